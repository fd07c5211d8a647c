// CRC-32 (IEEE 802.3, reflected, as zlib computes it): the checksum of the agent's spool and the
// master's journal records.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fructosa {

std::uint32_t crc32(const void* data, std::size_t size);

}  // namespace fructosa
