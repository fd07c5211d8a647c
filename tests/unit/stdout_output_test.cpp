// lmaster's [stdout] output: the line format of stdout_output.h, read back by a parser written
// from that description alone.
#include "stdout_output.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace fructosa::master {
namespace {

using test::make_sample;

constexpr std::int64_t kT0 = 1700000000LL * 1000000000 + 200000000;

// One field of a line: a name (bare or quoted) and, after '=', a value (bare or quoted).
struct Field {
  std::string name;
  bool has_value = false;
  std::string value;
  bool value_quoted = false;
};

// Reads a quoted string at `at` (which is at its opening '"'); fails the test on bad escapes.
std::string read_quoted(const std::string& line, std::size_t& at) {
  std::string text;
  ++at;
  while (at < line.size() && line[at] != '"') {
    char c = line[at++];
    if (c != '\\') {
      text += c;
      continue;
    }
    if (at < line.size() && (line[at] == '"' || line[at] == '\\')) {
      text += line[at++];
    } else if (at + 3 <= line.size() && line[at] == 'x') {
      text += static_cast<char>(std::stoi(line.substr(at + 1, 2), nullptr, 16));
      at += 3;
    } else {
      ADD_FAILURE() << "bad escape in " << line;
      return text;
    }
  }
  EXPECT_LT(at, line.size()) << "unterminated quote in " << line;
  ++at;  // the closing '"'
  return text;
}

// Fields separated by single spaces; bare text ends at ' ' or (a name) at '='.
std::vector<Field> parse_line(const std::string& line) {
  std::vector<Field> fields;
  std::size_t at = 0;
  auto read = [&](bool is_name, bool& quoted) {
    quoted = at < line.size() && line[at] == '"';
    if (quoted) return read_quoted(line, at);
    std::size_t end = line.find_first_of(is_name ? " =" : " ", at);
    if (end == std::string::npos) end = line.size();
    std::string text = line.substr(at, end - at);
    at = end;
    return text;
  };
  while (at < line.size()) {
    Field field;
    bool quoted = false;
    field.name = read(true, quoted);
    if (at < line.size() && line[at] == '=') {
      ++at;
      field.has_value = true;
      field.value = read(false, field.value_quoted);
    }
    fields.push_back(field);
    if (at < line.size()) {
      EXPECT_EQ(line[at], ' ') << line;
      ++at;
    }
  }
  return fields;
}

// The fewest significant digits printf needs for `value` to read back the same: an oracle
// independent of the formatting under test.
int shortest_digits(double value) {
  for (int digits = 1; digits < 17; ++digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) return digits;
  }
  return 17;
}

// Significant digits of a decimal number's text ("1.7946e-05" -> 5, "25165824000" -> 8).
int significant_digits(const std::string& text) {
  std::string digits;
  for (char c : text) {
    if (c == 'e' || c == 'E') break;
    if (c >= '0' && c <= '9') digits += c;
  }
  auto first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;
  auto last = digits.find_last_not_of('0');
  return static_cast<int>(last - first + 1);
}

TEST(StdoutOutput, ValuesAreTheShortestTextThatReadsBackTheSameDouble) {
  const double values[] = {0.1,           1.0 / 3, 0.1 + 0.2, 1.7946e-05, 1.7945999999999587e-05,
                           25165824000,   12.3,    -12.5,     5e-324,     1e300,
                           123456789.125, 2.5e-7};
  std::vector<MetricValue> metrics;
  for (std::size_t i = 0; i < std::size(values); ++i)
    metrics.push_back({"v" + std::to_string(i), values[i]});
  MetricInfoStore infos;
  const std::string line = format_sample(make_sample("node07", "Values", kT0, 0, metrics), infos);
  auto fields = parse_line(line);
  ASSERT_EQ(fields.size(), 4 + std::size(values)) << line;
  for (std::size_t i = 0; i < std::size(values); ++i) {
    const Field& field = fields[4 + i];
    EXPECT_EQ(field.name, "v" + std::to_string(i));
    EXPECT_EQ(std::strtod(field.value.c_str(), nullptr), values[i]) << field.value;
    EXPECT_EQ(significant_digits(field.value), shortest_digits(values[i])) << field.value;
  }
}

