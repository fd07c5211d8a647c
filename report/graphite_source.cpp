#include "graphite_source.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "graphite_name.h"

namespace fructosa::report {
namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxAnswerBytes = 512u << 20;
// Levels below jobs.<id> that job() walks at most (host, sensor, the key's components).
constexpr int kMaxDepth = 16;
// The series whose span --list shows (every job on a JobCgroup node has it).
constexpr const char* kSpanSeries = "JobCgroup.cpu.usage";

[[noreturn]] void fail(const std::string& where, const std::string& why) {
  throw SourceError(where + ": " + why);
}

// The start of an answer that is not what was expected, on one line.
std::string excerpt(std::string_view body) {
  std::string start(body.substr(0, 200));
  std::replace(start.begin(), start.end(), '\n', ' ');
  return start.empty() ? "an empty answer" : "\"" + start + "\"";
}

json parse_json(std::string_view body, const std::string& where) {
  json answer = json::parse(body, nullptr, false);
  if (answer.is_discarded())
    fail(where, "not JSON (is this graphite-web's render API?): " + excerpt(body));
  return answer;
}

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "77" -> 77; nullopt for anything but a job id (digits, not 0, in range).
std::optional<std::uint64_t> job_id(std::string_view text) {
  if (!all_digits(text) || text.size() > 19) return std::nullopt;
  std::uint64_t id = std::stoull(std::string(text));
  return id ? std::optional(id) : std::nullopt;
}

// The components of `path` after `jobs` ("[prefix.]jobs."): {"77", "node01", ...}; {""} for a
// path elsewhere.
std::vector<std::string_view> components_under(std::string_view path, std::string_view jobs) {
  if (!path.starts_with(jobs)) return {""};
  path.remove_prefix(jobs.size());
  std::vector<std::string_view> out;
  for (;;) {
    auto dot = path.find('.');
    out.push_back(path.substr(0, dot));
    if (dot == std::string_view::npos) return out;
    path.remove_prefix(dot + 1);
  }
}

std::size_t collect(char* data, std::size_t size, std::size_t count, void* into) {
  auto* body = static_cast<std::string*>(into);
  if (body->size() + size * count > kMaxAnswerBytes) return 0;  // curl fails the transfer
  body->append(data, size * count);
  return size * count;
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct SeriesSpan {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  void add(const Series& series) {
    if (series.time_ns.empty()) return;
    first = std::min(first, series.time_ns.front());
    last = std::max(last, series.time_ns.back());
  }
  bool empty() const { return first > last; }
};

}  // namespace

// --- the JSON answers ---------------------------------------------------------------------------

std::vector<GraphiteNode> parse_graphite_find(std::string_view body, const std::string& where) {
  const json answer = parse_json(body, where);
  if (!answer.is_object() || !answer.contains("metrics") || !answer["metrics"].is_array())
    fail(where, "not a /metrics/find answer (no \"metrics\" list): " + excerpt(body));
  std::vector<GraphiteNode> nodes;
  for (const auto& metric : answer["metrics"]) {
    if (!metric.is_object() || !metric.contains("path") || !metric["path"].is_string()) continue;
    GraphiteNode node;
    node.path = metric["path"].get<std::string>();
    if (node.path.find('*') != std::string::npos) continue;  // a wildcard entry
    if (!node.path.empty() && node.path.back() == '.') node.path.pop_back();
    const json leaf = metric.value("is_leaf", json(false));
    node.leaf = leaf.is_string() ? leaf.get<std::string>() == "1" || leaf.get<std::string>() == "true"
                : leaf.is_boolean() ? leaf.get<bool>()
                : leaf.is_number() ? leaf.get<double>() != 0
                                   : false;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::vector<GraphiteSeries> parse_graphite_render(std::string_view body, const std::string& where) {
  const json answer = parse_json(body, where);
  if (!answer.is_array()) fail(where, "not a /render JSON answer (not a list of series): " + excerpt(body));
  std::vector<GraphiteSeries> out;
  for (const auto& series : answer) {
    if (!series.is_object() || !series.contains("target") || !series["target"].is_string() ||
        !series.contains("datapoints") || !series["datapoints"].is_array())
      fail(where, "not a /render JSON answer (a series without target or datapoints): " + excerpt(body));
    GraphiteSeries into;
    into.name = series["target"].get<std::string>();
    for (const auto& point : series["datapoints"]) {
      // [value, timestamp]; a null value is a gap (Graphite stores no NaN).
      if (!point.is_array() || point.size() != 2 || !point[1].is_number())
        fail(where, "a datapoint that is not [value, timestamp] in " + into.name);
      if (!point[0].is_number()) continue;
      const double value = point[0].get<double>();
      if (std::isnan(value)) continue;
      into.points.time_ns.push_back(point[1].get<std::int64_t>() * 1'000'000'000);
      into.points.values.push_back(value);
    }
    out.push_back(std::move(into));
  }
  return out;
}

std::optional<JobData> graphite_job_data(std::uint64_t id, const std::vector<GraphiteSeries>& series,
                                         std::string_view job_prefix) {
  // host -> sensors, metrics
  std::map<std::string, HostData> hosts;
  for (const auto& one : series) {
    std::string_view name = one.name;
    if (one.points.time_ns.empty() || !name.starts_with(job_prefix)) continue;
    name.remove_prefix(job_prefix.size());
    const auto host_end = name.find('.');
    if (host_end == std::string_view::npos) continue;
    const std::string_view host = name.substr(0, host_end);
    const std::string_view metric = name.substr(host_end + 1);  // "<Sensor>[.<key>]"
    const auto sensor_end = metric.find('.');
    const std::string_view sensor = metric.substr(0, sensor_end);
    const std::string_view key = sensor_end == std::string_view::npos ? "" : metric.substr(sensor_end + 1);
    if (host.empty() || sensor.empty()) continue;
    HostData& data = hosts[std::string(host)];
    data.host = host;
    if (std::find(data.sensors.begin(), data.sensors.end(), sensor) == data.sensors.end())
      data.sensors.emplace_back(sensor);
    data.metrics[fmt::format("{}.{}", sensor, key)] = one.points;  // in time order, as rendered
  }
  if (hosts.empty()) return std::nullopt;
  JobData data;
  data.id = id;
  for (auto& [host, host_data] : hosts) {
    std::sort(host_data.sensors.begin(), host_data.sensors.end());
    data.hosts.push_back(std::move(host_data));
  }
  return data;
}

void add_graphite_node_series(JobData& data, const std::vector<GraphiteSeries>& series, std::string_view prefix) {
  std::map<std::string, HostData*, std::less<>> hosts;
  std::map<std::string, SeriesSpan> spans;
  for (auto& host : data.hosts) {
    hosts[host.host] = &host;
    for (const auto& [name, one] : host.metrics) spans[host.host].add(one);
  }
  const auto& sensors = node_sensors();
  for (const auto& one : series) {
    std::string_view name = one.name;
    if (one.points.time_ns.empty() || !name.starts_with(prefix)) continue;
    name.remove_prefix(prefix.size());
    const auto host_end = name.find('.');
    if (host_end == std::string_view::npos) continue;
    auto host = hosts.find(name.substr(0, host_end));
    const std::string_view metric = name.substr(host_end + 1);  // "<Sensor>[.<key>]"
    const std::string_view sensor = metric.substr(0, metric.find('.'));
    if (host == hosts.end() || std::find(sensors.begin(), sensors.end(), sensor) == sensors.end()) continue;
    const SeriesSpan& span = spans[host->first];
    if (span.empty()) continue;
    // From the last point at or before the job's first sample to the first at or after its last.
    const auto& times = one.points.time_ns.vector();
    auto from = std::upper_bound(times.begin(), times.end(), span.first);
    if (from != times.begin()) --from;
    auto to = std::lower_bound(times.begin(), times.end(), span.last);
    if (to != times.end()) ++to;
    if (from >= to) continue;
    Series cut;
    cut.time_ns = Times::Vector(from, to);
    cut.values.assign(one.points.values.begin() + (from - times.begin()),
                      one.points.values.begin() + (to - times.begin()));
    const std::string key = sensor.size() == metric.size() ? "" : std::string(metric.substr(sensor.size() + 1));
    host->second->node_metrics[fmt::format("{}.{}", sensor, key)] = std::move(cut);
  }
}

// --- the source ---------------------------------------------------------------------------------

GraphiteSource::GraphiteSource(GraphiteSettings settings)
    : settings_(std::move(settings)), prefix_(graphite_prefix(settings_.prefix)) {
  init_curl_once();
  CURLU* url = curl_url();
  if (!url) throw std::bad_alloc();
  const bool parsed = curl_url_set(url, CURLUPART_URL, settings_.url.c_str(), 0) == CURLUE_OK;
  char* scheme = nullptr;
  if (parsed) curl_url_get(url, CURLUPART_SCHEME, &scheme, 0);
  const std::string scheme_text = scheme ? scheme : "";
  curl_free(scheme);
  char* shown = nullptr;
  if (parsed) {
    curl_url_set(url, CURLUPART_USER, nullptr, 0);
    curl_url_set(url, CURLUPART_PASSWORD, nullptr, 0);
    curl_url_get(url, CURLUPART_URL, &shown, 0);
  }
  shown_ = shown ? shown : settings_.url;
  curl_free(shown);
  curl_url_cleanup(url);
  if (!parsed || (scheme_text != "http" && scheme_text != "https"))
    fail(settings_.url, "not a Graphite URL (expected http://HOST:PORT or https://HOST/PATH)");
  while (!settings_.url.empty() && settings_.url.back() == '/') settings_.url.pop_back();
  while (!shown_.empty() && shown_.back() == '/') shown_.pop_back();

  CURL* curl = curl_easy_init();
  if (!curl) fail(shown_, "curl_easy_init failed");
  curl_ = curl;
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, settings_.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::min(settings_.timeout_ms, 10000L));
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "fructosa-report/" FRUCTOSA_VERSION);
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  // Credentials from ~/.netrc (or the URL's user:password@), never from the command line.
  curl_easy_setopt(curl, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &collect);
}

GraphiteSource::~GraphiteSource() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string GraphiteSource::describe() const { return "Graphite at " + shown_; }

std::string GraphiteSource::get(const std::string& path,
                                const std::vector<std::pair<std::string, std::string>>& query) {
  CURL* curl = static_cast<CURL*>(curl_);
  std::string url = settings_.url + path;
  for (std::size_t i = 0; i < query.size(); ++i) {
    char* value = curl_easy_escape(curl, query[i].second.c_str(), static_cast<int>(query[i].second.size()));
    url += fmt::format("{}{}={}", i == 0 ? '?' : '&', query[i].first, value ? value : "");
    curl_free(value);
  }
  const std::string where = shown_ + path;
  std::string body;
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  if (code != CURLE_OK)
    fail(where, code == CURLE_WRITE_ERROR ? fmt::format("an answer over {} MiB", kMaxAnswerBytes >> 20)
                                          : std::string(error[0] ? error : curl_easy_strerror(code)));
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) fail(where, fmt::format("HTTP {}: {}", status, excerpt(body)));
  return body;
}

// The nodes that `query` matches (a pattern with wildcards).
std::vector<GraphiteNode> GraphiteSource::find(const std::string& query) {
  return parse_graphite_find(get("/metrics/find", {{"query", query}, {"format", "completer"}}),
                             shown_ + "/metrics/find");
}

// The series of `targets` over the window; then, when it holds any point, again from its first
// point on: whisper answers from the coarsest archive the window's start needs, so the job's
// own start gets the finest archive that still holds it (and a whisper point's time is the start
// of its interval: nothing of the job is before it).
std::vector<GraphiteSeries> GraphiteSource::render(const std::vector<std::string>& targets) {
  auto series = render_between(targets, settings_.from, settings_.until);
  SeriesSpan span;
  for (const auto& one : series) span.add(one.points);
  if (span.empty()) return series;
  // Graphite's `from` is exclusive.
  return render_between(targets, std::to_string(span.first / 1'000'000'000 - 1), settings_.until);
}

std::vector<GraphiteSeries> GraphiteSource::render_between(const std::vector<std::string>& targets,
                                                           const std::string& from, const std::string& until) {
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& target : targets) query.emplace_back("target", target);
  query.insert(query.end(), {{"format", "json"}, {"from", from}, {"until", until}, {"noNullPoints", "1"}});
  return parse_graphite_render(get("/render", query), shown_ + "/render");
}

std::vector<std::string> GraphiteSource::series_targets(std::string level, int first_depth) {
  std::vector<std::string> targets;
  for (int depth = 0; depth < kMaxDepth; ++depth, level += ".*") {
    bool branches = false, leaves = false;
    for (const auto& node : find(level)) (node.leaf ? leaves : branches) = true;
    if (leaves && depth >= first_depth) targets.push_back(level);
    if (!branches) break;
  }
  return targets;
}

void GraphiteSource::add_node_series(JobData& data) {
  SeriesSpan span;
  for (const auto& host : data.hosts)
    for (const auto& [name, series] : host.metrics) span.add(series);
  if (span.empty()) return;
  std::string sensors;
  for (const auto& sensor : node_sensors()) sensors += (sensors.empty() ? "" : ",") + sensor;
  const std::string from = std::to_string(span.first / 1'000'000'000 - kNodeSlackS - 1);  // exclusive
  const std::string until = std::to_string(span.last / 1'000'000'000 + kNodeSlackS + 1);
  // A few hosts a request, so that a large job's URLs stay short.
  constexpr std::size_t kHostsPerRequest = 32;
  for (std::size_t first = 0; first < data.hosts.size(); first += kHostsPerRequest) {
    std::string hosts;
    for (std::size_t h = first; h < std::min(data.hosts.size(), first + kHostsPerRequest); ++h)
      hosts += (hosts.empty() ? "" : ",") + data.hosts[h].host;
    // [prefix.]{hosts}.{sensors}: depth 0 is the sensor (a leaf for a sensor without keys).
    const auto targets = series_targets(prefix_ + "{" + hosts + "}.{" + sensors + "}", 0);
    if (!targets.empty()) add_graphite_node_series(data, render_between(targets, from, until), prefix_);
  }
}

std::vector<JobSummary> GraphiteSource::jobs() {
  const std::string jobs = prefix_ + "jobs.";
  // id -> hosts, from the tree (jobs.<id>.<host>)
  std::map<std::uint64_t, std::set<std::string>> hosts;
  for (const auto& node : find(jobs + "*.*")) {
    if (node.leaf) continue;
    const auto parts = components_under(node.path, jobs);
    if (auto id = job_id(parts[0]); id && parts.size() == 2) hosts[*id].insert(std::string(parts[1]));
  }
  // id -> span, from each host's cpu.usage
  std::map<std::uint64_t, SeriesSpan> spans;
  std::set<std::uint64_t> with_span_series;
  for (const auto& node : find(jobs + "*.*." + kSpanSeries))
    if (auto id = job_id(components_under(node.path, jobs)[0]); id && node.leaf)
      with_span_series.insert(*id);
  if (!with_span_series.empty())
    for (const auto& series : render({jobs + "*.*." + kSpanSeries}))
      if (auto id = job_id(components_under(series.name, jobs)[0])) spans[*id].add(series.points);
  std::vector<JobSummary> summaries;
  for (const auto& [id, job_hosts] : hosts) {
    JobSummary summary;
    summary.id = id;
    SeriesSpan span = spans[id];
    if (!with_span_series.contains(id))  // no JobCgroup: the span of all its series
      if (auto data = job(id))
        for (const auto& host : data->hosts)
          for (const auto& [name, series] : host.metrics) span.add(series);
    if (span.empty()) continue;  // nothing in the window
    summary.hosts.assign(job_hosts.begin(), job_hosts.end());
    summary.first_ns = span.first;
    summary.last_ns = span.last;
    summaries.push_back(std::move(summary));
  }
  return summaries;
}

std::optional<JobData> GraphiteSource::job(std::uint64_t id) {
  if (id == 0) return std::nullopt;
  const std::string base = fmt::format("{}jobs.{}", prefix_, id);
  // Walks the tree a level at a time (host, sensor, then the key's components): the depths that
  // hold series, one render target each (depth 0: the hosts, 1: the sensors).
  const auto targets = series_targets(base + ".*", 1);
  if (targets.empty()) return std::nullopt;
  auto data = graphite_job_data(id, render(targets), base + ".");
  if (data) add_node_series(*data);
  return data;
}

}  // namespace fructosa::report
