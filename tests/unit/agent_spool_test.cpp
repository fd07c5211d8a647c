// lagent's on-disk spool: append/read/acknowledge, what survives a restart, torn records,
// the budget (drops counted), and the link session that continues across restarts.
#include "agent_spool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "crc32.h"
#include "test_support.h"

namespace fructosa::agent {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<Sample> spool_batch(int n, std::int64_t t0 = 1'700'000'000'000'000'000) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    Sample sample = test::make_sample("", i % 2 ? "CPUPercent" : "VirtualMemory", t0 + i * std::int64_t{200'000'000}, i % 3,
                                      {{"total", 1.5 * i}, {"eth0.bytes_sent", -2.0}, {"percent", 42}});
    if (i == 1) sample.labels = {{"partition", "/dev/sda1"}, {"mount", "/"}};
    samples.push_back(sample);
  }
  return samples;
}

std::vector<fs::path> segments(const std::string& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".seg") found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  return found;
}

TEST(AgentSpool, KeepsBatchesSelfContainedUntilAcknowledged) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_TRUE(spool.empty());
  EXPECT_EQ(spool.next_sequence(), 1u);
  EXPECT_NE(spool.session(), 0u);
  auto first = spool_batch(5);
  EXPECT_EQ(spool.append(first), 1u);
  EXPECT_EQ(spool.append(spool_batch(2)), 2u);
  EXPECT_EQ(spool.append(spool_batch(3)), 3u);
  EXPECT_EQ(spool.first_sequence(), 1u);
  EXPECT_EQ(spool.stats().batches, 3u);
  EXPECT_EQ(spool.samples_in(1), 5u);

  auto back = spool.read(1);
  ASSERT_EQ(back.size(), first.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].sensor, first[i].sensor);
    EXPECT_EQ(back[i].time_ns, first[i].time_ns);
    EXPECT_EQ(back[i].job, first[i].job);
    ASSERT_EQ(back[i].metrics.size(), first[i].metrics.size());
    for (std::size_t m = 0; m < back[i].metrics.size(); ++m) {
      EXPECT_EQ(back[i].metrics[m].key, first[i].metrics[m].key);
      EXPECT_EQ(back[i].metrics[m].value, first[i].metrics[m].value);
    }
    ASSERT_EQ(back[i].labels.size(), first[i].labels.size());
    for (std::size_t l = 0; l < back[i].labels.size(); ++l) {
      EXPECT_EQ(back[i].labels[l].key, first[i].labels[l].key);
      EXPECT_EQ(back[i].labels[l].value, first[i].labels[l].value);
    }
  }

  spool.acknowledge(2);
  EXPECT_EQ(spool.first_sequence(), 3u);
  EXPECT_EQ(spool.stats().batches, 1u);
  EXPECT_THROW(spool.read(2), SpoolError);
  EXPECT_EQ(spool.read(3).size(), 3u);
  spool.acknowledge(1);  // stale acknowledgements change nothing
  EXPECT_EQ(spool.first_sequence(), 3u);
  spool.acknowledge(3);
  EXPECT_TRUE(spool.empty());
  EXPECT_EQ(spool.append({}), 4u);  // an empty batch still gets its number
}

TEST(BatchNames, NumbersEachBatchsNamesFromZeroInOrderOfFirstUse) {
  BatchNames names;
  names.start_batch();
  EXPECT_EQ(names.id("CPUPercent"), 0u);
  EXPECT_EQ(names.id("total"), 1u);
  EXPECT_EQ(names.id("CPUPercent"), 0u);
  EXPECT_EQ(names.in_batch(), (std::vector<std::string_view>{"CPUPercent", "total"}));
  names.start_batch();  // names of the batch before are not in this one's table
  EXPECT_EQ(names.id("total"), 0u);
  EXPECT_EQ(names.id("percent"), 1u);
  EXPECT_EQ(names.in_batch(), (std::vector<std::string_view>{"total", "percent"}));
  // A batch of many new names (jobs come and go) makes it forget the old ones, not lose these.
  names.start_batch();
  for (std::uint32_t i = 0; i <= BatchNames::kMaxKnown; ++i) ASSERT_EQ(names.id("job" + std::to_string(i)), i);
  EXPECT_GT(names.remembered(), BatchNames::kMaxKnown);
  names.start_batch();
  EXPECT_EQ(names.remembered(), 0u);
  EXPECT_EQ(names.id("job69999"), 0u);
  EXPECT_EQ(names.remembered(), 1u);
  EXPECT_EQ(names.in_batch(), (std::vector<std::string_view>{"job69999"}));
}

