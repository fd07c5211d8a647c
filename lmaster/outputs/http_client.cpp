// lmaster's HTTP outputs' shared options, credential files and libcurl settings (http_client.h).
#include "http_client.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace fructosa::master::http {

OptionTable tls_and_auth_options(std::string_view verified) {
  return {
      {.name = "credentials_file",
       .type = OptionType::text,
       .default_value = "",
       .help = "file holding `user:password` for HTTP basic authentication, read at start and on "
               "reload (relative to this file)",
       .relative_to_file = true},
      {.name = "ca_file",
       .type = OptionType::text,
       .default_value = "",
       .help = "PEM file of the certificate authorities to trust for https:// (relative to this file; "
               "default: the system's)",
       .relative_to_file = true},
      {.name = "verify_certificates",
       .type = OptionType::boolean,
       .default_value = "true",
       .help = fmt::format("verify {} TLS certificates and host names (false: like colmet's "
                           "--no-check-certificates)",
                           verified)},
  };
}

std::string read_first_line(std::string_view section, std::string_view key, const std::string& path,
                            std::string& line) {
  std::ifstream in(path);
  if (!in) return fmt::format("[{}] {} {}: {}", section, key, path, std::strerror(errno));
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
  if (line.empty()) return fmt::format("[{}] {} {}: the first line is empty", section, key, path);
  return {};
}

std::string read_credentials(std::string_view section, const std::string& path, std::string& user,
                             std::string& password) {
  std::string line;
  if (auto error = read_first_line(section, "credentials_file", path, line); !error.empty()) return error;
  auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0)
    return fmt::format("[{}] credentials_file {}: expected one line `user:password`", section, path);
  user = line.substr(0, colon);
  password = line.substr(colon + 1);
  return {};
}

void check_ca_file(std::string_view section, const std::string& ca_file) {
  if (!ca_file.empty() && !std::ifstream(ca_file))
    throw ConfigError(fmt::format("[{}] ca_file {}: {}", section, ca_file, std::strerror(errno)));
}

void set_common_options(CURL* curl, const ClientSettings& settings, char* error_buffer) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: outputs run on threads
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, settings.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, settings.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "fructosa-lmaster/" FRUCTOSA_VERSION);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  if (!settings.user.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));  // with the first request
    curl_easy_setopt(curl, CURLOPT_USERNAME, settings.user.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, settings.password.c_str());
  }
  if (!settings.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, settings.ca_file.c_str());
  if (!settings.verify_certificates) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
}

}  // namespace fructosa::master::http
