#include "graphite_name.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace fructosa {

namespace {

// Per byte: 1 kept, 2 a dot, 0 anything else (one load per byte instead of seven comparisons).
constexpr auto kByteClass = [] {
  std::array<std::uint8_t, 256> classes{};
  for (int c = 0; c < 256; ++c)
    classes[c] = c == '.' ? 2 : graphite_keeps(static_cast<char>(c)) ? 1 : 0;
  return classes;
}();

}  // namespace

void append_graphite_component(std::string& out, std::string_view component) {
  if (component.empty()) {
    out += '_';
    return;
  }
  // Most names need nothing replaced: checked first, then appended in one go (lmaster does
  // this for every sample it sends).
  if (std::all_of(component.begin(), component.end(),
                  [](char c) { return kByteClass[static_cast<unsigned char>(c)] == 1; })) {
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


bool graphite_dotted_as_is(std::string_view dotted) {
  // Kept bytes and dots, no empty part (leading, trailing or "..").
  bool part_empty = true;
  for (char c : dotted) {
    switch (kByteClass[static_cast<unsigned char>(c)]) {
      case 1: part_empty = false; break;
      case 2:
        if (part_empty) return false;
        part_empty = true;
        break;
      default: return false;
    }
  }
  return !part_empty;
}

void append_graphite_dotted(std::string& out, std::string_view dotted) {
  if (graphite_dotted_as_is(dotted)) {  // the common case in one pass
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
