// The Prometheus output (docs/prometheus.md): its options and their checks, and the Output
// adapter: names from the catalog, the series of each point, the order the points leave in,
// the requests, and what a failure leaves for the runner to send again. The rest of
// PrometheusOutput is declared in prometheus_output_impl.h, which says where each part lives.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "http_client.h"
#include "prometheus_name.h"
#include "prometheus_output_impl.h"

namespace fructosa::master {

namespace {

// The URL without user and password, for log lines; throws ConfigError unless http(s).
std::string checked_url(const std::string& text) {
  CURLU* url = curl_url();
  if (!url) throw std::bad_alloc();
  std::string shown, scheme_text;
  bool parsed = curl_url_set(url, CURLUPART_URL, text.c_str(), 0) == CURLUE_OK;
  if (parsed) {
    char* scheme = nullptr;
    curl_url_get(url, CURLUPART_SCHEME, &scheme, 0);
    scheme_text = scheme ? scheme : "";
    curl_free(scheme);
    curl_url_set(url, CURLUPART_USER, nullptr, 0);
    curl_url_set(url, CURLUPART_PASSWORD, nullptr, 0);
    char* without = nullptr;
    curl_url_get(url, CURLUPART_URL, &without, 0);
    shown = without ? without : text;
    curl_free(without);
  }
  curl_url_cleanup(url);
  if (!parsed) throw ConfigError(fmt::format("[prometheus] url: {}: not a URL", text));
  if (scheme_text != "http" && scheme_text != "https")
    throw ConfigError(fmt::format("[prometheus] url: {}: expected http://HOST:PORT/PATH or https://...", text));
  return shown;
}

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

std::int64_t milliseconds(std::int64_t time_ns) {
  std::int64_t ms = time_ns / 1'000'000;
  return time_ns % 1'000'000 < 0 ? ms - 1 : ms;  // floor, also before 1970
}

std::string snippet(const std::string& body) {
  std::string text = prometheus::valid_utf8(std::string_view(body).substr(0, 300));
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text.empty() ? "empty body" : text;
}

// How long the last_sent map remembers a series nobody sends any more (a finished job's):
// longer than Prometheus keeps a series writable (its head block, 2 to 3 hours).
constexpr std::int64_t kForgetAfterMs = 4 * 3600 * 1000;

}  // namespace

namespace prometheus {

PrometheusOutput::PrometheusOutput(const Options& options, const MetricInfoStore& infos)
    : infos_(infos),
      url_(options.get_text("url")),
      samples_per_request_(static_cast<std::size_t>(options.get_int("samples_per_request"))),
      flush_interval_(options.get_real("flush_interval")),
      timeout_ms_(std::lround(options.get_real("timeout") * 1000)),
      credentials_file_(options.get_text("credentials_file")),
      bearer_token_file_(options.get_text("bearer_token_file")),
      ca_file_(options.get_text("ca_file")),
      verify_certificates_(options.get_bool("verify_certificates")),
      catalog_deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.get_real("catalog_wait")))) {
  shown_url_ = checked_url(url_);
  if (!credentials_file_.empty() && !bearer_token_file_.empty())
    throw ConfigError("[prometheus] set credentials_file or bearer_token_file, not both");
  if (!credentials_file_.empty())
    if (auto error = http::read_credentials("prometheus", credentials_file_, user_, password_); !error.empty()) throw ConfigError(error);
  if (!bearer_token_file_.empty())
    if (auto error = http::read_first_line("prometheus", "bearer_token_file", bearer_token_file_, bearer_token_); !error.empty())
      throw ConfigError(error);
  http::check_ca_file("prometheus", ca_file_);
  open_handle();
  spdlog::info("prometheus: remote_write to {}, {} points per request{}{}", shown_url_, samples_per_request_,
               user_.empty() ? "" : ", basic auth as " + user_, bearer_token_.empty() ? "" : ", bearer token");
  if (!verify_certificates_)
    spdlog::warn("prometheus: TLS certificates are not verified (verify_certificates = false)");
}

