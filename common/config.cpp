#include "config.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fructosa {
namespace {

std::string trim(std::string_view text) {
  const char* spaces = " \t\r\n";
  auto begin = text.find_first_not_of(spaces);
  if (begin == std::string_view::npos) return {};
  auto end = text.find_last_not_of(spaces);
  return std::string(text.substr(begin, end - begin + 1));
}

// Boost.PropertyTree keeps no positions, so error messages find their line here. This only
// locates what the parser already accepted: section headers and the text before `=`.
struct LineIndex {
  std::vector<std::pair<std::string, int>> sections;  // in file order (ptree drops empty ones)
  std::map<std::string, int> section_lines;
  std::pair<std::string, int> repeated_section{"", 0};  // Boost 1.74 accepts a repeat; configparser does not
  std::map<std::pair<std::string, std::string>, int> key_lines;

  explicit LineIndex(const std::string& text) {
    std::istringstream in(text);
    std::string raw;
    std::string section;
    for (int number = 1; std::getline(in, raw); ++number) {
      std::string line = trim(raw);
      if (line.empty() || line[0] == ';' || line[0] == '#') continue;
      if (line[0] == '[') {
        section = trim(line.substr(1, line.find(']') - 1));
        if (section_lines.emplace(section, number).second) sections.emplace_back(section, number);
        else if (repeated_section.second == 0) repeated_section = {section, number};
      } else if (auto eq = line.find('='); eq != std::string::npos) {
        key_lines.emplace(std::pair{section, trim(line.substr(0, eq))}, number);
      }
    }
  }
};

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

}  // namespace

std::string_view to_string(OptionType type) {
  switch (type) {
    case OptionType::boolean: return "bool";
    case OptionType::integer: return "int";
    case OptionType::real: return "number";
    case OptionType::text: return "text";
    case OptionType::list: return "list";
  }
  return "?";
}

IniFile IniFile::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read configuration: {}", path, std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

IniFile IniFile::parse(const std::string& text, const std::string& path) {
  LineIndex lines(text);
  if (lines.repeated_section.second != 0)
    throw ConfigError(fmt::format("{}:{}: duplicate section [{}]", path, lines.repeated_section.second,
                                  lines.repeated_section.first));
  namespace pt = boost::property_tree;
  pt::ptree tree;
  std::istringstream in(text);
  try {
    pt::ini_parser::read_ini(in, tree);
  } catch (const pt::ini_parser_error& error) {
    throw ConfigError(fmt::format("{}:{}: {}", path, error.line(), error.message()));
  }
  IniFile file;
  file.path_ = path;
  for (const auto& [name, node] : tree) {
    if (node.empty() && !lines.section_lines.count(name)) {
      int line = lines.key_lines.count({"", name}) ? lines.key_lines.at({"", name}) : 0;
      throw ConfigError(fmt::format("{}:{}: key '{}' is outside any [section]", path, line, name));
    }
  }
  for (const auto& [name, header_line] : lines.sections) {
    IniSection section{name, header_line, {}};
    if (auto node = tree.get_child_optional(pt::ptree::path_type(name, '\0'))) {
      for (const auto& [key, value] : *node) {
        auto found = lines.key_lines.find({name, key});
        section.entries.push_back({key, value.data(), found == lines.key_lines.end() ? header_line : found->second});
      }
    }
    file.sections_.push_back(std::move(section));
  }
  return file;
}

const IniSection* IniFile::find(std::string_view name) const {
  for (const auto& section : sections_)
    if (section.name == name) return &section;
  return nullptr;
}

std::string IniFile::where(const IniSection& section, const IniEntry* entry) const {
  if (entry) return fmt::format("{}:{}: [{}] {}", path_, entry->line, section.name, entry->key);
  return fmt::format("{}:{}: [{}]", path_, section.line, section.name);
}

const Options::Value& Options::at(const std::string& name) const {
  auto found = values_.find(name);
  // A lookup of an undeclared option is a programming error, not a user's.
  if (found == values_.end()) throw std::logic_error("option not declared: " + name);
  return found->second;
}

