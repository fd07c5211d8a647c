// A remote_write receiver for the Prometheus output's unit tests: HTTP/1.1 on 127.0.0.1 (an
// ephemeral port), one connection at a time, kept alive; each POST's body is un-snappied and
// parsed as a WriteRequest and recorded with its headers; the answer is 204 unless `answer`
// (called with the request, under the lock) says otherwise.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "prometheus_output.h"
#include "prometheus_remote_write.pb.h"

namespace fructosa::test {

struct ReceivedWrite {
  std::map<std::string, std::string> headers;  // names in lower case
  fructosa::prompb::WriteRequest request;
};

struct Answer {
  int status = 204;
  std::string body;
};

class RemoteWriteServer {
 public:
  RemoteWriteServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("remote write test server: cannot listen");
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RemoteWriteServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/api/v1/write"; }
  void set_answer(std::function<Answer(const ReceivedWrite&)> answer) {
    std::lock_guard lock(mutex_);
    answer_ = std::move(answer);
  }
  // Every request received, answered 2xx or not, with the status it got.
  std::vector<std::pair<ReceivedWrite, int>> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  bool wait_readable(int fd) {
    pollfd entry{fd, POLLIN, 0};
    while (!stop_)
      if (::poll(&entry, 1, 50) > 0) return true;
    return false;
  }

  void serve() {
    while (wait_readable(listener_)) {
      int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) continue;
      std::string buffer;
      while (handle_one(connection, buffer)) {
      }
      ::close(connection);
    }
  }

  // Reads and answers one request; false when the connection is over.
  bool handle_one(int connection, std::string& buffer) {
    std::size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos)
      if (!read_more(connection, buffer)) return false;
    ReceivedWrite write;
    std::size_t line_start = buffer.find("\r\n") + 2, content_length = 0;
    while (line_start < header_end) {
      std::size_t line_end = buffer.find("\r\n", line_start);
      std::string line = buffer.substr(line_start, line_end - line_start);
      auto colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(line.find_first_not_of(' ', colon + 1));
      write.headers[name] = value;
      if (name == "content-length") content_length = std::stoul(value);
      line_start = line_end + 2;
    }
    while (buffer.size() < header_end + 4 + content_length)
      if (!read_more(connection, buffer)) return false;
    std::string body = buffer.substr(header_end + 4, content_length);
    buffer.erase(0, header_end + 4 + content_length);
    Answer answer;
    try {
      if (!write.request.ParseFromString(master::prometheus_snappy_uncompress(body))) answer = {400, "bad protobuf"};
    } catch (const std::exception& error) {
      answer = {400, error.what()};
    }
    {
      std::lock_guard lock(mutex_);
      if (answer.status == 204 && answer_) answer = answer_(write);
      received_.emplace_back(std::move(write), answer.status);
    }
    std::string reply = "HTTP/1.1 " + std::to_string(answer.status) + " X\r\nContent-Length: " +
                        std::to_string(answer.body.size()) + "\r\n\r\n" + answer.body;
    return ::send(connection, reply.data(), reply.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(reply.size());
  }

  bool read_more(int connection, std::string& buffer) {
    if (!wait_readable(connection)) return false;
    char chunk[65536];
    ssize_t got = ::recv(connection, chunk, sizeof chunk, 0);
    if (got <= 0) return false;
    buffer.append(chunk, static_cast<std::size_t>(got));
    return true;
  }

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::function<Answer(const ReceivedWrite&)> answer_;
  std::vector<std::pair<ReceivedWrite, int>> received_;
  std::thread thread_;
};

}  // namespace fructosa::test