PrometheusOutput::~PrometheusOutput() { close_handle(); }

void PrometheusOutput::reopen() {
  // A new connection; credentials read again (they may have been rotated).
  if (!credentials_file_.empty()) {
    std::string user, password;
    if (auto error = http::read_credentials("prometheus", credentials_file_, user, password); !error.empty())
      spdlog::error("prometheus: keeping the credentials read before: {}", error);
    else
      user_ = std::move(user), password_ = std::move(password);
  }
  if (!bearer_token_file_.empty()) {
    std::string token;
    if (auto error = http::read_first_line("prometheus", "bearer_token_file", bearer_token_file_, token); !error.empty())
      spdlog::error("prometheus: keeping the bearer token read before: {}", error);
    else
      bearer_token_ = std::move(token);
  }
  close_handle();
  open_handle();
}

const PrometheusOutput::Name& PrometheusOutput::name_of(const std::string& sensor, const std::string& key,
                                                        bool log_unknown) {
  std::string& lookup = name_lookup_;
  lookup.assign(sensor).append(1, '\x1f').append(key);
  auto found = names_.find(lookup);
  if (found != names_.end() && found->second.from_catalog) return found->second;
  auto info = infos_.find(sensor, key);
  Name name;
  if (info) {
    name = {prometheus_metric_name(sensor, key, info->unit, info->kind), true};
  } else {
    name = {prometheus_metric_name(sensor, key, "", Kind::gauge), false};
    std::uint64_t held_back = 0;
    if (log_unknown && found == names_.end() && unknown_log_.ready(held_back))
      spdlog::warn("prometheus: no agent described {} key {:?}: sent as {} (no unit, a gauge){}", sensor, key,
                   name.metric, held_back ? fmt::format(" ({} similar held back)", held_back) : "");
  }
  return names_.insert_or_assign(lookup, std::move(name)).first->second;
}

bool PrometheusOutput::catalog_known(const Sample& sample) {
  for (const auto& metric : sample.metrics)
    if (!name_of(sample.sensor, metric.key, false).from_catalog) return false;
  return true;
}

// Fills points_ with what `samples` has to send, each with its series and its layer: the
// layer-th point of its series in this write. A request holds points of one layer only.
void PrometheusOutput::collect_points(std::span<const Sample> samples) {
  series_used_ = 0;
  series_index_.clear();
  points_.clear();
  std::uint64_t collisions = 0, backwards = 0;
  std::string example;
  for (std::uint32_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    const std::int64_t ms = milliseconds(sample.time_ns);
    for (const auto& metric : sample.metrics) {
      prometheus_series_labels(sample, metric.key, name_of(sample.sensor, metric.key, true).metric, scratch_labels_);
      std::uint64_t hash = hash_labels(scratch_labels_);
      auto [at, inserted] = series_index_.try_emplace(hash, static_cast<std::uint32_t>(series_used_));
      if (inserted) {
        if (series_used_ == series_.size()) series_.emplace_back();
        Series& fresh = series_[series_used_++];
        fresh.labels = scratch_labels_;
        fresh.hash = hash;
        auto* sent = last_sent_.find(hash);
        fresh.sent_ms = sent ? sent->second : std::numeric_limits<std::int64_t>::min();
        fresh.last_ms = fresh.sent_ms;
        fresh.layers = 0;
        fresh.last_sample = 0;
      }
      Series& series = series_[at->second];
      if (series.last_sample == i + 1) {  // two keys of one sample named alike ("a.b", "a_b")
        ++collisions;
        if (example.empty()) example = fmt::format("{} key {:?} of {}", sample.sensor, metric.key, sample.host);
        continue;
      }
      series.last_sample = i + 1;
      if (ms <= series.sent_ms) continue;  // sent by an earlier write: this one is a retry
      if (ms <= series.last_ms) {  // two samples out of order, or in the same millisecond
        ++backwards;
        if (example.empty()) example = fmt::format("{} key {:?} of {}", sample.sensor, metric.key, sample.host);
        continue;
      }
      series.last_ms = ms;
      points_.push_back(Point{i, at->second, series.layers++, ms, metric.value});
    }
  }
  if (collisions + backwards == 0) return;
  counters_.dropped += collisions + backwards;
  std::uint64_t held_back = 0;
  if (refused_log_.ready(held_back))
    spdlog::error("prometheus: dropped {} points whose series already had a point of the same sample (keys "
                  "named alike) and {} not newer than their series' last one, e.g. {}{}",
                  collisions, backwards, example,
                  held_back ? fmt::format(" ({} similar held back)", held_back) : "");
}

