// crashfs's FUSE side: libfuse's low-level operations over the model. The low-level API names
// files by inode, so a file unlinked while open stays fully usable (read, write, fstat, fchmod,
// ftruncate, fsync) for as long as a process holds it, as on a real filesystem.
#pragma once

#include <mutex>

#include "crashfs_model.h"

struct fuse_lowlevel_ops;

namespace crashfs {

// The state the FUSE loop and the control thread share: every use of `model` holds `mutex`.
struct Filesystem {
  explicit Filesystem(const Image& image) : model(image) {}
  std::mutex mutex;
  Model model;
};

// The operations, for fuse_session_new with a Filesystem* as user data. Attribute and entry
// timeouts are 0 and files are opened with direct_io, so that every call reaches crashfs: the
// kernel caches nothing a cut should take away, and serves nothing after it.
const fuse_lowlevel_ops& fuse_operations();

}  // namespace crashfs
