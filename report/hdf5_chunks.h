// Reading the chunks of a closed file's datasets without HDF5's filter pipeline: the stored bytes
// of each chunk (H5Dread_chunk) are inflated here with libdeflate (zlib where it is missing) and
// unshuffled, on kDecodeThreads threads. lmaster's closed files are shuffle + deflate
// (docs/hdf5.md) and a report inflates every chunk of its job's tables (docs/performance.md:
// zlib's inflate was half of job()'s time). Only datasets this decodes exactly are read so
// (chunked, 1-D, the filters shuffle and deflate or none, stored in the memory type's layout);
// any other is read with H5Dread. Internal to hdf5_tables.cpp.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace fructosa::report::hdf5_read {

// Threads that decode chunks, the calling one included.
inline constexpr unsigned kDecodeThreads = 2;

// Runs task(0) ... task(count - 1) on the calling thread and the decoding pool's, and returns
// once all are done; the first exception a task throws is thrown here. Tasks must not call HDF5
// (the library is not thread-safe).
void run_parallel(std::size_t count, const std::function<void(std::size_t)>& task);

// How a dataset's chunks are stored, for reading them directly.
class ChunkDecoder {
 public:
  // nullopt when the dataset cannot be read directly: not chunked in one dimension, a filter
  // other than shuffle and deflate, or stored in another type than `memory_type` (a fixed-length
  // string type is read as stored).
  static std::optional<ChunkDecoder> open(hid_t dataset, hid_t memory_type);

  hsize_t chunk_rows() const { return chunk_rows_; }
  // Whether it decodes to `memory_type` (the very id it was opened with).
  bool reads_as(hid_t memory_type) const { return memory_type == memory_type_; }
  std::size_t element_size() const { return element_size_; }

  // Decodes the chunks whose indexes are in `chunks` (chunk i holds rows [i * chunk_rows(),
  // (i + 1) * chunk_rows())) and calls use(k, bytes) with chunk chunks[k]'s chunk_rows()
  // elements, from several threads at once (`use` must only write what is chunk k's). False,
  // before any `use`, when a chunk is not stored as the dataset says (missing, a filter skipped):
  // read it with H5Dread then. Throws std::runtime_error when stored bytes do not decode.
  bool read(hid_t dataset, const std::vector<hsize_t>& chunks,
            const std::function<void(std::size_t, const unsigned char*)>& use) const;

 private:
  hid_t memory_type_ = H5I_INVALID_HID;
  hsize_t chunk_rows_ = 0;
  std::size_t element_size_ = 0;
  bool shuffled_ = false, deflated_ = false;
  unsigned shuffle_bit_ = 0, deflate_bit_ = 0;  // the filters' bits in a chunk's filter mask
};

}  // namespace fructosa::report::hdf5_read
