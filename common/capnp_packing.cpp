#include "capnp_packing.h"

#include <capnp/message.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec.h"

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

// Bits set in each tag byte (std::popcount is a libgcc call on the baseline x86-64 target: no
// POPCNT instruction).
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

std::size_t unpack_message(const unsigned char* in, std::size_t size, std::uint64_t* out) {
  constexpr std::size_t kMaxWords = kMaxMessageBytes / sizeof(std::uint64_t);
  std::size_t words = 0;
  std::size_t at = 0;
  auto truncated = [] { return ProtocolError("undecodable message: packed data ends inside a word or run"); };
  while (at < size) {
    unsigned tag = in[at++];
    auto present = static_cast<std::size_t>(kBitsSet[tag]);
    if (present > size - at) throw truncated();
    if (!out) {
      at += present;  // counting: the bytes need not be looked at
    } else if (tag == 0xff) {
      std::memcpy(out + words, in + at, sizeof(std::uint64_t));
      at += sizeof(std::uint64_t);
    } else {
      unsigned char word[8];
      for (unsigned bit = 0; bit < 8; ++bit) word[bit] = (tag >> bit) & 1u ? in[at++] : 0;
      std::memcpy(out + words, word, sizeof word);
    }
    ++words;
    if (tag == 0x00 || tag == 0xff) {
      if (at == size) throw truncated();
      std::size_t run = in[at++];
      if (tag == 0x00) {
        if (out) std::memset(out + words, 0, run * sizeof(std::uint64_t));
      } else {
        if (run * sizeof(std::uint64_t) > size - at) throw truncated();
        if (out) std::memcpy(out + words, in + at, run * sizeof(std::uint64_t));
        at += run * sizeof(std::uint64_t);
      }
      words += run;
    }
    if (words > kMaxWords)
      throw ProtocolError(fmt::format("message unpacks to more than {} bytes", kMaxMessageBytes));
  }
  return words;
}

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
