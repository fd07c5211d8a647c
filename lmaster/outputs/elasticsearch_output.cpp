// The Elasticsearch output (docs/elasticsearch.md): its options, the checks of their values,
// the Output adapter (ElasticsearchOutput: construction, reopen, write) and the writing of a
// batch: templates first, then _bulk requests, halved while a node finds them too large, with the
// samples not delivered handed back to the runner. The rest of ElasticsearchOutput is declared in
// elasticsearch_output_impl.h, which says where each part lives.
#include "elasticsearch_output_impl.h"
#include "http_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace fructosa::master {

namespace {

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

}  // namespace

namespace elasticsearch {

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
    if (auto error = http::read_credentials("elasticsearch", credentials_file_, user_, password_); !error.empty())
      throw ConfigError(error);
  }
  http::check_ca_file("elasticsearch", ca_file_);
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

void ElasticsearchOutput::reopen() {
  // New connections, templates put again (the cluster may have been rebuilt), credentials read
  // again (they may have been rotated).
  if (!credentials_file_.empty()) {
    std::string user, password;
    if (auto error = http::read_credentials("elasticsearch", credentials_file_, user, password); !error.empty())
      spdlog::error("elasticsearch: keeping the credentials read before: {}", error);
    else
      user_ = std::move(user), password_ = std::move(password);
  }
  sensors_.clear();
  current_node_ = 0;
  close_handle();
  open_handle();
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

}  // namespace elasticsearch

const OptionTable& elasticsearch_options() {
  static const OptionTable own{
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
      {.name = "api_key",
       .type = OptionType::text,
       .default_value = "",
       .help = "API key sent as `Authorization: ApiKey <api_key>` (the base64 `encoded` value "
               "Elasticsearch "
               "returns)"},
  };
  static const OptionTable table = [] {
    OptionTable all = own;
    for (auto& spec : http::tls_and_auth_options("the nodes'")) all.push_back(std::move(spec));
    return all;
  }();
  return table;
}

std::unique_ptr<Output> make_elasticsearch_output(const Options& options,
                                                  const MetricInfoStore& infos) {
  return std::make_unique<elasticsearch::ElasticsearchOutput>(options, infos);
}

}  // namespace fructosa::master
