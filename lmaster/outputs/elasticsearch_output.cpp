#include "elasticsearch_output.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <utility>

namespace fructosa::master {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxResponseBytes = 64u << 20;
// Above Elasticsearch's own templates (priority 100 for logs-*-*, metrics-*-*) and above a
// catch-all a site may have, so that lmaster's indices get lmaster's mappings.
constexpr int kTemplatePriority = 200;
constexpr auto kLogPeriod = std::chrono::seconds(10);

// Writes at most one line per period for one kind of trouble and counts the lines held back,
// so that a broken cluster does not flood the log at the rate of the retries.
class LogLimiter {
 public:
  // True when a line may be written now; `held_back` receives how many were not written since.
  bool ready(std::uint64_t& held_back) {
    auto now = Clock::now();
    if (written_ && now - last_ < kLogPeriod) {
      ++held_back_;
      return false;
    }
    written_ = true;
    last_ = now;
    held_back = std::exchange(held_back_, 0);
    return true;
  }

 private:
  bool written_ = false;
  Clock::time_point last_;
  std::uint64_t held_back_ = 0;
};

std::string held_back_note(std::uint64_t held_back) {
  return held_back ? fmt::format(" ({} similar messages held back)", held_back) : std::string();
}

struct UtcTime {
  std::tm calendar{};
  int millis = 0;
};

UtcTime utc_time(std::int64_t time_ns) {
  std::int64_t seconds = time_ns / 1'000'000'000;
  std::int64_t rest = time_ns % 1'000'000'000;
  if (rest < 0) {  // before 1970: floor, not truncation
    rest += 1'000'000'000;
    --seconds;
  }
  UtcTime utc;
  std::time_t whole = static_cast<std::time_t>(seconds);
  ::gmtime_r(&whole, &utc.calendar);
  utc.millis = static_cast<int>(rest / 1'000'000);
  return utc;
}

std::string iso8601_millis(std::int64_t time_ns) {
  UtcTime utc = utc_time(time_ns);
  const std::tm& t = utc.calendar;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1,
                     t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, utc.millis);
}

// JSON text of a value; invalid UTF-8 (a host name, a label read from the node) becomes U+FFFD
// instead of making dump() throw.
std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string escape_id_part(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == '%' || c == '|')
      escaped += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      escaped += c;
  }
  return escaped;
}

// True when an index name may start with `prefix` (Elasticsearch's rules for index names).
bool valid_index_prefix(std::string_view prefix) {
  if (prefix.empty()) return true;
  if (prefix.front() == '_' || prefix.front() == '-' || prefix.front() == '+') return false;
  for (char c : prefix) {
    if (std::isupper(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)))
      return false;
    if (std::string_view("\\/*?\"<>| ,#:").find(c) != std::string_view::npos) return false;
  }
  return prefix.size() < 200;
}

std::string read_credentials(const std::string& path, std::string& user, std::string& password) {
  std::ifstream in(path);
  if (!in)
    return fmt::format("[elasticsearch] credentials_file {}: {}", path, std::strerror(errno));
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
  auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0)
    return fmt::format("[elasticsearch] credentials_file {}: expected one line `user:password`",
                       path);
  user = line.substr(0, colon);
  password = line.substr(colon + 1);
  return {};
}

// Puts a field mapping at a dotted path inside `properties`; false when a leaf is in the way
// (a key that is also a prefix of another key of the same sensor).
bool put_field(Json& properties, std::string_view field, const Json& mapping) {
  Json* level = &properties;
  while (true) {
    auto dot = field.find('.');
    std::string name(field.substr(0, dot));
    if (dot == std::string_view::npos) {
      if (level->contains(name)) return false;  // already an object of other keys
      (*level)[name] = mapping;
      return true;
    }
    Json& object = (*level)[name];
    if (object.is_null()) object = Json{{"properties", Json::object()}};
    if (!object.contains("properties")) return false;  // a leaf: this key cannot be below it
    level = &object["properties"];
    field.remove_prefix(dot + 1);
  }
}

