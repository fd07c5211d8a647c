// ZeroMQ CURVE keys for the lagent <-> lmaster link: generation, key files, and the check that
// the linked libzmq has CURVE at all (docs/security.md).
//
// Key file format (what `lmaster keygen` writes), one `name = value` per line, '#' comments:
//   NAME.key (mode 0600)  public-key = <40 Z85 characters>
//                         secret-key = <40 Z85 characters>
//   NAME.pub (mode 0644)  public-key = <40 Z85 characters>
// Leading blanks and double quotes around values are ignored and other names are skipped, so a
// CZMQ certificate (zcert: `curve` block with `public-key = "..."`) reads as well.
#pragma once

#include <string>
#include <string_view>

namespace fructosa::curve {

inline constexpr std::size_t kZ85KeyLength = 40;  // a 32-byte key in Z85 text

struct KeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// What a key file holds; a .pub file has no secret key.
struct KeyFile {
  std::string public_key;  // Z85; empty when the file has none
  std::string secret_key;  // Z85; empty when the file has none
};

// True when the libzmq this program runs with supports CURVE (zmq_has("curve")).
bool available();

// Throws std::runtime_error saying that this libzmq lacks CURVE and what `what` needed it.
void require(std::string_view what);

KeyPair generate();

// True for 40 characters of the Z85 alphabet that decode to a 32-byte key.
bool is_key(std::string_view text);

// The public key that belongs to a Z85 secret key; throws std::invalid_argument for a bad key.
std::string public_key_of(const std::string& secret_key);

// Throws std::runtime_error "PATH: ..." or "PATH:LINE: ..." (unreadable, malformed key, a name
// given twice, or public and secret keys that do not belong together).
KeyFile read_key_file(const std::string& path);

// A file that must hold a secret key (the public one is derived when absent). Logs a warning
// when group or others may read the file.
KeyPair read_key_pair(const std::string& path);

// A file that must hold a public key (a .pub file, or a key pair file of which only the public
// key is used).
std::string read_public_key(const std::string& path);

struct WrittenFiles {
  std::string secret_path;  // DIR/NAME.key, mode 0600
  std::string public_path;  // DIR/NAME.pub, mode 0644
};

// Writes the pair as DIR/NAME.key and DIR/NAME.pub with those modes whatever the umask. An
// existing file is an error (std::runtime_error naming it) unless `overwrite`.
WrittenFiles write_key_pair(const std::string& directory, const std::string& name, const KeyPair& pair,
                            bool overwrite);

}  // namespace fructosa::curve