TEST(AgentSpool, BatchesWithDifferentNamesReadBackAsWritten) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  std::vector<std::vector<Sample>> sent{spool_batch(3), {}, spool_batch(2)};
  sent[1].push_back(test::make_sample("", "DiskUsage", 1, 0, {{"percent", 7}, {"total", 8}}));
  sent[1][0].labels = {{"mount", "/home"}};
  sent[2][0].sensor = "NetIOCounters";
  for (const auto& samples : sent) spool.append(samples);
  for (std::size_t b = 0; b < sent.size(); ++b) {
    auto back = spool.read(b + 1);
    ASSERT_EQ(back.size(), sent[b].size());
    for (std::size_t i = 0; i < back.size(); ++i) {
      EXPECT_EQ(back[i].sensor, sent[b][i].sensor);
      ASSERT_EQ(back[i].metrics.size(), sent[b][i].metrics.size());
      for (std::size_t m = 0; m < back[i].metrics.size(); ++m) {
        EXPECT_EQ(back[i].metrics[m].key, sent[b][i].metrics[m].key);
        EXPECT_EQ(back[i].metrics[m].value, sent[b][i].metrics[m].value);
      }
      ASSERT_EQ(back[i].labels.size(), sent[b][i].labels.size());
      for (std::size_t l = 0; l < back[i].labels.size(); ++l) {
        EXPECT_EQ(back[i].labels[l].key, sent[b][i].labels[l].key);
        EXPECT_EQ(back[i].labels[l].value, sent[b][i].labels[l].value);
      }
    }
  }
}

TEST(AgentSpool, ARestartContinuesSessionSequenceAndUnacknowledgedBatches) {
  TempDir dir;
  std::uint64_t session = 0;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
    for (int i = 0; i < 10; ++i) spool.append(spool_batch(4, i * 1'000'000'000ll));
    spool.acknowledge(6);
  }
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    EXPECT_EQ(spool.session(), session);
    EXPECT_EQ(spool.first_sequence(), 7u);
    EXPECT_EQ(spool.next_sequence(), 11u);
    EXPECT_EQ(spool.read(7)[0].time_ns, 6 * 1'000'000'000ll);
    spool.acknowledge(10);
    EXPECT_TRUE(spool.empty());
  }
  {  // everything acknowledged: numbers still go on (lmaster remembers the session's last one)
    AgentSpool spool(dir.file("spool"), 1 << 20);
    EXPECT_EQ(spool.session(), session);
    EXPECT_TRUE(spool.empty());
    EXPECT_EQ(spool.append(spool_batch(1)), 11u);
  }
}

TEST(AgentSpool, OneLagentPerDirectory) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_TRUE(AgentSpool::held_here(dir.file("spool")));
  EXPECT_THROW(AgentSpool(dir.file("spool"), 1 << 20), SpoolError);
}

TEST(AgentSpool, AnUnwritableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  try {
    AgentSpool spool(dir.file("file") + "/spool", 1 << 20);
    FAIL() << "no error";
  } catch (const SpoolError& error) {
    EXPECT_NE(std::string(error.what()).find(dir.file("file")), std::string::npos) << error.what();
  }
}

TEST(AgentSpool, ATornLastRecordIsCutAndTheRestKept) {
  TempDir dir;
  std::uint64_t session = 0;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
    for (int i = 0; i < 5; ++i) spool.append(spool_batch(3));
  }
  auto files = segments(dir.file("spool"));
  ASSERT_EQ(files.size(), 1u);
  auto size = fs::file_size(files[0]);
  // kill -9 in the middle of a write: the last record lacks its end.
  fs::resize_file(files[0], size - 7);
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    EXPECT_EQ(spool.session(), session);
    EXPECT_EQ(spool.first_sequence(), 1u);
    // Batch 5 is lost, and its number may have been sent with it: not given again.
    EXPECT_EQ(spool.next_sequence(), 6u);
    EXPECT_EQ(spool.read(4).size(), 3u);
    EXPECT_LT(fs::file_size(files[0]), size - 7);
    EXPECT_EQ(spool.append(spool_batch(2)), 6u);
  }
  {
    // A flipped byte inside a record: its CRC fails; the records after it are whole and kept,
    // and so is the file as it was (.damaged).
    std::fstream file(files[0], std::ios::in | std::ios::out | std::ios::binary);
    auto record_size = fs::file_size(files[0]) / 5;  // five records of similar size; aim into the 3rd
    file.seekp(static_cast<std::streamoff>(record_size * 2 + record_size / 2));
    char c = 0;
    file.read(&c, 1);
    file.seekp(static_cast<std::streamoff>(record_size * 2 + record_size / 2));
    c = static_cast<char>(c ^ 0x5a);
    file.write(&c, 1);
  }
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_EQ(spool.first_sequence(), 1u);
  EXPECT_EQ(spool.next_sequence(), 7u);  // after the last one handed out, 6
  EXPECT_EQ(spool.read(1).size(), 3u);
  EXPECT_THROW(spool.read(3), SpoolError);
  EXPECT_EQ(spool.next_kept(3), 4u);
  EXPECT_EQ(spool.read(4).size(), 3u);
  EXPECT_EQ(spool.read(6).size(), 2u);
  EXPECT_EQ(spool.stats().batches, 4u);
  auto damaged = files[0];
  damaged += ".damaged";
  EXPECT_TRUE(fs::exists(damaged));
}

