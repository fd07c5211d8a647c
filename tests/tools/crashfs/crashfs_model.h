// crashfs's in-memory filesystem: what processes see (the LIVE state) and what a power cut
// would leave (the DURABLE state), with no FUSE in it so that it can be unit-tested.
//
// Every regular file has live and durable contents; every directory live and durable entries.
// Operations change the live state only. fsync(file) makes its contents, size and attributes
// durable (not its names); fsyncdir(dir) makes the directory's entries and attributes durable;
// a write through a handle opened with O_SYNC or O_DSYNC is an fsync of its file. Entry changes
// not yet durable are also kept in one global list, in the order they were made, for seeded
// cuts (docs/durability.md, "crashfs").
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "crashfs_image.h"

namespace crashfs {

using Ino = std::uint64_t;
using Handle = std::uint64_t;
inline constexpr Ino kRootIno = 1;  // FUSE_ROOT_ID: inode numbers are FUSE node ids
inline constexpr std::uint64_t kBlockSize = 4096;
inline constexpr std::size_t kNameMax = 255;

// The wall clock, for timestamps.
timespec wall_clock();

struct Attr {
  Ino ino = 0;
  Kind kind = Kind::file;
  mode_t mode = 0;  // permission bits
  uid_t uid = 0;
  gid_t gid = 0;
  nlink_t nlink = 0;
  std::uint64_t size = 0;
  timespec atime{};
  timespec mtime{};
  timespec ctime{};

  struct stat to_stat() const;
};

struct DirEntry {
  std::string name;
  Ino ino = 0;
  Kind kind = Kind::file;
};

struct Owner {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Stats {
  std::uint64_t files = 0;  // live regular files, unlinked ones still open included
  std::uint64_t directories = 0;
  std::uint64_t symlinks = 0;
  std::uint64_t dirty_files = 0;  // live files changed since their last fsync
  std::uint64_t pending_metadata_ops = 0;
  std::uint64_t open_handles = 0;
  std::uint64_t inodes = 0;  // held in memory, durable-only and pending ones included
  std::uint64_t live_bytes = 0;
  std::uint64_t durable_bytes = 0;  // of the files a cut now would keep
  std::optional<std::uint64_t> capacity;
  bool cut = false;
  bool fail_fsync = false;

  // "files=N directories=N ... capacity=N|none cut=0|1 fail_fsync=0|1"
  std::string to_string() const;
};

class Model {
 public:
  // Live and durable states both equal to `image` (what a mount finds on the disk).
  explicit Model(const Image& image);

  // Every operation returns 0 (read and write: a byte count) or a negated errno, and -EIO
  // once cut() has been called: the disk is dead.
  int lookup(Ino parent, std::string_view name, Attr& out);
  int getattr(Ino ino, Attr& out);
  int chmod(Ino ino, mode_t mode);
  int chown(Ino ino, std::optional<uid_t> uid, std::optional<gid_t> gid);
  int set_times(Ino ino, std::optional<timespec> atime, std::optional<timespec> mtime);
  int truncate(Ino ino, std::uint64_t size);
  int readlink(Ino ino, std::string& target);

  // A regular file; with O_EXCL in `flags` an existing name is EEXIST, otherwise it is opened.
  int create(Ino parent, std::string_view name, mode_t mode, Owner owner, int flags, Attr& out, Handle& handle);
  int mknod(Ino parent, std::string_view name, mode_t mode, Owner owner, Attr& out);  // S_IFREG only
  int mkdir(Ino parent, std::string_view name, mode_t mode, Owner owner, Attr& out);
  int symlink(Ino parent, std::string_view name, std::string_view target, Owner owner, Attr& out);
  int link(Ino ino, Ino parent, std::string_view name, Attr& out);
  int unlink(Ino parent, std::string_view name);
  int rmdir(Ino parent, std::string_view name);
  // flags: 0 or RENAME_NOREPLACE; RENAME_EXCHANGE and RENAME_WHITEOUT are EINVAL.
  int rename(Ino parent, std::string_view name, Ino new_parent, std::string_view new_name, unsigned flags);

  // Files and directories; an open handle keeps its inode usable after its last name is gone.
  // O_TRUNC truncates; O_SYNC/O_DSYNC make each write through the handle an fsync.
  int open(Ino ino, int flags, Handle& handle);
  void release(Handle handle);
  int read(Handle handle, std::uint64_t offset, std::size_t size, std::string& out);
  int write(Handle handle, std::uint64_t offset, std::string_view data);
  int fallocate(Ino ino, int mode, std::uint64_t offset, std::uint64_t length);
  int fsync(Ino ino);
  int fsyncdir(Ino ino);
  int list(Ino dir, std::vector<DirEntry>& out);  // ".", ".." and the live entries
  int statfs(struct statvfs& out);

