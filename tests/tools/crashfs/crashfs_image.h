// The durable image of a crashfs filesystem: a plain directory tree on the real disk (the
// "backing directory"), read at mount and written at a cut or a clean unmount. In memory it is
// a list of nodes; a directory's entries name nodes by index, so two entries naming one file
// node are hard links. Directories form a tree (one entry each, the root none).
#pragma once

#include <sys/types.h>

#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace crashfs {

enum class Kind { file, directory, symlink };

struct ImageNode {
  Kind kind = Kind::file;
  mode_t mode = 0644;  // permission bits only (07777)
  uid_t uid = 0;
  gid_t gid = 0;
  timespec atime{};
  timespec mtime{};
  std::string data;                              // a file's contents or a symlink's target
  std::map<std::string, std::size_t> entries;    // a directory's: name -> node index
};

struct Image {
  std::vector<ImageNode> nodes;  // nodes[0] is the root directory
};

// An image holding only an empty root directory (mode 0755, owned by this process's user).
Image empty_image();

// Reads the tree under `backing`. A missing `backing` is created empty, or, when a write-back
// was interrupted between its two renames (see write_image), the previous image is moved back.
// Entries other than files, directories and symlinks are skipped with a warning on stderr.
// Throws std::runtime_error naming the path on any error.
Image read_image(const std::filesystem::path& backing);

// Replaces the tree under `backing` by `image`, so that a crash of crashfs at any point leaves
// either the old or the new tree there: the new tree is written and synced into the sibling
// `<backing>.crashfs-new`, then exchanged with `backing` (renameat2 RENAME_EXCHANGE, or two
// renames through `<backing>.crashfs-old` where the filesystem cannot exchange), and the old tree
// is removed. Throws std::runtime_error naming the path on any error.
void write_image(const Image& image, const std::filesystem::path& backing);

}  // namespace crashfs
