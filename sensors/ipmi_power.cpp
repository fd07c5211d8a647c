// IPMIPower: the node's power draw as the BMC measures it, through FreeIPMI's tools.
//
// method = dcmi (default): `ipmi-dcmi --get-system-power-statistics`, whose lines read
//   Current Power                        : 180 Watts
//   Minimum Power over sampling duration : 36 watts
//   Maximum Power over sampling duration : 306 watts
//   Average Power over sampling duration : 180 watts
//   Time Stamp                           : 01/23/2024 - 10:23:45
//   Statistics reporting time period     : 1000 milliseconds
//   Power Measurement                    : Active
// ("Power Measurement : Not Available" means the BMC measures nothing: unavailable).
// method = sensors: `ipmi-sensors --sensor-types=<sensor_types> --ignore-not-available-sensors`,
//   a table "ID | Name | Type | Reading | Units | Event"; every row whose Units is W is a power
//   sensor (sensors.<name>), and `power` is the sum of those that `sensors_include` selects
//   (PSU input powers add up to the node; a "Pwr Consumption" sensor already is the node).
// method = command: `command` run with /bin/sh -c (colmet's
//   "ipmi-oem dell power-monitoring-over-interval 5 systempower" and the like). The rule for
//   its output: of the lines that contain `match` (all lines when it is empty), the first
//   number followed by a watt unit ("W", "Watt", "Watts", any case, blanks allowed between)
//   is the power; when there is none and the whole output is one number, that number.
//
// The tools talk to the BMC over KCS or the network and can take seconds or hang, so they
// never run on the agent's thread: sample() hands the run to a BackgroundCommand
// (child_process.h) and reports the result of the last run that finished (nothing in the very
// first round, like a rate sensor), with its age. A run that passes `timeout` is killed with
// its whole process group (SIGKILL) and reaped; the sensor is then unavailable until a run
// succeeds. sample() itself only looks at a mutex-guarded slot and stats the program path.
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "child_process.h"
#include "glob_match.h"
#include "sensor.h"

