// What crashfs's model leaves on the disk (cuts, clean shutdowns), what it reports (statfs,
// stats), and how it frees the inodes nothing can reach any more.
#include <algorithm>
#include <random>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "crashfs_model.h"

namespace crashfs {

namespace {

// What statfs reports as the size of a filesystem without a capacity.
constexpr std::uint64_t kNominalSize = std::uint64_t{1} << 40;
constexpr std::uint64_t kNominalInodes = std::uint64_t{1} << 24;

}  // namespace

std::string Stats::to_string() const {
  std::ostringstream text;
  text << "files=" << files << " directories=" << directories << " symlinks=" << symlinks
       << " dirty_files=" << dirty_files << " pending_metadata_ops=" << pending_metadata_ops
       << " open_handles=" << open_handles << " inodes=" << inodes << " live_bytes=" << live_bytes
       << " durable_bytes=" << durable_bytes
       << " capacity=" << (capacity ? std::to_string(*capacity) : std::string("none")) << " cut=" << (cut ? 1 : 0)
       << " fail_fsync=" << (fail_fsync ? 1 : 0);
  return text.str();
}

Image Model::build_image(const EntriesOf& entries_of, const ContentsOf& contents_of, bool live_attributes) const {
  Image image;
  std::unordered_map<Ino, std::size_t> index_of;
  auto add = [&](const Inode& inode) {
    ImageNode node;
    if (live_attributes) {
      node.mode = inode.mode;
      node.uid = inode.uid;
      node.gid = inode.gid;
      node.atime = inode.atime;
      node.mtime = inode.mtime;
    } else {
      node = inode.durable_attributes;
    }
    node.kind = inode.kind;
    if (inode.kind == Kind::file) node.data = contents_of(inode);
    if (inode.kind == Kind::symlink) node.data = inode.data;
    image.nodes.push_back(std::move(node));
    index_of[inode.ino] = image.nodes.size() - 1;
    return image.nodes.size() - 1;
  };
  add(inodes_.at(kRootIno));
  std::vector<Ino> directories{kRootIno};
  while (!directories.empty()) {
    const Inode& dir = inodes_.at(directories.back());
    directories.pop_back();
    const std::size_t dir_index = index_of.at(dir.ino);
    for (const auto& [name, child_ino] : entries_of(dir)) {
      const Inode& child = inodes_.at(child_ino);
      auto known = index_of.find(child_ino);
      if (known != index_of.end()) {
        // A file reached twice is a hard link. A directory can be reached twice (even from
        // below itself) only through renames made durable in one directory and not the other;
        // it keeps its first name, as a real directory has one.
        if (child.kind != Kind::directory) image.nodes[dir_index].entries[name] = known->second;
        continue;
      }
      std::size_t child_index = add(child);
      image.nodes[dir_index].entries[name] = child_index;
      if (child.kind == Kind::directory) directories.push_back(child_ino);
    }
  }
  return image;
}

std::vector<Ino> Model::reachable(const EntriesOf& entries_of) const {
  std::unordered_set<Ino> seen{kRootIno};
  std::vector<Ino> directories{kRootIno};
  while (!directories.empty()) {
    const Inode& dir = inodes_.at(directories.back());
    directories.pop_back();
    for (const auto& [name, child] : entries_of(dir)) {
      if (seen.insert(child).second && inodes_.at(child).kind == Kind::directory) directories.push_back(child);
    }
  }
  std::vector<Ino> sorted(seen.begin(), seen.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

Image Model::cut(std::optional<std::uint64_t> seed) {
  if (cut_) throw std::logic_error("crashfs: already cut");
  cut_ = true;
  auto durable_entries = [](const Inode& dir) -> const std::map<std::string, Ino, std::less<>>& {
    return dir.durable_entries;
  };
  if (!seed) return build_image(durable_entries, [](const Inode& file) { return file.durable_data; }, false);

  // Seeded: the same operations and seed give the same draws, in this order: how many of the
  // pending metadata operations survive (a prefix: ext4 commits them in order), then for each
  // file of the resulting tree with unsynced changes, in inode order, its size (durable or
  // live) and, block by block, whether its pending block reached the disk. (Only files of the
  // tree: which unreachable inodes are still in memory depends on when the kernel forgets them.)
  std::mt19937_64 random(*seed);
  const std::size_t kept_ops = random() % (pending_.size() + 1);
  std::map<Ino, std::map<std::string, Ino, std::less<>>> entries_after;
  for (std::size_t i = 0; i < kept_ops; ++i) {
    for (const EntryChange& change : pending_[i]) {
      auto& entries = entries_after.try_emplace(change.dir, inodes_.at(change.dir).durable_entries).first->second;
      if (change.target) {
        entries[change.name] = *change.target;
      } else {
        entries.erase(change.name);
      }
    }
  }
  auto entries_of = [&](const Inode& dir) -> const std::map<std::string, Ino, std::less<>>& {
    auto it = entries_after.find(dir.ino);
    return it == entries_after.end() ? dir.durable_entries : it->second;
  };
  std::unordered_map<Ino, std::string> contents_after;
  for (Ino ino : reachable(entries_of)) {
    const Inode& inode = inodes_.at(ino);
    if (inode.kind != Kind::file || (inode.dirty_blocks.empty() && inode.data.size() == inode.durable_data.size())) continue;
    std::string contents = inode.durable_data;
    contents.resize(random() % 2 ? inode.data.size() : inode.durable_data.size(), '\0');
    for (std::uint64_t block : inode.dirty_blocks) {
      if (random() % 2 == 0) continue;
      std::uint64_t begin = block * kBlockSize;
      std::uint64_t end = std::min<std::uint64_t>({begin + kBlockSize, contents.size(), inode.data.size()});
      if (begin < end) std::copy(inode.data.begin() + begin, inode.data.begin() + end, contents.begin() + begin);
    }
    contents_after.emplace(ino, std::move(contents));
  }
  return build_image(
      entries_of,
      [&](const Inode& file) {
        auto it = contents_after.find(file.ino);
        return it == contents_after.end() ? file.durable_data : it->second;
      },
      false);
}

Image Model::live_image() const {
  return build_image([](const Inode& dir) -> const std::map<std::string, Ino, std::less<>>& { return dir.entries; },
                     [](const Inode& file) { return file.data; }, true);
}

int Model::statfs(struct statvfs& out) {
  if (cut_) return -EIO;
  out = {};
  const std::uint64_t total = capacity_.value_or(kNominalSize);
  const std::uint64_t free = total > live_bytes_ ? total - live_bytes_ : 0;
  out.f_bsize = kBlockSize;
  out.f_frsize = kBlockSize;
  out.f_blocks = total / kBlockSize;
  out.f_bfree = free / kBlockSize;
  out.f_bavail = free / kBlockSize;
  out.f_files = kNominalInodes;
  out.f_ffree = kNominalInodes > inodes_.size() ? kNominalInodes - inodes_.size() : 0;
  out.f_favail = out.f_ffree;
  out.f_namemax = kNameMax;
  return 0;
}

Stats Model::stats() const {
  Stats stats;
  for (const auto& [ino, inode] : inodes_) {
    bool live = inode.kind == Kind::directory ? inode.parent != 0 : inode.names > 0 || inode.handles > 0;
    if (!live) continue;
    switch (inode.kind) {
      case Kind::file:
        ++stats.files;
        if (inode.dirty) ++stats.dirty_files;
        break;
      case Kind::directory: ++stats.directories; break;
      case Kind::symlink: ++stats.symlinks; break;
    }
  }
  // The files a cut now would keep: those reachable through durable entries.
  auto durable_entries = [](const Inode& dir) -> const std::map<std::string, Ino, std::less<>>& {
    return dir.durable_entries;
  };
  for (Ino ino : reachable(durable_entries)) {
    const Inode& inode = inodes_.at(ino);
    if (inode.kind == Kind::file) stats.durable_bytes += inode.durable_data.size();
  }
  stats.pending_metadata_ops = pending_.size();
  stats.open_handles = handles_.size();
  stats.inodes = inodes_.size();
  stats.live_bytes = live_bytes_;
  stats.capacity = capacity_;
  stats.cut = cut_;
  stats.fail_fsync = fail_fsync_;
  return stats;
}

void Model::collect_garbage_if_due() {
  // Amortised: a full mark and sweep once the inode count has doubled since the last one.
  if (inodes_.size() < 2 * inodes_after_collect_ + 64) return;
  // Kept: whatever a cut (durable or seeded), a clean shutdown, a process or the kernel can
  // still reach.
  std::vector<Ino> roots{kRootIno};
  for (const auto& [handle, open_file] : handles_) roots.push_back(open_file.ino);
  for (const auto& [ino, inode] : inodes_)
    if (inode.kernel_refs > 0) roots.push_back(ino);
  for (const MetadataOp& op : pending_) {
    for (const EntryChange& change : op) {
      roots.push_back(change.dir);
      if (change.target) roots.push_back(*change.target);
    }
  }
  std::unordered_set<Ino> reached;
  while (!roots.empty()) {
    Ino ino = roots.back();
    roots.pop_back();
    if (!reached.insert(ino).second) continue;
    const Inode& inode = inodes_.at(ino);
    for (const auto& [name, child] : inode.entries) roots.push_back(child);
    for (const auto& [name, child] : inode.durable_entries) roots.push_back(child);
  }
  std::erase_if(inodes_, [&](const auto& item) { return !reached.contains(item.first); });
  inodes_after_collect_ = inodes_.size();
}

}  // namespace crashfs
