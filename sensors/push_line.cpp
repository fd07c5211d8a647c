#include "push_line.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace fructosa::sensors {
namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-'; }

// A character as a reason shows it: 'x', or \xNN for what a terminal would not print.
std::string shown(char c) {
  auto byte = static_cast<unsigned char>(c);
  if (byte < 0x20 || byte >= 0x7f) return fmt::format("\\x{:02x}", byte);
  return fmt::format("'{}'", c);
}

// Input quoted in a reason: at most 40 bytes, each unprintable one as \xNN (a reply is text).
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 40)) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '\\')
      out += fmt::format("\\x{:02x}", byte);
    else
      out += c;
  }
  return out + (text.size() > 40 ? "...'" : "'");
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

PushLine refused(std::string reason) {
  PushLine line;
  line.status = PushLine::Status::refused;
  line.reason = std::move(reason);
  return line;
}

// A finite number: decimal or exponent notation, an optional sign.
bool parse_value(std::string_view text, double& value, std::string& reason) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) {
    reason = "the value is missing";
    return false;
  }
  // from_chars takes a '-' of its own: "+-1" would otherwise be read as -1.
  if (digits.size() < text.size() && digits.front() == '-') {
    reason = fmt::format("value {} is not a number", quoted(text));
    return false;
  }
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::result_out_of_range) {
    reason = fmt::format("value {} is out of range", quoted(text));
    return false;
  }
  if (error != std::errc() || end != digits.data() + digits.size()) {
    reason = fmt::format("value {} is not a number", quoted(text));
    return false;
  }
  if (!std::isfinite(value)) {
    reason = fmt::format("value {} is not finite", quoted(text));
    return false;
  }
  return true;
}

// statsd: name:value|type[|@rate]
PushLine parse_statsd(std::string_view text) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return refused("no ':' between name and value (name:value|g or name:value|c)");
  std::string_view name = text.substr(0, colon);
  std::string_view rest = text.substr(colon + 1);
  auto bar = rest.find('|');
  // The '|' came before the ':' (in the name, then).
  if (bar == std::string_view::npos) {
    if (auto problem = pushed_name_problem(name); !problem.empty()) return refused(problem);
    return refused("no type: name:value|g (gauge) or name:value|c (counter)");
  }
  std::string_view value_text = rest.substr(0, bar);
  std::string_view type = rest.substr(bar + 1);
  std::string_view options;
  if (auto next = type.find('|'); next != std::string_view::npos) {
    options = type.substr(next + 1);
    type = type.substr(0, next);
  }
  PushLine line;
  line.status = PushLine::Status::metric;
  if (type == "g") {
    line.kind = PushedKind::gauge;
  } else if (type == "c") {
    line.kind = PushedKind::counter;
  } else {
    return refused(fmt::format("type {} is not supported: g (gauge) or c (counter)", quoted(type)));
  }
  if (auto problem = pushed_name_problem(name); !problem.empty()) return refused(problem);
  line.name = name;
  if (!parse_value(value_text, line.value, line.reason)) return refused(line.reason);
  if (!options.empty()) {
    if (options.front() == '#') return refused("tags (|#...) are not supported: put what they say in the name");
    if (options.front() != '@' || line.kind != PushedKind::counter)
      return refused(fmt::format("{} is not understood (a counter may end in |@RATE)", quoted(options)));
    double rate = 0;
    std::string reason;
    if (!parse_value(options.substr(1), rate, reason) || !(rate > 0 && rate <= 1))
      return refused(fmt::format("sample rate {} is not in (0, 1]", quoted(options.substr(1))));
    line.value /= rate;
    if (!std::isfinite(line.value)) return refused("the value divided by its sample rate is not finite");
  }
  return line;
}

// A label value as part of a name component: what a name may not hold becomes '_'.
void append_label_value(std::string& name, std::string_view value) {
  for (char c : value) name += is_name_char(c) ? c : '_';
}

