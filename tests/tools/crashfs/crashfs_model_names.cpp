// The operations of crashfs's model on names: directory entries change in the live state and
// are recorded, in order, as pending metadata operations until fsyncdir makes them durable.
#include <fcntl.h>
#include <linux/fs.h>

#include <algorithm>
#include <cerrno>

#include "crashfs_model.h"

namespace crashfs {

namespace {

int check_name(std::string_view name) {
  if (name.empty() || name.find('/') != std::string_view::npos) return -EINVAL;
  if (name == "." || name == "..") return -EEXIST;
  if (name.size() > kNameMax) return -ENAMETOOLONG;
  return 0;
}

}  // namespace

void Model::set_entry(Inode& dir, const std::string& name, std::optional<Ino> target, MetadataOp& op) {
  auto it = dir.entries.find(name);
  if (it != dir.entries.end()) {
    Inode& old = inodes_.at(it->second);
    --old.names;
    if (old.kind == Kind::directory) {
      old.parent = 0;
      --dir.subdirs;
    }
    dir.entries.erase(it);
    account(old);
  }
  if (target) {
    Inode& inode = inodes_.at(*target);
    ++inode.names;
    if (inode.kind == Kind::directory) {
      inode.parent = dir.ino;
      ++dir.subdirs;
    }
    dir.entries[name] = *target;
    account(inode);
  }
  op.push_back({dir.ino, name, target});
}

void Model::record(MetadataOp op) {
  if (!op.empty()) pending_.push_back(std::move(op));
}

int Model::lookup(Ino parent, std::string_view name, Attr& out) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (name.size() > kNameMax) return -ENAMETOOLONG;
  Ino ino = 0;
  if (name == ".") {
    ino = dir->ino;
  } else if (name == "..") {
    ino = dir->parent == 0 ? dir->ino : dir->parent;
  } else {
    auto it = dir->entries.find(name);
    if (it == dir->entries.end()) return -ENOENT;
    ino = it->second;
  }
  out = attr_of(inodes_.at(ino));
  return 0;
}

int Model::add_name(Ino parent, std::string_view name, Inode& inode, Attr& out) {
  Inode& dir = inodes_.at(parent);
  MetadataOp op;
  set_entry(dir, std::string(name), inode.ino, op);
  record(std::move(op));
  changed(dir, true);
  out = attr_of(inode);
  return 0;
}

int Model::create(Ino parent, std::string_view name, mode_t mode, Owner owner, int flags, Attr& out, Handle& handle) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (int error = check_name(name)) return error;
  if (dir->parent == 0) return -ENOENT;  // removed while some process was in it
  auto existing = dir->entries.find(name);
  if (existing != dir->entries.end()) {
    if (flags & O_EXCL) return -EEXIST;
    Ino ino = existing->second;
    if (inodes_.at(ino).kind == Kind::directory) return -EISDIR;
    if (int error = open(ino, flags, handle)) return error;
    out = attr_of(inodes_.at(ino));
    return 0;
  }
  Inode& file = new_inode(Kind::file, mode, owner);
  add_name(parent, name, file, out);
  return open(file.ino, flags & ~O_TRUNC, handle);
}

int Model::mknod(Ino parent, std::string_view name, mode_t mode, Owner owner, Attr& out) {
  if (cut_) return -EIO;
  if (!S_ISREG(mode)) return -EPERM;  // no devices, fifos or sockets
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (int error = check_name(name)) return error;
  if (dir->parent == 0) return -ENOENT;
  if (dir->entries.contains(name)) return -EEXIST;
  return add_name(parent, name, new_inode(Kind::file, mode, owner), out);
}

int Model::mkdir(Ino parent, std::string_view name, mode_t mode, Owner owner, Attr& out) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (int error = check_name(name)) return error;
  if (dir->parent == 0) return -ENOENT;
  if (dir->entries.contains(name)) return -EEXIST;
  return add_name(parent, name, new_inode(Kind::directory, mode, owner), out);
}

int Model::symlink(Ino parent, std::string_view name, std::string_view target, Owner owner, Attr& out) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (int error = check_name(name)) return error;
  if (dir->parent == 0) return -ENOENT;
  if (dir->entries.contains(name)) return -EEXIST;
  Inode& link = new_inode(Kind::symlink, 0777, owner);
  link.data = target;  // never changes: durable with the link's name
  return add_name(parent, name, link, out);
}

int Model::link(Ino ino, Ino parent, std::string_view name, Attr& out) {
  if (cut_) return -EIO;
  Inode* inode = find(ino);
  if (inode == nullptr) return -ENOENT;
  if (inode->kind == Kind::directory) return -EPERM;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (int error = check_name(name)) return error;
  if (dir->parent == 0) return -ENOENT;
  if (dir->entries.contains(name)) return -EEXIST;
  inode->ctime = wall_clock();
  return add_name(parent, name, *inode, out);
}

