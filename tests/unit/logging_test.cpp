// [logging]: a log file that cannot be written (a directory the daemon may not write, say after an
// upgrade moved lmaster's logs) does not stop the program; it says so where it logs instead.
#include "logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>

#include "config.h"
#include "test_support.h"

namespace fructosa {
namespace {

TEST(Logging, AnUnwritableLogFileFallsBackToStderrAndSaysWhy) {
  test::TempDir dir;
  // A file where the directory should be (spdlog makes missing directories; root writes anywhere).
  std::FILE* in_the_way = std::fopen(dir.file("file").c_str(), "w");
  ASSERT_NE(in_the_way, nullptr);
  std::fclose(in_the_way);
  const std::string unwritable = dir.file("file/lmaster.log");
  Options logging = parse_pairs(logging_options(), {"filename=" + unwritable}, "[logging]");
  testing::internal::CaptureStderr();
  ASSERT_NO_THROW(setup_logging(logging, true, "logging-test"));
  spdlog::info("still logging");
  spdlog::default_logger()->flush();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[logging] filename = " + unwritable), std::string::npos) << err;
  EXPECT_NE(err.find("still logging"), std::string::npos) << err;
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
}

}  // namespace
}  // namespace fructosa
