// The resident memory of lagent's library stack alone: a program that links what lagent links
// (ZeroMQ, Cap'n Proto, spdlog/fmt, Boost.Program_options, zlib, libstdc++) and does the least
// an agent does with them: parses a command line, logs a line, builds and serialises a Cap'n
// Proto message, sends it over a connected ZeroMQ DEALER to a ROUTER in the same process and
// gets it back, compresses a few bytes. Then it prints VmRSS and its parts (RssAnon, RssFile)
// and the resident KiB of each mapped file (/proc/self/smaps): the floor under any agent built
// on this stack, to set against lagent's RSS (bench/agent_overhead.py).
//
//   build/bench/stack_floor          linked as lagent is (the C++ libraries statically)
//   build/bench/stack_floor_shared   the same, every library shared
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>
#include <zlib.h>
#include <zmq.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

// VmRSS, RssAnon, RssFile of /proc/self/status.
void print_status() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    for (const char* field : {"VmRSS", "RssAnon", "RssFile"})
      if (line.rfind(field, 0) == 0) std::printf("%s\n", line.c_str());
}

// Resident KiB per mapped file (anonymous mappings together), largest first.
void print_mappings() {
  std::ifstream smaps("/proc/self/smaps");
  std::map<std::string, long> resident;
  std::string line, current = "[anonymous]";
  while (std::getline(smaps, line)) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first.find('-') != std::string::npos && first.back() != ':') {
      std::string permissions, offset, device, inode, path;
      fields >> permissions >> offset >> device >> inode;
      std::getline(fields >> std::ws, path);
      current = path.empty() ? "[anonymous]" : path;
    } else if (first == "Rss:") {
      long kib = 0;
      fields >> kib;
      resident[current] += kib;
    }
  }
  std::vector<std::pair<long, std::string>> sorted;
  for (const auto& [path, kib] : resident) sorted.emplace_back(kib, path);
  std::sort(sorted.rbegin(), sorted.rend());
  for (const auto& [kib, path] : sorted)
    if (kib > 0) std::printf("  %6ld kB  %s\n", kib, path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  po::options_description options("stack_floor");
  options.add_options()("help,h", "what this prints");
  po::variables_map arguments;
  po::store(po::parse_command_line(argc, argv, options), arguments);
  if (arguments.count("help")) {
    std::printf("usage: stack_floor\nPrints the resident memory of lagent's library stack "
                "doing the least an agent does.\n");
    return 0;
  }
  spdlog::info("stack_floor: lagent's libraries, doing the least an agent does");

  capnp::MallocMessageBuilder message;
  message.initRoot<capnp::AnyPointer>().setAs<capnp::Text>("a sample");
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();

  void* context = zmq_ctx_new();
  void* router = zmq_socket(context, ZMQ_ROUTER);
  void* dealer = zmq_socket(context, ZMQ_DEALER);
  char endpoint[256] = {};
  std::size_t size = sizeof endpoint;
  if (zmq_bind(router, "tcp://127.0.0.1:*") != 0 ||
      zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &size) != 0 ||
      zmq_connect(dealer, endpoint) != 0) {
    std::fprintf(stderr, "stack_floor: zmq: %s\n", zmq_strerror(zmq_errno()));
    return 1;
  }
  zmq_send(dealer, bytes.begin(), bytes.size(), 0);
  zmq_msg_t identity, body;
  zmq_msg_init(&identity);
  zmq_msg_init(&body);
  zmq_msg_recv(&identity, router, 0);  // blocks until the message went through the I/O thread
  zmq_msg_recv(&body, router, 0);
  zmq_msg_send(&identity, router, ZMQ_SNDMORE);
  zmq_msg_send(&body, router, 0);
  std::vector<char> answer(bytes.size() + 16);
  const int received = zmq_recv(dealer, answer.data(), answer.size(), 0);

  uLongf compressed_size = compressBound(static_cast<uLong>(bytes.size()));
  std::vector<Bytef> compressed(compressed_size);
  compress(compressed.data(), &compressed_size, bytes.begin(), static_cast<uLong>(bytes.size()));

  std::printf("round trip: %d bytes over %s; %lu bytes compressed\n", received, endpoint,
              static_cast<unsigned long>(compressed_size));
  print_status();
  print_mappings();
  zmq_close(dealer);
  zmq_close(router);
  zmq_ctx_term(context);
  return 0;
}
