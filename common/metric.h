// The data model shared by every part of fructosa (DESIGN.md, "Data model").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fructosa {

enum class Kind : std::uint8_t { gauge, counter };

// Units are written as the names Grafana and humans use; the catalog validates them.
enum class Unit : std::uint8_t {
  none,
  percent,
  bytes,
  seconds,
  count,
  hertz_mega,
  celsius,
  watts,
  joules,
  rpm,
  timestamp,     // seconds since the Unix epoch
  boolean,       // 0 or 1
  milliseconds,
  megabits_per_second,
  volts,
  amperes,
};

std::string_view to_string(Kind kind);
std::string_view to_string(Unit unit);
std::optional<Kind> kind_from_string(std::string_view text);

struct MetricValue {
  std::string key;
  double value = 0;
};

struct Label {
  std::string key;
  std::string value;
};

// One reading of one sensor on one host (for one job, or the node itself when job == 0).
struct Sample {
  std::string host;
  std::string sensor;
  std::int64_t time_ns = 0;  // ns since the Unix epoch
  std::uint64_t job = 0;
  std::vector<MetricValue> metrics;
  std::vector<Label> labels;
};

// What the catalog says of one key, as it travels with the dictionary.
struct MetricInfo {
  std::string unit;
  Kind kind = Kind::gauge;
  std::string description;
};

// One catalog line. `pattern` is a metric key in which `*` stands for one dotted component
// (e.g. "*" for CPUPercent's per-CPU keys, "*.bytes_sent" for per-NIC keys).
struct CatalogEntry {
  std::string pattern;
  Unit unit;
  Kind kind;
  std::string description;
};

class Catalog {
 public:
  Catalog(std::initializer_list<CatalogEntry> entries) : entries_(entries) {}
  const std::vector<CatalogEntry>& entries() const { return entries_; }
  // The first entry whose pattern matches `key`, or nullptr.
  const CatalogEntry* find(std::string_view key) const;

 private:
  std::vector<CatalogEntry> entries_;
};

bool key_matches(std::string_view pattern, std::string_view key);

// One component of a dotted metric key made from a name found on the node (a NIC, a mount
// point, a chip label): dots become '_' so the component stays one component, and control
// characters become '_'. Spaces and '/' are kept (HDF5 escapes '/', Graphite sanitises).
std::string key_component(std::string_view name);

// Python's round(x, ndigits): correctly rounded on the exact binary value, as psutil uses it.
double python_round(double value, int ndigits);

// psutil._common.usage_percent(used, total, round_=1).
double usage_percent(double used, double total);

}  // namespace fructosa
