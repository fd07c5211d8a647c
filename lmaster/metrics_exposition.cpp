#include "metrics_exposition.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <set>

#include "master_catalog.h"
#include "prometheus_name.h"

namespace fructosa::master {

namespace {

// HELP text: backslash and newline escaped. Label values: also the double quote.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
}

std::string value_text(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);  // the shortest text that reads back as the same double
}

}  // namespace

std::string metrics_exposition(const Sample& sample) {
  std::string out;
  std::string labels = "{host=\"";
  append_escaped(labels, sample.host, true);
  labels += "\"}";
  std::set<std::string> written;  // a family once (two keys of one name: the first, as the output)
  for (const auto& metric : sample.metrics) {
    const CatalogEntry* entry = master_catalog().find(metric.key);
    Unit unit = entry ? entry->unit : Unit::none;
    Kind kind = entry ? entry->kind : Kind::gauge;
    std::string name = prometheus_metric_name(sample.sensor, metric.key, to_string(unit), kind);
    if (!written.insert(name).second) continue;
    out += "# HELP " + name + " ";
    append_escaped(out, entry ? entry->description : "lmaster's " + metric.key, false);
    out += "\n# TYPE " + name + (kind == Kind::counter ? " counter\n" : " gauge\n");
    out += name + labels + " " + value_text(metric.value) + "\n";
  }
  return out;
}

bool split_listen_address(std::string_view text, std::string& host, unsigned& port) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host_part = text.substr(0, colon);
  std::string_view port_part = text.substr(colon + 1);
  if (host_part.front() == '[') {
    if (host_part.size() < 3 || host_part.back() != ']') return false;
    host_part = host_part.substr(1, host_part.size() - 2);
  } else if (host_part.find(':') != std::string_view::npos) {
    return false;  // an IPv6 address needs its brackets
  }
  unsigned value = 0;
  auto [end, error] = std::from_chars(port_part.data(), port_part.data() + port_part.size(), value);
  if (port_part.empty() || error != std::errc() || end != port_part.data() + port_part.size() || value > 65535)
    return false;
  host = host_part;
  port = value;
  return true;
}

}  // namespace fructosa::master
