#include "capnp_packing.h"

#include <capnp/message.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fructosa {
namespace {

constexpr std::size_t kWord = 8;
constexpr std::size_t kMaxRun = 255;

// The tag of a word: bit i set when its byte i is not zero. On a little-endian host in a few
// operations on the whole word: each byte's high bit is set when the byte is not zero, and a
// multiplication gathers those eight bits into the top byte.
unsigned tag_of(const unsigned char* word) {
  if constexpr (std::endian::native == std::endian::little) {
    std::uint64_t bits;
    std::memcpy(&bits, word, sizeof bits);
    constexpr std::uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
    std::uint64_t nonzero = (((bits & kLow7) + kLow7) | bits) & ~kLow7;
    return static_cast<unsigned>(((nonzero >> 7) * 0x0102040810204080ull) >> 56);
  } else {
    unsigned tag = 0;
    for (unsigned byte = 0; byte < kWord; ++byte) tag |= static_cast<unsigned>(word[byte] != 0) << byte;
    return tag;
  }
}

constexpr auto kBitsSet = [] {
  std::array<std::uint8_t, 256> bits{};
  for (unsigned tag = 0; tag < 256; ++tag) bits[tag] = static_cast<std::uint8_t>(std::popcount(tag));
  return bits;
}();

unsigned zero_bytes(const unsigned char* word) { return kWord - kBitsSet[tag_of(word)]; }

// Packs `words` words at `in` to `out` (room for 10 bytes a word: a tag, 8 bytes, a count);
// returns the end of what it wrote.
unsigned char* pack_words(const unsigned char* in, std::size_t words, unsigned char* out) {
  const unsigned char* end = in + words * kWord;
  while (in < end) {
    const unsigned tag = tag_of(in);
    *out++ = static_cast<unsigned char>(tag);
    if (tag == 0x00) {
      in += kWord;
      std::size_t run = 0;
      while (in < end && run < kMaxRun && tag_of(in) == 0) in += kWord, ++run;
      *out++ = static_cast<unsigned char>(run);
      continue;
    }
    for (unsigned byte = 0; byte < kWord; ++byte)
      if (in[byte]) *out++ = in[byte];
    in += kWord;
    if (tag == 0xff) {
      const unsigned char* run_start = in;
      std::size_t run = 0;
      while (in < end && run < kMaxRun && zero_bytes(in) <= 1) in += kWord, ++run;
      *out++ = static_cast<unsigned char>(run);
      std::memcpy(out, run_start, run * kWord);
      out += run * kWord;
    }
  }
  return out;
}

}  // namespace

std::string pack_message(capnp::MessageBuilder& builder) {
  auto segments = builder.getSegmentsForOutput();
  // The stream's segment table: u32 count - 1, u32 size in words per segment, padded to a word;
  // little-endian like every word of the message.
  std::vector<unsigned char> table(((segments.size() + 2) / 2) * kWord, 0);
  auto put_u32 = [&](std::size_t at, std::uint32_t value) {
    for (int i = 0; i < 4; ++i, value >>= 8) table[at + i] = static_cast<unsigned char>(value & 0xff);
  };
  put_u32(0, static_cast<std::uint32_t>(segments.size() - 1));
  std::size_t words = table.size() / kWord;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    put_u32(4 * (i + 1), static_cast<std::uint32_t>(segments[i].size()));
    words += segments[i].size();
  }
  std::string packed(words * (kWord + 2), '\0');
  auto* start = reinterpret_cast<unsigned char*>(packed.data());
  unsigned char* out = pack_words(table.data(), table.size() / kWord, start);
  for (const auto& segment : segments)
    out = pack_words(reinterpret_cast<const unsigned char*>(segment.begin()), segment.size(), out);
  packed.resize(static_cast<std::size_t>(out - start));
  return packed;
}

}  // namespace fructosa