// {"<name>": {"path_match": ..., "match_mapping_type": ..., "mapping": ...}}
Json dynamic_template(std::string_view name, std::string_view path, std::string_view json_type,
                      Json mapping) {
  return {
      {std::string(name),
       {{"path_match", path}, {"match_mapping_type", json_type}, {"mapping", std::move(mapping)}}}};
}

struct Node {
  std::string url;    // without a trailing '/'
  std::string shown;  // for log lines: without user and password
};

Node parse_node(const std::string& text) {
  CURLU* url = curl_url();
  if (!url) throw std::bad_alloc();
  auto release = [&] { curl_url_cleanup(url); };
  auto fail = [&](std::string_view why) {
    release();
    throw ConfigError(fmt::format("[elasticsearch] url: {}: {}", text, why));
  };
  if (curl_url_set(url, CURLUPART_URL, text.c_str(), 0) != CURLUE_OK) fail("not a URL");
  char* scheme = nullptr;
  curl_url_get(url, CURLUPART_SCHEME, &scheme, 0);
  std::string scheme_text = scheme ? scheme : "";
  curl_free(scheme);
  if (scheme_text != "http" && scheme_text != "https")
    fail("expected http://HOST:PORT or https://HOST:PORT");
  curl_url_set(url, CURLUPART_USER, nullptr, 0);
  curl_url_set(url, CURLUPART_PASSWORD, nullptr, 0);
  char* shown = nullptr;
  curl_url_get(url, CURLUPART_URL, &shown, 0);
  Node node{text, shown ? shown : text};
  curl_free(shown);
  release();
  while (!node.url.empty() && node.url.back() == '/') node.url.pop_back();
  while (!node.shown.empty() && node.shown.back() == '/') node.shown.pop_back();
  return node;
}

bool retryable_item(int status, const std::string& type) {
  return status == 429 || status >= 500 || type == "es_rejected_execution_exception" ||
         type == "circuit_breaking_exception" || type == "cluster_block_exception" ||
         type == "unavailable_shards_exception";
}

// "type: reason" of an Elasticsearch error object (or of a response body holding one).
std::string error_text(const Json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (!error.is_object()) return "no details";
  std::string type = error.value("type", std::string("error"));
  std::string reason = error.contains("reason") && error["reason"].is_string()
                           ? error["reason"].get<std::string>()
                           : "";
  if (error.contains("caused_by") && error["caused_by"].is_object())
    reason += fmt::format(" (caused by {})", error_text(error["caused_by"]));
  return reason.empty() ? type : type + ": " + reason;
}

std::string body_error_text(const std::string& body) {
  Json reply = Json::parse(body, nullptr, false);
  if (!reply.is_discarded() && reply.is_object() && reply.contains("error"))
    return error_text(reply["error"]);
  std::string start = body.substr(0, 200);
  std::replace(start.begin(), start.end(), '\n', ' ');
  return start.empty() ? "empty body" : start;
}

struct Response {
  long status = 0;
  std::string body;
  bool from_elasticsearch = false;  // X-Elastic-Product: Elasticsearch (not a proxy's answer)
  const Node* node = nullptr;
};

// Thrown inside the output when no node could be reached; becomes an OutputError.
struct Unreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ElasticsearchOutput final : public Output {
 public:
  ElasticsearchOutput(const Options& options, const MetricInfoStore& infos);
  ~ElasticsearchOutput() override;
  ElasticsearchOutput(const ElasticsearchOutput&) = delete;
  ElasticsearchOutput& operator=(const ElasticsearchOutput&) = delete;

  std::string name() const override { return "elasticsearch"; }
  void write(std::span<const Sample> samples) override;
  double flush_period() const override { return flush_interval_; }
  std::size_t batch_samples() const override { return bulk_size_; }
  void reopen() override;

 private:
  struct SensorState {
    bool template_put = false;
    std::size_t catalog_keys = 0;                // keys_of(sensor).size() when it was put
    std::unordered_set<std::string> known_keys;  // in the catalog at that time
    std::unordered_set<std::string> integer_keys;
  };
  enum class BulkOutcome { done, temporary_failure, split };

