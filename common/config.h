// INI configuration: a file loaded with Boost.PropertyTree plus typed option tables.
//
// Every configurable thing (a sensor, an output, [logging], ...) declares one OptionTable:
// name, type, default, help. The same table parses and validates a section, fills in
// defaults and prints the help text, so an option is declared exactly once.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fructosa {

// sysexits.h EX_CONFIG: what the daemons exit with when their configuration is unusable.
inline constexpr int kExitConfigError = 78;

// A configuration problem; what() names file, line, section and key.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct IniEntry {
  std::string key;
  std::string value;
  int line = 0;
};

struct IniSection {
  std::string name;
  int line = 0;
  std::vector<IniEntry> entries;
};

class IniFile {
 public:
  // Throws ConfigError (unreadable file, syntax error, duplicate section or key).
  static IniFile load(const std::string& path);
  static IniFile parse(const std::string& text, const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<IniSection>& sections() const { return sections_; }
  const IniSection* find(std::string_view name) const;

  // "path:line: [section] key: message", the form every configuration error takes.
  std::string where(const IniSection& section, const IniEntry* entry = nullptr) const;

 private:
  std::string path_;
  std::vector<IniSection> sections_;
};

enum class OptionType { boolean, integer, real, text, list };

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::text;
  std::string default_value;  // as written in a file; empty for a list means an empty list
  std::string help;
  double min = -std::numeric_limits<double>::infinity();  // for integer and real
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices = {};  // for text: the accepted values, when limited
  bool required = false;
  // A text naming a file or directory: parse_section makes a relative value relative to the
  // configuration file's directory, so a daemon (which runs in "/") and a foreground run agree.
  bool relative_to_file = false;
};

using OptionTable = std::vector<OptionSpec>;

// The parsed values of one section, with every option of its table present.
class Options {
 public:
  using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

  bool get_bool(const std::string& name) const { return std::get<bool>(at(name)); }
  std::int64_t get_int(const std::string& name) const { return std::get<std::int64_t>(at(name)); }
  double get_real(const std::string& name) const { return std::get<double>(at(name)); }
  const std::string& get_text(const std::string& name) const {
    return std::get<std::string>(at(name));
  }
  const std::vector<std::string>& get_list(const std::string& name) const {
    return std::get<std::vector<std::string>>(at(name));
  }
  const Value& get(const std::string& name) const { return at(name); }
  // True when `name` is an option of the table these values were parsed with.
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // True when the value came from the file (or -o), not from the default.
  bool is_set(const std::string& name) const { return explicitly_set_.count(name) > 0; }
  bool operator==(const Options& other) const { return values_ == other.values_; }

  void set(const std::string& name, Value value, bool explicitly) {
    values_[name] = std::move(value);
    if (explicitly) explicitly_set_[name] = true;
  }

 private:
  const Value& at(const std::string& name) const;
  std::map<std::string, Value> values_;
  std::map<std::string, bool> explicitly_set_;
};

// Parses `section` (nullptr: the section is absent, defaults apply) against `table`.
// Unknown keys, bad values and missing required options throw ConfigError naming the place.
Options parse_section(const OptionTable& table, const IniFile& file, const IniSection* section);

// `value` made relative to the directory of the configuration file `config_path` (absolute and
// empty values are kept as they are).
std::string resolve_config_path(const std::string& config_path, const std::string& value);

// Parses key=value pairs given on a command line (e.g. `lagent probe -o percpu=false`).
Options parse_pairs(const OptionTable& table, const std::vector<std::string>& pairs,
                    const std::string& origin);

// Parses one value of the given type; throws std::invalid_argument with a short reason.
Options::Value parse_value(const OptionSpec& spec, const std::string& text);

// ASCII case-insensitive equality: FrUCToSA's configparser matched keys so, and lmaster and lagent
// match [Graphite] so.
bool equal_ignoring_case(std::string_view a, std::string_view b);

// The name of `known` that `unknown` was probably meant to be, or "" when none is close: a
// case-insensitive edit distance (insert, delete, replace, swap) of at most a third of the
// name, or a known name that has `unknown` as one of its words (`port` -> `incoming data
// port`). For "did you mean" hints in configuration errors.
std::string closest_name(std::string_view unknown, const std::vector<std::string>& known);

// ", did you mean 'X'?" with the closest of `known`, or "" when none is close.
std::string did_you_mean(std::string_view unknown, const std::vector<std::string>& known);

// Sections of FrUCToSA's files (and of QULo's, its predecessor) that fructosa has no use for:
// a site's existing files keep working, with a warning that says why the section is ignored.
// Returns that reason, or "" for a section FrUCToSA did not know.
std::string_view legacy_section_note(std::string_view section);

// Help text: one line per option with its type, default and description.
std::string describe_options(const OptionTable& table, std::string_view indent = "  ");

std::string_view to_string(OptionType type);

}  // namespace fructosa
