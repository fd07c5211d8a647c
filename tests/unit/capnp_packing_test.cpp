// common/capnp_packing.h: fructosa's own packing of Cap'n Proto messages must read back, with
// Cap'n Proto's own reader and with ours, as the words the builder holds, whatever the bytes
// (runs of zero words and of nonzero words longer than a run count takes, words with one or two
// zero bytes) and however many segments the message has.
#include <gtest/gtest.h>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "capnp_packing.h"

using namespace fructosa;

namespace {

// The message's words as Cap'n Proto's stream framing lays them out, unpacked from `packed`
// by capnp's own reader and written again unpacked.
std::string read_back_with_capnp(const std::string& packed) {
  kj::ArrayInputStream input(kj::arrayPtr(reinterpret_cast<const kj::byte*>(packed.data()), packed.size()));
  std::string words;
  {
    capnp::PackedMessageReader reader(input, {.traversalLimitInWords = 1u << 30});
    capnp::MallocMessageBuilder copy;
    copy.setRoot(reader.getRoot<capnp::AnyPointer>());
    auto flat = capnp::messageToFlatArray(copy);
    words.assign(reinterpret_cast<const char*>(flat.begin()), flat.size() * sizeof(capnp::word));
  }  // the reader reads its last segments lazily, and what it did not need when destroyed
  kj::byte left;
  EXPECT_EQ(input.tryRead(&left, 0, 1), 0u) << "bytes left after the message";
  return words;
}

std::string flat(capnp::MessageBuilder& builder) {
  capnp::MallocMessageBuilder copy;
  copy.setRoot(builder.getRoot<capnp::AnyPointer>().asReader());
  auto words = capnp::messageToFlatArray(copy);
  return {reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word)};
}

// Blobs whose bytes are zero with probability `zeros`.
void fill(capnp::Data::Builder blob, double zeros, std::mt19937_64& random) {
  std::bernoulli_distribution zero(zeros);
  for (auto& byte : blob) byte = zero(random) ? 0 : static_cast<kj::byte>(1 + random() % 255);
}

}  // namespace

TEST(CapnpPacking, CapnpsReaderReadsBackEveryWordOfOneSegment) {
  std::mt19937_64 random(7);
  for (double zeros : {0.0, 0.05, 0.2, 0.5, 0.9, 1.0}) {
    for (unsigned size : {0u, 1u, 7u, 8u, 9u, 100u, 255u * 8, 256u * 8, 257u * 8 + 3, 5000u}) {
      capnp::MallocMessageBuilder builder;
      fill(builder.getRoot<capnp::AnyPointer>().initAs<capnp::Data>(size), zeros, random);
      std::string packed = pack_message(builder);
      EXPECT_EQ(read_back_with_capnp(packed), flat(builder)) << "zeros " << zeros << ", size " << size;
      // And with our own unpacker, which decode() uses: counting first, then filling.
      const auto* bytes = reinterpret_cast<const unsigned char*>(packed.data());
      std::vector<std::uint64_t> words(unpack_message(bytes, packed.size(), nullptr));
      ASSERT_EQ(unpack_message(bytes, packed.size(), words.data()), words.size());
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8), flat(builder));
      // Never larger than capnp's own packing by more than a byte per 8 words of the message.
      kj::VectorOutputStream theirs;
      capnp::writePackedMessage(theirs, builder);
      EXPECT_LE(packed.size(), theirs.getArray().size() + size / 64 + 2) << "zeros " << zeros << ", size " << size;
    }
  }
}

TEST(CapnpPacking, ManySegmentsAndLongRunsOfZeroAndNonzeroWords) {
  std::mt19937_64 random(11);
  // Small fixed segments: the blobs land in several segments, so the segment table has many
  // entries (an odd and an even count both occur).
  for (unsigned blobs : {1u, 2u, 3u, 6u}) {
    capnp::MallocMessageBuilder builder(64, capnp::AllocationStrategy::FIXED_SIZE);
    auto list = builder.getRoot<capnp::AnyPointer>().initAs<capnp::List<capnp::Data>>(blobs);
    for (unsigned i = 0; i < blobs; ++i) fill(list.init(i, 600 + 300 * i), i % 2 ? 0.0 : 1.0, random);
    ASSERT_GT(builder.getSegmentsForOutput().size(), 1u);
    EXPECT_EQ(read_back_with_capnp(pack_message(builder)), flat(builder)) << blobs << " blobs";
  }
  capnp::MallocMessageBuilder zeros;  // 4000 zero words: runs of 256 and what is left
  zeros.getRoot<capnp::AnyPointer>().initAs<capnp::Data>(4000 * 8);
  std::string packed = pack_message(zeros);
  EXPECT_EQ(read_back_with_capnp(packed), flat(zeros));
  EXPECT_LT(packed.size(), 64u);
}
