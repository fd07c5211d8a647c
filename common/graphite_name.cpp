#include "graphite_name.h"

#include <algorithm>

namespace fructosa {

void append_graphite_component(std::string& out, std::string_view component) {
  if (component.empty()) {
    out += '_';
    return;
  }
  // Most names need nothing replaced: checked first, then appended in one go (lmaster does
  // this for every point it sends).
  if (std::all_of(component.begin(), component.end(), graphite_keeps)) {
    out.append(component);
    return;
  }
  for (char c : component) out += graphite_keeps(c) ? c : '_';
}

std::string graphite_component(std::string_view component) {
  std::string out;
  append_graphite_component(out, component);
  return out;
}

void append_graphite_dotted(std::string& out, std::string_view dotted) {
  // The common case in one pass: kept bytes and dots, no empty part (leading, trailing or "..").
  bool part_empty = true;
  bool as_is = true;
  for (char c : dotted) {
    if (c == '.') {
      if (part_empty) break;
      part_empty = true;
    } else if (graphite_keeps(c)) {
      part_empty = false;
    } else {
      as_is = false;
      break;
    }
  }
  if (as_is && !part_empty) {
    out.append(dotted);
    return;
  }
  while (true) {
    auto dot = dotted.find('.');
    append_graphite_component(out, dotted.substr(0, dot));
    if (dot == std::string_view::npos) return;
    out += '.';
    dotted.remove_prefix(dot + 1);
  }
}

std::string graphite_dotted(std::string_view dotted) {
  std::string out;
  append_graphite_dotted(out, dotted);
  return out;
}

void append_graphite_host(std::string& out, std::string_view host) {
  const bool ipv4 =
      !host.empty() && host.find_first_not_of("0123456789.") == std::string_view::npos;
  append_graphite_component(out, ipv4 ? host : host.substr(0, host.find('.')));
}

std::string graphite_host(std::string_view host) {
  std::string out;
  append_graphite_host(out, host);
  return out;
}

std::string graphite_prefix(std::string_view prefix) {
  while (!prefix.empty() && prefix.front() == '.') prefix.remove_prefix(1);
  while (!prefix.empty() && prefix.back() == '.') prefix.remove_suffix(1);
  std::string out;
  if (prefix.empty()) return out;
  append_graphite_dotted(out, prefix);
  out += '.';
  return out;
}

}  // namespace fructosa
