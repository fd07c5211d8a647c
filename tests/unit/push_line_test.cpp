// parse_push_line() and pushed_name_problem() (sensors/push_line.h): every form a pushed line
// may take, and every refusal with the words its reason must say, since the reason is what a
// batch script's author reads back from `lagent push`.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "push_line.h"

using namespace fructosa::sensors;

namespace {

using Status = PushLine::Status;

::testing::AssertionResult is_metric(std::string_view text, PushedKind kind, const std::string& name, double value) {
  PushLine line = parse_push_line(text);
  if (line.status != Status::metric)
    return ::testing::AssertionFailure() << "'" << text << "' not taken: " << line.reason;
  if (line.kind != kind) return ::testing::AssertionFailure() << "'" << text << "': wrong kind";
  if (line.name != name) return ::testing::AssertionFailure() << "'" << text << "': name " << line.name;
  if (line.value != value) return ::testing::AssertionFailure() << "'" << text << "': value " << line.value;
  if (!line.reason.empty()) return ::testing::AssertionFailure() << "'" << text << "': a reason " << line.reason;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gauge(std::string_view text, const std::string& name, double value) {
  return is_metric(text, PushedKind::gauge, name, value);
}
::testing::AssertionResult counter(std::string_view text, const std::string& name, double value) {
  return is_metric(text, PushedKind::counter, name, value);
}

// Refused, with every one of `words` in the reason.
::testing::AssertionResult refused(std::string_view text, std::initializer_list<std::string_view> words) {
  PushLine line = parse_push_line(text);
  if (line.status != Status::refused)
    return ::testing::AssertionFailure() << "'" << text << "' not refused (name " << line.name << ")";
  for (auto word : words)
    if (line.reason.find(word) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << text << "': reason '" << line.reason << "' lacks '" << word << "'";
  return ::testing::AssertionSuccess();
}

bool ignored(std::string_view text) {
  PushLine line = parse_push_line(text);
  return line.status == Status::ignored && line.name.empty() && line.reason.empty();
}

}  // namespace

// ---- statsd ----

TEST(PushLine, StatsdGaugeAndCounter) {
  EXPECT_TRUE(gauge("load:0.5|g", "load", 0.5));
  EXPECT_TRUE(counter("files_written:3|c", "files_written", 3));
  EXPECT_TRUE(gauge("_private-name2:7|g", "_private-name2", 7));
  EXPECT_TRUE(gauge("Step:0|g", "Step", 0));
}

TEST(PushLine, StatsdSampleRateDividesTheCounter) {
  EXPECT_TRUE(counter("hits:1|c|@0.1", "hits", 10));
  EXPECT_TRUE(counter("hits:3|c|@0.5", "hits", 6));
  EXPECT_TRUE(counter("hits:4|c|@1", "hits", 4));
  EXPECT_TRUE(counter("hits:4|c|@+0.25", "hits", 16));
}

TEST(PushLine, SignedAndExponentValues) {
  EXPECT_TRUE(gauge("t:-2.5|g", "t", -2.5));
  EXPECT_TRUE(gauge("t:+4|g", "t", 4));
  EXPECT_TRUE(gauge("t:1e3|g", "t", 1000));
  EXPECT_TRUE(gauge("t:-1.5E-2|g", "t", -0.015));
  EXPECT_TRUE(gauge("t:+2.5e+2|g", "t", 250));
  EXPECT_TRUE(gauge("t:.5|g", "t", 0.5));
  EXPECT_TRUE(counter("c:-3|c", "c", -3));
  EXPECT_TRUE(gauge("t 1.5e2", "t", 150));
  EXPECT_TRUE(gauge("t -7", "t", -7));
  EXPECT_TRUE(gauge("t +7", "t", 7));
}

TEST(PushLine, CarriageReturnAndSurroundingBlanks) {
  EXPECT_TRUE(gauge("load:0.5|g\r", "load", 0.5));  // "\r\n" with its '\n' cut
  EXPECT_TRUE(gauge("  load:0.5|g \t", "load", 0.5));
  EXPECT_TRUE(gauge("\tload:0.5|g  \r", "load", 0.5));
  EXPECT_TRUE(gauge("  temp 21.5 \r", "temp", 21.5));
  // Only one '\r' is a line ending; another is a byte of the value.
  EXPECT_TRUE(refused("load:0.5|g\r\r", {"type"}));
}

TEST(PushLine, BlankAndCommentLinesAreIgnored) {
  for (std::string_view text : {"", "   ", "\t \t", "\r", " \r", "#", "# HELP temp the temperature",
                                "  # TYPE temp gauge", "\t#x:1|g", "#\r"})
    EXPECT_TRUE(ignored(text)) << "'" << text << "'";
  // A '#' that is not first is no comment.
  EXPECT_FALSE(ignored("x # 1"));
}

TEST(PushLine, StatsdRefusals) {
  EXPECT_TRUE(refused("a:1|ms", {"type", "'ms'", "not supported"}));
  EXPECT_TRUE(refused("a:1|h", {"type", "'h'"}));
  EXPECT_TRUE(refused("a:1|", {"type", "not supported"}));
  EXPECT_TRUE(refused("a:1|c|#host:n1", {"tags", "|#"}));
  EXPECT_TRUE(refused("a:1|c|@0", {"sample rate", "(0, 1]"}));
  EXPECT_TRUE(refused("a:1|c|@2", {"sample rate", "'2'", "(0, 1]"}));
  EXPECT_TRUE(refused("a:1|c|@-0.5", {"sample rate"}));
  EXPECT_TRUE(refused("a:1|c|@", {"sample rate"}));
  EXPECT_TRUE(refused("a:1|c|@nan", {"sample rate"}));
  EXPECT_TRUE(refused("a:1|c|@0.5x", {"sample rate"}));
  EXPECT_TRUE(refused("a:1|c|x", {"not understood", "|@RATE"}));
  EXPECT_TRUE(refused("a:1|g|@0.5", {"not understood"}));  // a gauge has no sample rate
  EXPECT_TRUE(refused("a:1e308|c|@1e-10", {"sample rate", "not finite"}));
  EXPECT_TRUE(refused("a|g", {"no ':'"}));
  EXPECT_TRUE(refused("a:|g", {"value is missing"}));
  EXPECT_TRUE(refused("a:+|g", {"value is missing"}));
  EXPECT_TRUE(refused("a:1x|g", {"'1x'", "not a number"}));
  EXPECT_TRUE(refused("a: 1|g", {"not a number"}));
  EXPECT_TRUE(refused("a:1,5|g", {"not a number"}));
  EXPECT_TRUE(refused("a:0x10|g", {"not a number"}));
  EXPECT_TRUE(refused("a:++1|g", {"not a number"}));
  EXPECT_TRUE(refused("a:+-1|g", {"not a number"}));  // was read as -1
  EXPECT_TRUE(refused("a:1e400|g", {"out of range"}));
  EXPECT_TRUE(refused("a:b:1|g", {"not a number"}));
}

TEST(PushLine, MissingType) {
  EXPECT_TRUE(refused("a:1", {"no type", "|g", "|c"}));
  EXPECT_TRUE(refused("a:1 ", {"no type"}));
  // A '|' before the ':' is in the name, and the name is what is wrong.
  EXPECT_TRUE(refused("a|b:1", {"name holds '|'"}));
  EXPECT_TRUE(refused("ab|:1", {"name holds '|'"}));
}

TEST(PushLine, NonFiniteValues) {
  for (std::string_view text : {"a:NaN|g", "a:nan|g", "a:inf|g", "a:-inf|g", "a:+Inf|g", "a:infinity|c",
                                "a:nan(1)|g", "x NaN", "x +Inf", "x -Inf", "x inf", "x nan", "x{a=\"b\"} +Inf"})
    EXPECT_TRUE(refused(text, {"not finite"}));
  EXPECT_TRUE(refused("a:NaN|g", {"'NaN'"}));
  EXPECT_TRUE(refused("x +Inf", {"'+Inf'"}));
}

// ---- names ----

TEST(PushLine, NameRefusals) {
  EXPECT_TRUE(refused(":1|g", {"name is empty"}));
  EXPECT_TRUE(refused("{a=\"b\"} 1", {"name is empty"}));
  EXPECT_TRUE(refused("a.b:1|g", {"'.'", "Graphite", "'_'"}));
  EXPECT_TRUE(refused("a.b 1", {"'.'"}));
  EXPECT_TRUE(refused("a b:1|g", {"name holds ' '"}));
  EXPECT_TRUE(refused("a/b:1|g", {"name holds '/'"}));
  EXPECT_TRUE(refused("job:rate 1", {"name holds ':'"}));
  EXPECT_TRUE(refused(std::string_view("a\x01:1|g"), {"\\x01"}));
  EXPECT_TRUE(refused(std::string_view("a\0b:1|g", 7), {"\\x00"}));
  EXPECT_TRUE(refused("a\xff:1|g", {"\\xff"}));
  EXPECT_TRUE(refused("caf\xc3\xa9 1", {"\\xc3"}));
  EXPECT_TRUE(refused("1a:1|g", {"start with a letter", "'1'"}));
  EXPECT_TRUE(refused("-a:1|g", {"start with a letter"}));
}

TEST(PushLine, NameLength) {
  std::string longest(kMaxPushedNameLength, 'n');
  EXPECT_TRUE(gauge(longest + ":1|g", longest, 1));
  EXPECT_TRUE(gauge(longest + " 1", longest, 1));
  EXPECT_TRUE(refused(longest + "n:1|g", {"longer than 128"}));
  EXPECT_TRUE(refused(longest + "n 1", {"longer than 128"}));
  // Labels folded in count as well.
  std::string base(kMaxPushedNameLength - 6, 'n');
  EXPECT_TRUE(gauge(base + "{a=\"bcd\"} 1", base + "_a_bcd", 1));
  EXPECT_TRUE(refused(base + "{a=\"bcde\"} 1", {"with its labels", "longer than 128"}));
}

TEST(PushLine, LineLength) {
  static_assert(kMaxPushLineLength == 1024);
  // "a:000...01|g": as long as a line may be, then one byte more.
  std::string longest = "a:" + std::string(kMaxPushLineLength - 5, '0') + "1|g";
  ASSERT_EQ(longest.size(), kMaxPushLineLength);
  EXPECT_TRUE(gauge(longest, "a", 1));
  EXPECT_TRUE(gauge(longest + "\r", "a", 1));  // the line ending is not counted
  EXPECT_TRUE(refused("a:0" + longest.substr(2), {"line longer than 1024"}));
  // Even a blank or comment line: the socket reads no more of it.
  EXPECT_TRUE(refused(std::string(kMaxPushLineLength + 1, ' '), {"line longer than 1024"}));
  EXPECT_TRUE(refused("#" + std::string(kMaxPushLineLength, 'x'), {"line longer than 1024"}));
}

TEST(PushLine, PushedNameProblem) {
  EXPECT_EQ(pushed_name_problem("ok_name-1"), "");
  EXPECT_EQ(pushed_name_problem("_x"), "");
  EXPECT_EQ(pushed_name_problem("X9"), "");
  EXPECT_EQ(pushed_name_problem(std::string(kMaxPushedNameLength, 'a')), "");
  EXPECT_NE(pushed_name_problem("").find("empty"), std::string::npos);
  EXPECT_NE(pushed_name_problem("9x").find("start with a letter"), std::string::npos);
  EXPECT_NE(pushed_name_problem("-x").find("start with a letter"), std::string::npos);
  EXPECT_NE(pushed_name_problem("a.b").find("'.'"), std::string::npos);
  EXPECT_NE(pushed_name_problem("a:b").find("':'"), std::string::npos);
  EXPECT_NE(pushed_name_problem("a\tb").find("\\x09"), std::string::npos);
  EXPECT_NE(pushed_name_problem("a\x7f").find("\\x7f"), std::string::npos);
  EXPECT_NE(pushed_name_problem(std::string(kMaxPushedNameLength + 1, 'a')).find("longer than 128"),
            std::string::npos);
  // A too long name is quoted shortened, not whole.
  EXPECT_LT(pushed_name_problem(std::string(1000, 'a')).size(), 120u);
}

// ---- Prometheus ----

TEST(PushLine, PrometheusSamplesAreGauges) {
  EXPECT_TRUE(gauge("temp 21.5", "temp", 21.5));
  EXPECT_TRUE(gauge("temp\t21.5", "temp", 21.5));
  EXPECT_TRUE(gauge("temp{} 3", "temp", 3));
  EXPECT_TRUE(gauge("temp{gpu=\"0\"} 70", "temp_gpu_0", 70));
  EXPECT_TRUE(gauge("io{dev=\"sda\",op=\"read\"} 12", "io_dev_sda_op_read", 12));
  EXPECT_TRUE(gauge("io{ dev = \"sda\" , op=\"read\" } 12", "io_dev_sda_op_read", 12));
  EXPECT_TRUE(gauge("io{dev=\"sda\",} 5", "io_dev_sda", 5));  // a trailing comma
  EXPECT_TRUE(gauge("io{dev=\"\"} 5", "io_dev_", 5));
  // What a name may not hold becomes '_', escapes included.
  EXPECT_TRUE(gauge("run{cmd=\"say \\\"hi\\\"\"} 1", "run_cmd_say__hi_", 1));
  EXPECT_TRUE(gauge("run{path=\"a\\\\b\"} 1", "run_path_a_b", 1));
  EXPECT_TRUE(gauge("run{msg=\"a\\nb\"} 1", "run_msg_a_b", 1));
  EXPECT_TRUE(gauge("run{path=\"/x.y-z\"} 1", "run_path__x_y-z", 1));
  // A label value may hold '|' and ':' (a statsd line's separators).
  EXPECT_TRUE(gauge("run{cmd=\"a|b\"} 1", "run_cmd_a_b", 1));
  EXPECT_TRUE(gauge("run{at=\"12:30\",cmd=\"x|y\"} 2", "run_at_12_30_cmd_x_y", 2));
}

TEST(PushLine, PrometheusTimestampIsIgnored) {
  EXPECT_TRUE(gauge("temp 21.5 1700000000000", "temp", 21.5));
  EXPECT_TRUE(gauge("temp{gpu=\"1\"} 7 1700000000000", "temp_gpu_1", 7));
  EXPECT_TRUE(gauge("temp 2  \t -5", "temp", 2));
  EXPECT_TRUE(refused("temp 1 1.5", {"'1.5'", "not a timestamp"}));
  EXPECT_TRUE(refused("temp 1 now", {"not a timestamp"}));
  EXPECT_TRUE(refused("temp 1 2 3", {"not a timestamp"}));
}

TEST(PushLine, PrometheusRefusals) {
  EXPECT_TRUE(refused("temp", {"no value"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\"}", {"value is missing"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\"}  ", {"value is missing"}));
  EXPECT_TRUE(refused("temp x", {"'x'", "not a number"}));
  EXPECT_TRUE(refused("temp{gpu=\"0} 1", {"gpu", "no closing"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\\\"} 1", {"no closing"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\\", {"no closing"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\"", {"labels not closed"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\",", {"labels not closed"}));
  EXPECT_TRUE(refused("temp{gpu=\"0\" 1", {"labels not closed"}));
  EXPECT_TRUE(refused("temp{gpu 1", {"labels not closed"}));
  EXPECT_TRUE(refused("temp{gpu} 1", {"without '=\"value\"'"}));
  EXPECT_TRUE(refused("temp{gpu=0} 1", {"not quoted"}));
  EXPECT_TRUE(refused("temp{gpu=} 1", {"not quoted"}));
  EXPECT_TRUE(refused("temp{=\"0\"} 1", {"label name", "start with a letter"}));
  EXPECT_TRUE(refused("temp{1gpu=\"0\"} 1", {"label name", "start with a letter"}));
  EXPECT_TRUE(refused("temp{gpu-id=\"0\"} 1", {"label name holds '-'"}));
  EXPECT_TRUE(refused("temp{gpu.id=\"0\"} 1", {"label name holds '.'"}));
}
