#include "crashfs_image.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <utility>

namespace crashfs {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& what, const fs::path& path, int error) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(error));
}

// `backing` as an absolute path without a trailing slash, so that its siblings can be named.
fs::path normalized(const fs::path& backing) {
  fs::path path = fs::absolute(backing).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  if (!path.has_filename()) throw std::runtime_error("backing directory " + backing.string() + ": cannot be /");
  return path;
}

fs::path sibling(const fs::path& backing, const char* suffix) {
  return backing.parent_path() / (backing.filename().string() + suffix);
}

bool exists_no_follow(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return true;
  if (errno != ENOENT) fail("cannot stat", path, errno);
  return false;
}

// remove_all, also where directories were written without write permission (mode 0555).
void remove_tree(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    ::chmod(path.c_str(), 0700);
    std::error_code ignored;
    for (const auto& entry : fs::directory_iterator(path, ignored)) remove_tree(entry.path());
  }
  std::error_code error;
  fs::remove(path, error);
  if (error) throw std::runtime_error("cannot remove " + path.string() + ": " + error.message());
}

ImageNode node_from_stat(const struct stat& st, Kind kind) {
  ImageNode node;
  node.kind = kind;
  node.mode = st.st_mode & 07777;
  node.uid = st.st_uid;
  node.gid = st.st_gid;
  node.atime = st.st_atim;
  node.mtime = st.st_mtim;
  return node;
}

std::string read_whole_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail("cannot open", path, errno);
  std::string data;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      ::close(fd);
      fail("cannot read", path, error);
    }
    if (n == 0) break;
    data.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return data;
}

std::string read_link(const fs::path& path) {
  std::string target(256, '\0');
  for (;;) {
    ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0) fail("cannot read the link", path, errno);
    if (static_cast<std::size_t>(n) < target.size()) {
      target.resize(static_cast<std::size_t>(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

class Loader {
 public:
  Image image;

  void load_directory(const fs::path& path, std::size_t index) {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) fail("cannot read the directory", path, errno);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    int error = errno;
    ::closedir(dir);
    if (error != 0) fail("cannot read the directory", path, error);
    for (const std::string& name : names) {
      fs::path child = path / name;
      struct stat st;
      if (::lstat(child.c_str(), &st) != 0) fail("cannot stat", child, errno);
      std::size_t child_index = 0;
      if (S_ISDIR(st.st_mode)) {
        child_index = add(node_from_stat(st, Kind::directory));
        load_directory(child, child_index);
      } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
        // A file with several names is one node with several entries (hard links).
        auto key = std::make_pair(st.st_dev, st.st_ino);
        auto known = linked_.find(key);
        if (known != linked_.end()) {
          child_index = known->second;
        } else {
          ImageNode node = node_from_stat(st, S_ISREG(st.st_mode) ? Kind::file : Kind::symlink);
          node.data = S_ISREG(st.st_mode) ? read_whole_file(child) : read_link(child);
          child_index = add(std::move(node));
          if (st.st_nlink > 1) linked_[key] = child_index;
        }
      } else {
        std::cerr << "crashfs: skipping " << child << ": neither a file, a directory nor a symlink\n";
        continue;
      }
      image.nodes[index].entries[name] = child_index;
    }
  }

  std::size_t add(ImageNode node) {
    image.nodes.push_back(std::move(node));
    return image.nodes.size() - 1;
  }

 private:
  std::map<std::pair<dev_t, ino_t>, std::size_t> linked_;
};

class Writer {
 public:
  explicit Writer(const Image& image) : image_(image), written_(image.nodes.size()) {}

  void write_directory(std::size_t index, const fs::path& path) {
    written_[index] = path;
    const ImageNode& node = image_.nodes[index];
    for (const auto& [name, child_index] : node.entries) {
      if (child_index >= image_.nodes.size()) throw std::logic_error("crashfs image: entry " + name + " out of range");
      const ImageNode& child = image_.nodes[child_index];
      fs::path child_path = path / name;
      if (!written_[child_index].empty()) {
        if (child.kind == Kind::directory) {
          std::cerr << "crashfs: not writing " << child_path << ": directory already written as "
                    << written_[child_index] << '\n';
          continue;
        }
        // linkat without AT_SYMLINK_FOLLOW links a symlink itself.
        if (::linkat(AT_FDCWD, written_[child_index].c_str(), AT_FDCWD, child_path.c_str(), 0) != 0)
          fail("cannot link", child_path, errno);
        continue;
      }
      switch (child.kind) {
        case Kind::directory:
          if (::mkdir(child_path.c_str(), 0700) != 0) fail("cannot create the directory", child_path, errno);
          write_directory(child_index, child_path);
          break;
        case Kind::file:
          write_file(child, child_path);
          written_[child_index] = child_path;
          break;
        case Kind::symlink:
          if (::symlink(child.data.c_str(), child_path.c_str()) != 0) fail("cannot create the symlink", child_path, errno);
          set_attributes(child, child_path);
          written_[child_index] = child_path;
          break;
      }
    }
    // Last, so that writing the entries neither needs write permission nor changes the times.
    set_attributes(node, path);
  }

 private:
  static void write_file(const ImageNode& node, const fs::path& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) fail("cannot create", path, errno);
    std::size_t done = 0;
    while (done < node.data.size()) {
      ssize_t n = ::write(fd, node.data.data() + done, node.data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int error = errno;
        ::close(fd);
        fail("cannot write", path, error);
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) fail("cannot write", path, errno);
    set_attributes(node, path);
  }

  static void set_attributes(const ImageNode& node, const fs::path& path) {
    // Owners other than this process's need root; without it the files are ours.
    if (::lchown(path.c_str(), node.uid, node.gid) != 0 && errno != EPERM) fail("cannot chown", path, errno);
    if (node.kind != Kind::symlink && ::chmod(path.c_str(), node.mode) != 0) fail("cannot chmod", path, errno);
    const timespec times[2] = {node.atime, node.mtime};
    if (::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) fail("cannot set the times of", path, errno);
  }

  const Image& image_;
  std::vector<fs::path> written_;  // where each node was written, empty until then
};

void sync_directory(const fs::path& path, bool whole_filesystem) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path, errno);
  int result = whole_filesystem ? ::syncfs(fd) : ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (result != 0) fail("cannot sync", path, error);
}

}  // namespace

