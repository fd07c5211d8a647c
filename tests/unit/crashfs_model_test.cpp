// crashfs's model (tests/tools/crashfs): what a power cut keeps, without FUSE.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "crashfs_image.h"
#include "crashfs_model.h"

namespace {

using crashfs::Attr;
using crashfs::Handle;
using crashfs::Image;
using crashfs::Ino;
using crashfs::kRootIno;
using crashfs::Kind;
using crashfs::Model;

constexpr crashfs::Owner kOwner{0, 0};

// An image as path -> contents ("<dir>" for directories, "-> target" for symlinks).
std::map<std::string, std::string> flatten(const Image& image) {
  std::map<std::string, std::string> out;
  std::vector<std::pair<std::size_t, std::string>> stack{{0, ""}};
  while (!stack.empty()) {
    auto [index, path] = stack.back();
    stack.pop_back();
    for (const auto& [name, child] : image.nodes.at(index).entries) {
      const crashfs::ImageNode& node = image.nodes.at(child);
      std::string child_path = path + "/" + name;
      switch (node.kind) {
        case Kind::directory:
          out[child_path] = "<dir>";
          stack.emplace_back(child, child_path);
          break;
        case Kind::file: out[child_path] = node.data; break;
        case Kind::symlink: out[child_path] = "-> " + node.data; break;
      }
    }
  }
  return out;
}

class CrashFsModelTest : public ::testing::Test {
 protected:
  Model model{crashfs::empty_image()};

  Ino make_dir(Ino parent, const std::string& name) {
    Attr attr;
    EXPECT_EQ(model.mkdir(parent, name, 0755, kOwner, attr), 0);
    return attr.ino;
  }

  // Creates (or truncates) `name` in `parent` with `data`; returns the open handle.
  Handle write_file(Ino parent, const std::string& name, const std::string& data, int flags = O_WRONLY | O_TRUNC) {
    Attr attr;
    Handle handle = 0;
    EXPECT_EQ(model.create(parent, name, 0644, kOwner, flags | O_CREAT, attr, handle), 0);
    EXPECT_EQ(model.write(handle, 0, data), static_cast<int>(data.size()));
    return handle;
  }

  Ino ino_of(const std::string& path) {
    Ino ino = 0;
    EXPECT_EQ(model.resolve(path, ino), 0) << path;
    return ino;
  }

