// The Elasticsearch output's internals (included only by lmaster/outputs/elasticsearch_*.cpp):
// the nodes and their answers (Node, Response, Unreachable), the log limiter that keeps a broken
// cluster from flooding the log, the helpers more than one file uses, and ElasticsearchOutput,
// whose member functions are defined by responsibility: elasticsearch_output.cpp (options,
// construction, reopen, write), elasticsearch_transport.cpp (the libcurl handle, sending with
// failover between nodes, one _bulk request and its per-document answer) and
// elasticsearch_template.cpp (putting the index templates). The documents themselves are encoded
// by elasticsearch_document.cpp (the functions declared in elasticsearch_output.h).
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "elasticsearch_output.h"

namespace fructosa::master::elasticsearch {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline constexpr auto kLogPeriod = std::chrono::seconds(10);

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

// " (N similar messages held back)", or nothing when none was.
std::string held_back_note(std::uint64_t held_back);

// --- encoding (elasticsearch_document.cpp) -------------------------------------------------------

// "2024-05-01T12:00:00.200Z": UTC, to the millisecond.
std::string iso8601_millis(std::int64_t time_ns);
// JSON text of a value; invalid UTF-8 becomes U+FFFD instead of making dump() throw.
std::string dump(const Json& value);

// --- transport (elasticsearch_transport.cpp) -----------------------------------------------------

struct Node {
  std::string url;    // without a trailing '/'
  std::string shown;  // for log lines: without user and password
};

// Throws ConfigError for a URL that is not http:// or https://.
Node parse_node(const std::string& text);

// For log lines and OutputErrors: an error object as "type: reason (caused by ...)"; a body as
// the error it holds, or else its first 200 characters.
std::string error_text(const Json& error);
std::string body_error_text(const std::string& body);

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

// --- the output ----------------------------------------------------------------------------------

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

  // elasticsearch_transport.cpp
  void open_handle();
  void close_handle();
  Response send(const char* method, const std::string& path, const std::string& body,
                curl_slist* headers, std::size_t points);
  BulkOutcome send_bulk(std::span<const Sample> samples, std::size_t begin, std::size_t end,
                        std::vector<std::size_t>& undelivered, std::string& failure);
  void drop(const Sample& sample, const std::string& index, const std::string& why,
            const Node* node);
  static std::size_t collect(void* data, std::size_t size, std::size_t count, void* self);
  static std::size_t header(char* data, std::size_t size, std::size_t count, void* self);

  // elasticsearch_template.cpp
  void put_templates(std::span<const Sample> samples);

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

}  // namespace fructosa::master::elasticsearch