// lagent killed (no clean stop): the batches it wrote are on disk (the page cache survives a
// killed process), but whether a power cut took some is unknown, so numbers continue after the
// reservation. A clean stop continues right after the last one.
TEST(AgentSpool, NumbersHandedOutBeforeAnUncleanStopAreNotGivenAgain) {
  TempDir dir;
  std::uint64_t session = 0;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
  }
  pid_t child = ::fork();
  if (child == 0) {
    auto* spool = new AgentSpool(dir.file("spool"), 1 << 20);  // never destroyed: as a kill
    for (int i = 0; i < 3; ++i) spool->append(spool_batch(2));
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // A power cut took the last, unsynced batch with it.
  auto files = segments(dir.file("spool"));
  ASSERT_EQ(files.size(), 1u);
  fs::resize_file(files[0], fs::file_size(files[0]) * 2 / 3);
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    EXPECT_EQ(spool.session(), session);
    EXPECT_EQ(spool.first_sequence(), 1u);
    EXPECT_EQ(spool.read(2).size(), 2u);
    EXPECT_EQ(spool.next_sequence(), 1 + AgentSpool::kReservedBatches);
    EXPECT_EQ(spool.stats().batches, 2u);
    EXPECT_EQ(spool.next_kept(3), spool.next_sequence());
    EXPECT_EQ(spool.append(spool_batch(1)), 1 + AgentSpool::kReservedBatches);
    // What the sender walks through: 1, 2, then across the numbers skipped.
    EXPECT_EQ(spool.next_kept(3), 1 + AgentSpool::kReservedBatches);
    EXPECT_EQ(spool.stats().batches, 3u);
    spool.acknowledge(2);
    EXPECT_EQ(spool.first_sequence(), 1 + AgentSpool::kReservedBatches);
    EXPECT_EQ(spool.stats().batches, 1u);
  }
  AgentSpool spool(dir.file("spool"), 1 << 20);  // after a clean stop: no gap
  EXPECT_EQ(spool.next_sequence(), 2 + AgentSpool::kReservedBatches);
}

TEST(AgentSpool, BatchesWaitForASyncOnlyUntilAcknowledged) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_FALSE(spool.unsynced_since().has_value());
  spool.append(spool_batch(1));
  auto first = spool.unsynced_since();
  ASSERT_TRUE(first.has_value());
  spool.append(spool_batch(1));
  EXPECT_EQ(spool.unsynced_since(), first);  // the oldest one waiting counts
  spool.acknowledge(1);
  EXPECT_TRUE(spool.unsynced_since().has_value());  // batch 2 still waits
  spool.acknowledge(2);
  EXPECT_FALSE(spool.unsynced_since().has_value());  // lmaster has both on disk
  spool.append(spool_batch(1));
  EXPECT_TRUE(spool.unsynced_since().has_value());
  spool.sync();
  EXPECT_FALSE(spool.unsynced_since().has_value());
}

