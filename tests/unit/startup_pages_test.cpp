#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "startup_pages.h"
#include "test_support.h"

using fructosa::agent::release_clean_file_pages;

namespace {

constexpr std::size_t kBytes = 64 * 1024;

// The Rss (kB) /proc/self/smaps gives the mapping that starts at `at`.
std::uint64_t resident_kb(const void* at) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &start, &end) == 2 && line.find(' ') > line.find('-')) {
      in_mapping = start == reinterpret_cast<std::uintptr_t>(at);
    } else if (in_mapping && line.rfind("Rss:", 0) == 0) {
      return std::stoull(line.substr(4));
    }
  }
  ADD_FAILURE() << "no mapping at " << at << " in /proc/self/smaps";
  return 0;
}

unsigned char pattern(std::size_t i) { return static_cast<unsigned char>(i % 251); }

struct MappedFile {
  MappedFile(const std::string& path, int protection, int flags) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (protection & PROT_WRITE) {
      ::close(fd);
      fd = ::open(path.c_str(), O_RDWR);
    }
    bytes = static_cast<unsigned char*>(::mmap(nullptr, kBytes, protection, flags, fd, 0));
    ::close(fd);
  }
  ~MappedFile() { ::munmap(bytes, kBytes); }
  unsigned sum() const {
    unsigned total = 0;
    for (std::size_t i = 0; i < kBytes; i += 4096) total += bytes[i];
    return total;
  }
  unsigned char* bytes;
};

}  // namespace

TEST(StartupPages, ReleasesUnwrittenPrivateFileMappingsOnly) {
  fructosa::test::TempDir dir;
  std::string path = dir.file("code");
  {
    std::ofstream out(path, std::ios::binary);
    for (std::size_t i = 0; i < kBytes; ++i) out.put(static_cast<char>(pattern(i)));
  }
  MappedFile code(path, PROT_READ, MAP_PRIVATE);       // as a program's text or constants
  MappedFile relocated(path, PROT_READ | PROT_WRITE, MAP_PRIVATE);  // as RELRO after relocation
  relocated.bytes[5000] = 0xAB;
  ASSERT_EQ(::mprotect(relocated.bytes, kBytes, PROT_READ), 0);
  MappedFile shared(path, PROT_READ, MAP_SHARED);
  ASSERT_NE(code.bytes, MAP_FAILED);
  ASSERT_NE(relocated.bytes, MAP_FAILED);
  ASSERT_NE(shared.bytes, MAP_FAILED);
  unsigned expected_sum = code.sum() + relocated.sum() + shared.sum();  // every page resident
  ASSERT_EQ(resident_kb(code.bytes), kBytes / 1024);
  ASSERT_EQ(resident_kb(shared.bytes), kBytes / 1024);

  auto released = release_clean_file_pages();

  EXPECT_GE(released.mappings, 1u);
  EXPECT_GE(released.bytes, kBytes);
  EXPECT_EQ(resident_kb(code.bytes), 0u);
  EXPECT_EQ(resident_kb(shared.bytes), kBytes / 1024) << "a shared mapping is left alone";
  EXPECT_GT(resident_kb(relocated.bytes), 0u) << "a written mapping keeps its pages";
  // The released pages come back from the file; the written one kept what was written.
  for (std::size_t i = 0; i < kBytes; ++i) ASSERT_EQ(code.bytes[i], pattern(i)) << i;
  EXPECT_EQ(relocated.bytes[5000], 0xAB);
  EXPECT_EQ(relocated.bytes[5001], pattern(5001));
  EXPECT_EQ(code.sum() + relocated.sum() + shared.sum(), expected_sum);
  EXPECT_EQ(resident_kb(code.bytes), kBytes / 1024);
}
