// Making files and directory entries survive a power cut: data is durable after fdatasync, a
// new name (create, rename, unlink) only after an fsync of its directory. docs/durability.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fructosa {

class DurabilityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replaces `path` with `text` so that after a crash it holds the old or the new text, whole:
// a temporary file beside it, fdatasync, rename, fsync of the directory. `mode` as for open(2).
// Throws DurabilityError naming the file.
void write_file_durably(const std::filesystem::path& path, const std::string& text, unsigned mode = 0640);

// fsync(2) of a directory: the creates, renames and unlinks in it so far survive a power cut.
// Throws DurabilityError naming the directory.
void sync_directory(const std::filesystem::path& directory);

// std::filesystem::create_directories, with an fsync of the parent of every directory it makes,
// so that a power cut cannot take the directory, and the files
// later made durable in it, away. `mode` for the new directories (before the umask).
// Throws DurabilityError naming the directory.
void create_directories_durably(const std::filesystem::path& directory, unsigned mode = 0750);

// pread/pwrite of all of `data` at `offset`, through EINTR and short counts; false on an error
// (errno says which) or, reading, at the end of the file.
bool read_all_at(int fd, char* data, std::size_t size, std::uint64_t offset);
bool write_all_at(int fd, std::string_view data, std::uint64_t offset);

}  // namespace fructosa
