// The segment log under lmaster's journal and lagent's spool: records back as written across a
// reopen, a torn append cut, damage kept aside with every whole record around it kept, failed
// syncs undone, segments rolled and removed.
#include "segment_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace fructosa {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

SegmentLogFormat format() { return {0x54534554, ".log", "test log", 1u << 20, 0640}; }

std::string payload(std::uint64_t id) { return std::string(100 + id % 7, static_cast<char>('a' + id % 26)); }

std::vector<fs::path> files(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().string().ends_with(suffix)) found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<std::uint64_t> segment_ids(const SegmentLog& log) {
  std::vector<std::uint64_t> found;
  for (auto place = log.find(0); place; place = log.find(place->id + 1)) {
    EXPECT_EQ(log.read(*place), payload(place->id));
    found.push_back(place->id);
  }
  return found;
}

void flip_byte(const fs::path& path, std::uint64_t at) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  file.seekg(static_cast<std::streamoff>(at));
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  file.seekp(static_cast<std::streamoff>(at));
  file.write(&c, 1);
}

TEST(SegmentLog, RecordsComeBackAfterAReopenAcrossSegments) {
  TempDir dir;
  {
    SegmentLog log(dir.path(), format(), 1000);
    for (std::uint64_t id = 1; id <= 30; ++id) log.append(id * 2, id, payload(id * 2));  // ids need not follow
    log.sync();
    EXPECT_FALSE(log.unsynced());
    EXPECT_GT(log.segment_count(), 3u);
    EXPECT_EQ(log.count_from(0), 465u);
    EXPECT_EQ(log.count_from(41), 255u);  // records 42..60 have counts 21..30
    EXPECT_EQ(log.records_from(41), 10u);
  }
  SegmentLog log(dir.path(), format(), 1000);
  auto found = segment_ids(log);
  ASSERT_EQ(found.size(), 30u);
  EXPECT_EQ(found.front(), 2u);
  EXPECT_EQ(found.back(), 60u);
  EXPECT_EQ(log.find(41)->id, 42u);
  EXPECT_EQ(log.next_id(), 61u);
  EXPECT_THROW(log.append(60, 1, "x"), SegmentLogError);
  EXPECT_TRUE(files(dir.path(), ".damaged").empty());
}

TEST(SegmentLog, ATornAppendAtTheEndIsCut) {
  TempDir dir;
  {
    SegmentLog log(dir.path(), format(), 1 << 20);
    for (std::uint64_t id = 1; id <= 5; ++id) log.append(id, 1, payload(id));
  }
  auto segment = files(dir.path(), ".log").back();
  fs::resize_file(segment, fs::file_size(segment) - 10);
  SegmentLog log(dir.path(), format(), 1 << 20);
  EXPECT_EQ(segment_ids(log), (std::vector<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(files(dir.path(), ".damaged").empty());
  log.append(5, 1, payload(5));
  EXPECT_EQ(segment_ids(log).back(), 5u);
}

// A flipped byte in the middle of the newest segment: the records after it are whole and kept
// (a truncation would delete acknowledged records), and the file as it was is kept aside.
TEST(SegmentLog, DamageKeepsTheRecordsAfterItAndTheFileAside) {
  TempDir dir;
  std::uint64_t third = 0;
  {
    SegmentLog log(dir.path(), format(), 1 << 20);
    for (std::uint64_t id = 1; id <= 5; ++id) log.append(id, 1, payload(id));
    third = log.find(3)->offset;
  }
  auto segment = files(dir.path(), ".log").back();
  auto size = fs::file_size(segment);
  flip_byte(segment, third + 40);
  {
    SegmentLog log(dir.path(), format(), 1 << 20);
    EXPECT_EQ(segment_ids(log), (std::vector<std::uint64_t>{1, 2, 4, 5}));
    auto aside = files(dir.path(), ".damaged");
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(fs::file_size(aside[0]), size);
    log.append(6, 1, payload(6));
  }
  SegmentLog log(dir.path(), format(), 1 << 20);
  EXPECT_EQ(segment_ids(log), (std::vector<std::uint64_t>{1, 2, 4, 5, 6}));
  EXPECT_EQ(files(dir.path(), ".damaged").size(), 1u);
}

// The end of an older segment is never a torn append (the log moved on after syncing it).
TEST(SegmentLog, DamageAtTheEndOfAnOlderSegmentIsKeptAside) {
  TempDir dir;
  {
    SegmentLog log(dir.path(), format(), 400);
    for (std::uint64_t id = 1; id <= 9; ++id) log.append(id, 1, payload(id));
    log.sync();
    ASSERT_GE(log.segment_count(), 3u);
  }
  auto first = files(dir.path(), ".log").front();
  fs::resize_file(first, fs::file_size(first) - 3);
  SegmentLog log(dir.path(), format(), 400);
  auto found = segment_ids(log);
  EXPECT_EQ(found.size(), 8u);
  EXPECT_EQ(found.back(), 9u);
  EXPECT_EQ(files(dir.path(), ".damaged").size(), 1u);
}

TEST(SegmentLog, DiscardAfterUndoesAppendsAndTheSegmentsMadeForThem) {
  TempDir dir;
  SegmentLog log(dir.path(), format(), 400);
  for (std::uint64_t id = 1; id <= 3; ++id) log.append(id, 1, payload(id));
  log.sync();
  auto segments_before = log.segment_count();
  for (std::uint64_t id = 4; id <= 12; ++id) log.append(id, 1, payload(id));
  ASSERT_GT(log.segment_count(), segments_before);
  log.discard_after(3);
  EXPECT_EQ(log.segment_count(), segments_before);
  EXPECT_EQ(log.last_id(), 3u);
  log.append(4, 1, payload(4));
  log.sync();
  SegmentLog reopened(dir.path(), format(), 400);
  EXPECT_EQ(segment_ids(reopened), (std::vector<std::uint64_t>{1, 2, 3, 4}));
}

TEST(SegmentLog, AnEmptyNewestSegmentNamesTheNextId) {
  TempDir dir;
  {
    SegmentLog log(dir.path(), format(), 1 << 20);
    log.append(1, 1, payload(1));
    log.start_segment(40);
    log.sync();
  }
  SegmentLog log(dir.path(), format(), 1 << 20);
  EXPECT_EQ(log.next_id(), 40u);
  EXPECT_THROW(log.start_segment(1), SegmentLogError);
}

TEST(SegmentLog, RemovingTheFrontKeepsReadersOfItWorking) {
  TempDir dir;
  SegmentLog log(dir.path(), format(), 400);
  for (std::uint64_t id = 1; id <= 9; ++id) log.append(id, 2, payload(id));
  auto place = log.find(1);
  auto removed = log.remove_front();
  EXPECT_EQ(removed.first_id, 1u);
  EXPECT_EQ(removed.count, 2 * removed.records);
  EXPECT_EQ(log.read(*place), payload(1));  // the descriptor lives as long as the place
  EXPECT_EQ(log.find(1)->id, removed.last_id + 1);
  EXPECT_EQ(log.bytes(), [&] {
    std::uint64_t total = 0;
    for (const auto& info : log.segments()) total += info.bytes;
    return total;
  }());
}

}  // namespace
}  // namespace fructosa