  void open_handle();
  void close_handle();
  Response send(const char* method, const std::string& path, const std::string& body,
                curl_slist* headers, std::size_t points);
  void put_templates(std::span<const Sample> samples);
  BulkOutcome send_bulk(std::span<const Sample> samples, std::size_t begin, std::size_t end,
                        std::vector<std::size_t>& undelivered, std::string& failure);
  void drop(const Sample& sample, const std::string& index, const std::string& why,
            const Node* node);

  static std::size_t collect(void* data, std::size_t size, std::size_t count, void* self);
  static std::size_t header(char* data, std::size_t size, std::size_t count, void* self);

  const MetricInfoStore& infos_;
  std::vector<Node> nodes_;
  std::size_t current_node_ = 0;
  std::string index_prefix_;
  std::size_t bulk_size_;
  double flush_interval_;
  long timeout_ms_;
  std::string credentials_file_;
  std::string user_, password_;
  std::string api_key_;
  std::string ca_file_;
  bool verify_certificates_;

  CURL* curl_ = nullptr;
  curl_slist* json_headers_ = nullptr;
  curl_slist* ndjson_headers_ = nullptr;
  char curl_error_[CURL_ERROR_SIZE] = {};
  Response response_;

  std::unordered_map<std::string, SensorState> sensors_;
  LogLimiter refused_log_, unreachable_log_, template_log_;
};

ElasticsearchOutput::ElasticsearchOutput(const Options& options, const MetricInfoStore& infos)
    : infos_(infos),
      index_prefix_(options.get_text("index_prefix")),
      bulk_size_(static_cast<std::size_t>(options.get_int("bulk_size"))),
      flush_interval_(options.get_real("flush_interval")),
      timeout_ms_(std::lround(options.get_real("timeout") * 1000)),
      credentials_file_(options.get_text("credentials_file")),
      api_key_(options.get_text("api_key")),
      ca_file_(options.get_text("ca_file")),
      verify_certificates_(options.get_bool("verify_certificates")) {
  for (const auto& url : options.get_list("url")) nodes_.push_back(parse_node(url));
  if (nodes_.empty()) throw ConfigError("[elasticsearch] url: at least one node is needed");
  if (!valid_index_prefix(index_prefix_))
    throw ConfigError(
        fmt::format("[elasticsearch] index_prefix: {:?} cannot start an index name (lowercase; no "
                    "\\ / * ? \" < > | , # : or space; not starting with _ - +)",
                    index_prefix_));
  if (!credentials_file_.empty() && !api_key_.empty())
    throw ConfigError("[elasticsearch] set credentials_file or api_key, not both");
  if (!credentials_file_.empty()) {
    if (auto error = read_credentials(credentials_file_, user_, password_); !error.empty())
      throw ConfigError(error);
  }
  if (!ca_file_.empty() && !std::ifstream(ca_file_))
    throw ConfigError(
        fmt::format("[elasticsearch] ca_file {}: {}", ca_file_, std::strerror(errno)));
  open_handle();
  std::string shown;
  for (const auto& node : nodes_) shown += (shown.empty() ? "" : ", ") + node.shown;
  spdlog::info("elasticsearch: nodes {}, indices {}<sensor>-YYYY.MM.DD, {} documents per _bulk{}{}",
               shown, index_prefix_, bulk_size_, user_.empty() ? "" : ", basic auth as " + user_,
               api_key_.empty() ? "" : ", API key");
  if (!verify_certificates_)
    spdlog::warn("elasticsearch: TLS certificates are not verified (verify_certificates = false)");
}

ElasticsearchOutput::~ElasticsearchOutput() { close_handle(); }

