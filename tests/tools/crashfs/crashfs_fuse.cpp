#define FUSE_USE_VERSION 35
#include "crashfs_fuse.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <cerrno>
#include <ctime>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace crashfs {

namespace {

// An open directory: its entries as of the opendir (or the last rewind), so that offsets stay
// meaningful while entries come and go.
struct DirHandle {
  Handle handle = 0;
  std::vector<DirEntry> entries;
};

Filesystem& filesystem(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

// Runs `body` under the model's lock. Out of memory is ENOMEM for the caller, not a crash.
template <typename Body>
void serve(fuse_req_t req, Body body) {
  Filesystem& fs = filesystem(req);
  try {
    std::lock_guard lock(fs.mutex);
    body(fs.model);
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  } catch (const std::exception& error) {
    std::cerr << "crashfs: internal error: " << error.what() << '\n';
    fuse_reply_err(req, EIO);
  }
}

void reply_error(fuse_req_t req, int result) { fuse_reply_err(req, result < 0 ? -result : 0); }

Owner owner_of(fuse_req_t req) {
  const fuse_ctx* context = fuse_req_ctx(req);
  return {context->uid, context->gid};
}

fuse_entry_param entry_of(const Attr& attr) {
  fuse_entry_param entry{};
  entry.ino = attr.ino;
  entry.generation = 1;  // inode numbers are never reused within a mount
  entry.attr = attr.to_stat();
  entry.attr_timeout = 0;
  entry.entry_timeout = 0;
  return entry;
}

// Every entry reply gives the kernel one reference to the inode (FUSE's lookup count).
void reply_entry(fuse_req_t req, Model& model, int result, const Attr& attr) {
  if (result != 0) return reply_error(req, result);
  fuse_entry_param entry = entry_of(attr);
  model.remember(attr.ino);
  if (fuse_reply_entry(req, &entry) != 0) model.forget(attr.ino, 1);  // interrupted: the kernel never saw it
}

void op_init(void*, fuse_conn_info* conn) {
  // Every write must reach crashfs when it is made: no writeback cache. Suid and sgid bits are
  // cleared by the kernel (through setattr), and we do not implement readdirplus.
  conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_READDIRPLUS);
  // O_TRUNC arrives with open, not as a separate setattr.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve(req, [&](Model& model) {
    Attr attr;
    reply_entry(req, model, model.lookup(parent, name, attr), attr);
  });
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t count) {
  Filesystem& fs = filesystem(req);
  {
    std::lock_guard lock(fs.mutex);
    fs.model.forget(ino, count);
  }
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  Filesystem& fs = filesystem(req);
  {
    std::lock_guard lock(fs.mutex);
    for (size_t i = 0; i < count; ++i) fs.model.forget(forgets[i].ino, forgets[i].nlookup);
  }
  fuse_reply_none(req);
}

void reply_attr(fuse_req_t req, Model& model, fuse_ino_t ino) {
  Attr attr;
  if (int result = model.getattr(ino, attr)) return reply_error(req, result);
  struct stat st = attr.to_stat();
  fuse_reply_attr(req, &st, 0);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  serve(req, [&](Model& model) { reply_attr(req, model, ino); });
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  serve(req, [&](Model& model) {
    int result = 0;
    if (to_set & FUSE_SET_ATTR_MODE) result = model.chmod(ino, attr->st_mode);
    if (result == 0 && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
      result = model.chown(ino, to_set & FUSE_SET_ATTR_UID ? std::optional<uid_t>(attr->st_uid) : std::nullopt,
                           to_set & FUSE_SET_ATTR_GID ? std::optional<gid_t>(attr->st_gid) : std::nullopt);
    }
    if (result == 0 && (to_set & FUSE_SET_ATTR_SIZE)) result = model.truncate(ino, static_cast<std::uint64_t>(attr->st_size));
    if (result == 0 && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
      std::optional<timespec> atime, mtime;
      if (to_set & FUSE_SET_ATTR_ATIME) atime = to_set & FUSE_SET_ATTR_ATIME_NOW ? wall_clock() : attr->st_atim;
      if (to_set & FUSE_SET_ATTR_MTIME) mtime = to_set & FUSE_SET_ATTR_MTIME_NOW ? wall_clock() : attr->st_mtim;
      result = model.set_times(ino, atime, mtime);
    }
    if (result != 0) return reply_error(req, result);
    reply_attr(req, model, ino);
  });
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  serve(req, [&](Model& model) {
    std::string target;
    if (int result = model.readlink(ino, target)) return reply_error(req, result);
    fuse_reply_readlink(req, target.c_str());
  });
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t) {
  serve(req, [&](Model& model) {
    Attr attr;
    reply_entry(req, model, model.mknod(parent, name, mode, owner_of(req), attr), attr);
  });
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  serve(req, [&](Model& model) {
    Attr attr;
    reply_entry(req, model, model.mkdir(parent, name, mode, owner_of(req), attr), attr);
  });
}