namespace fructosa::sensors::ipmi_power_file {
namespace {

const OptionTable kOptions{
    {.name = "method",
     .type = OptionType::text,
     .default_value = "dcmi",
     .help = "where the power comes from: dcmi (ipmi-dcmi --get-system-power-statistics), sensors "
             "(the watt readings of ipmi-sensors) or command (the `command` option)",
     .choices = {"dcmi", "sensors", "command"}},
    {.name = "ipmi_dcmi",
     .type = OptionType::text,
     .default_value = "ipmi-dcmi",
     .help = "FreeIPMI's ipmi-dcmi: a path, or a name looked up in PATH, then /usr/local/sbin, "
             "/usr/sbin, /sbin"},
    {.name = "ipmi_sensors",
     .type = OptionType::text,
     .default_value = "ipmi-sensors",
     .help = "FreeIPMI's ipmi-sensors (method = sensors): a path or a name, as ipmi_dcmi"},
    {.name = "sensor_types",
     .type = OptionType::list,
     .default_value = "Current,Power_Supply,Power_Unit,Other_Units_Based_Sensor",
     .help = "method = sensors: the sensor types ipmi-sensors reads (--sensor-types; `ipmi-sensors "
             "-L` lists them); empty: all sensors"},
    {.name = "sensors_include",
     .type = OptionType::list,
     .default_value = "",
     .help = "method = sensors: name patterns (fnmatch) of the watt sensors added up into `power`, "
             "e.g. 'PS* Input Power' or 'Pwr Consumption'; empty: all of them"},
    {.name = "arguments",
     .type = OptionType::text,
     .default_value = "",
     .help = "extra arguments for ipmi-dcmi / ipmi-sensors, split at blanks ('...' and \"...\" "
             "quote), e.g. '-D LAN_2_0 -h bmc07 -u monitor -p secret' for out-of-band access"},
    {.name = "command",
     .type = OptionType::text,
     .default_value = "",
     .help = "method = command: a shell command (run with /bin/sh -c) that prints the power, e.g. "
             "'/usr/sbin/ipmi-oem dell power-monitoring-over-interval 5 systempower'"},
    {.name = "match",
     .type = OptionType::text,
     .default_value = "",
     .help = "method = command: only lines containing this text are searched for the power (the "
             "first number followed by W/Watt/Watts; else an output that is one number)"},
    {.name = "timeout",
     .type = OptionType::real,
     .default_value = "5",
     .help = "seconds a run of the tool may take; then it is killed (SIGKILL, with everything it "
             "started) and the sensor is unavailable until a run succeeds",
     .min = 0.01,
     .max = 3600},
};

const Catalog kCatalog{
    {"power", Unit::watts, Kind::gauge,
     "node power: DCMI's current power, the sum of the selected watt sensors, or the command's "
     "reading"},
    {"power_min", Unit::watts, Kind::gauge, "DCMI: minimum power over the BMC's sampling period"},
    {"power_max", Unit::watts, Kind::gauge, "DCMI: maximum power over the BMC's sampling period"},
    {"power_average", Unit::watts, Kind::gauge, "DCMI: average power over the BMC's sampling period"},
    {"sampling_period", Unit::seconds, Kind::gauge,
     "DCMI: the BMC's statistics reporting time period the min/max/average cover"},
    {"sensors.*", Unit::watts, Kind::gauge,
     "method = sensors: one watt sensor of ipmi-sensors, by name (whether or not sensors_include "
     "adds it into power)"},
    {"age", Unit::seconds, Kind::gauge,
     "how long before this reading the tool run that gave these values finished"},
    {"duration", Unit::seconds, Kind::gauge, "how long that tool run took"},
};

enum class Method { dcmi, sensors, command };

struct Reading {
  std::vector<std::pair<std::string, double>> values;  // key, value
  std::string error;                                  // non-empty: the run failed
  std::chrono::steady_clock::time_point finished{};
  double duration = 0;
};

std::string_view trim(std::string_view text) {
  auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

bool istarts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && iequals(text.substr(0, prefix.size()), prefix);
}

// A number at the front of `text` (sign, digits, fraction); consumed from `text`.
std::optional<double> leading_number(std::string_view& text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || !std::isfinite(value)) return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return value;
}

// The whole of `text` as one number.
std::optional<double> whole_number(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto value = leading_number(text);
  return value && text.empty() ? value : std::nullopt;
}

// "Watt", "Watts", "W" (any case) as a whole word at the front of `text`.
bool starts_with_watt_unit(std::string_view text) {
  std::size_t length = 0;
  if (istarts_with(text, "watts"))
    length = 5;
  else if (istarts_with(text, "watt"))
    length = 4;
  else if (istarts_with(text, "w"))
    length = 1;
  else
    return false;
  return text.size() == length || !std::isalnum(static_cast<unsigned char>(text[length]));
}

// The first "<number> W|Watt|Watts" in `line`.
std::optional<double> watts_in(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    if (!std::isdigit(c)) continue;
    if (i > 0 && (std::isalnum(static_cast<unsigned char>(line[i - 1])) || line[i - 1] == '.')) continue;
    std::string_view rest = line.substr(i);
    auto value = leading_number(rest);
    if (!value) continue;
    std::string_view after = rest.substr(std::min(rest.size(), rest.find_first_not_of(" \t")));
    if (starts_with_watt_unit(after)) return value;
    i = line.size() - rest.size();  // skip the number
  }
  return std::nullopt;
}

std::string quote_start(std::string_view output) {
  output = trim(output);
  if (output.empty()) return "nothing";
  auto line = output.substr(0, output.find('\n'));
  if (line.size() > 80) line = line.substr(0, 80);
  return fmt::format("'{}'", trim(line));
}