void ElasticsearchOutput::open_handle() {
  curl_ = curl_easy_init();
  if (!curl_) throw std::runtime_error("elasticsearch: curl_easy_init failed");
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: we run on a thread
  curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, timeout_ms_);
  curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms_);
  curl_easy_setopt(curl_, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl_, CURLOPT_USERAGENT, "fructosa-lmaster/" FRUCTOSA_VERSION);
  curl_easy_setopt(curl_, CURLOPT_ACCEPT_ENCODING, "");  // whatever compression libcurl can decode
  curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, curl_error_);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &ElasticsearchOutput::collect);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &ElasticsearchOutput::header);
  curl_easy_setopt(curl_, CURLOPT_HEADERDATA, this);
  if (!user_.empty()) {
    curl_easy_setopt(curl_, CURLOPT_HTTPAUTH,
                     static_cast<long>(CURLAUTH_BASIC));  // sent with the first request
    curl_easy_setopt(curl_, CURLOPT_USERNAME, user_.c_str());
    curl_easy_setopt(curl_, CURLOPT_PASSWORD, password_.c_str());
  }
  if (!ca_file_.empty()) curl_easy_setopt(curl_, CURLOPT_CAINFO, ca_file_.c_str());
  if (!verify_certificates_) {
    curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  for (auto [list, type] : {std::pair{&json_headers_, "application/json"},
                            {&ndjson_headers_, "application/x-ndjson"}}) {
    *list = curl_slist_append(*list, fmt::format("Content-Type: {}", type).c_str());
    *list = curl_slist_append(*list, "Accept: application/json");
    *list = curl_slist_append(*list, "Expect:");  // no 100-continue round trip for large bodies
    if (!api_key_.empty())
      *list = curl_slist_append(*list, fmt::format("Authorization: ApiKey {}", api_key_).c_str());
  }
}

void ElasticsearchOutput::close_handle() {
  if (curl_) curl_easy_cleanup(curl_);
  curl_slist_free_all(json_headers_);
  curl_slist_free_all(ndjson_headers_);
  curl_ = nullptr;
  json_headers_ = ndjson_headers_ = nullptr;
}

void ElasticsearchOutput::reopen() {
  // New connections, templates put again (the cluster may have been rebuilt), credentials read
  // again (they may have been rotated).
  if (!credentials_file_.empty()) {
    std::string user, password;
    if (auto error = read_credentials(credentials_file_, user, password); !error.empty())
      spdlog::error("elasticsearch: keeping the credentials read before: {}", error);
    else
      user_ = std::move(user), password_ = std::move(password);
  }
  sensors_.clear();
  current_node_ = 0;
  close_handle();
  open_handle();
}

std::size_t ElasticsearchOutput::collect(void* data, std::size_t size, std::size_t count,
                                         void* self) {
  auto& body = static_cast<ElasticsearchOutput*>(self)->response_.body;
  if (body.size() + size * count > kMaxResponseBytes) return 0;  // makes curl fail the transfer
  body.append(static_cast<const char*>(data), size * count);
  return size * count;
}

std::size_t ElasticsearchOutput::header(char* data, std::size_t size, std::size_t count,
                                        void* self) {
  std::string_view line(data, size * count);
  constexpr std::string_view kProduct = "x-elastic-product:";
  if (line.size() > kProduct.size() &&
      std::equal(kProduct.begin(), kProduct.end(), line.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }) &&
      line.find("Elasticsearch") != std::string_view::npos)
    static_cast<ElasticsearchOutput*>(self)->response_.from_elasticsearch = true;
  return size * count;
}

Response ElasticsearchOutput::send(const char* method, const std::string& path,
                                   const std::string& body, curl_slist* headers,
                                   std::size_t points) {
  if (!curl_) open_handle();  // a reopen() that failed
  std::string errors;
  for (std::size_t attempt = 0; attempt < nodes_.size(); ++attempt) {
    const Node& node = nodes_[current_node_];
    response_ = Response{};
    response_.node = &node;
    curl_error_[0] = '\0';
    std::string url = node.url + path;
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST,
                     std::string_view(method) == "POST" ? nullptr : method);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    CURLcode code = curl_easy_perform(curl_);
    if (code == CURLE_OK) {
      curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response_.status);
      return std::move(response_);
    }
    std::string error =
        fmt::format("{}: {}", node.shown, curl_error_[0] ? curl_error_ : curl_easy_strerror(code));
    errors += (errors.empty() ? "" : "; ") + error;
    current_node_ = (current_node_ + 1) % nodes_.size();
    if (attempt + 1 < nodes_.size()) {
      counters_.retried += points;
      std::uint64_t held_back = 0;
      if (unreachable_log_.ready(held_back))
        spdlog::warn("elasticsearch {}; trying {}{}", error, nodes_[current_node_].shown,
                     held_back_note(held_back));
    }
  }
  throw Unreachable(errors);
}

