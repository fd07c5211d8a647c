// Cap'n Proto's packed stream encoding of a message (the encoding spec's "Packing"), written
// here rather than with capnp::writePackedMessage, which goes through an output stream a byte at
// a time: it ran for every batch an agent sends, and its packing, the buffer it grows and the
// copy out of it were a fifth of an agent's encoding work per point (callgrind). The reading
// side is codec.cpp's unpack(); capnp's own PackedMessageReader reads it too (the test).
#pragma once

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

}  // namespace fructosa