// ipmi-dcmi --get-system-power-statistics.
std::string parse_dcmi(std::string_view output, Reading& reading) {
  std::optional<double> current;
  bool not_available = false;
  std::string_view rest = output;
  while (!rest.empty()) {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view label = trim(line.substr(0, colon));
    std::string_view value = trim(line.substr(colon + 1));
    std::string_view number = value;
    auto parsed = leading_number(number);
    number = trim(number);
    if (iequals(label, "Power Measurement")) {
      not_available = !iequals(value, "Active");
      continue;
    }
    if (!parsed) continue;
    bool watts = starts_with_watt_unit(number);
    if (iequals(label, "Current Power") && watts) {
      current = *parsed;
    } else if (istarts_with(label, "Minimum Power") && watts) {
      reading.values.emplace_back("power_min", *parsed);
    } else if (istarts_with(label, "Maximum Power") && watts) {
      reading.values.emplace_back("power_max", *parsed);
    } else if (istarts_with(label, "Average Power") && watts) {
      reading.values.emplace_back("power_average", *parsed);
    } else if (istarts_with(label, "Statistics reporting time period")) {
      double scale = istarts_with(number, "milliseconds") ? 1e-3 : istarts_with(number, "seconds") ? 1 : 0;
      if (scale != 0) reading.values.emplace_back("sampling_period", *parsed * scale);
    }
  }
  if (not_available)
    return "ipmi-dcmi: the BMC reports 'Power Measurement : Not Available' (it measures no power; "
           "try method = sensors)";
  if (!current)
    return fmt::format("ipmi-dcmi printed no 'Current Power : N Watts' line (output starts with {})",
                       quote_start(output));
  reading.values.insert(reading.values.begin(), {"power", *current});
  return {};
}

// ipmi-sensors' table: "ID | Name | Type | Reading | Units | Event".
std::string parse_sensors(std::string_view output, const std::vector<std::string>& include, Reading& reading) {
  std::size_t name_column = 1, reading_column = 3, units_column = 4;
  double total = 0;
  std::size_t watt_sensors = 0, added = 0;
  std::string_view rest = output;
  while (!rest.empty()) {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
      auto bar = line.find('|', start);
      fields.push_back(trim(line.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start)));
      if (bar == std::string_view::npos) break;
      start = bar + 1;
    }
    if (fields.size() < 5) continue;
    if (iequals(fields[0], "ID")) {  // the header says where the columns are
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (iequals(fields[i], "Name")) name_column = i;
        if (iequals(fields[i], "Reading")) reading_column = i;
        if (iequals(fields[i], "Units")) units_column = i;
      }
      continue;
    }
    if (std::max({name_column, reading_column, units_column}) >= fields.size()) continue;
    std::string_view units = fields[units_column];
    if (!iequals(units, "W") && !iequals(units, "Watts")) continue;
    auto value = whole_number(fields[reading_column]);
    if (!value) continue;  // N/A
    ++watt_sensors;
    std::string name(fields[name_column]);
    reading.values.emplace_back("sensors." + key_component(name), *value);
    bool selected = include.empty();
    for (const auto& pattern : include) selected |= glob_match(pattern, name);
    if (selected) {
      total += *value;
      ++added;
    }
  }
  if (watt_sensors == 0)
    return fmt::format("ipmi-sensors listed no sensor with a reading in watts (output starts with {})",
                       quote_start(output));
  if (added == 0) return fmt::format("none of the {} watt sensors of ipmi-sensors matches sensors_include", watt_sensors);
  reading.values.insert(reading.values.begin(), {"power", total});
  return {};
}

// method = command: the rule in the header comment.
std::string parse_command(std::string_view output, std::string_view match, Reading& reading) {
  std::string_view rest = output;
  while (!rest.empty()) {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (!match.empty() && line.find(match) == std::string_view::npos) continue;
    if (auto watts = watts_in(line)) {
      reading.values.emplace_back("power", *watts);
      return {};
    }
  }
  if (match.empty()) {
    if (auto value = whole_number(output)) {
      reading.values.emplace_back("power", *value);
      return {};
    }
  }
  return fmt::format("the command printed no power ('<number> W' or 'Watts'{}; output starts with {})",
                     match.empty() ? std::string(", or one number") : fmt::format(" on a line containing '{}'", match),
                     quote_start(output));
}

