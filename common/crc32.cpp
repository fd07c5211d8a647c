#include "crc32.h"

#include <zlib.h>

namespace fructosa {

// zlib's: the same CRC, several times faster than a byte-wise table (the journal checksums
// every point lmaster receives).
std::uint32_t crc32(const void* data, std::size_t size) {
  return static_cast<std::uint32_t>(::crc32_z(0, static_cast<const Bytef*>(data), size));
}

}  // namespace fructosa