void ElasticsearchOutput::put_templates(std::span<const Sample> samples) {
  std::set<std::string_view> stale;
  for (const auto& sample : samples) {
    if (stale.count(sample.sensor)) continue;
    auto found = sensors_.find(sample.sensor);
    if (found == sensors_.end() || !found->second.template_put) {
      stale.insert(sample.sensor);
      continue;
    }
    for (const auto& metric : sample.metrics)
      if (!found->second.known_keys.count(metric.key)) {
        stale.insert(sample.sensor);
        break;
      }
  }
  for (std::string_view sensor_name : stale) {
    std::string sensor(sensor_name);
    auto keys = infos_.keys_of(sensor);
    SensorState& state = sensors_[sensor];
    // A key the agent never described stays unknown: it is mapped dynamically (as a double).
    if (state.template_put && keys.size() == state.catalog_keys) continue;
    std::string name = index_prefix_ + elasticsearch_sensor_part(sensor);
    Response response;
    try {
      response = send("PUT", "/_index_template/" + name,
                      elasticsearch_index_template(index_prefix_, sensor, keys), json_headers_, 0);
    } catch (const Unreachable& error) {
      throw OutputError(fmt::format("elasticsearch: no node answered: {}", error.what()));
    }
    if (response.status == 429 || response.status >= 500 || response.status == 401 ||
        response.status == 403 || response.status == 408)
      throw OutputError(fmt::format("elasticsearch {}: PUT _index_template/{} answered {}: {}",
                                    response.node->shown, name, response.status,
                                    body_error_text(response.body)));
    if (response.status < 200 || response.status >= 300) {
      // The documents still go in, with dynamic mappings; try again when the catalog grows.
      std::uint64_t held_back = 0;
      if (template_log_.ready(held_back))
        spdlog::error("elasticsearch {}: index template {} refused ({}): {}{}",
                      response.node->shown, name, response.status, body_error_text(response.body),
                      held_back_note(held_back));
    } else if (!state.template_put) {
      spdlog::info("elasticsearch {}: index template {} for {} ({} keys)", response.node->shown,
                   name, sensor, keys.size());
    } else {
      spdlog::debug("elasticsearch {}: index template {} updated ({} keys)", response.node->shown,
                    name, keys.size());
    }
    state.template_put = true;
    state.catalog_keys = keys.size();
    state.known_keys.clear();
    state.integer_keys.clear();
    for (const auto& [key, info] : keys) {
      state.known_keys.insert(key);
      if (elasticsearch_integer_unit(info.unit)) state.integer_keys.insert(key);
    }
  }
}

void ElasticsearchOutput::drop(const Sample& sample, const std::string& index,
                               const std::string& why, const Node* node) {
  counters_.dropped += sample.metrics.size();
  std::uint64_t held_back = 0;
  if (refused_log_.ready(held_back))
    spdlog::error("elasticsearch {}: {} refused the {} sample of {} at {} for good: {}{}",
                  node ? node->shown : "?", index, sample.sensor, sample.host,
                  iso8601_millis(sample.time_ns), why, held_back_note(held_back));
}