  // The kernel's references (FUSE lookup counts): a known inode stays until forgotten.
  void remember(Ino ino);
  void forget(Ino ino, std::uint64_t count);

  // Past `bytes` of live file data (none: no limit), writes and truncates fail with ENOSPC.
  void set_capacity(std::optional<std::uint64_t> bytes);
  // While on, fsync and fsyncdir fail with EIO and make nothing durable.
  void set_fail_fsync(bool on);

  // The power cut: what survives, and from now on every operation fails with EIO. Without a
  // seed only the durable state; with one, also a seeded choice among the pending changes.
  Image cut(std::optional<std::uint64_t> seed = std::nullopt);
  // The live state, as a clean shutdown (everything synced) leaves it.
  Image live_image() const;
  Stats stats() const;
  bool is_cut() const { return cut_; }

  // For tests: the inode at "/a/b" through live entries.
  int resolve(std::string_view path, Ino& out);

 private:
  struct Inode {
    Ino ino = 0;
    Kind kind = Kind::file;
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    timespec atime{};
    timespec mtime{};
    timespec ctime{};
    std::string data;          // a file's live contents, a symlink's target
    std::string durable_data;  // a file's durable contents
    std::set<std::uint64_t> dirty_blocks;  // blocks whose live bytes may differ from the durable ones
    bool dirty = false;                    // contents, size or attributes changed since the last sync
    ImageNode durable_attributes;          // mode, owner and times as last synced (no data, no entries)
    std::map<std::string, Ino, std::less<>> entries;          // a directory's live entries
    std::map<std::string, Ino, std::less<>> durable_entries;  // and durable ones
    Ino parent = 0;             // a directory's live parent (0 once removed)
    nlink_t names = 0;          // live entries naming it
    std::uint64_t subdirs = 0;  // a directory's live subdirectories
    std::uint64_t handles = 0;
    std::uint64_t kernel_refs = 0;
    std::uint64_t counted_bytes = 0;  // this inode's share of live_bytes_
  };
  struct EntryChange {
    Ino dir = 0;
    std::string name;
    std::optional<Ino> target;  // none: removed
  };
  using MetadataOp = std::vector<EntryChange>;  // made durable by a seeded cut all or nothing
  struct OpenFile {
    Ino ino = 0;
    int flags = 0;
  };
  // How an image gets each directory's entries and each file's contents.
  using EntriesOf = std::function<const std::map<std::string, Ino, std::less<>>&(const Inode&)>;
  using ContentsOf = std::function<std::string(const Inode&)>;

  Inode* find(Ino ino);
  const Inode* find(Ino ino) const;
  int find_directory(Ino ino, Inode*& out);
  Inode& new_inode(Kind kind, mode_t mode, Owner owner);
  int add_name(Ino parent, std::string_view name, Inode& inode, Attr& out);
  void set_entry(Inode& dir, const std::string& name, std::optional<Ino> target, MetadataOp& op);
  void record(MetadataOp op);
  int resize(Inode& file, std::uint64_t size);
  void mark_dirty(Inode& file, std::uint64_t begin, std::uint64_t end);
  void account(Inode& inode);
  void sync_file(Inode& file);
  void snapshot_attributes(Inode& inode);
  void changed(Inode& inode, bool contents);
  Attr attr_of(const Inode& inode) const;
  void collect_garbage_if_due();
  Image build_image(const EntriesOf& entries_of, const ContentsOf& contents_of, bool live_attributes) const;
  std::vector<Ino> reachable(const EntriesOf& entries_of) const;  // from the root, sorted

  std::map<Ino, Inode> inodes_;  // ordered: a seeded cut draws its choices in inode order
  std::deque<MetadataOp> pending_;
  std::unordered_map<Handle, OpenFile> handles_;
  Ino next_ino_ = kRootIno;
  Handle next_handle_ = 1;
  std::uint64_t live_bytes_ = 0;
  std::optional<std::uint64_t> capacity_;
  bool fail_fsync_ = false;
  bool cut_ = false;
  std::size_t inodes_after_collect_ = 0;
};

}  // namespace crashfs