void PrometheusOutput::settle(std::span<const Point> points) {
  for (const auto& point : points) {
    auto& last = last_sent_[series_[point.series].hash];
    last = std::max(last, point.ms);
    newest_ms_ = std::max(newest_ms_, point.ms);
  }
}

void PrometheusOutput::drop(std::span<const Point> points, const std::string& why) {
  counters_.dropped += points.size();
  settle(points);  // given up: not sent again
  std::uint64_t held_back = 0;
  if (refused_log_.ready(held_back)) {
    std::string example;
    for (const auto& label : series_[points.front().series].labels)
      example += fmt::format("{}{}={:?}", example.empty() ? "" : ", ", label.name, label.value);
    spdlog::error("prometheus {}: refused {} points for good (e.g. {{{}}} at {} ms): {}{}", shown_url_,
                  points.size(), example, points.front().ms, why,
                  held_back ? fmt::format(" ({} similar held back)", held_back) : "");
  }
}

PrometheusOutput::Sent PrometheusOutput::send_points(std::span<const Point> points, std::string& failure) {
  request_.clear();
  for (const auto& point : points) request_.add(series_[point.series].labels, point.ms, point.value);
  Response response;
  try {
    response = post(request_.body());
  } catch (const Unreachable& error) {
    failure = fmt::format("prometheus {}", error.what());
    return Sent::temporary_failure;
  }
  if (response.status >= 200 && response.status < 300) {
    counters_.sent += points.size();
    settle(points);
    return Sent::done;
  }
  if (response.status == 429 || response.status >= 500) {
    failure = fmt::format("prometheus {}: answered {}: {}", shown_url_, response.status, snippet(response.body));
    return Sent::temporary_failure;
  }
  // Prometheus refuses a whole request for the time of some of its samples (already stored by a
  // lmaster that was killed before it saved its journal position, or a clock that went back),
  // and a proxy may find a request too large: halves are sent until the refused points are
  // found. Every other 4xx is final: the specification says not to send it again.
  if ((response.status == 413 || prometheus_refuses_times(response.body)) && points.size() > 1) {
    auto half = points.size() / 2;
    if (send_points(points.first(half), failure) == Sent::temporary_failure) return Sent::temporary_failure;
    return send_points(points.subspan(half), failure);
  }
  drop(points, fmt::format("answered {}: {}", response.status, snippet(response.body)));
  return Sent::done;
}

void PrometheusOutput::forget_old_series() {
  if (last_sent_.size() < 2 * std::max<std::size_t>(last_sent_size_after_prune_, 100000)) return;
  last_sent_.erase_if([&](const auto& entry) { return entry.second < newest_ms_ - kForgetAfterMs; });
  last_sent_size_after_prune_ = last_sent_.size();
}