ElasticsearchOutput::BulkOutcome ElasticsearchOutput::send_bulk(
    std::span<const Sample> samples, std::size_t begin, std::size_t end,
    std::vector<std::size_t>& undelivered, std::string& failure) {
  static const std::unordered_set<std::string> kNoIntegerKeys;
  std::string body;
  std::vector<std::string> indices;
  std::size_t points = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const Sample& sample = samples[i];
    indices.push_back(elasticsearch_index_name(index_prefix_, sample.sensor, sample.time_ns));
    auto state = sensors_.find(sample.sensor);
    body += dump(
        Json{{"create", {{"_index", indices.back()}, {"_id", elasticsearch_document_id(sample)}}}});
    body += '\n';
    body += elasticsearch_document(
        sample, state == sensors_.end() ? kNoIntegerKeys : state->second.integer_keys);
    body += '\n';
    points += sample.metrics.size();
  }
  auto all_undelivered = [&] {
    for (std::size_t i = begin; i < end; ++i) undelivered.push_back(i);
  };
  Response response;
  try {
    response = send("POST", "/_bulk", body, ndjson_headers_, points);
  } catch (const Unreachable& error) {
    failure = fmt::format("elasticsearch: no node answered: {}", error.what());
    all_undelivered();
    return BulkOutcome::temporary_failure;
  }
  const std::string& node = response.node->shown;
  // Too large for the node (or a proxy), or a document that spoils the whole request: halves
  // go through, and a single sample that still does not is refused for good.
  if (response.status == 413 || (response.status == 400 && response.from_elasticsearch)) {
    if (end - begin > 1) return BulkOutcome::split;
    drop(samples[begin], indices.front(),
         fmt::format("_bulk answered {}: {}", response.status, body_error_text(response.body)),
         response.node);
    return BulkOutcome::done;
  }
  if (response.status < 200 || response.status >= 300) {
    failure = fmt::format("elasticsearch {}: _bulk answered {}: {}", node, response.status,
                          body_error_text(response.body));
    all_undelivered();
    return BulkOutcome::temporary_failure;
  }
  Json reply = Json::parse(response.body, nullptr, false);
  if (reply.is_discarded() || !reply.is_object() || !reply.contains("items") ||
      !reply["items"].is_array() || reply["items"].size() != end - begin) {
    failure = fmt::format("elasticsearch {}: unreadable _bulk answer: {}", node,
                          body_error_text(response.body));
    all_undelivered();
    return BulkOutcome::temporary_failure;
  }
  if (!reply.value("errors", true)) {
    counters_.sent += points;
    return BulkOutcome::done;
  }
  const Json& items = reply["items"];
  for (std::size_t i = begin; i < end; ++i) {
    const Json& item = items[i - begin];
    const Json& result = item.is_object() && !item.empty() ? item.begin().value() : item;
    // An item without a status is not understood: sent again rather than given up.
    int status = result.is_object() ? result.value("status", 500) : 500;
    const Json& error = result.is_object() && result.contains("error") ? result["error"] : Json();
    std::string type = error.is_object() ? error.value("type", std::string()) : std::string();
    std::size_t sample_points = samples[i].metrics.size();
    // 409 from `create`: the document is there already (an earlier try got through).
    if ((status >= 200 && status < 300) ||
        (status == 409 && type == "version_conflict_engine_exception")) {
      counters_.sent += sample_points;
    } else if (retryable_item(status, type)) {
      undelivered.push_back(i);
      if (failure.empty())
        failure = fmt::format("elasticsearch {}: {} refused a document for now ({}): {}", node,
                              indices[i - begin], status, error_text(error));
    } else {
      drop(samples[i], indices[i - begin], fmt::format("{} {}", status, error_text(error)),
           response.node);
    }
  }
  return BulkOutcome::done;
}

void ElasticsearchOutput::write(std::span<const Sample> samples) {
  if (samples.empty()) return;
  put_templates(samples);
  std::vector<std::size_t> undelivered;  // indices into `samples`, for the runner to send again
  std::string failure;
  std::vector<std::pair<std::size_t, std::size_t>> ranges{
      {0, samples.size()}};  // [begin, end), last first
  bool request_failed = false;
  while (!ranges.empty()) {
    auto [begin, end] = ranges.back();
    ranges.pop_back();
    if (request_failed) {  // the node is in trouble: the rest waits for the runner's next try
      for (std::size_t i = begin; i < end; ++i) undelivered.push_back(i);
      continue;
    }
    switch (send_bulk(samples, begin, end, undelivered, failure)) {
      case BulkOutcome::split: {
        counters_.retried += count_points(samples.subspan(begin, end - begin));
        std::size_t middle = begin + (end - begin) / 2;
        ranges.push_back({middle, end});
        ranges.push_back({begin, middle});
        break;
      }
      case BulkOutcome::temporary_failure:
        request_failed = true;
        break;
      case BulkOutcome::done:
        break;
    }
  }
  if (undelivered.empty()) return;
  std::sort(undelivered.begin(), undelivered.end());
  if (undelivered.size() == samples.size()) undelivered.clear();  // none delivered
  throw OutputError(failure, std::move(undelivered));
}

}  // namespace