  // A durable file: written, fsynced, and its directory fsynced.
  void durable_file(Ino parent, const std::string& name, const std::string& data) {
    Handle handle = write_file(parent, name, data);
    Attr attr;
    ASSERT_EQ(model.lookup(parent, name, attr), 0);
    ASSERT_EQ(model.fsync(attr.ino), 0);
    ASSERT_EQ(model.fsyncdir(parent), 0);
    model.release(handle);
  }
};

TEST_F(CrashFsModelTest, UnsyncedDataIsGoneAfterACut) {
  durable_file(kRootIno, "log", "durable");
  Handle handle = write_file(kRootIno, "log", "overwritten, never synced");
  model.release(handle);
  write_file(kRootIno, "new", "never synced");
  auto files = flatten(model.cut());
  EXPECT_EQ(files, (std::map<std::string, std::string>{{"/log", "durable"}}));
}

TEST_F(CrashFsModelTest, FsyncedDataAndDirectoryAreKept) {
  Ino dir = make_dir(kRootIno, "data");
  ASSERT_EQ(model.fsyncdir(kRootIno), 0);
  durable_file(dir, "a", std::string(10000, 'x'));
  auto files = flatten(model.cut());
  EXPECT_EQ(files.at("/data"), "<dir>");
  EXPECT_EQ(files.at("/data/a"), std::string(10000, 'x'));
}

TEST_F(CrashFsModelTest, CreatedAndFsyncedFileWithoutDirectoryFsyncIsGone) {
  Handle handle = write_file(kRootIno, "fresh", "synced data");
  ASSERT_EQ(model.fsync(ino_of("/fresh")), 0);
  model.release(handle);
  EXPECT_TRUE(flatten(model.cut()).empty());
}

TEST_F(CrashFsModelTest, DirectoryFsyncWithoutFileFsyncKeepsAnEmptyFile) {
  model.release(write_file(kRootIno, "named", "data never synced"));
  ASSERT_EQ(model.fsyncdir(kRootIno), 0);
  EXPECT_EQ(flatten(model.cut()), (std::map<std::string, std::string>{{"/named", ""}}));
}

TEST_F(CrashFsModelTest, RenameWithoutDirectoryFsyncIsUndone) {
  durable_file(kRootIno, "state", "old");
  // write_file_durably without the directory's fsync: the old contents survive.
  Handle handle = write_file(kRootIno, "state.tmp", "new");
  ASSERT_EQ(model.fsync(ino_of("/state.tmp")), 0);
  model.release(handle);
  ASSERT_EQ(model.rename(kRootIno, "state.tmp", kRootIno, "state", 0), 0);
  EXPECT_EQ(flatten(model.live_image()), (std::map<std::string, std::string>{{"/state", "new"}}));
  EXPECT_EQ(flatten(model.cut()), (std::map<std::string, std::string>{{"/state", "old"}}));
}

TEST_F(CrashFsModelTest, RenameWithDirectoryFsyncIsKept) {
  durable_file(kRootIno, "state", "old");
  Handle handle = write_file(kRootIno, "state.tmp", "new");
  ASSERT_EQ(model.fsync(ino_of("/state.tmp")), 0);
  model.release(handle);
  ASSERT_EQ(model.rename(kRootIno, "state.tmp", kRootIno, "state", 0), 0);
  ASSERT_EQ(model.fsyncdir(kRootIno), 0);
  EXPECT_EQ(flatten(model.cut()), (std::map<std::string, std::string>{{"/state", "new"}}));
}

TEST_F(CrashFsModelTest, RenameBetweenDirectoriesIsDurableInEachWhenItIsFsynced) {
  Ino a = make_dir(kRootIno, "a");
  Ino b = make_dir(kRootIno, "b");
  ASSERT_EQ(model.fsyncdir(kRootIno), 0);
  durable_file(a, "f", "data");
  ASSERT_EQ(model.rename(a, "f", b, "f", 0), 0);
  ASSERT_EQ(model.fsyncdir(b), 0);
  // Only the destination was fsynced: the file has both names (one inode: a hard link).
  auto files = flatten(model.cut());
  EXPECT_EQ(files.at("/a/f"), "data");
  EXPECT_EQ(files.at("/b/f"), "data");
}

TEST_F(CrashFsModelTest, UnlinkWithoutDirectoryFsyncIsUndone) {
  durable_file(kRootIno, "victim", "still here");
  ASSERT_EQ(model.unlink(kRootIno, "victim"), 0);
  Attr attr;
  EXPECT_EQ(model.lookup(kRootIno, "victim", attr), -ENOENT);
  EXPECT_EQ(flatten(model.cut()), (std::map<std::string, std::string>{{"/victim", "still here"}}));
}

TEST_F(CrashFsModelTest, UnlinkedFileStaysUsableWhileOpen) {
  Handle handle = write_file(kRootIno, "tmp", "abc", O_RDWR);
  Ino ino = ino_of("/tmp");
  ASSERT_EQ(model.unlink(kRootIno, "tmp"), 0);
  EXPECT_EQ(model.write(handle, 3, "def"), 3);
  std::string data;
  EXPECT_EQ(model.read(handle, 0, 100, data), 6);
  EXPECT_EQ(data, "abcdef");
  Attr attr;
  ASSERT_EQ(model.getattr(ino, attr), 0);
  EXPECT_EQ(attr.nlink, 0u);
  EXPECT_EQ(model.fsync(ino), 0);
  model.release(handle);
  EXPECT_TRUE(flatten(model.cut()).empty());
}

TEST_F(CrashFsModelTest, AfterACutEveryCallFailsWithEio) {
  Handle handle = write_file(kRootIno, "f", "x");
  model.cut();
  Attr attr;
  std::string data;
  EXPECT_EQ(model.getattr(kRootIno, attr), -EIO);
  EXPECT_EQ(model.lookup(kRootIno, "f", attr), -EIO);
  EXPECT_EQ(model.write(handle, 0, "y"), -EIO);
  EXPECT_EQ(model.read(handle, 0, 1, data), -EIO);
  EXPECT_EQ(model.fsync(kRootIno), -EIO);
  EXPECT_EQ(model.mkdir(kRootIno, "d", 0755, kOwner, attr), -EIO);
  model.release(handle);  // closing still works
  EXPECT_TRUE(model.stats().cut);
}

TEST_F(CrashFsModelTest, OsyncWritesAreDurableWhenTheyReturn) {
  durable_file(kRootIno, "journal", "");
  Handle handle = 0;
  ASSERT_EQ(model.open(ino_of("/journal"), O_WRONLY | O_DSYNC, handle), 0);
  ASSERT_EQ(model.write(handle, 0, "record"), 6);
  EXPECT_EQ(flatten(model.cut()).at("/journal"), "record");
}

// The same operations, then a seeded cut: the pending writes and directory changes of the run.
Image seeded_run(std::uint64_t seed) {
  Model model{crashfs::empty_image()};
  Attr attr;
  Handle handle = 0;
  // A durable file of 8 blocks, then every block rewritten and the file grown, no fsync.
  EXPECT_EQ(model.create(kRootIno, "big", 0644, kOwner, O_WRONLY, attr, handle), 0);
  EXPECT_EQ(model.write(handle, 0, std::string(8 * crashfs::kBlockSize, 'o')), 8 * 4096);
  EXPECT_EQ(model.fsync(attr.ino), 0);
  EXPECT_EQ(model.fsyncdir(kRootIno), 0);
  EXPECT_EQ(model.write(handle, 0, std::string(10 * crashfs::kBlockSize, 'n')), 10 * 4096);
  model.release(handle);
  // Ten pending directory operations.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(model.mkdir(kRootIno, "d" + std::to_string(i), 0755, kOwner, attr), 0);
  EXPECT_EQ(model.stats().pending_metadata_ops, 10u);
  return model.cut(seed);
}

TEST(CrashFsSeededCut, KeepsADeterministicSubsetOfBlocksAndPrefixOfOperations) {
  std::set<std::size_t> prefixes;
  std::set<std::string> contents;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    auto files = flatten(seeded_run(seed));
    EXPECT_EQ(files, flatten(seeded_run(seed))) << "seed " << seed;
    // Directory operations: a prefix of d0..d9.
    std::size_t kept = 0;
    while (files.contains("/d" + std::to_string(kept))) ++kept;
    EXPECT_EQ(files.size(), kept + 1) << "not a prefix, seed " << seed;
    prefixes.insert(kept);
    // Blocks: each whole block old or new; the size the durable or the live one.
    const std::string& big = files.at("/big");
    ASSERT_TRUE(big.size() == 8 * 4096 || big.size() == 10 * 4096) << big.size();
    for (std::size_t block = 0; block < big.size() / 4096; ++block) {
      std::string data = big.substr(block * 4096, 4096);
      bool valid = data == std::string(4096, 'n') || data == std::string(4096, block < 8 ? 'o' : '\0');
      EXPECT_TRUE(valid) << "block " << block << " seed " << seed;
    }
    contents.insert(big);
  }
  EXPECT_GT(prefixes.size(), 3u);
  EXPECT_GT(contents.size(), 10u);
}

