#include "logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <syslog.h>

#include <algorithm>

#include "service_notify.h"

namespace fructosa {

const OptionTable& logging_options() {
  static const OptionTable table{
      {.name = "filename", .type = OptionType::text, .default_value = "",
       .help = "log file (relative to this file); empty: stderr in the foreground, syslog as a daemon",
       .relative_to_file = true},
      {.name = "level", .type = OptionType::text, .default_value = "INFO", .help = "lowest level logged",
       .choices = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "debug", "info", "warning", "error", "critical"}},
      {.name = "maxBytes", .type = OptionType::integer, .default_value = "0",
       .help = "rotate the file when it reaches this many bytes; 0: never", .min = 0},
      {.name = "backupCount", .type = OptionType::integer, .default_value = "0",
       .help = "rotated files kept (file.1 ... file.N); 0: never rotate", .min = 0, .max = 1000},
  };
  return table;
}

void setup_logging(const Options& logging, bool foreground, const std::string& program) {
  std::vector<spdlog::sink_ptr> sinks;
  if (foreground) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  const std::string& filename = logging.get_text("filename");
  std::string file_failure;  // a log file that cannot be written does not stop the program
  if (!filename.empty()) {
    auto max_bytes = logging.get_int("maxBytes");
    auto backups = logging.get_int("backupCount");
    try {
      // Python's RotatingFileHandler never rolls over when either is 0.
      if (max_bytes > 0 && backups > 0)
        sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
            filename, static_cast<std::size_t>(max_bytes), static_cast<std::size_t>(backups)));
      else
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(filename));
    } catch (const spdlog::spdlog_ex& error) {
      file_failure = error.what();
    }
  }
  if ((filename.empty() || !file_failure.empty()) && !foreground) {
    sinks.push_back(std::make_shared<spdlog::sinks::syslog_sink_mt>(program, LOG_PID, LOG_DAEMON, false));
  }
  auto logger = std::make_shared<spdlog::logger>(program, sinks.begin(), sinks.end());
  std::string level = logging.get_text("level");
  std::transform(level.begin(), level.end(), level.begin(), ::tolower);
  if (level == "warning") level = "warn";
  logger->set_level(spdlog::level::from_str(level));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %n[%P] %l: %v");
  // Under systemd stderr is the journal, which stamps and attributes each line itself.
  if (foreground && stderr_is_journal()) sinks.front()->set_formatter(journal_line_formatter());
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  if (!file_failure.empty())
    spdlog::error("[logging] filename = {}: {}; logging to {} instead", filename, file_failure,
                  foreground ? "stderr" : "syslog");
}

}  // namespace fructosa