void op_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  serve(req, [&](Model& model) {
    Attr attr;
    reply_entry(req, model, model.symlink(parent, name, target, owner_of(req), attr), attr);
  });
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char* name) {
  serve(req, [&](Model& model) {
    Attr attr;
    reply_entry(req, model, model.link(ino, parent, name, attr), attr);
  });
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve(req, [&](Model& model) { reply_error(req, model.unlink(parent, name)); });
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve(req, [&](Model& model) { reply_error(req, model.rmdir(parent, name)); });
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent, const char* new_name,
               unsigned flags) {
  serve(req, [&](Model& model) { reply_error(req, model.rename(parent, name, new_parent, new_name, flags)); });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    Handle handle = 0;
    if (int result = model.open(ino, fi->flags, handle)) return reply_error(req, result);
    fi->fh = handle;
    fi->direct_io = 1;
    if (fuse_reply_open(req, fi) != 0) model.release(handle);
  });
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    Attr attr;
    Handle handle = 0;
    if (int result = model.create(parent, name, mode, owner_of(req), fi->flags, attr, handle))
      return reply_error(req, result);
    fi->fh = handle;
    fi->direct_io = 1;
    fuse_entry_param entry = entry_of(attr);
    model.remember(attr.ino);
    if (fuse_reply_create(req, &entry, fi) != 0) {
      model.forget(attr.ino, 1);
      model.release(handle);
    }
  });
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    std::string data;
    int result = model.read(fi->fh, static_cast<std::uint64_t>(offset), size, data);
    if (result < 0) return reply_error(req, result);
    fuse_reply_buf(req, data.data(), data.size());
  });
}

void op_write(fuse_req_t req, fuse_ino_t, const char* buffer, size_t size, off_t offset, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    int result = model.write(fi->fh, static_cast<std::uint64_t>(offset), std::string_view(buffer, size));
    if (result < 0) return reply_error(req, result);
    fuse_reply_write(req, static_cast<size_t>(result));
  });
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  // Nothing is buffered; after a cut, close(2) reports the dead disk as it would.
  serve(req, [&](Model& model) { fuse_reply_err(req, model.is_cut() ? EIO : 0); });
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    model.release(fi->fh);
    fuse_reply_err(req, 0);
  });
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  // fdatasync makes as much durable as fsync: the size and the data, and the attributes too.
  serve(req, [&](Model& model) { reply_error(req, model.fsync(ino)); });
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    auto dir = std::make_unique<DirHandle>();
    if (int result = model.open(ino, O_RDONLY | O_DIRECTORY, dir->handle)) return reply_error(req, result);
    if (int result = model.list(ino, dir->entries)) {
      model.release(dir->handle);
      return reply_error(req, result);
    }
    fi->fh = reinterpret_cast<std::uint64_t>(dir.get());
    if (fuse_reply_open(req, fi) != 0) {
      model.release(dir->handle);
      return;
    }
    dir.release();  // now owned by the kernel's open directory, freed in releasedir
  });
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    auto* dir = reinterpret_cast<DirHandle*>(fi->fh);
    if (model.is_cut()) return reply_error(req, -EIO);
    if (offset == 0) {  // opendir or rewinddir: the entries as they are now
      if (int result = model.list(ino, dir->entries)) return reply_error(req, result);
    }
    std::vector<char> buffer(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(offset); i < dir->entries.size(); ++i) {
      const DirEntry& entry = dir->entries[i];
      struct stat st{};
      st.st_ino = entry.ino;
      st.st_mode = entry.kind == Kind::directory ? S_IFDIR : entry.kind == Kind::symlink ? S_IFLNK : S_IFREG;
      size_t needed = fuse_add_direntry(req, buffer.data() + used, size - used, entry.name.c_str(), &st,
                                        static_cast<off_t>(i + 1));
      if (needed > size - used) break;
      used += needed;
    }
    fuse_reply_buf(req, buffer.data(), used);
  });
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  serve(req, [&](Model& model) {
    std::unique_ptr<DirHandle> dir(reinterpret_cast<DirHandle*>(fi->fh));
    model.release(dir->handle);
    fuse_reply_err(req, 0);
  });
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  serve(req, [&](Model& model) { reply_error(req, model.fsyncdir(ino)); });
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  serve(req, [&](Model& model) {
    struct statvfs st;
    if (int result = model.statfs(st)) return reply_error(req, result);
    fuse_reply_statfs(req, &st);
  });
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fuse_file_info*) {
  serve(req, [&](Model& model) {
    if (offset < 0 || length <= 0) return reply_error(req, -EINVAL);
    reply_error(req, model.fallocate(ino, mode, static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length)));
  });
}

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.readlink = op_readlink;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.symlink = op_symlink;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.open = op_open;
  ops.read = op_read;
  ops.write = op_write;
  ops.flush = op_flush;
  ops.release = op_release;
  ops.fsync = op_fsync;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.releasedir = op_releasedir;
  ops.fsyncdir = op_fsyncdir;
  ops.statfs = op_statfs;
  ops.create = op_create;
  ops.fallocate = op_fallocate;
  // Not implemented, so the kernel answers for us: flock and POSIX locks are local to this
  // mount (what HDF5's file locking needs); xattrs are EOPNOTSUPP; copy_file_range and lseek's
  // SEEK_DATA/SEEK_HOLE fall back to their generic versions, through read and write.
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& fuse_operations() {
  static const fuse_lowlevel_ops ops = make_operations();
  return ops;
}

}  // namespace crashfs
