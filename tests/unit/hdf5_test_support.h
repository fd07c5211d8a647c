// What the HDF5 output's unit tests (tests/unit/hdf5_*_test.cpp) share: a temporary directory
// that lists the files of a series, the options of an output under test, a reader of the files
// that is independent of the code under test (the HDF5 C API), and a child process that runs
// one of this program's "child" tests (Hdf5SwmrReaderChild.*, Hdf5KilledWriterChild.*).
#pragma once

#include <hdf5.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config.h"
#include "hdf5_output.h"
#include "test_support.h"

extern char** environ;

namespace fructosa::master::hdf5_test {

using test::make_sample;

namespace fs = std::filesystem;

// A temporary directory that also lists the HDF5 files of a series.
class TempDir : public test::TempDir {
 public:
  // The files of the series <stem>-<UTC time>[-N].h5, sorted by name (= by start time).
  std::vector<std::string> series(const std::string& stem = "metrics") const {
    const std::regex member(stem + R"(-\d{8}T\d{6}Z(-\d+)?\.h5)");
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(path()))
      if (std::regex_match(entry.path().filename().string(), member) &&
          !fs::is_symlink(entry.symlink_status()))
        files.push_back(entry.path().string());
    // "-1" sorts before "-2" and after the plain name of the same second.
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      auto key = [](const std::string& name) {
        auto stamp = name.find_last_of('Z');
        std::string suffix = name.substr(stamp + 1, name.size() - stamp - 4);
        return std::make_pair(name.substr(0, stamp),
                              suffix.empty() ? 0 : std::stoi(suffix.substr(1)));
      };
      return key(a) < key(b);
    });
    return files;
  }
};

// The tests read tables at /<host>/<sensor> unless they ask for layout=per_sensor.
inline Options options_for(const std::string& path, std::vector<std::string> more = {}) {
  if (std::none_of(more.begin(), more.end(),
                   [](const std::string& pair) { return pair.starts_with("layout="); }))
    more.push_back("layout=per_host");
  more.push_back("path=" + path);
  return parse_pairs(Hdf5Output::hdf5_options(), more, "test");
}

// The file consistency flags in a version 2/3 superblock: non-zero while a writer has it open.
inline int superblock_flags(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 12> head{};
  in.read(head.data(), head.size());
  return static_cast<unsigned char>(head[11]);
}

