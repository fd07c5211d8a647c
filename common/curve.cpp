#include "curve.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "durable_file.h"

namespace fructosa::curve {
namespace {

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string_view trim(std::string_view text) {
  auto start = text.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) return {};
  auto end = text.find_last_not_of(" \t\r");
  return text.substr(start, end - start + 1);
}

// Writes `text` to a new file with exactly `mode` (fchmod: the umask must not widen nor narrow
// it). O_NOFOLLOW: a secret is never written through a symbolic link someone planted.
void write_file(const std::string& path, const std::string& text, mode_t mode, bool overwrite) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (overwrite ? O_TRUNC : O_EXCL);
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      throw std::runtime_error(fmt::format("{} exists already (--force replaces it)", path));
    throw std::runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  bool ok = ::fchmod(fd, mode) == 0 && write_all_at(fd, text, 0) && ::fsync(fd) == 0;
  int error = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(path.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(error ? error : errno)));
  }
}

}  // namespace

bool available() { return zmq_has("curve") != 0; }

void require(std::string_view what) {
  if (available()) return;
  int major = 0, minor = 0, patch = 0;
  zmq_version(&major, &minor, &patch);
  throw std::runtime_error(fmt::format(
      "{} needs ZeroMQ CURVE, but the libzmq in use ({}.{}.{}) was built without it (zmq_has(\"curve\") is "
      "false); install a libzmq built with libsodium or its own tweetnacl (Debian's libzmq5 is)",
      what, major, minor, patch));
}

KeyPair generate() {
  char public_key[kZ85KeyLength + 1] = {};
  char secret_key[kZ85KeyLength + 1] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    throw std::runtime_error(fmt::format("cannot generate a CURVE key pair: {}", zmq_strerror(zmq_errno())));
  return {public_key, secret_key};
}

bool is_key(std::string_view text) {
  if (text.size() != kZ85KeyLength) return false;
  // Every group of 5 characters is a base-85 number that must fit in 32 bits.
  for (std::size_t group = 0; group < text.size(); group += 5) {
    std::uint64_t value = 0;
    for (std::size_t i = group; i < group + 5; ++i) {
      auto digit = kZ85Alphabet.find(text[i]);
      if (digit == std::string_view::npos) return false;
      value = value * 85 + digit;
    }
    if (value > 0xffffffffu) return false;
  }
  return true;
}

std::string public_key_of(const std::string& secret_key) {
  if (!is_key(secret_key)) throw std::invalid_argument("not a CURVE key (40 Z85 characters)");
  char public_key[kZ85KeyLength + 1] = {};
  if (zmq_curve_public(public_key, secret_key.c_str()) != 0)
    throw std::invalid_argument(fmt::format("cannot derive the public key: {}", zmq_strerror(zmq_errno())));
  return public_key;
}

KeyFile read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  KeyFile keys;
  int public_line = 0, secret_line = 0;
  std::string raw;
  for (int number = 1; std::getline(in, raw); ++number) {
    std::string_view line = trim(raw);
    // No trailing comments: '#' is a Z85 digit.
    if (line.empty() || line.front() == '#') continue;
    auto equals = line.find('=');
    if (equals == std::string_view::npos) continue;  // e.g. zcert's `curve` and `metadata` lines
    std::string_view name = trim(line.substr(0, equals));
    std::string_view value = trim(line.substr(equals + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    std::string* target = nullptr;
    int* seen = nullptr;
    if (name == "public-key") {
      target = &keys.public_key;
      seen = &public_line;
    } else if (name == "secret-key") {
      target = &keys.secret_key;
      seen = &secret_line;
    } else {
      continue;
    }
    if (*seen)
      throw std::runtime_error(fmt::format("{}:{}: {} given again (first on line {})", path, number, name, *seen));
    if (!is_key(value))
      throw std::runtime_error(fmt::format("{}:{}: {} is not a CURVE key (40 Z85 characters; `lmaster keygen` "
                                           "writes them)",
                                           path, number, name));
    *target = std::string(value);
    *seen = number;
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", path));
  if (!public_line && !secret_line)
    throw std::runtime_error(
        fmt::format("{}: holds no key (expected lines `public-key = ...` and/or `secret-key = ...`)", path));
  if (public_line && secret_line && public_key_of(keys.secret_key) != keys.public_key)
    throw std::runtime_error(fmt::format("{}:{}: public-key does not belong to the secret-key on line {}", path,
                                         public_line, secret_line));
  return keys;
}

KeyPair read_key_pair(const std::string& path) {
  KeyFile keys = read_key_file(path);
  if (keys.secret_key.empty())
    throw std::runtime_error(fmt::format("{}: holds no secret-key (a public .pub file where the key pair, the "
                                         ".key file, is needed?)",
                                         path));
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && (info.st_mode & 077))
    spdlog::warn("{}: the secret CURVE key is readable by others (mode {:o}); chmod 600 it", path,
                 info.st_mode & 0777);
  return {keys.public_key.empty() ? public_key_of(keys.secret_key) : keys.public_key, keys.secret_key};
}

std::string read_public_key(const std::string& path) {
  KeyFile keys = read_key_file(path);
  return keys.public_key.empty() ? public_key_of(keys.secret_key) : keys.public_key;
}

WrittenFiles write_key_pair(const std::string& directory, const std::string& name, const KeyPair& pair,
                            bool overwrite) {
  if (name.empty() || name.front() == '.' || name.find('/') != std::string::npos)
    throw std::runtime_error(fmt::format("'{}' is not usable as a key name (no '/', not starting with '.')", name));
  if (!is_key(pair.public_key) || !is_key(pair.secret_key)) throw std::invalid_argument("write_key_pair: bad key");
  std::filesystem::path dir = directory.empty() ? "." : directory;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw std::runtime_error(fmt::format("cannot create {}: {}", dir.string(), error.message()));
  WrittenFiles files{(dir / (name + ".key")).string(), (dir / (name + ".pub")).string()};
  // Both names are checked first so that a refusal leaves nothing half written.
  if (!overwrite)
    for (const auto& path : {files.secret_path, files.public_path})
      if (std::filesystem::exists(std::filesystem::symlink_status(path)))
        throw std::runtime_error(fmt::format("{} exists already (--force replaces it)", path));
  write_file(files.secret_path,
             fmt::format("# fructosa CURVE key pair \"{}\" (lmaster keygen). Secret: keep it readable by its owner\n"
                         "# only, on the one host (lagent or lmaster) it identifies.\n"
                         "public-key = {}\nsecret-key = {}\n",
                         name, pair.public_key, pair.secret_key),
             0600, overwrite);
  try {
    write_file(files.public_path,
               fmt::format("# fructosa CURVE public key \"{}\" (lmaster keygen). An agent's goes into lmaster's\n"
                           "# curve_allowed_keys_dir; the master's is every agent's curve_server_public_key_file.\n"
                           "public-key = {}\n",
                           name, pair.public_key),
               0644, overwrite);
  } catch (...) {
    ::unlink(files.secret_path.c_str());
    throw;
  }
  return files;
}

}  // namespace fructosa::curve
