// Cap'n Proto's packed stream encoding of a message (the encoding spec's "Packing"), both ways.
// Packing is written here rather than with capnp::writePackedMessage, which goes through an
// output stream a byte at a time: it ran for every batch an agent sends, and its packing, the
// buffer it grows and the copy out of it were a fifth of an agent's encoding work per point
// (callgrind); capnp's own PackedMessageReader reads ours (the test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace capnp {
class MessageBuilder;
}

namespace fructosa {

// The message framed as a stream (segment table, then the segments) and packed: each word is a
// tag byte (bit i: byte i is not zero) and its nonzero bytes; a zero word is followed by a
// count of further zero words, an all-nonzero word by a count of further words copied as they
// are (those with at most one zero byte, where a tag would save nothing).
std::string pack_message(capnp::MessageBuilder& builder);

// The packed bytes at `in` back into words at `out`; returns how many. With `out` null it only
// counts them, so decode() allocates its buffer once, at its real size, and never beyond
// kMaxMessageBytes. Unpacking before reading, rather than letting a PackedMessageReader read
// lazily from a stream, means a malformed message fails before any Cap'n Proto object exists
// (whose destructor would otherwise read on and print to stderr while unwinding). Throws
// ProtocolError (codec.h) on a word or run cut short, or past kMaxMessageBytes.
std::size_t unpack_message(const unsigned char* in, std::size_t size, std::uint64_t* out);

}  // namespace fructosa