const OptionTable& elasticsearch_options() {
  static const OptionTable table{
      {.name = "url",
       .type = OptionType::list,
       .default_value = "http://localhost:9200",
       .help = "Elasticsearch nodes, comma-separated (http:// or https://, may hold a path "
               "prefix); on a "
               "connection error the next one is tried"},
      {.name = "index_prefix",
       .type = OptionType::text,
       .default_value = "fructosa_",
       .help =
           "start of every index and template name: indices are <index_prefix><sensor>-YYYY.MM.DD "
           "(sensor lowercased, UTC day of the sample)"},
      {.name = "bulk_size",
       .type = OptionType::integer,
       .default_value = "1000",
       .help = "documents (samples) per _bulk request at most",
       .min = 1,
       .max = 100000},
      {.name = "flush_interval",
       .type = OptionType::real,
       .default_value = "1",
       .help = "seconds a sample may wait for a fuller _bulk request",
       .min = 0.01,
       .max = 3600},
      {.name = "timeout",
       .type = OptionType::real,
       .default_value = "5",
       .help = "seconds one request (connecting included) may take before the node counts as "
               "unreachable",
       .min = 0.1,
       .max = 600},
      {.name = "credentials_file",
       .type = OptionType::text,
       .default_value = "",
       .help = "file holding `user:password` for HTTP basic authentication, read at start and on "
               "reload "
               "(relative to this file)",
       .relative_to_file = true},
      {.name = "api_key",
       .type = OptionType::text,
       .default_value = "",
       .help = "API key sent as `Authorization: ApiKey <api_key>` (the base64 `encoded` value "
               "Elasticsearch "
               "returns)"},
      {.name = "ca_file",
       .type = OptionType::text,
       .default_value = "",
       .help =
           "PEM file of the certificate authorities to trust for https:// (relative to this file; "
           "default: the system's)",
       .relative_to_file = true},
      {.name = "verify_certificates",
       .type = OptionType::boolean,
       .default_value = "true",
       .help = "verify the nodes' TLS certificates and host names (false: like colmet's "
               "--no-check-certificates)"},
  };
  return table;
}

std::unique_ptr<Output> make_elasticsearch_output(const Options& options,
                                                  const MetricInfoStore& infos) {
  return std::make_unique<ElasticsearchOutput>(options, infos);
}

std::string elasticsearch_sensor_part(std::string_view sensor) {
  std::string part;
  part.reserve(sensor.size());
  for (char c : sensor) {
    unsigned char byte = static_cast<unsigned char>(c);
    part += (std::isalnum(byte) && byte < 0x80) ? static_cast<char>(std::tolower(byte)) : '_';
  }
  return part.empty() ? "_" : part;
}

std::string elasticsearch_index_name(std::string_view prefix, std::string_view sensor,
                                     std::int64_t time_ns) {
  const std::tm& day = utc_time(time_ns).calendar;
  return fmt::format("{}{}-{:04}.{:02}.{:02}", prefix, elasticsearch_sensor_part(sensor),
                     day.tm_year + 1900, day.tm_mon + 1, day.tm_mday);
}

std::string elasticsearch_document_id(const Sample& sample) {
  return fmt::format("{}|{}|{}|{}", escape_id_part(sample.host), escape_id_part(sample.sensor),
                     sample.job, sample.time_ns);
}

