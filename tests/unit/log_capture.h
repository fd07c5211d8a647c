// Captures what spdlog's default logger writes while a LogCapture lives.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

namespace fructosa::test {

class LogCapture {
 public:
  LogCapture() : old_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(old_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far. The sink's mutex guards the stream while a line is written; lines
  // are whole when read after the condition they report has been seen through the counters.
  std::string text() {
    spdlog::default_logger()->flush();
    return stream_.str();
  }
  // What was logged since the last take().
  std::string take() {
    std::string logged = text();
    stream_.str("");
    return logged;
  }

 private:
  std::shared_ptr<spdlog::logger> old_;
  std::ostringstream stream_;
};

}  // namespace fructosa::test