// Prometheus: name[{label="value",...}] value [timestamp]. A gauge; the timestamp is ignored
// (a sample is stamped with the reading it is reported at).
PushLine parse_prometheus(std::string_view text) {
  std::size_t end_of_name = 0;
  while (end_of_name < text.size() && text[end_of_name] != '{' && text[end_of_name] != ' ' &&
         text[end_of_name] != '\t')
    ++end_of_name;
  std::string_view name = text.substr(0, end_of_name);
  if (end_of_name == text.size()) {
    if (name.find(':') != std::string_view::npos)
      return refused("no type: name:value|g (gauge) or name:value|c (counter)");
    return refused("no value: name:value|g, name:value|c or the Prometheus `name value`");
  }
  if (auto problem = pushed_name_problem(name); !problem.empty()) return refused(problem);
  PushLine line;
  line.status = PushLine::Status::metric;
  line.kind = PushedKind::gauge;
  line.name = name;
  std::string_view rest = text.substr(end_of_name);
  if (rest.front() == '{') {
    rest.remove_prefix(1);
    while (true) {
      rest = trim(rest);
      if (rest.empty()) return refused("labels not closed with '}'");
      if (rest.front() == '}') {
        rest.remove_prefix(1);
        break;
      }
      auto equals = rest.find('=');
      if (equals == std::string_view::npos)
        return refused(rest.find('}') == std::string_view::npos ? "labels not closed with '}'"
                                                                : "a label without '=\"value\"'");
      std::string_view label = trim(rest.substr(0, equals));
      if (label.empty() || !is_name_start(label.front()))
        return refused(fmt::format("label name {} must start with a letter or '_'", quoted(label)));
      for (char c : label)
        if (!is_name_char(c) || c == '-') return refused(fmt::format("label name holds {}", shown(c)));
      rest = trim(rest.substr(equals + 1));
      if (rest.empty() || rest.front() != '"')
        return refused(fmt::format("label {}'s value is not quoted", quoted(label)));
      rest.remove_prefix(1);
      std::string value;
      bool closed = false;
      while (!rest.empty()) {
        char c = rest.front();
        rest.remove_prefix(1);
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && !rest.empty()) {
          c = rest.front() == 'n' ? '\n' : rest.front();
          rest.remove_prefix(1);
        }
        value += c;
      }
      if (!closed) return refused(fmt::format("label {}'s value has no closing '\"'", quoted(label)));
      line.name += '_';
      line.name += label;
      line.name += '_';
      append_label_value(line.name, value);
      rest = trim(rest);
      if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
    }
    if (line.name.size() > kMaxPushedNameLength)
      return refused(fmt::format("name with its labels is longer than {} characters", kMaxPushedNameLength));
  }
  rest = trim(rest);
  auto space = rest.find_first_of(" \t");
  std::string_view value_text = rest.substr(0, space);
  if (space != std::string_view::npos) {
    std::string_view timestamp = trim(rest.substr(space));
    long long ignored = 0;
    auto [end, error] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), ignored);
    if (error != std::errc() || end != timestamp.data() + timestamp.size())
      return refused(fmt::format("{} after the value is not a timestamp", quoted(timestamp)));
  }
  if (value_text == "NaN" || value_text == "+Inf" || value_text == "-Inf")
    return refused(fmt::format("value {} is not finite", quoted(value_text)));
  if (!parse_value(value_text, line.value, line.reason)) return refused(line.reason);
  return line;
}

}  // namespace

std::string pushed_name_problem(std::string_view name) {
  if (name.empty()) return "the name is empty";
  if (name.size() > kMaxPushedNameLength)
    return fmt::format("name {} is longer than {} characters", quoted(name), kMaxPushedNameLength);
  if (!is_name_start(name.front()))
    return fmt::format("name must start with a letter or '_', not {}", shown(name.front()));
  for (char c : name) {
    if (c == '.')
      return fmt::format("name {} holds '.': Graphite would split it (use '_')", quoted(name));
    if (!is_name_char(c))
      return fmt::format("name holds {}: letters, digits, '_' and '-' only", shown(c));
  }
  return {};
}

PushLine parse_push_line(std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.size() > kMaxPushLineLength) return refused(fmt::format("line longer than {} bytes", kMaxPushLineLength));
  text = trim(text);
  if (text.empty() || text.front() == '#') return {};
  // A Prometheus label value may hold '|' and ':': a '{' before either makes the line Prometheus.
  auto brace = text.find('{');
  bool prometheus = brace != std::string_view::npos && brace < text.find_first_of(":|");
  if (!prometheus && text.find('|') != std::string_view::npos) return parse_statsd(text);
  return parse_prometheus(text);
}

}  // namespace fructosa::sensors