TEST(AgentSpool, OverBudgetTheOldestAreDroppedAndCounted) {
  TempDir dir;
  const std::uint64_t budget = 64 << 10;  // segments of 16 KiB
  AgentSpool spool(dir.file("spool"), budget);
  std::uint64_t appended_samples = 0;
  for (int i = 0; i < 400; ++i) {
    spool.append(spool_batch(4, i * 1'000'000'000ll));
    appended_samples += 4;
    auto stats = spool.stats();
    ASSERT_LE(stats.bytes, budget);
    // Nothing is lost without being counted: kept + dropped = appended.
    std::uint64_t kept_samples = 0;
    for (auto s = spool.first_sequence(); s < spool.next_sequence(); ++s) kept_samples += spool.samples_in(s);
    ASSERT_EQ(kept_samples + stats.dropped_samples, appended_samples);
    ASSERT_EQ(stats.batches + stats.dropped_batches, static_cast<std::uint64_t>(i + 1));
  }
  auto stats = spool.stats();
  EXPECT_GT(stats.dropped_batches, 0u);
  EXPECT_EQ(stats.dropped_samples, 4 * stats.dropped_batches);
  // The oldest went: what is kept is the newest, in order.
  EXPECT_EQ(spool.first_sequence(), 1 + stats.dropped_batches);
  EXPECT_EQ(spool.read(spool.first_sequence())[0].time_ns,
            static_cast<std::int64_t>(stats.dropped_batches) * 1'000'000'000ll);
  // Acknowledged batches are not counted as dropped when their segment goes.
  spool.acknowledge(spool.next_sequence() - 1);
  for (int i = 0; i < 100; ++i) spool.append(spool_batch(4));
  EXPECT_EQ(spool.stats().dropped_batches, stats.dropped_batches);

  // A batch larger than the whole budget cannot be kept: counted too.
  AgentSpool small(dir.file("small"), 65536);
  EXPECT_EQ(small.append(spool_batch(2000)), 0u);
  EXPECT_EQ(small.stats().dropped_batches, 1u);
  EXPECT_EQ(small.stats().dropped_samples, 2000u);
  EXPECT_EQ(small.append(spool_batch(1)), 1u);
}

TEST(AgentSpool, AcknowledgedSegmentsAreRemoved) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 64 << 10);
  for (int i = 0; i < 100; ++i) spool.append(spool_batch(4));
  EXPECT_GT(segments(dir.file("spool")).size(), 1u);
  spool.acknowledge(100);
  spool.append(spool_batch(1));
  EXPECT_EQ(segments(dir.file("spool")).size(), 1u);
  EXPECT_EQ(spool.stats().batches, 1u);
}

TEST(AgentSpool, LostPositionStartsANewSession) {
  TempDir dir;
  std::uint64_t session = 0;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
    spool.append(spool_batch(1));
    spool.acknowledge(1);
  }
  // Without `acked` and without batches the next number is unknown: a new session is safe.
  for (const auto& file : segments(dir.file("spool"))) fs::remove(file);
  fs::remove(dir.file("spool/acked"));
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_NE(spool.session(), session);
  EXPECT_EQ(spool.next_sequence(), 1u);
}

TEST(AgentSpool, WithoutAckedFileKeptBatchesAreSentAgainUnderTheSameSession) {
  TempDir dir;
  std::uint64_t session = 0;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
    for (int i = 0; i < 4; ++i) spool.append(spool_batch(1));
    spool.acknowledge(3);
  }
  fs::remove(dir.file("spool/acked"));
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_EQ(spool.session(), session);  // lmaster drops the ones it has by (host, session, sequence)
  EXPECT_EQ(spool.first_sequence(), 1u);
  EXPECT_EQ(spool.next_sequence(), 5u);
}

TEST(AgentSpool, AnAcknowledgementBeyondTheTailMovesTheSequenceOn) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  spool.append(spool_batch(1));
  spool.acknowledge(50);
  EXPECT_EQ(spool.append(spool_batch(1)), 51u);
  EXPECT_EQ(spool.read(51).size(), 1u);
}

TEST(AgentSpool, AnAcknowledgementOfANumberNeverHandedOutIsIgnored) {
  TempDir dir;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  spool.append(spool_batch(1));
  // A confused or lying peer: UINT64_MAX would wrap the next number to 0.
  spool.acknowledge(UINT64_MAX);
  spool.acknowledge(AgentSpool::kReservedBatches + 1);
  EXPECT_EQ(spool.first_sequence(), 1u);
  EXPECT_EQ(spool.append(spool_batch(1)), 2u);
  EXPECT_EQ(spool.read(1).size(), 1u);
}

