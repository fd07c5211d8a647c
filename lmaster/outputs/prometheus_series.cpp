// The Prometheus output's series: the metric names from the catalog, and the series cache. A
// series' labels are built, hashed and encoded once, when first met; a point finds its series
// by the hash of what gives the labels (its "source": host, sensor, job, the sample's item
// labels, key), one lookup in a flat table, prefetched a few points ahead: at 200,000 series
// the tables are larger than the caches and each lookup would otherwise wait for memory.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "prometheus_name.h"
#include "prometheus_output_impl.h"

namespace fructosa::master::prometheus {

namespace {

std::uint64_t hash_labels(const std::vector<PrometheusLabel>& labels) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  auto mix = [&](std::string_view text, unsigned char end) {
    for (char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    hash = (hash ^ end) * 1099511628211ull;  // bytes no label has: "a","bc" differs from "ab","c"
  };
  for (const auto& label : labels) {
    mix(label.name, 0xff);
    mix(label.value, 0xfe);
  }
  return hash;
}

// The part of a point's source its sample gives: every item label ("<item>.<name>") counts,
// whichever keys it applies to; labels of the whole sample are never sent and do not count.
std::uint64_t sample_source(const Sample& sample) {
  std::uint64_t hash = hash_bytes(sample.host, 0x66727563746f7361ull);
  hash = hash_bytes(sample.sensor, hash);
  hash = hash_bytes(std::string_view(reinterpret_cast<const char*>(&sample.job), sizeof sample.job), hash);
  for (const auto& label : sample.labels) {
    auto dot = label.key.rfind('.');
    if (dot == std::string::npos || dot == 0) continue;
    hash = hash_bytes(label.value, hash_bytes(label.key, hash));
  }
  return hash;
}

std::uint64_t varint(std::string_view& bytes) {
  std::uint64_t value = 0;
  for (int shift = 0; !bytes.empty() && shift < 64; shift += 7) {
    auto byte = static_cast<unsigned char>(bytes.front());
    bytes.remove_prefix(1);
    value |= std::uint64_t{byte & 0x7fu} << shift;
    if (byte < 0x80) break;
  }
  return value;
}

std::string_view field(std::string_view& bytes) {
  bytes.remove_prefix(std::min<std::size_t>(1, bytes.size()));  // the tag
  auto size = std::min<std::size_t>(varint(bytes), bytes.size());
  auto value = bytes.substr(0, size);
  bytes.remove_prefix(size);
  return value;
}

// How long a series nobody sends any more (a finished job's) is remembered: longer than
// Prometheus keeps a series writable (its head block, 2 to 3 hours).
constexpr std::int64_t kForgetAfterMs = 4 * 3600 * 1000;

}  // namespace

PrometheusOutput::Name& PrometheusOutput::name_of(const std::string& sensor, const std::string& key) {
  std::string& lookup = name_lookup_;
  lookup.assign(sensor).append(1, '\x1f').append(key);
  auto found = names_.find(lookup);
  if (found != names_.end() && found->second.from_catalog) return found->second;
  auto info = infos_.find(sensor, key);
  Name name;
  if (info)
    name = {prometheus_metric_name(sensor, key, info->unit, info->kind), true};
  else
    name = {prometheus_metric_name(sensor, key, "", Kind::gauge), false, found != names_.end() && found->second.warned};
  return names_.insert_or_assign(lookup, std::move(name)).first->second;
}

void PrometheusOutput::warn_unknown(const Sample& sample, const std::string& key) {
  Name& name = name_of(sample.sensor, key);
  if (name.from_catalog || name.warned) return;
  name.warned = true;
  std::uint64_t held_back = 0;
  if (unknown_log_.ready(held_back))
    spdlog::warn("prometheus: no agent described {} key {:?}: sent as {} (no unit, a gauge){}", sample.sensor, key,
                 name.metric, held_back ? fmt::format(" ({} similar held back)", held_back) : "");
}

// Fills sources_ and found_: each point's series, kNotFinal added while its name is not the
// catalog's (looked up again at each write until it is).
void PrometheusOutput::find_series(std::span<const Sample> samples) {
  sources_.clear();
  for (const auto& sample : samples) {
    std::uint64_t hash = sample_source(sample);
    for (const auto& metric : sample.metrics) sources_.push_back(hash_bytes(metric.key, hash));
  }
  found_.resize(sources_.size());
  constexpr std::size_t kAhead = 32;
  std::size_t p = 0;
  for (const auto& sample : samples)
    for (const auto& metric : sample.metrics) {
      if (p + kAhead < sources_.size()) by_source_.prefetch(sources_[p + kAhead]);
      auto* entry = by_source_.find(sources_[p]);
      found_[p] = entry && !(entry->second & kNotFinal) ? entry->second : add_series(sample, metric.key, sources_[p]);
      ++p;
    }
}

std::uint32_t PrometheusOutput::add_series(const Sample& sample, const std::string& key, std::uint64_t source) {
  const Name& name = name_of(sample.sensor, key);
  prometheus_series_labels(sample, key, name.metric, scratch_labels_);
  std::uint64_t hash = hash_labels(scratch_labels_);
  auto [entry, inserted] = by_labels_.try_emplace(hash, static_cast<std::uint32_t>(series_.size()));
  std::uint32_t id = entry->second;
  if (inserted) {
    if (series_.size() >= kNotFinal) throw std::length_error("prometheus: too many series");
    constexpr auto never = std::numeric_limits<std::int64_t>::min();
    scratch_bytes_.clear();
    prometheus_encode_labels(scratch_labels_, scratch_bytes_);
    series_.push_back(Series{never, never, 0, 0, 0, static_cast<std::uint32_t>(scratch_bytes_.size()),
                             labels_.size(), hash, name.from_catalog});
    labels_.insert(labels_.end(), scratch_bytes_.begin(), scratch_bytes_.end());
  } else {
    series_[id].from_catalog = series_[id].from_catalog || name.from_catalog;
  }
  std::uint32_t found = id | (name.from_catalog ? 0 : kNotFinal);
  by_source_[source] = found;
  return found;
}

std::string PrometheusOutput::shown_labels(const Series& series) const {
  std::string text;
  std::string_view bytes = labels_of(series);
  while (!bytes.empty()) {
    std::string_view label = field(bytes), name, value;
    while (!label.empty()) {
      bool is_name = label.front() == '\x0a';
      (is_name ? name : value) = field(label);
    }
    text += fmt::format("{}{}={:?}", text.empty() ? "" : ", ", name, value);
  }
  return text;
}

void PrometheusOutput::settle(std::span<const Point> points) {
  for (std::size_t k = 0; k < points.size(); ++k) {
    if (k + 8 < points.size()) __builtin_prefetch(&series_[points[k + 8].series]);
    auto& sent = series_[points[k].series].sent_ms;
    sent = std::max(sent, points[k].ms);
    newest_ms_ = std::max(newest_ms_, points[k].ms);
  }
}

// Called after a write (no Point refers to a series any more): the series not sent for
// kForgetAfterMs go, and the sources are found again.
void PrometheusOutput::forget_old_series() {
  std::size_t limit = 2 * std::max<std::size_t>(series_after_prune_, 100000);
  if (series_.size() < limit && by_source_.size() < limit) return;
  decltype(series_) kept;
  decltype(labels_) labels;
  by_labels_.clear();
  by_source_.clear();
  for (const auto& series : series_) {
    if (series.sent_ms < newest_ms_ - kForgetAfterMs) continue;
    Series copy = series;
    copy.labels_at = labels.size();
    auto bytes = labels_of(series);
    labels.insert(labels.end(), bytes.begin(), bytes.end());
    by_labels_.try_emplace(series.hash, static_cast<std::uint32_t>(kept.size()));
    kept.push_back(copy);
  }
  series_ = std::move(kept);
  labels_ = std::move(labels);
  series_after_prune_ = series_.size();
}

}  // namespace fructosa::master::prometheus