Image empty_image() {
  Image image;
  ImageNode root;
  root.kind = Kind::directory;
  root.mode = 0755;
  root.uid = ::geteuid();
  root.gid = ::getegid();
  ::clock_gettime(CLOCK_REALTIME, &root.mtime);
  root.atime = root.mtime;
  image.nodes.push_back(std::move(root));
  return image;
}

Image read_image(const fs::path& backing_path) {
  const fs::path backing = normalized(backing_path);
  const fs::path old = sibling(backing, ".crashfs-old");
  if (!exists_no_follow(backing)) {
    if (exists_no_follow(old)) {
      std::cerr << "crashfs: " << backing << " is missing: a write-back was interrupted, restoring " << old << '\n';
      if (::rename(old.c_str(), backing.c_str()) != 0) fail("cannot restore", backing, errno);
    } else if (::mkdir(backing.c_str(), 0755) != 0) {
      fail("cannot create the backing directory", backing, errno);
    }
  }
  // Leftovers of an interrupted write-back are never the current image.
  remove_tree(sibling(backing, ".crashfs-new"));
  remove_tree(old);
  struct stat st;
  if (::stat(backing.c_str(), &st) != 0) fail("cannot stat the backing directory", backing, errno);
  if (!S_ISDIR(st.st_mode)) fail("backing directory", backing, ENOTDIR);
  Loader loader;
  loader.add(node_from_stat(st, Kind::directory));
  loader.load_directory(backing, 0);
  return std::move(loader.image);
}

void write_image(const Image& image, const fs::path& backing_path) {
  if (image.nodes.empty() || image.nodes[0].kind != Kind::directory)
    throw std::logic_error("crashfs image: the root is not a directory");
  const fs::path backing = normalized(backing_path);
  const fs::path fresh = sibling(backing, ".crashfs-new");
  const fs::path old = sibling(backing, ".crashfs-old");
  remove_tree(fresh);
  if (::mkdir(fresh.c_str(), 0700) != 0) fail("cannot create", fresh, errno);
  Writer(image).write_directory(0, fresh);
  // One syncfs rather than an fsync per file: the image is on the disk before it replaces the old.
  sync_directory(fresh, true);
  if (!exists_no_follow(backing)) {
    if (::rename(fresh.c_str(), backing.c_str()) != 0) fail("cannot rename to", backing, errno);
  } else if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, backing.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(fresh);  // the old image, now under the new one's name
  } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
    // No exchange here: read_image restores <backing>.crashfs-old if we stop between the renames.
    remove_tree(old);
    if (::rename(backing.c_str(), old.c_str()) != 0) fail("cannot rename to", old, errno);
    if (::rename(fresh.c_str(), backing.c_str()) != 0) fail("cannot rename to", backing, errno);
    remove_tree(old);
  } else {
    fail("cannot exchange with", backing, errno);
  }
  sync_directory(backing.parent_path(), false);
}

}  // namespace crashfs