// Spools written by lagent versions before the shared segment log are converted, batch for
// batch, sequence for sequence.
TEST(AgentSpool, ASegmentOfTheEarlierFormatIsConverted) {
  TempDir dir;
  std::uint64_t session = 0;
  std::vector<std::string> payloads;
  {
    AgentSpool spool(dir.file("spool"), 1 << 20);
    session = spool.session();
  }
  // Two FAS1 records, sequences 1 and 2: [magic][body bytes][CRC][samples] [u64 seq][payload].
  std::string legacy;
  BatchNames names;
  std::string scratch, payload;
  for (std::uint64_t sequence : {1, 2}) {
    spool_format::encode_payload(spool_batch(static_cast<int>(sequence) + 1), names, scratch, payload);
    std::string body;
    spool_format::put<std::uint64_t>(body, sequence);
    body += payload;
    spool_format::put<std::uint32_t>(legacy, spool_format::kLegacyRecordMagic);
    spool_format::put<std::uint32_t>(legacy, static_cast<std::uint32_t>(body.size()));
    spool_format::put<std::uint32_t>(legacy, crc32(body.data(), body.size()));
    spool_format::put<std::uint32_t>(legacy, static_cast<std::uint32_t>(sequence + 1));
    legacy += body;
  }
  legacy += "torn";
  std::ofstream(dir.file("spool/00000000000000000001.seg"), std::ios::binary) << legacy;
  AgentSpool spool(dir.file("spool"), 1 << 20);
  EXPECT_EQ(spool.session(), session);
  EXPECT_EQ(spool.first_sequence(), 1u);
  EXPECT_EQ(spool.samples_in(2), 3u);
  EXPECT_EQ(spool.read(1).size(), 2u);
  EXPECT_EQ(spool.read(2).size(), 3u);
  EXPECT_EQ(spool.read(2)[1].labels.size(), 2u);
  EXPECT_GE(spool.next_sequence(), 3u);
}

// A spool_dir that cannot be used at start (here: a file is in the way) gives a spool in memory:
// lagent starts and sends; only another lagent holding the directory stops it.
TEST(AgentSpool, AnUnusableDirectoryGivesASpoolInMemory) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "in the way\n";
  auto spool = AgentSpool::open(dir.file("file/spool"), 1 << 20);
  ASSERT_TRUE(spool->memory_only());
  EXPECT_NE(spool->session(), 0u);
  EXPECT_EQ(spool->append(spool_batch(3)), 1u);
  EXPECT_EQ(spool->append(spool_batch(2)), 2u);
  EXPECT_EQ(spool->read(2).size(), 2u);
  EXPECT_EQ(spool->stats().batches, 2u);
  spool->acknowledge(1);
  EXPECT_EQ(spool->first_sequence(), 2u);
  spool->acknowledge(UINT64_MAX);  // never made: ignored
  EXPECT_EQ(spool->append(spool_batch(1)), 3u);

  AgentSpool held(dir.file("spool"), 1 << 20);
  EXPECT_THROW(AgentSpool::open(dir.file("spool"), 1 << 20), SpoolError);
}

// A disk that fills up under the spool (here: RLIMIT_FSIZE, in a child process): the batches it
// refuses wait in memory, in order with those on disk, and writing resumes when it can.
TEST(AgentSpool, BatchesTheDiskRefusesWaitInMemory) {
  TempDir dir;
  pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
    auto spool = AgentSpool::open(dir.file("spool"), 1 << 20);
    if (spool->memory_only()) ::_exit(10);
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    const rlim_t hard = limit.rlim_max;
    limit.rlim_cur = 3000;  // the soft limit only: raising it back needs no privilege
    ::setrlimit(RLIMIT_FSIZE, &limit);
    for (int i = 0; i < 12; ++i) spool->append(spool_batch(4));
    if (spool->in_memory() == 0 || spool->in_memory() == 12) ::_exit(11);
    if (spool->stats().batches != 12) ::_exit(12);
    for (std::uint64_t sequence = 1; sequence <= 12; ++sequence)
      if (spool->next_kept(sequence) != sequence || spool->read(sequence).size() != 4) ::_exit(13);
    spool->acknowledge(12);  // lmaster has them all
    if (spool->in_memory() != 0 || !spool->empty()) ::_exit(14);
    limit.rlim_cur = hard;
    ::setrlimit(RLIMIT_FSIZE, &limit);
    if (spool->append(spool_batch(1)) != 13 || spool->in_memory() != 0) ::_exit(15);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A record is checked by its CRC, but a bug-free writer is not assumed: counts that the payload
// cannot hold are refused before anything is allocated for them.
TEST(SpoolFormat, CountsLargerThanThePayloadAreRefused) {
  BatchNames names;
  std::string scratch, payload;
  spool_format::encode_payload(spool_batch(2), names, scratch, payload);
  EXPECT_EQ(spool_format::decode_payload(payload, "test").size(), 2u);
  std::string strings = payload;
  std::uint32_t huge = 0xfffffff0;
  std::memcpy(strings.data(), &huge, 4);  // the string table's count
  EXPECT_THROW(spool_format::decode_payload(strings, "test"), SpoolError);
  std::string truncated = payload.substr(0, payload.size() / 2);
  EXPECT_THROW(spool_format::decode_payload(truncated, "test"), SpoolError);
}

}  // namespace
}  // namespace fructosa::agent
