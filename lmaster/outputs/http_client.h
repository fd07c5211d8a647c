// What lmaster's HTTP outputs (elasticsearch, prometheus) share: the options for authentication
// and TLS with their checks, the files that hold credentials, and the libcurl settings of every
// connection (timeouts without signals, keep-alive, http(s) only, basic auth, TLS). Each output
// adds its own headers and body handling.
#pragma once

#include <curl/curl.h>

#include <string>
#include <string_view>

#include "config.h"

namespace fructosa::master::http {

// The options credentials_file, ca_file and verify_certificates, for an output's table;
// `verified`: whose certificate verify_certificates is about ("the nodes'", "the server's").
OptionTable tls_and_auth_options(std::string_view verified);

// The first line of `path` (without a trailing \r) into `line`; "" or the error, naming the
// section, key and file.
std::string read_first_line(std::string_view section, std::string_view key, const std::string& path,
                            std::string& line);
// credentials_file's `user:password`; "" or the error.
std::string read_credentials(std::string_view section, const std::string& path, std::string& user,
                             std::string& password);
// Throws ConfigError naming the section when a CA file is set and cannot be read.
void check_ca_file(std::string_view section, const std::string& ca_file);

struct ClientSettings {
  long timeout_ms = 0;  // connecting, and the whole request
  std::string user, password;  // basic auth when user is not empty
  std::string ca_file;         // "" = the system's
  bool verify_certificates = true;
};

// The settings every connection of an HTTP output has; `error_buffer` (CURL_ERROR_SIZE bytes)
// receives libcurl's message of a failed transfer.
void set_common_options(CURL* curl, const ClientSettings& settings, char* error_buffer);

}  // namespace fructosa::master::http