void PrometheusOutput::write(std::span<const Sample> samples) {
  if (samples.empty()) return;
  // After a restart lmaster replays its journal before the agents have reconnected and described
  // their keys again: samples wait (catalog_wait) rather than go out under a name without unit.
  std::size_t ready = samples.size();
  if (Clock::now() < catalog_deadline_)
    for (std::size_t i = 0; i < samples.size(); ++i)
      if (!catalog_known(samples[i])) {
        ready = i;
        break;
      }
  std::vector<std::size_t> undelivered;
  std::string failure;
  if (ready > 0) {
    collect_points(samples.first(ready));
    // By layer, a stable counting sort: every series' points leave oldest first.
    std::vector<std::size_t> starts;
    for (const auto& point : points_) {
      if (point.layer >= starts.size()) starts.resize(point.layer + 1, 0);
      ++starts[point.layer];
    }
    std::size_t total = 0;
    for (auto& start : starts) total += std::exchange(start, total);
    ordered_.resize(points_.size());
    for (const auto& point : points_) ordered_[starts[point.layer]++] = point;
    std::size_t at = 0;
    while (at < ordered_.size()) {
      std::size_t end = at;
      while (end < ordered_.size() && ordered_[end].layer == ordered_[at].layer && end - at < samples_per_request_)
        ++end;
      if (send_points(std::span(ordered_).subspan(at, end - at), failure) == Sent::temporary_failure) {
        // This request and every later one wait, whole samples: the points of theirs that did go
        // out are not sent again (last_sent_).
        for (std::size_t k = at; k < ordered_.size(); ++k) undelivered.push_back(ordered_[k].sample);
        break;
      }
      at = end;
    }
    forget_old_series();
  }
  if (ready < samples.size() && failure.empty())
    failure = fmt::format("prometheus: waiting for the agent of {} to describe the keys of {} (catalog_wait)",
                          samples[ready].host, samples[ready].sensor);
  for (std::size_t i = ready; i < samples.size(); ++i) undelivered.push_back(i);
  if (undelivered.empty()) return;
  std::sort(undelivered.begin(), undelivered.end());
  undelivered.erase(std::unique(undelivered.begin(), undelivered.end()), undelivered.end());
  if (undelivered.size() == samples.size()) undelivered.clear();  // none delivered
  throw OutputError(failure, std::move(undelivered));
}

}  // namespace prometheus

const OptionTable& prometheus_options() {
  static const OptionTable own{
      {.name = "url",
       .type = OptionType::text,
       .default_value = "http://localhost:9090/api/v1/write",
       .help = "remote_write endpoint (http:// or https://); Prometheus 2.33 or later receives with "
               "--web.enable-remote-write-receiver at /api/v1/write"},
      {.name = "samples_per_request",
       .type = OptionType::integer,
       .default_value = "2000",
       .help = "points (Prometheus samples) per request at most",
       .min = 1,
       .max = 1000000},
      {.name = "flush_interval",
       .type = OptionType::real,
       .default_value = "1",
       .help = "seconds a sample may wait for a fuller request",
       .min = 0.01,
       .max = 3600},
      {.name = "timeout",
       .type = OptionType::real,
       .default_value = "10",
       .help = "seconds one request (connecting included) may take before it counts as failed and is "
               "sent again",
       .min = 0.1,
       .max = 600},
      {.name = "bearer_token_file",
       .type = OptionType::text,
       .default_value = "",
       .help = "file whose first line is sent as `Authorization: Bearer <token>`, read at start and on "
               "reload (relative to this file)",
       .relative_to_file = true},
      {.name = "catalog_wait",
       .type = OptionType::real,
       .default_value = "60",
       .help = "seconds after start during which samples whose keys no agent has described yet (a "
               "journal replayed before the agents reconnect) wait rather than go out without the "
               "unit and kind in their name",
       .min = 0,
       .max = 3600},
  };
  static const OptionTable table = [] {
    OptionTable all = own;
    for (auto& spec : http::tls_and_auth_options("the server's")) all.push_back(std::move(spec));
    return all;
  }();
  return table;
}

std::unique_ptr<Output> make_prometheus_output(const Options& options, const MetricInfoStore& infos) {
  return std::make_unique<prometheus::PrometheusOutput>(options, infos);
}

}  // namespace fructosa::master