class IPMIPowerSensor final : public Sensor {
 public:
  explicit IPMIPowerSensor(const SensorContext& context)
      : timeout_(context.options.get_real("timeout")),
        include_(context.options.get_list("sensors_include")),
        match_(context.options.get_text("match")),
        runner_(timeout_) {
    const auto& method = context.options.get_text("method");
    auto extra = split_command_line(context.options.get_text("arguments"));
    if (method == "sensors") {
      method_ = Method::sensors;
      program_ = context.options.get_text("ipmi_sensors");
      const auto& types = context.options.get_list("sensor_types");
      if (!types.empty()) {
        std::string joined;
        for (const auto& type : types) joined += (joined.empty() ? "" : ",") + type;
        arguments_.push_back("--sensor-types=" + joined);
      }
      arguments_.push_back("--ignore-not-available-sensors");
    } else if (method == "command") {
      method_ = Method::command;
      if (context.options.get_text("command").empty())
        throw ConfigError("method = command needs the `command` option (the program line to run)");
      program_ = "/bin/sh";
      arguments_ = {"-c", context.options.get_text("command")};
      extra.clear();
    } else {
      program_ = context.options.get_text("ipmi_dcmi");
      arguments_.push_back("--get-system-power-statistics");
    }
    arguments_.insert(arguments_.end(), extra.begin(), extra.end());
    name_ = method_ == Method::command ? "the command" : std::string(program_);
  }

  bool sample(SampleWriter& out) override {
    if (auto result = runner_.take()) absorb(*result);
    if (!runner_.running()) start();
    if (!last_) return false;  // the first run is still going
    if (!last_->error.empty()) throw SensorUnavailable(last_->error);
    for (const auto& [key, value] : last_->values) out.set(key, value);
    out.set("age", std::chrono::duration<double>(std::chrono::steady_clock::now() - last_->finished).count());
    out.set("duration", last_->duration);
    return true;
  }

 private:
  std::string missing() const {
    return fmt::format("{} not found: install freeipmi-tools", program_);
  }

  void start() {
    std::string path = find_program(program_);
    if (path.empty()) {
      // Nothing to wait for: say so now (and forget an older reading).
      last_.reset();
      throw SensorUnavailable(missing());
    }
    std::vector<std::string> argv{path};
    argv.insert(argv.end(), arguments_.begin(), arguments_.end());
    runner_.start(std::move(argv));
  }

  void absorb(const ChildResult& result) {
    Reading reading;
    reading.finished = result.finished;
    reading.duration = result.seconds;
    if (result.spawn_error == ENOENT && method_ != Method::command) {
      reading.error = missing();
    } else if (!result.succeeded()) {
      reading.error = result.failure(name_, timeout_);
    } else if (method_ == Method::dcmi) {
      reading.error = parse_dcmi(result.out, reading);
    } else if (method_ == Method::sensors) {
      reading.error = parse_sensors(result.out, include_, reading);
    } else {
      reading.error = parse_command(result.out, match_, reading);
    }
    last_ = std::move(reading);
  }

  Method method_ = Method::dcmi;
  std::string program_;
  std::vector<std::string> arguments_;
  std::string name_;
  double timeout_;
  std::vector<std::string> include_;
  std::string match_;
  std::optional<Reading> last_;
  BackgroundCommand runner_;  // last: destroyed (its run killed) before what it reports into
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("IPMIPower",
                         "Node power from the BMC through FreeIPMI (ipmi-dcmi, ipmi-sensors or a "
                         "command), run off the timer thread with a timeout",
                         kOptions, kCatalog, IPMIPowerSensor, .row = DashboardRow::energy);

}  // namespace fructosa::sensors::ipmi_power_file
