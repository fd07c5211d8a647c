// The HTTP transport, over one libcurl easy handle (kept alive between requests): the nodes'
// URLs, the handle's options (timeouts, TLS, authentication, headers), send() with failover to
// the next node when one cannot be reached, and one _bulk request of NDJSON `create` actions:
// what its answer says, as a whole (too large: split; a failure: try later) and per document
// (delivered, already there, refused for now, refused for good and dropped).
#include "elasticsearch_output_impl.h"
#include "http_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <new>
#include <string_view>

namespace fructosa::master::elasticsearch {

namespace {

constexpr std::size_t kMaxResponseBytes = 64u << 20;

bool retryable_item(int status, const std::string& type) {
  return status == 429 || status >= 500 || type == "es_rejected_execution_exception" ||
         type == "circuit_breaking_exception" || type == "cluster_block_exception" ||
         type == "unavailable_shards_exception";
}

}  // namespace

std::string held_back_note(std::uint64_t held_back) {
  return held_back ? fmt::format(" ({} similar messages held back)", held_back) : std::string();
}

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

void ElasticsearchOutput::open_handle() {
  curl_ = curl_easy_init();
  if (!curl_) throw std::runtime_error("elasticsearch: curl_easy_init failed");
  http::set_common_options(curl_, {timeout_ms_, user_, password_, ca_file_, verify_certificates_}, curl_error_);
  curl_easy_setopt(curl_, CURLOPT_ACCEPT_ENCODING, "");  // whatever compression libcurl can decode
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &ElasticsearchOutput::collect);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &ElasticsearchOutput::header);
  curl_easy_setopt(curl_, CURLOPT_HEADERDATA, this);
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

}  // namespace fructosa::master::elasticsearch
