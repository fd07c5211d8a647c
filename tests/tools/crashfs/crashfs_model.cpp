// The operations of crashfs's model on inodes and their contents: they change the live state,
// and fsync copies it to the durable one. Names (directory entries, renames, fsyncdir):
// crashfs_model_names.cpp; cuts, images, statistics, garbage collection: crashfs_model_image.cpp.
#include "crashfs_model.h"

#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace crashfs {

namespace {

// Larger files would only exhaust crashfs's memory: writes past it are EFBIG.
constexpr std::uint64_t kMaxFileSize = std::uint64_t{1} << 40;

mode_t type_bits(Kind kind) {
  switch (kind) {
    case Kind::directory: return S_IFDIR;
    case Kind::symlink: return S_IFLNK;
    case Kind::file: break;
  }
  return S_IFREG;
}

}  // namespace

timespec wall_clock() {
  timespec t;
  ::clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

struct stat Attr::to_stat() const {
  struct stat st{};
  st.st_ino = ino;
  st.st_mode = type_bits(kind) | mode;
  st.st_nlink = nlink;
  st.st_uid = uid;
  st.st_gid = gid;
  st.st_size = static_cast<off_t>(size);
  st.st_blksize = kBlockSize;
  st.st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  st.st_atim = atime;
  st.st_mtim = mtime;
  st.st_ctim = ctime;
  return st;
}

Model::Model(const Image& image) {
  if (image.nodes.empty() || image.nodes[0].kind != Kind::directory)
    throw std::invalid_argument("crashfs image: the root is not a directory");
  std::vector<Ino> ino_of(image.nodes.size(), 0);
  auto make = [&](std::size_t index) -> Inode& {
    const ImageNode& node = image.nodes.at(index);
    Inode& inode = new_inode(node.kind, node.mode, {node.uid, node.gid});
    inode.atime = node.atime;
    inode.mtime = node.mtime;
    inode.data = node.data;
    if (node.kind == Kind::file) inode.durable_data = node.data;
    snapshot_attributes(inode);
    ino_of[index] = inode.ino;
    return inode;
  };
  Inode& root = make(0);
  root.parent = root.ino;  // the root is its own parent, and always linked
  root.names = 1;
  std::vector<std::size_t> directories{0};
  while (!directories.empty()) {
    std::size_t index = directories.back();
    directories.pop_back();
    Inode& dir = inodes_.at(ino_of[index]);
    for (const auto& [name, child_index] : image.nodes[index].entries) {
      bool fresh = ino_of.at(child_index) == 0;
      if (!fresh && image.nodes[child_index].kind == Kind::directory) continue;  // a directory has one name
      Inode& child = fresh ? make(child_index) : inodes_.at(ino_of[child_index]);
      dir.entries[name] = child.ino;
      dir.durable_entries[name] = child.ino;
      ++child.names;
      if (child.kind == Kind::directory) {
        child.parent = dir.ino;
        ++dir.subdirs;
        directories.push_back(child_index);
      }
      account(child);
    }
  }
  inodes_after_collect_ = inodes_.size();
}

Model::Inode* Model::find(Ino ino) {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : &it->second;
}

const Model::Inode* Model::find(Ino ino) const {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : &it->second;
}

int Model::find_directory(Ino ino, Inode*& out) {
  out = find(ino);
  if (out == nullptr) return -ENOENT;
  return out->kind == Kind::directory ? 0 : -ENOTDIR;
}

Model::Inode& Model::new_inode(Kind kind, mode_t mode, Owner owner) {
  Inode inode;
  inode.ino = next_ino_++;
  inode.kind = kind;
  inode.mode = mode & 07777;
  inode.uid = owner.uid;
  inode.gid = owner.gid;
  inode.atime = inode.mtime = inode.ctime = wall_clock();
  // A new inode's attributes are durable as created: they go with its first durable name.
  snapshot_attributes(inode);
  return inodes_.emplace(inode.ino, std::move(inode)).first->second;
}

void Model::snapshot_attributes(Inode& inode) {
  ImageNode& durable = inode.durable_attributes;
  durable.kind = inode.kind;
  durable.mode = inode.mode;
  durable.uid = inode.uid;
  durable.gid = inode.gid;
  durable.atime = inode.atime;
  durable.mtime = inode.mtime;
}

void Model::changed(Inode& inode, bool contents) {
  inode.ctime = wall_clock();
  if (contents) inode.mtime = inode.ctime;
  inode.dirty = true;
}

Attr Model::attr_of(const Inode& inode) const {
  Attr attr;
  attr.ino = inode.ino;
  attr.kind = inode.kind;
  attr.mode = inode.mode;
  attr.uid = inode.uid;
  attr.gid = inode.gid;
  attr.atime = inode.atime;
  attr.mtime = inode.mtime;
  attr.ctime = inode.ctime;
  if (inode.kind == Kind::directory) {
    attr.nlink = inode.parent == 0 ? 0 : static_cast<nlink_t>(2 + inode.subdirs);  // removed: 0
    attr.size = kBlockSize;
  } else {
    attr.nlink = inode.names;
    attr.size = inode.data.size();
  }
  return attr;
}

void Model::account(Inode& inode) {
  // Like a disk, space is taken by files that have a name or are open.
  std::uint64_t share = inode.kind == Kind::file && (inode.names > 0 || inode.handles > 0) ? inode.data.size() : 0;
  live_bytes_ = live_bytes_ - inode.counted_bytes + share;
  inode.counted_bytes = share;
}

void Model::mark_dirty(Inode& file, std::uint64_t begin, std::uint64_t end) {
  if (begin >= end) return;
  for (std::uint64_t block = begin / kBlockSize; block <= (end - 1) / kBlockSize; ++block) file.dirty_blocks.insert(block);
}

int Model::resize(Inode& file, std::uint64_t size) {
  std::uint64_t old_size = file.data.size();
  if (size > kMaxFileSize) return -EFBIG;
  if (size > old_size && capacity_) {
    std::uint64_t share = file.names > 0 || file.handles > 0 ? size : 0;
    if (live_bytes_ - file.counted_bytes + share > *capacity_) return -ENOSPC;
  }
  // Bytes past the old end become zeros: their blocks differ from whatever the durable copy
  // holds there (a shrink needs nothing: fsync cuts the durable copy to the live size).
  mark_dirty(file, old_size, size);
  file.data.resize(size, '\0');
  account(file);
  return 0;
}

void Model::sync_file(Inode& file) {
  file.durable_data.resize(file.data.size(), '\0');
  for (std::uint64_t block : file.dirty_blocks) {
    std::uint64_t begin = block * kBlockSize;
    if (begin >= file.data.size()) break;  // blocks are sorted
    std::uint64_t length = std::min<std::uint64_t>(kBlockSize, file.data.size() - begin);
    std::memcpy(file.durable_data.data() + begin, file.data.data() + begin, length);
  }
  file.dirty_blocks.clear();
  snapshot_attributes(file);
  file.dirty = false;
}

int Model::getattr(Ino ino, Attr& out) {
  if (cut_) return -EIO;
  const Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  out = attr_of(*inode);
  return 0;
}

int Model::chmod(Ino ino, mode_t mode) {
  if (cut_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  inode->mode = mode & 07777;
  changed(*inode, false);
  return 0;
}

int Model::chown(Ino ino, std::optional<uid_t> uid, std::optional<gid_t> gid) {
  if (cut_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  if (uid) inode->uid = *uid;
  if (gid) inode->gid = *gid;
  changed(*inode, false);
  return 0;
}

int Model::set_times(Ino ino, std::optional<timespec> atime, std::optional<timespec> mtime) {
  if (cut_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  changed(*inode, false);
  if (atime) inode->atime = *atime;
  if (mtime) inode->mtime = *mtime;
  return 0;
}

int Model::truncate(Ino ino, std::uint64_t size) {
  if (cut_) return -EIO;
  Inode* file = find(ino);
  if (file == nullptr) return -ENOENT;
  if (file->kind == Kind::directory) return -EISDIR;
  if (file->kind != Kind::file) return -EINVAL;
  if (int error = resize(*file, size)) return error;
  changed(*file, true);
  return 0;
}

int Model::readlink(Ino ino, std::string& target) {
  if (cut_) return -EIO;
  const Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  if (inode->kind != Kind::symlink) return -EINVAL;
  target = inode->data;
  return 0;
}

int Model::open(Ino ino, int flags, Handle& handle) {
  if (cut_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  bool writes = (flags & O_ACCMODE) != O_RDONLY;
  if (inode->kind == Kind::symlink) return -ELOOP;
  if (inode->kind == Kind::directory && writes) return -EISDIR;
  if (inode->kind == Kind::file && writes && (flags & O_TRUNC)) {
    resize(*inode, 0);  // shrinking cannot fail
    changed(*inode, true);
  }
  handle = next_handle_++;
  handles_[handle] = {ino, flags};
  ++inode->handles;
  account(*inode);
  return 0;
}

void Model::release(Handle handle) {
  // Also after a cut: the kernel closes what processes held.
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  Inode& inode = inodes_.at(it->second.ino);
  handles_.erase(it);
  --inode.handles;
  account(inode);
  collect_garbage_if_due();
}

int Model::read(Handle handle, std::uint64_t offset, std::size_t size, std::string& out) {
  if (cut_) return -EIO;
  auto it = handles_.find(handle);
  if (it == handles_.end()) return -EBADF;
  if ((it->second.flags & O_ACCMODE) == O_WRONLY) return -EBADF;
  const Inode& file = inodes_.at(it->second.ino);
  if (file.kind != Kind::file) return -EISDIR;
  out.clear();
  if (offset < file.data.size()) out.assign(file.data, offset, size);
  return static_cast<int>(out.size());
}

int Model::write(Handle handle, std::uint64_t offset, std::string_view data) {
  if (cut_) return -EIO;
  auto it = handles_.find(handle);
  if (it == handles_.end()) return -EBADF;
  if ((it->second.flags & O_ACCMODE) == O_RDONLY) return -EBADF;
  Inode& file = inodes_.at(it->second.ino);
  if (file.kind != Kind::file) return -EISDIR;
  if (data.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return -EINVAL;
  if (data.empty()) return 0;
  if (offset > kMaxFileSize || data.size() > kMaxFileSize - offset) return -EFBIG;
  std::uint64_t end = offset + data.size();
  if (end > file.data.size()) {
    if (int error = resize(file, end)) return error;
  }
  std::memcpy(file.data.data() + offset, data.data(), data.size());
  mark_dirty(file, offset, end);
  changed(file, true);
  // O_SYNC includes O_DSYNC's bit. The whole file is synced, which a real one may also do.
  if (it->second.flags & O_DSYNC) {
    if (fail_fsync_) return -EIO;
    sync_file(file);
  }
  return static_cast<int>(data.size());
}

int Model::fallocate(Ino ino, int mode, std::uint64_t offset, std::uint64_t length) {
  if (cut_) return -EIO;
  Inode* file = find(ino);
  if (file == nullptr) return -ENOENT;
  if (file->kind == Kind::directory) return -EISDIR;
  if (file->kind != Kind::file) return -ENODEV;
  if (length == 0) return -EINVAL;
  if (offset > kMaxFileSize || length > kMaxFileSize - offset) return -EFBIG;
  const std::uint64_t end = offset + length;
  const bool keep_size = mode & FALLOC_FL_KEEP_SIZE;
  const int operation = mode & ~FALLOC_FL_KEEP_SIZE;
  if (operation != 0 && operation != FALLOC_FL_PUNCH_HOLE && operation != FALLOC_FL_ZERO_RANGE) return -EOPNOTSUPP;
  if (operation == FALLOC_FL_PUNCH_HOLE && !keep_size) return -EINVAL;  // as fallocate(2) requires
  if (!keep_size && end > file->data.size()) {
    if (int error = resize(*file, end)) return error;
  }
  if (operation != 0) {  // punching a hole or zeroing: the range reads as zeros
    std::uint64_t stop = std::min<std::uint64_t>(end, file->data.size());
    if (offset < stop) {
      std::fill(file->data.begin() + static_cast<std::ptrdiff_t>(offset), file->data.begin() + static_cast<std::ptrdiff_t>(stop), '\0');
      mark_dirty(*file, offset, stop);
    }
  }
  changed(*file, true);
  return 0;
}

int Model::fsync(Ino ino) {
  if (cut_ || fail_fsync_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  if (inode->kind == Kind::directory) return fsyncdir(ino);
  if (inode->kind == Kind::file) sync_file(*inode);
  return 0;
}

void Model::remember(Ino ino) {
  if (Inode* inode = find(ino)) ++inode->kernel_refs;
}

void Model::forget(Ino ino, std::uint64_t count) {
  Inode* inode = find(ino);
  if (inode == nullptr) return;
  inode->kernel_refs -= std::min(count, inode->kernel_refs);
  collect_garbage_if_due();
}

void Model::set_capacity(std::optional<std::uint64_t> bytes) { capacity_ = bytes; }

void Model::set_fail_fsync(bool on) { fail_fsync_ = on; }

}  // namespace crashfs