TEST(StdoutOutput, TheUnitFollowsTheValue) {
  MetricInfoStore infos;
  infos.remember("CPUTimes", "user", {"seconds", Kind::counter, "time in user mode"});
  infos.remember("VirtualMemory", "percent", {"percent", Kind::gauge, "used"});
  EXPECT_EQ(format_sample(make_sample("node07", "CPUTimes", kT0, 0, {{"user", 1.7946e-05}}), infos),
            "2023-11-14T22:13:20.200Z node07 CPUTimes job=0 user=1.7946e-05s");
  EXPECT_EQ(format_sample(make_sample("n", "VirtualMemory", kT0, 42, {{"percent", 12.3}, {"x", 2}}),
                          infos),
            "2023-11-14T22:13:20.200Z n VirtualMemory job=42 percent=12.3% x=2");
}

TEST(StdoutOutput, NamesThatCouldBeMisreadAreQuoted) {
  MetricInfoStore infos;
  infos.remember("DiskUsage", "/scratch a=b.total", {"bytes", Kind::gauge, "size"});
  Sample sample = make_sample("node07", "DiskUsage", kT0, 0,
                              {{"/scratch a=b.total", 12}, {"/home.total", 3}, {"a\"b\\c", 1}});
  sample.labels.push_back({"device", "/dev/sd\"a\" 1"});
  EXPECT_EQ(format_sample(sample, infos),
            "2023-11-14T22:13:20.200Z node07 DiskUsage job=0 \"/scratch a=b.total\"=12B "
            "/home.total=3 \"a\\\"b\\\\c\"=1 device=\"/dev/sd\\\"a\\\" 1\"");
  // A scalar sensor's empty key is written `value`.
  EXPECT_EQ(format_sample(make_sample("n", "BootTime", kT0, 0, {{"", 5}}), infos),
            "2023-11-14T22:13:20.200Z n BootTime job=0 value=5");
}

TEST(StdoutOutput, EveryNameAndLabelReadsBackAsItWas) {
  const std::vector<std::string> names{"plain",
                                       "a b",
                                       "a=b",
                                       "=",
                                       "\"",
                                       "\\",
                                       "\\\"",
                                       "x\ny",
                                       std::string(1, '\0') + "z",
                                       "\x7f",
                                       "/scratch+proj(1)@a=b.total",
                                       "caf\xc3\xa9",
                                       "trailing\\",
                                       "=\"=",
                                       " "};
  Sample sample = make_sample("node 07=x", "My Sensor", kT0, 7, {});
  for (const auto& name : names) {
    sample.metrics.push_back({name, 1.5});
    sample.labels.push_back({name, name + "\" \\ ="});
  }
  sample.labels.push_back({"", ""});
  MetricInfoStore infos;
  const std::string line = format_sample(sample, infos);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per sample";
  auto fields = parse_line(line);
  ASSERT_EQ(fields.size(), 4 + 2 * names.size() + 1) << line;
  EXPECT_EQ(fields[1].name, "node 07=x");
  EXPECT_EQ(fields[2].name, "My Sensor");
  EXPECT_EQ(fields[3].name, "job");
  EXPECT_EQ(fields[3].value, "7");
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Field& metric = fields[4 + i];
    EXPECT_EQ(metric.name, names[i]) << line;
    EXPECT_EQ(metric.value, "1.5");
    EXPECT_FALSE(metric.value_quoted);
    const Field& label = fields[4 + names.size() + i];
    EXPECT_EQ(label.name, names[i]) << line;
    EXPECT_TRUE(label.value_quoted);
    EXPECT_EQ(label.value, names[i] + "\" \\ =") << line;
  }
  EXPECT_EQ(fields.back().name, "");
  EXPECT_EQ(fields.back().value, "");
}

TEST(StdoutOutput, WritesOneLinePerSampleAndCountsPoints) {
  std::ostringstream out;
  MetricInfoStore infos;
  StdoutOutput output(out, infos);
  std::vector<Sample> samples{make_sample("a", "S", kT0, 0, {{"k", 1}, {"j", 2}}),
                              make_sample("b", "S", kT0, 0, {{"k", 3}})};
  output.write(samples);
  output.flush();
  EXPECT_EQ(out.str(),
            format_sample(samples[0], infos) + "\n" + format_sample(samples[1], infos) + "\n");
  EXPECT_EQ(output.counters().sent, 3u);
}

}  // namespace
}  // namespace fructosa::master