std::string elasticsearch_field_name(std::string_view key) {
  if (key.empty()) return "value";
  std::string field;
  field.reserve(key.size());
  while (true) {
    auto dot = key.find('.');
    std::string_view component = key.substr(0, dot);
    bool blank = std::all_of(component.begin(), component.end(),
                             [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    field += blank ? std::string_view("_") : component;
    if (dot == std::string_view::npos) break;
    field += '.';
    key.remove_prefix(dot + 1);
  }
  return field;
}

bool elasticsearch_integer_unit(std::string_view unit) {
  return unit == to_string(Unit::bytes) || unit == to_string(Unit::count) ||
         unit == to_string(Unit::boolean);
}

std::string elasticsearch_document(const Sample& sample,
                                   const std::unordered_set<std::string>& integer_keys) {
  Json metrics = Json::object();
  for (const auto& metric : sample.metrics) {
    Json& field = metrics[elasticsearch_field_name(metric.key)];
    double value = metric.value;
    // Whole numbers of long fields as JSON integers; everything else as a double (dump writes
    // the shortest text that reads back as the same double; NaN and infinities become null).
    if (integer_keys.count(metric.key) && std::isfinite(value) && value == std::trunc(value) &&
        std::fabs(value) < 9.2e18)
      field = static_cast<std::int64_t>(value);
    else
      field = value;
  }
  Json document = {{"@timestamp", iso8601_millis(sample.time_ns)},
                   {"host", sample.host},
                   {"sensor", sample.sensor},
                   {"job", sample.job},
                   {"metrics", std::move(metrics)}};
  if (!sample.labels.empty()) {
    Json labels = Json::object();
    for (const auto& label : sample.labels)
      labels[elasticsearch_field_name(label.key)] = label.value;
    document["labels"] = std::move(labels);
  }
  return dump(document);
}

std::string elasticsearch_index_template(
    std::string_view prefix, std::string_view sensor,
    const std::vector<std::pair<std::string, MetricInfo>>& keys) {
  std::string name = std::string(prefix) + elasticsearch_sensor_part(sensor);
  Json metric_properties = Json::object();
  Json catalog = Json::object();
  for (const auto& [key, info] : keys) {
    std::string kind(to_string(info.kind));
    Json meta = {{"kind", kind}};
    if (!info.unit.empty()) meta["unit"] = info.unit.substr(0, 50);  // ES allows 50 characters
    Json mapping = {{"type", elasticsearch_integer_unit(info.unit) ? "long" : "double"},
                    {"meta", meta}};
    if (!put_field(metric_properties, elasticsearch_field_name(key), mapping))
      spdlog::warn(
          "elasticsearch: {} key {:?} is also the prefix of another key (or below one): it is left "
          "to dynamic mapping, and documents holding both are refused",
          std::string(sensor), key);
    catalog[elasticsearch_field_name(key)] = {
        {"unit", info.unit}, {"kind", kind}, {"description", info.description}};
  }
  // Keys the catalog did not describe (yet): numbers are doubles (ES would pick float), labels
  // are keywords (ES would pick text).
  Json dynamic_templates =
      Json::array({dynamic_template("metrics_integers", "metrics.*", "long", {{"type", "double"}}),
                   dynamic_template("metrics_numbers", "metrics.*", "double", {{"type", "double"}}),
                   dynamic_template("labels", "labels.*", "string",
                                    {{"type", "keyword"}, {"ignore_above", 1024}})});
  Json properties = {{"@timestamp", {{"type", "date"}}},
                     {"host", {{"type", "keyword"}}},
                     {"sensor", {{"type", "keyword"}}},
                     {"job", {{"type", "long"}}},
                     {"metrics", {{"properties", metric_properties}}},
                     {"labels", {{"type", "object"}}}};
  Json body = Json::object();
  body["index_patterns"] = Json::array({name + "-*"});
  body["priority"] = kTemplatePriority;
  body["_meta"] = {{"managed_by", "fructosa lmaster"}, {"sensor", std::string(sensor)}};
  // Mapping fields: metrics, labels, the fixed fields and the objects of dotted keys.
  body["template"]["settings"]["index.mapping.total_fields.limit"] =
      std::max<std::size_t>(1000, 4 * keys.size() + 200);
  body["template"]["mappings"] = {
      {"_meta", {{"sensor", std::string(sensor)}, {"metrics", catalog}}},
      {"dynamic_templates", std::move(dynamic_templates)},
      {"properties", std::move(properties)}};
  return dump(body);
}

}  // namespace fructosa::master
