// Closed HDF5 files compressed on a thread of their own.
//
// A rotation used to compress the file it closed on the output's thread: 16-22 s for 5 minutes
// of 1000 agents, during which the output's runner queued everything that arrived (lmaster's
// RSS rose by 100-170 MiB at every rotation, docs/performance.md). The writer now goes on with
// the next file while this thread rewrites the last one. Debian's libhdf5 is built thread-safe:
// the library runs one call at a time, and the copy works a few chunks per call, so the writer's
// calls wait milliseconds. With a library that is not thread-safe, files are compressed where
// they are added, as before.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fructosa::master {

class BackgroundCompactor {
 public:
  // `compact` compresses one file and logs how it went; it must not throw.
  explicit BackgroundCompactor(std::function<void(const std::string& path)> compact);
  ~BackgroundCompactor();  // finish()
  BackgroundCompactor(const BackgroundCompactor&) = delete;
  BackgroundCompactor& operator=(const BackgroundCompactor&) = delete;

  // Compresses `path` after the files added before it, on the thread (started at the first).
  void add(std::string path);
  // Returns once every file added is done (at stop: the files are all compressed, as before).
  void finish();
  // Files added and not done yet.
  std::size_t waiting() const;

 private:
  void run();

  const std::function<void(const std::string&)> compact_;
  const bool threaded_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fructosa::master