int Model::unlink(Ino parent, std::string_view name) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  auto it = dir->entries.find(name);
  if (it == dir->entries.end()) return -ENOENT;
  Inode& inode = inodes_.at(it->second);
  if (inode.kind == Kind::directory) return -EISDIR;
  inode.ctime = wall_clock();
  MetadataOp op;
  set_entry(*dir, std::string(name), std::nullopt, op);
  record(std::move(op));
  changed(*dir, true);
  collect_garbage_if_due();
  return 0;
}

int Model::rmdir(Ino parent, std::string_view name) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(parent, dir)) return error;
  if (name == ".") return -EINVAL;
  if (name == "..") return -ENOTEMPTY;
  auto it = dir->entries.find(name);
  if (it == dir->entries.end()) return -ENOENT;
  const Inode& victim = inodes_.at(it->second);
  if (victim.kind != Kind::directory) return -ENOTDIR;
  if (!victim.entries.empty()) return -ENOTEMPTY;
  MetadataOp op;
  set_entry(*dir, std::string(name), std::nullopt, op);
  record(std::move(op));
  changed(*dir, true);
  collect_garbage_if_due();
  return 0;
}

int Model::rename(Ino parent, std::string_view name, Ino new_parent, std::string_view new_name, unsigned flags) {
  if (cut_) return -EIO;
  if (flags & ~unsigned{RENAME_NOREPLACE}) return -EINVAL;  // no RENAME_EXCHANGE, no RENAME_WHITEOUT
  Inode* from;
  Inode* to;
  if (int error = find_directory(parent, from)) return error;
  if (int error = find_directory(new_parent, to)) return error;
  if (int error = check_name(new_name)) return error;
  auto source = from->entries.find(name);
  if (source == from->entries.end()) return -ENOENT;
  if (to->parent == 0) return -ENOENT;
  Inode& moved = inodes_.at(source->second);
  if (moved.kind == Kind::directory) {
    // Not into itself or below itself.
    for (Ino ancestor = to->ino;; ancestor = inodes_.at(ancestor).parent) {
      if (ancestor == moved.ino) return -EINVAL;
      if (ancestor == kRootIno || ancestor == 0) break;
    }
  }
  auto target = to->entries.find(new_name);
  if (target != to->entries.end()) {
    if (flags & RENAME_NOREPLACE) return -EEXIST;
    if (target->second == moved.ino) return 0;  // two names of one file: nothing to do
    const Inode& replaced = inodes_.at(target->second);
    if (moved.kind == Kind::directory) {
      if (replaced.kind != Kind::directory) return -ENOTDIR;
      if (!replaced.entries.empty()) return -ENOTEMPTY;
    } else if (replaced.kind == Kind::directory) {
      return -EISDIR;
    }
  }
  MetadataOp op;  // one operation: a seeded cut keeps both changes or neither
  set_entry(*from, std::string(name), std::nullopt, op);
  set_entry(*to, std::string(new_name), moved.ino, op);
  record(std::move(op));
  changed(*from, true);
  if (to != from) changed(*to, true);
  moved.ctime = wall_clock();
  collect_garbage_if_due();
  return 0;
}

int Model::fsyncdir(Ino ino) {
  if (cut_ || fail_fsync_) return -EIO;
  Inode* dir;
  if (int error = find_directory(ino, dir)) return error;
  dir->durable_entries = dir->entries;
  // What is durable now no longer waits in the global order.
  for (MetadataOp& op : pending_) std::erase_if(op, [ino](const EntryChange& change) { return change.dir == ino; });
  std::erase_if(pending_, [](const MetadataOp& op) { return op.empty(); });
  snapshot_attributes(*dir);
  dir->dirty = false;
  collect_garbage_if_due();
  return 0;
}

int Model::list(Ino ino, std::vector<DirEntry>& out) {
  if (cut_) return -EIO;
  Inode* dir;
  if (int error = find_directory(ino, dir)) return error;
  out.clear();
  out.push_back({".", dir->ino, Kind::directory});
  out.push_back({"..", dir->parent == 0 ? dir->ino : dir->parent, Kind::directory});
  for (const auto& [name, child] : dir->entries) out.push_back({name, child, inodes_.at(child).kind});
  return 0;
}

int Model::resolve(std::string_view path, Ino& out) {
  Ino ino = kRootIno;
  while (!path.empty()) {
    std::size_t slash = path.find('/');
    std::string_view name = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (name.empty()) continue;
    Attr attr;
    if (int error = lookup(ino, name, attr)) return error;
    ino = attr.ino;
  }
  out = ino;
  return 0;
}

}  // namespace crashfs