TEST_F(CrashFsModelTest, CapacityMakesGrowthFailWithEnospc) {
  model.set_capacity(10000);
  Handle handle = write_file(kRootIno, "a", std::string(6000, 'a'));
  EXPECT_EQ(model.write(handle, 6000, std::string(4000, 'b')), 4000);
  EXPECT_EQ(model.write(handle, 10000, "c"), -ENOSPC);
  EXPECT_EQ(model.write(handle, 0, "overwrite in place"), 18);
  Ino ino = ino_of("/a");
  EXPECT_EQ(model.truncate(ino, 10001), -ENOSPC);
  EXPECT_EQ(model.fallocate(ino, 0, 9000, 2000), -ENOSPC);
  EXPECT_EQ(model.fallocate(ino, FALLOC_FL_KEEP_SIZE, 9000, 2000), 0);
  struct statvfs st;
  ASSERT_EQ(model.statfs(st), 0);
  EXPECT_EQ(st.f_blocks * st.f_frsize, 8192u);  // 10000 rounded down to blocks
  EXPECT_EQ(st.f_bavail, 0u);
  // Freed by unlinking (once closed), and lifted.
  model.release(handle);
  ASSERT_EQ(model.unlink(kRootIno, "a"), 0);
  EXPECT_EQ(model.stats().live_bytes, 0u);
  model.set_capacity(std::nullopt);
  model.release(write_file(kRootIno, "b", std::string(20000, 'b')));
  EXPECT_EQ(model.stats().live_bytes, 20000u);
}

