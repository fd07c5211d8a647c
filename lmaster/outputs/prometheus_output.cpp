// The Prometheus output (docs/prometheus.md): its options and their checks, and the Output
// adapter: the points of a write, the order they leave in, the requests, and what a failure
// leaves for the runner to send again. The rest of
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

// Fills points_ with what the samples that can go now have to send, each with its series and
// its layer: the layer-th point of its series in this write (a request holds points of one
// layer only). Returns how many samples can go: during catalog_wait, those before the first
// with a key no agent has described yet.
std::size_t PrometheusOutput::collect_points(std::span<const Sample> samples) {
  if (++write_count_ == 0) ++write_count_;
  find_series(samples);
  points_.clear();
  const bool waiting = Clock::now() < catalog_deadline_;
  std::uint64_t collisions = 0, backwards = 0;
  std::string example;
  std::size_t ready = samples.size();
  std::size_t p = 0;
  for (std::uint32_t i = 0; i < samples.size(); ++i) {
    const Sample& sample = samples[i];
    if (waiting && std::any_of(found_.begin() + p, found_.begin() + p + sample.metrics.size(),
                               [](std::uint32_t found) { return found & kNotFinal; })) {
      ready = i;
      break;
    }
    const std::int64_t ms = milliseconds(sample.time_ns);
    for (const auto& metric : sample.metrics) {
      if (p + 8 < found_.size()) __builtin_prefetch(&series_[found_[p + 8] & ~kNotFinal]);
      std::uint32_t id = found_[p++];
      if (id & kNotFinal) warn_unknown(sample, metric.key), id &= ~kNotFinal;
      Series& series = series_[id];
      if (series.write != write_count_) {
        series.write = write_count_;
        series.last_ms = series.sent_ms;
        series.layers = 0;
        series.last_sample = 0;
      }
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
      points_.push_back(Point{i, id, series.layers++, ms, metric.value});
    }
  }
  if (collisions + backwards == 0) return ready;
  counters_.dropped += collisions + backwards;
  std::uint64_t held_back = 0;
  if (refused_log_.ready(held_back))
    spdlog::error("prometheus: dropped {} points whose series already had a point of the same sample (keys "
                  "named alike) and {} not newer than their series' last one, e.g. {}{}",
                  collisions, backwards, example,
                  held_back ? fmt::format(" ({} similar held back)", held_back) : "");
  return ready;
}

void PrometheusOutput::drop(std::span<const Point> points, const std::string& why) {
  counters_.dropped += points.size();
  settle(points);  // given up: not sent again
  std::uint64_t held_back = 0;
  if (refused_log_.ready(held_back))
    spdlog::error("prometheus {}: refused {} points for good (e.g. {{{}}} at {} ms): {}{}", shown_url_,
                  points.size(), shown_labels(series_[points.front().series]), points.front().ms, why,
                  held_back ? fmt::format(" ({} similar held back)", held_back) : "");
}

PrometheusOutput::Sent PrometheusOutput::send_points(std::span<const Point> points, std::string& failure) {
  request_.clear();
  for (std::size_t k = 0; k < points.size(); ++k) {
    // The series a few points ahead, then its labels: both are random reads from large tables.
    if (k + 16 < points.size()) __builtin_prefetch(&series_[points[k + 16].series]);
    if (k + 8 < points.size()) {
      const Series& ahead = series_[points[k + 8].series];
      for (std::size_t line = 0; line < ahead.labels_size; line += 64) __builtin_prefetch(&labels_[ahead.labels_at + line]);
    }
    request_.add_encoded(labels_of(series_[points[k].series]), points[k].ms, points[k].value);
  }
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

void PrometheusOutput::write(std::span<const Sample> samples) {
  if (samples.empty()) return;
  // After a restart lmaster replays its journal before the agents have reconnected and described
  // their keys again: samples wait (catalog_wait) rather than go out under a name without unit.
  std::size_t ready = collect_points(samples);
  std::vector<std::size_t> undelivered;
  std::string failure;
  if (ready > 0) {
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
        // out are not sent again (their series' sent_ms).
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
