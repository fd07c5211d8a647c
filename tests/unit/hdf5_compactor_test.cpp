// BackgroundCompactor: rotated files are compressed on a thread of their own, in the order they
// were added, and finish() waits for all of them (the output's stop).
#include "hdf5_compactor.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fructosa::master {
namespace {

// A compaction that waits until the test lets it go, and records which files it did.
struct HeldCompaction {
  std::mutex mutex;
  std::condition_variable changed;
  bool released = false;
  std::vector<std::string> started, done;
  std::thread::id thread;

  void operator()(const std::string& path) {
    std::unique_lock lock(mutex);
    started.push_back(path);
    thread = std::this_thread::get_id();
    changed.notify_all();
    changed.wait(lock, [&] { return released; });
    done.push_back(path);
  }
  void wait_started(std::size_t count) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return started.size() >= count; });
  }
  void release() {
    std::lock_guard lock(mutex);
    released = true;
    changed.notify_all();
  }
};

TEST(Hdf5Compactor, CompressesOnItsOwnThreadInOrderAndFinishWaitsForAll) {
  hbool_t threadsafe = 0;
  ASSERT_GE(H5is_library_threadsafe(&threadsafe), 0);
  if (!threadsafe) GTEST_SKIP() << "this libhdf5 is not thread-safe: files are compressed where they are added";
  HeldCompaction held;
  BackgroundCompactor compactor([&](const std::string& path) { held(path); });
  // add() returns while the compaction of the first file is still held: the writer goes on.
  compactor.add("a.h5");
  compactor.add("b.h5");
  held.wait_started(1);
  EXPECT_NE(held.thread, std::this_thread::get_id());
  EXPECT_EQ(compactor.waiting(), 2u);
  {
    std::lock_guard lock(held.mutex);
    EXPECT_EQ(held.started, std::vector<std::string>{"a.h5"});  // one at a time
    EXPECT_TRUE(held.done.empty());
  }
  std::thread releaser([&] { held.release(); });
  compactor.finish();
  releaser.join();
  EXPECT_EQ(compactor.waiting(), 0u);
  std::lock_guard lock(held.mutex);
  EXPECT_EQ(held.done, (std::vector<std::string>{"a.h5", "b.h5"}));
}

TEST(Hdf5Compactor, ItsEndCompressesWhatWasStillWaiting) {
  std::vector<std::string> done;
  std::mutex mutex;
  {
    BackgroundCompactor compactor([&](const std::string& path) {
      std::lock_guard lock(mutex);
      done.push_back(path);
    });
    for (const char* path : {"1.h5", "2.h5", "3.h5"}) compactor.add(path);
  }
  EXPECT_EQ(done, (std::vector<std::string>{"1.h5", "2.h5", "3.h5"}));
}

}  // namespace
}  // namespace fructosa::master