TEST_F(CrashFsModelTest, FailFsyncMakesNothingDurable) {
  model.release(write_file(kRootIno, "f", "data"));
  model.set_fail_fsync(true);
  EXPECT_EQ(model.fsync(ino_of("/f")), -EIO);
  EXPECT_EQ(model.fsyncdir(kRootIno), -EIO);
  model.set_fail_fsync(false);
  EXPECT_TRUE(flatten(model.cut()).empty());
}

TEST_F(CrashFsModelTest, RenameRules) {
  make_dir(kRootIno, "dir");
  Ino sub = make_dir(ino_of("/dir"), "sub");
  model.release(write_file(kRootIno, "f", "1"));
  model.release(write_file(kRootIno, "g", "2"));
  EXPECT_EQ(model.rename(kRootIno, "f", kRootIno, "g", RENAME_NOREPLACE), -EEXIST);
  EXPECT_EQ(model.rename(kRootIno, "f", kRootIno, "g", RENAME_EXCHANGE), -EINVAL);
  EXPECT_EQ(model.rename(kRootIno, "dir", sub, "x", 0), -EINVAL);  // into itself
  EXPECT_EQ(model.rename(kRootIno, "f", kRootIno, "dir", 0), -EISDIR);
  EXPECT_EQ(model.rename(kRootIno, "dir", kRootIno, "f", 0), -ENOTDIR);
  EXPECT_EQ(model.rename(kRootIno, "f", kRootIno, "g", 0), 0);
  EXPECT_EQ(flatten(model.live_image()),
            (std::map<std::string, std::string>{{"/dir", "<dir>"}, {"/dir/sub", "<dir>"}, {"/g", "1"}}));
  EXPECT_EQ(model.rmdir(kRootIno, "dir"), -ENOTEMPTY);
}

TEST_F(CrashFsModelTest, ManyTemporaryFilesAreCollected) {
  for (int i = 0; i < 1000; ++i) {
    model.release(write_file(kRootIno, "tmp", "x"));
    ASSERT_EQ(model.unlink(kRootIno, "tmp"), 0);
    ASSERT_EQ(model.fsyncdir(kRootIno), 0);
  }
  EXPECT_EQ(model.stats().files, 0u);
  EXPECT_LT(model.stats().inodes, 200u);
  EXPECT_TRUE(flatten(model.cut()).empty());
}

TEST(CrashFsImage, WritesAndReadsBackADirectoryTree) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("crashfs-image-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Model model{crashfs::empty_image()};
  Attr attr;
  Handle handle = 0;
  ASSERT_EQ(model.mkdir(kRootIno, "sub", 0700, kOwner, attr), 0);
  ASSERT_EQ(model.create(attr.ino, "file", 0600, kOwner, O_WRONLY, attr, handle), 0);
  ASSERT_EQ(model.write(handle, 0, "contents"), 8);
  model.release(handle);
  Ino file = attr.ino;
  ASSERT_EQ(model.link(file, kRootIno, "hardlink", attr), 0);
  ASSERT_EQ(model.symlink(kRootIno, "symlink", "sub/file", kOwner, attr), 0);
  fs::path backing = dir / "backing";
  crashfs::write_image(model.live_image(), backing);
  crashfs::write_image(model.live_image(), backing);  // replaces the first
  EXPECT_FALSE(fs::exists(dir / "backing.crashfs-new"));
  EXPECT_FALSE(fs::exists(dir / "backing.crashfs-old"));
  struct stat a, b;
  ASSERT_EQ(::stat((backing / "hardlink").c_str(), &a), 0);
  ASSERT_EQ(::stat((backing / "sub" / "file").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_mode & 07777, 0600u);
  Model reloaded{crashfs::read_image(backing)};
  EXPECT_EQ(flatten(reloaded.live_image()), (std::map<std::string, std::string>{{"/hardlink", "contents"},
                                                                                {"/sub", "<dir>"},
                                                                                {"/sub/file", "contents"},
                                                                                {"/symlink", "-> sub/file"}}));
  Ino one = 0, two = 0;
  ASSERT_EQ(reloaded.resolve("/hardlink", one), 0);
  ASSERT_EQ(reloaded.resolve("/sub/file", two), 0);
  EXPECT_EQ(one, two);
  fs::remove_all(dir);
}

}  // namespace
