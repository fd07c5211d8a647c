// The Prometheus output's HTTP transport: one libcurl easy handle, kept alive between requests,
// with the remote_write headers, timeouts, TLS and authentication; one POST and its answer.
#include <fmt/format.h>

#include <new>

#include "http_client.h"
#include "prometheus_output_impl.h"

namespace fructosa::master::prometheus {

namespace {
constexpr std::size_t kMaxResponseBytes = 1u << 20;  // an error text; remote_write answers 204
}

void PrometheusOutput::open_handle() {
  curl_ = curl_easy_init();
  if (!curl_) throw std::runtime_error("prometheus: curl_easy_init failed");
  curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
  http::set_common_options(curl_, {timeout_ms_, user_, password_, ca_file_, verify_certificates_}, curl_error_);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &PrometheusOutput::collect);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl_, CURLOPT_POST, 1L);
  // The headers remote_write 1.0 requires.
  for (const char* header : {"Content-Type: application/x-protobuf", "Content-Encoding: snappy",
                             "X-Prometheus-Remote-Write-Version: 0.1.0", "Expect:"})
    headers_ = curl_slist_append(headers_, header);
  if (!bearer_token_.empty())
    headers_ = curl_slist_append(headers_, fmt::format("Authorization: Bearer {}", bearer_token_).c_str());
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
}

void PrometheusOutput::close_handle() {
  if (curl_) curl_easy_cleanup(curl_);
  curl_slist_free_all(headers_);
  curl_ = nullptr;
  headers_ = nullptr;
}

std::size_t PrometheusOutput::collect(void* data, std::size_t size, std::size_t count, void* self) {
  auto& body = static_cast<PrometheusOutput*>(self)->response_body_;
  if (body.size() + size * count > kMaxResponseBytes) return 0;  // makes curl fail the transfer
  body.append(static_cast<const char*>(data), size * count);
  return size * count;
}

Response PrometheusOutput::post(const std::string& body) {
  if (!curl_) open_handle();  // a reopen() that failed
  response_body_.clear();
  curl_error_[0] = '\0';
  curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  CURLcode code = curl_easy_perform(curl_);
  if (code != CURLE_OK)
    throw Unreachable(fmt::format("{}: {}", shown_url_, curl_error_[0] ? curl_error_ : curl_easy_strerror(code)));
  Response response;
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(response_body_);
  return response;
}

}  // namespace fructosa::master::prometheus
