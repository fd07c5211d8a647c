// crashfs: a FUSE filesystem for the tests that models what survives a power cut (in the spirit
// of Jepsen's LazyFS; see docs/durability.md, "crashfs: the power-cut filesystem of the tests").
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "crashfs_control.h"
#include "crashfs_fuse.h"
#include "crashfs_image.h"

namespace {

constexpr const char* kUsage = R"(usage: crashfs BACKING MOUNTPOINT [--control SOCKET] [--capacity BYTES] [-f] [--debug]

A FUSE filesystem for tests that models what survives a power cut. BACKING (created if
missing) holds the durable image as a plain directory tree: it is loaded at the mount, written
back at a cut and at a clean unmount (fusermount3 -u, SIGTERM, SIGINT: everything as synced).
Writes change the live state; fsync makes a file's contents durable, fsync of a directory its
entries. crashfs always runs in the foreground.

  --control SOCKET   unix stream socket taking one command per line, one reply line each:
                       cut            power cut: only the durable state is written to BACKING,
                                      every later call on the mount fails with EIO
                       cut SEED       the same, also keeping a seeded choice of pending writes
                                      and a prefix of the pending directory changes
                       capacity BYTES|none   ENOSPC past BYTES of live file data
                       fail-fsync on|off     fsync and fsync of directories fail with EIO
                       stats          counts of files, dirty files, pending changes, bytes
  --capacity BYTES   ENOSPC past BYTES of live file data from the start
  -f                 accepted for habit (crashfs never goes to the background)
  --debug            libfuse's debug trace on stderr
  -h, --help         this text
)";

struct Options {
  std::string backing;
  std::string mountpoint;
  std::optional<std::string> control;
  std::optional<std::uint64_t> capacity;
  bool debug = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "crashfs: " << message << "\n" << kUsage;
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (arg == name) {
        if (i + 1 >= argc) usage_error(std::string(name) + " needs a value");
        return std::string(argv[++i]);
      }
      if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=')
        return std::string(arg.substr(name.size() + 1));
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "-f") {
    } else if (arg == "--debug") {
      options.debug = true;
    } else if (auto control = value("--control")) {
      options.control = *control;
    } else if (auto capacity = value("--capacity")) {
      std::uint64_t bytes = 0;
      auto [end, error] = std::from_chars(capacity->data(), capacity->data() + capacity->size(), bytes);
      if (capacity->empty() || error != std::errc() || end != capacity->data() + capacity->size())
        usage_error("--capacity: not a number of bytes: " + *capacity);
      options.capacity = bytes;
    } else if (arg.starts_with("-") && arg != "-") {
      usage_error("unknown option " + std::string(arg));
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.size() != 2) usage_error("needs BACKING and MOUNTPOINT");
  options.backing = positional[0];
  options.mountpoint = positional[1];
  return options;
}

int run(const Options& options) {
  struct stat st;
  if (::stat(options.mountpoint.c_str(), &st) != 0) {
    std::cerr << "crashfs: mount point " << options.mountpoint << ": " << std::strerror(errno) << '\n';
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::cerr << "crashfs: mount point " << options.mountpoint << ": not a directory\n";
    return 1;
  }
  crashfs::Filesystem fs(crashfs::read_image(options.backing));
  fs.model.set_capacity(options.capacity);
  const std::filesystem::path backing = options.backing;

  std::optional<crashfs::ControlServer> control;
  if (options.control) {
    control.emplace(*options.control, [&fs, &backing](const std::string& line) {
      return crashfs::execute_command(fs, backing, line);
    });
  }

  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_opt_add_arg(&args, "crashfs");
  // default_permissions: the kernel checks modes and owners against what getattr reports.
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, "fsname=crashfs,subtype=crashfs,default_permissions");
  if (options.debug) fuse_opt_add_arg(&args, "-d");
  fuse_session* session = fuse_session_new(&args, &crashfs::fuse_operations(), sizeof(fuse_lowlevel_ops), &fs);
  fuse_opt_free_args(&args);
  if (session == nullptr) {
    std::cerr << "crashfs: cannot start a FUSE session\n";
    return 1;
  }
  if (fuse_set_signal_handlers(session) != 0) {
    fuse_session_destroy(session);
    std::cerr << "crashfs: cannot install the signal handlers\n";
    return 1;
  }
  if (fuse_session_mount(session, options.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    std::cerr << "crashfs: cannot mount on " << options.mountpoint << " (is /dev/fuse usable here?)\n";
    return 1;
  }
  if (control) control->start();
  std::cerr << "crashfs: " << options.backing << " mounted on " << options.mountpoint << std::endl;

  // One thread serves FUSE; the control thread shares the model under its mutex.
  fuse_session_loop(session);

  control.reset();
  fuse_session_unmount(session);
  fuse_remove_signal_handlers(session);
  fuse_session_destroy(session);
  // A SIGTERM now (crashfs.py's, after an unmount that took long) must not cut the writing short.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);

  // A clean unmount is a clean shutdown: the live state, as if everything had been synced. After
  // a cut the durable image is already there.
  if (!fs.model.is_cut()) {
    crashfs::write_image(fs.model.live_image(), backing);
    std::cerr << "crashfs: unmounted, live state written to " << options.backing << std::endl;
  } else {
    std::cerr << "crashfs: unmounted after a cut" << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "crashfs: " << error.what() << '\n';
    return 1;
  }
}