Options::Value parse_value(const OptionSpec& spec, const std::string& raw) {
  std::string text = trim(raw);
  auto check_range = [&](double value) {
    if (std::isnan(value) || value < spec.min || value > spec.max) {
      if (std::isinf(spec.max)) throw std::invalid_argument(fmt::format("must be at least {}", spec.min));
      if (std::isinf(spec.min)) throw std::invalid_argument(fmt::format("must be at most {}", spec.max));
      throw std::invalid_argument(fmt::format("must be between {} and {}", spec.min, spec.max));
    }
  };
  switch (spec.type) {
    case OptionType::boolean: {
      std::string lower = text;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      // The words Python's configparser accepts, so FrUCToSA configs keep working.
      if (lower == "1" || lower == "yes" || lower == "true" || lower == "on") return true;
      if (lower == "0" || lower == "no" || lower == "false" || lower == "off") return false;
      throw std::invalid_argument("expected a boolean (true/false, yes/no, on/off, 1/0)");
    }
    case OptionType::integer: {
      std::size_t used = 0;
      long long value = 0;
      try {
        value = std::stoll(text, &used, 10);
      } catch (const std::exception&) {
        used = 0;
      }
      if (text.empty() || used != text.size()) throw std::invalid_argument("expected an integer");
      check_range(static_cast<double>(value));
      return static_cast<std::int64_t>(value);
    }
    case OptionType::real: {
      std::size_t used = 0;
      double value = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (text.empty() || used != text.size() || !std::isfinite(value))
        throw std::invalid_argument("expected a number");
      check_range(value);
      return value;
    }
    case OptionType::text: {
      if (!spec.choices.empty() &&
          std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end())
        throw std::invalid_argument("expected one of: " + join(spec.choices, ", "));
      return text;
    }
    case OptionType::list: {
      std::vector<std::string> items;
      std::string item;
      std::istringstream in(text);
      while (std::getline(in, item, ',')) {
        item = trim(item);
        if (!item.empty()) items.push_back(item);
      }
      return items;
    }
  }
  throw std::logic_error("unknown option type");
}

