// fructosa-report's direct reading of chunks (report/hdf5_chunks.h): which datasets it decodes
// itself, that it decodes them as HDF5 does (shuffled 8-byte numbers by 16, by 8 and one by one,
// strings, edge chunks, unfiltered chunks), that the columns read through it are the same as read
// with H5Dread, and its pool's tasks.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hdf5_chunks.h"
#include "hdf5_tables.h"
#include "report_hdf5_test_support.h"

namespace fructosa::report {
namespace {

using namespace hdf5_source_test;
using hdf5_read::ChunkDecoder;
using hdf5_read::first_row_at;
using hdf5_read::Handle;
using hdf5_read::latest_texts;
using hdf5_read::NumberColumn;
using hdf5_read::open_file;
using hdf5_read::open_numbers;
using hdf5_read::open_text;
using hdf5_read::OpenFile;
using hdf5_read::pick_numbers;
using hdf5_read::pick_texts;
using hdf5_read::run_parallel;
using hdf5_read::TextColumn;

// 27 rows a chunk: 16 elements unshuffled together, then 8, then 3 one by one; 70 rows: two
// full chunks and an edge chunk.
constexpr Storage kOddChunks{27, true, 6, false};
constexpr hsize_t kRows = 70;

struct Made {
  TempDir dir;
  std::string path = dir.file("chunks.h5");
  std::vector<double> reals;
  std::vector<std::int64_t> integers;
  std::vector<std::string> texts;
  Made() {
    for (hsize_t i = 0; i < kRows; ++i) {
      reals.push_back(i % 7 == 3 ? kNaN : 1.5e9 + 0.25 * static_cast<double>(i * i));
      integers.push_back(static_cast<std::int64_t>(i) * -1'000'003 + (std::int64_t{1} << 50));
      texts.push_back("node" + std::to_string(i % 13));
    }
    HandMade file(path);
    hid_t group = file.group("/T");
    file.numbers(group, "shuffled", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, reals, "", kOddChunks);
    file.numbers(group, "int64", H5T_STD_I64LE, H5T_NATIVE_INT64, integers, "", kOddChunks);
    file.numbers(group, "deflated", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, reals, "", {27, false, 1, false});
    file.numbers(group, "unfiltered", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, reals, "", {27, false, -1, false});
    file.numbers(group, "checksummed", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, reals, "", {27, true, 6, true});
    file.numbers(group, "contiguous", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, reals);
    file.numbers(group, "big_endian", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, reals, "", kOddChunks);
    file.texts(group, "text", texts, kOddChunks);
  }
};

Handle open_dataset(const OpenFile& file, const std::string& path) {
  return Handle(H5Dopen2(file.file.get(), path.c_str(), H5P_DEFAULT), H5Dclose);
}

TEST(ReportHdf5Chunks, DecodesOnlyWhatItDecodesAsHdf5Does) {
  Made made;
  const OpenFile file = open_file(made.path, std::chrono::seconds(1));
  ASSERT_TRUE(file.closed);
  for (const char* link : {"shuffled", "deflated", "unfiltered"})
    EXPECT_TRUE(ChunkDecoder::open(open_dataset(file, std::string("/T/") + link).get(), H5T_NATIVE_DOUBLE)) << link;
  EXPECT_TRUE(ChunkDecoder::open(open_dataset(file, "/T/int64").get(), H5T_NATIVE_INT64));
  EXPECT_FALSE(ChunkDecoder::open(open_dataset(file, "/T/int64").get(), H5T_NATIVE_DOUBLE)) << "another type";
  EXPECT_FALSE(ChunkDecoder::open(open_dataset(file, "/T/checksummed").get(), H5T_NATIVE_DOUBLE)) << "fletcher32";
  EXPECT_FALSE(ChunkDecoder::open(open_dataset(file, "/T/contiguous").get(), H5T_NATIVE_DOUBLE)) << "no chunks";
  EXPECT_FALSE(ChunkDecoder::open(open_dataset(file, "/T/big_endian").get(), H5T_NATIVE_DOUBLE));

  // Every chunk decoded here is what H5Dread reads.
  const Handle shuffled = open_dataset(file, "/T/shuffled");
  const auto decoder = ChunkDecoder::open(shuffled.get(), H5T_NATIVE_DOUBLE);
  ASSERT_TRUE(decoder);
  EXPECT_EQ(decoder->chunk_rows(), 27u);
  std::vector<double> decoded(81);
  ASSERT_TRUE(decoder->read(shuffled.get(), {2, 0, 1}, [&](std::size_t k, const unsigned char* bytes) {
    const hsize_t chunk = std::vector<hsize_t>{2, 0, 1}[k];
    std::memcpy(decoded.data() + chunk * 27, bytes, 27 * sizeof(double));
  }));
  decoded.resize(kRows);
  EXPECT_TRUE(same_values(decoded, made.reals));
}

// Columns read through the chunks (a closed file) and with H5Dread (the same file taken for one
// being written) give the same values, whatever rows are picked.
TEST(ReportHdf5Chunks, ColumnsReadDirectlyEqualThoseReadByHdf5) {
  Made made;
  OpenFile direct = open_file(made.path, std::chrono::seconds(1));
  OpenFile plain = open_file(made.path, std::chrono::seconds(1));
  plain.closed = false;
  const Handle group(H5Gopen2(direct.file.get(), "/T", H5P_DEFAULT), H5Gclose);
  const Handle plain_group(H5Gopen2(plain.file.get(), "/T", H5P_DEFAULT), H5Gclose);
  const std::vector<hsize_t> picked{0, 1, 15, 16, 26, 27, 40, 53, 54, 69, 70, 500};  // past the end: NaN
  for (const char* link : {"shuffled", "deflated", "unfiltered", "checksummed", "int64"}) {
    const NumberColumn a = open_numbers(direct, group.get(), link, link);
    const NumberColumn b = open_numbers(plain, plain_group.get(), link, link);
    EXPECT_EQ(a.direct.has_value(), std::string(link) != "checksummed") << link;
    EXPECT_FALSE(b.direct) << link;
    EXPECT_TRUE(same_values(pick_numbers(direct, a, picked), pick_numbers(plain, b, picked))) << link;
  }
  const NumberColumn reals = open_numbers(direct, group.get(), "shuffled", "shuffled");
  std::vector<double> block(40);
  reals.read_block(direct, H5T_NATIVE_DOUBLE, sizeof(double), 20, 40, block.data());
  EXPECT_TRUE(same_values(block, std::vector<double>(made.reals.begin() + 20, made.reals.begin() + 60)));
  const NumberColumn integers = open_numbers(direct, group.get(), "int64", "int64");
  std::vector<std::int64_t> exact(kRows);
  integers.read_block(direct, H5T_NATIVE_INT64, sizeof(std::int64_t), 0, kRows, exact.data());
  EXPECT_EQ(exact, made.integers) << "int64 read as int64: no rounding through double";

  const TextColumn text = open_text(direct, group.get(), "text", "text");
  ASSERT_TRUE(text.direct);
  const std::vector<hsize_t> rows{3, 30, 69};
  EXPECT_EQ(pick_texts(direct, text, rows), (std::vector<std::string>{made.texts[3], made.texts[30], made.texts[69]}));
  // The latest non-empty text of each group, read from the end.
  const auto latest = latest_texts(direct, text, {1, 2, 40, 41, 68}, {0, 1, 0, 1, 1}, 3);
  ASSERT_TRUE(latest[0] && latest[1]);
  EXPECT_EQ(*latest[0], std::make_pair(std::size_t{2}, made.texts[40]));
  EXPECT_EQ(*latest[1], std::make_pair(std::size_t{4}, made.texts[68]));
  EXPECT_FALSE(latest[2]) << "a group without rows";
}

TEST(ReportHdf5Chunks, TheFirstRowAtATimeIsFoundByBisection) {
  TempDir dir;
  const std::string path = dir.file("times.h5");
  std::vector<std::int64_t> times;
  for (std::int64_t i = 0; i < 100; ++i) times.push_back(1000 + 10 * i);
  times.insert(times.end(), 5, 0);  // grown, never written: after every time
  {
    HandMade file(path);
    file.numbers(file.group("/T"), "time", H5T_STD_I64LE, H5T_NATIVE_INT64, times, "", kOddChunks);
  }
  const OpenFile file = open_file(path, std::chrono::seconds(1));
  const Handle group(H5Gopen2(file.file.get(), "/T", H5P_DEFAULT), H5Gclose);
  const NumberColumn time = open_numbers(file, group.get(), "time", "time");
  EXPECT_EQ(first_row_at(file, time, time.rows, 0), 0u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1000), 0u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1001), 1u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1270), 27u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1990), 99u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1991), 100u);
  EXPECT_EQ(first_row_at(file, time, time.rows, 1'000'000), 100u);
}

TEST(ReportHdf5Chunks, RunsEveryTaskOnceAndThrowsWhatATaskThrew) {
  std::vector<std::atomic<int>> runs(100);
  run_parallel(runs.size(), [&](std::size_t i) { ++runs[i]; });
  for (const auto& count : runs) EXPECT_EQ(count.load(), 1);
  std::atomic<int> done{0};
  EXPECT_THROW(run_parallel(10,
                            [&](std::size_t i) {
                              ++done;
                              if (i == 3) throw std::runtime_error("task 3");
                            }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 10) << "the other tasks still ran";
  run_parallel(0, [](std::size_t) { FAIL(); });
}

}  // namespace
}  // namespace fructosa::report