// Reads a file back with the HDF5 C API, independently of the code under test.
class Reader {
 public:
  explicit Reader(const std::string& path, unsigned flags = H5F_ACC_RDONLY) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
    if (file_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~Reader() { H5Fclose(file_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool exists(const std::string& path) const {
    // Checks each component, as H5Lexists needs its parents to exist.
    std::size_t start = 1;
    while (start <= path.size()) {
      std::size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      if (H5Lexists(file_, path.substr(0, slash).c_str(), H5P_DEFAULT) <= 0) return false;
      start = slash + 1;
    }
    return true;
  }

  std::vector<std::string> members(const std::string& group_path) const {
    std::vector<std::string> names;
    hid_t group = H5Gopen2(file_, group_path.c_str(), H5P_DEFAULT);
    if (group < 0) throw std::runtime_error("no group " + group_path);
    H5G_info_t info{};
    H5Gget_info(group, &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char name[256] = {};
      H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
      names.push_back(name);
    }
    H5Gclose(group);
    return names;
  }

  hsize_t length(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t dims = 0;
    H5Sget_simple_extent_dims(space, &dims, nullptr);
    H5Sclose(space);
    H5Dclose(dataset);
    return dims;
  }

  template <typename T>
  std::vector<T> read(const std::string& path, hid_t memory_type) const {
    std::vector<T> values(length(path));
    hid_t dataset = open(path);
    herr_t status = H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(dataset);
    if (status < 0) throw std::runtime_error("cannot read " + path);
    return values;
  }
  std::vector<double> doubles(const std::string& path) const {
    return read<double>(path, H5T_NATIVE_DOUBLE);
  }
  std::vector<std::int64_t> int64s(const std::string& path) const {
    return read<std::int64_t>(path, H5T_NATIVE_INT64);
  }
  std::vector<std::uint64_t> uint64s(const std::string& path) const {
    return read<std::uint64_t>(path, H5T_NATIVE_UINT64);
  }
  // A fixed-length string dataset, each row without its padding.
  std::vector<std::string> strings(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t type = H5Dget_type(dataset);
    std::size_t width = H5Tget_size(type);
    bool fixed = H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) == 0;
    std::vector<char> raw(length(path) * width);
    herr_t status = fixed ? H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) : -1;
    H5Tclose(type);
    H5Dclose(dataset);
    if (status < 0) throw std::runtime_error("cannot read strings " + path);
    std::vector<std::string> values;
    for (std::size_t i = 0; i < raw.size(); i += width) {
      std::string value(raw.data() + i, width);
      value.resize(std::strlen(value.c_str()));
      values.push_back(value);
    }
    return values;
  }

  std::string attribute(const std::string& object_path, const std::string& name) const {
    hid_t object = H5Oopen(file_, object_path.c_str(), H5P_DEFAULT);
    if (object < 0) throw std::runtime_error("no object " + object_path);
    hid_t attribute = H5Aopen(object, name.c_str(), H5P_DEFAULT);
    if (attribute < 0) {
      H5Oclose(object);
      throw std::runtime_error("no attribute " + name + " on " + object_path);
    }
    hid_t type = H5Aget_type(attribute);
    bool variable = H5Tis_variable_str(type) > 0;
    H5T_cset_t cset = H5Tget_cset(type);
    char* text = nullptr;
    herr_t status = variable ? H5Aread(attribute, type, &text) : -1;
    std::string value = (status >= 0 && text) ? text : "<unreadable>";
    if (text) H5free_memory(text);
    H5Tclose(type);
    H5Aclose(attribute);
    H5Oclose(object);
    if (!variable) return "<not a variable-length string>";
    if (cset != H5T_CSET_UTF8) return "<not UTF-8>";
    return value;
  }

  // A scalar integer attribute.
  long long integer_attribute(const std::string& object_path, const std::string& name) const {
    hid_t object = H5Oopen(file_, object_path.c_str(), H5P_DEFAULT);
    if (object < 0) throw std::runtime_error("no object " + object_path);
    hid_t attribute = H5Aopen(object, name.c_str(), H5P_DEFAULT);
    long long value = 0;
    herr_t status = attribute >= 0 ? H5Aread(attribute, H5T_NATIVE_LLONG, &value) : -1;
    if (attribute >= 0) H5Aclose(attribute);
    H5Oclose(object);
    if (status < 0) throw std::runtime_error("no integer attribute " + name + " on " + object_path);
    return value;
  }

  std::vector<std::uint64_t> jobs(const std::string& object_path) const {
    hid_t object = H5Oopen(file_, object_path.c_str(), H5P_DEFAULT);
    if (object < 0) throw std::runtime_error("no object " + object_path);
    hid_t attribute = H5Aopen(object, "jobs", H5P_DEFAULT);
    std::vector<std::uint64_t> values;
    if (attribute >= 0) {
      hid_t space = H5Aget_space(attribute);
      values.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
      if (!values.empty()) H5Aread(attribute, H5T_NATIVE_UINT64, values.data());
      H5Sclose(space);
      H5Aclose(attribute);
    }
    H5Oclose(object);
    if (attribute < 0) throw std::runtime_error("no jobs attribute on " + object_path);
    return values;
  }

  // Filters, chunk rows and whether partial edge chunks stay unfiltered.
  struct Layout {
    int filters = 0;
    hsize_t chunk = 0;
    bool unfiltered_edges = false;
    bool operator==(const Layout&) const = default;
  };
  Layout layout(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t properties = H5Dget_create_plist(dataset);
    Layout result;
    result.filters = H5Pget_nfilters(properties);
    H5Pget_chunk(properties, 1, &result.chunk);
    unsigned options = 0;
    H5Pget_chunk_opts(properties, &options);
    result.unfiltered_edges = options & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS;
    H5Pclose(properties);
    H5Dclose(dataset);
    return result;
  }

  // Bytes each stored chunk takes (compressed ones are smaller than rows * 8).
  std::vector<hsize_t> chunk_sizes(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t chunks = 0;
    H5Dget_num_chunks(dataset, space, &chunks);
    std::vector<hsize_t> sizes;
    for (hsize_t i = 0; i < chunks; ++i) {
      hsize_t offset = 0, size = 0;
      unsigned mask = 0;
      haddr_t address = 0;
      H5Dget_chunk_info(dataset, space, i, &offset, &mask, &address, &size);
      sizes.push_back(size);
    }
    H5Sclose(space);
    H5Dclose(dataset);
    return sizes;
  }

  bool unlimited(const std::string& path) const {
    hid_t dataset = open(path);
    hid_t space = H5Dget_space(dataset);
    hsize_t dims = 0, max_dims = 0;
    int rank = H5Sget_simple_extent_dims(space, &dims, &max_dims);
    H5Sclose(space);
    H5Dclose(dataset);
    return rank == 1 && max_dims == H5S_UNLIMITED;
  }

  H5T_class_t type_class(const std::string& path, std::size_t* size, H5T_sign_t* sign) const {
    hid_t dataset = open(path);
    hid_t type = H5Dget_type(dataset);
    H5T_class_t result = H5Tget_class(type);
    *size = H5Tget_size(type);
    *sign = result == H5T_INTEGER ? H5Tget_sign(type) : H5T_SGN_ERROR;
    H5Tclose(type);
    H5Dclose(dataset);
    return result;
  }

 private:
  hid_t open(const std::string& path) const {
    hid_t dataset = H5Dopen2(file_, path.c_str(), H5P_DEFAULT);
    if (dataset < 0) throw std::runtime_error("no dataset " + path);
    return dataset;
  }
  hid_t file_;
};

// A file the output gives up after write errors cannot be closed; HDF5 1.10.8 would crash when
// it tries again at exit (the output calls this too, but other tests use HDF5 first).
inline const bool kNoHdf5ShutdownAtExit = (H5dont_atexit(), true);

inline constexpr std::int64_t kSecond = 1'000'000'000;
inline constexpr std::int64_t kT0 = 1'700'000'000 * kSecond;
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs this test program again as a child with `environment` added, and the gtest filter
// `filter`; its stdout comes back through a pipe.
class Child {
 public:
  Child(const std::string& filter, const std::vector<std::string>& environment) {
    int pipe_ends[2];
    if (pipe(pipe_ends) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], 1);
    posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
    std::vector<std::string> variables = environment;
    for (char** entry = environ; *entry; ++entry) variables.emplace_back(*entry);
    std::vector<char*> envp;
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::string self = fs::read_symlink("/proc/self/exe").string();
    std::string filter_arg = "--gtest_filter=" + filter;
    char* argv[] = {self.data(), filter_arg.data(), nullptr};
    if (posix_spawn(&pid_, self.c_str(), &actions, nullptr, argv, envp.data()) != 0)
      throw std::runtime_error("posix_spawn failed");
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_ends[1]);
    out_ = fdopen(pipe_ends[0], "r");
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) fclose(out_);
  }
  // The next line the child printed that starts with `prefix` (without it); "" at its end.
  std::string line(const std::string& prefix) {
    char buffer[4096];
    while (fgets(buffer, sizeof buffer, out_)) {
      std::string text = buffer;
      if (!text.empty() && text.back() == '\n') text.pop_back();
      if (text.rfind(prefix, 0) == 0) return text.substr(prefix.size());
    }
    return "";
  }
  // Everything it prints from here to its end.
  std::string rest() {
    std::string text;
    char buffer[4096];
    while (fgets(buffer, sizeof buffer, out_)) text += buffer;
    return text;
  }
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

// Polls for a file another process (a child writer) makes: false after 30 s without it.
inline bool wait_for_file(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace fructosa::master::hdf5_test