namespace {

Options defaults_of(const OptionTable& table) {
  Options options;
  for (const auto& spec : table) {
    if (spec.required) continue;
    options.set(spec.name, parse_value(spec, spec.default_value), false);
  }
  return options;
}

// Keys match case-insensitively, as in Python's configparser that FrUCToSA used
// (its sample files write `maxBytes`, which configparser reads as `maxbytes`).
const OptionSpec* find_spec(const OptionTable& table, const std::string& name) {
  for (const auto& spec : table)
    if (equal_ignoring_case(spec.name, name)) return &spec;
  return nullptr;
}

std::vector<std::string> names_of(const OptionTable& table) {
  std::vector<std::string> names;
  for (const auto& spec : table) names.push_back(spec.name);
  return names;
}

std::string known_keys(const OptionTable& table) {
  return table.empty() ? "this section takes no keys" : "known keys: " + join(names_of(table), ", ");
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Optimal string alignment distance: a typo is usually one insertion, deletion, replacement
// or swap of neighbours.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

bool has_word(const std::string& name, const std::string& word) {
  for (std::size_t at = name.find(word); at != std::string::npos; at = name.find(word, at + 1)) {
    auto separator = [](char c) { return c == ' ' || c == '_' || c == '-' || c == ':' || c == '.'; };
    bool starts = at == 0 || separator(name[at - 1]);
    bool ends = at + word.size() == name.size() || separator(name[at + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

std::string resolve_config_path(const std::string& config_path, const std::string& value) {
  if (value.empty() || value.front() == '/') return value;
  auto base = std::filesystem::absolute(config_path).parent_path();
  return (base / value).lexically_normal().string();
}

Options parse_section(const OptionTable& table, const IniFile& file, const IniSection* section) {
  Options options = defaults_of(table);
  if (section) {
    for (const auto& entry : section->entries) {
      const OptionSpec* spec = find_spec(table, entry.key);
      if (!spec)
        throw ConfigError(fmt::format("{}: unknown key{} ({})", file.where(*section, &entry),
                                      did_you_mean(entry.key, names_of(table)), known_keys(table)));
      try {
        options.set(spec->name, parse_value(*spec, entry.value), true);
      } catch (const std::invalid_argument& why) {
        throw ConfigError(fmt::format("{}: bad value '{}': {}", file.where(*section, &entry),
                                      entry.value, why.what()));
      }
    }
  }
  for (const auto& spec : table) {
    if (spec.required && !options.is_set(spec.name)) {
      if (section)
        throw ConfigError(fmt::format("{}: missing required key '{}'", file.where(*section), spec.name));
      throw ConfigError(fmt::format("{}: missing required key '{}'", file.path(), spec.name));
    }
    if (spec.relative_to_file && spec.type == OptionType::text)
      options.set(spec.name, resolve_config_path(file.path(), options.get_text(spec.name)), options.is_set(spec.name));
  }
  return options;
}

Options parse_pairs(const OptionTable& table, const std::vector<std::string>& pairs,
                    const std::string& origin) {
  Options options = defaults_of(table);
  for (const auto& pair : pairs) {
    auto eq = pair.find('=');
    if (eq == std::string::npos)
      throw ConfigError(fmt::format("{}: '{}' is not key=value", origin, pair));
    std::string key = trim(pair.substr(0, eq));
    const OptionSpec* spec = find_spec(table, key);
    if (!spec)
      throw ConfigError(fmt::format("{}: unknown key '{}'{} ({})", origin, key, did_you_mean(key, names_of(table)),
                                    known_keys(table)));
    try {
      options.set(spec->name, parse_value(*spec, pair.substr(eq + 1)), true);
    } catch (const std::invalid_argument& why) {
      throw ConfigError(fmt::format("{}: {}: bad value '{}': {}", origin, key, pair.substr(eq + 1), why.what()));
    }
  }
  for (const auto& spec : table)
    if (spec.required && !options.is_set(spec.name))
      throw ConfigError(fmt::format("{}: missing required key '{}'", origin, spec.name));
  return options;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string closest_name(std::string_view unknown, const std::vector<std::string>& known) {
  std::string wanted = lower(unknown);
  if (wanted.empty()) return {};
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(1, wanted.size() / 3) + 1;
  for (const auto& name : known) {
    std::string candidate = lower(name);
    std::size_t distance = edit_distance(wanted, candidate);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  if (!best.empty()) return best;
  // A word of a longer name: FrUCToSA's docker files write `port` for `incoming data port`.
  if (wanted.size() >= 3)
    for (const auto& name : known)
      if (has_word(lower(name), wanted)) return name;
  return {};
}

std::string did_you_mean(std::string_view unknown, const std::vector<std::string>& known) {
  std::string name = closest_name(unknown, known);
  return name.empty() ? std::string() : fmt::format(", did you mean '{}'?", name);
}

std::string_view legacy_section_note(std::string_view section) {
  if (section == "qmaster")
    return "QULo's name for [lmaster], still in FrUCToSA's example files; fructosa reads [lmaster] only";
  if (section == "Redis") return "FrUCToSA's Redis store is not part of fructosa ([hdf5], [Graphite] and [elasticsearch] are)";
  return {};
}

std::string describe_options(const OptionTable& table, std::string_view indent) {
  std::string out;
  for (const auto& spec : table) {
    std::string kind(to_string(spec.type));
    if (!spec.choices.empty()) kind = join(spec.choices, "|");
    std::string default_text = spec.required ? "required" : "default: " + (spec.default_value.empty() ? "\"\"" : spec.default_value);
    out += fmt::format("{}{} ({}, {})\n{}    {}\n", indent, spec.name, kind, default_text, indent, spec.help);
  }
  return out;
}

}  // namespace fructosa
