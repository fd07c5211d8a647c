// hdf5_chunks.h: chunks decoded on a small pool of threads, with libdeflate where it was found
// at build time (FRUCTOSA_HAVE_LIBDEFLATE; it inflates about twice as fast as zlib).
#include "hdf5_chunks.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#ifdef FRUCTOSA_HAVE_LIBDEFLATE
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

#include "hdf5_basics.h"

namespace fructosa::report::hdf5_read {

namespace {

using h5::Handle;

// --- the pool -----------------------------------------------------------------------------------

// Workers that wait for a batch of tasks and take them one at a time with the caller.
class Pool {
 public:
  explicit Pool(unsigned workers) {
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      wake_.notify_all();
    }
    for (auto& thread : threads_) thread.join();
  }

  void run(std::size_t count, const std::function<void(std::size_t)>& task) {
    if (count == 0) return;
    if (count == 1 || threads_.empty()) {
      for (std::size_t i = 0; i < count; ++i) task(i);
      return;
    }
    std::lock_guard one_at_a_time(run_mutex_);
    auto batch = std::make_shared<Batch>(task, count);
    {
      std::lock_guard lock(mutex_);
      batch_ = batch;
      ++generation_;
      wake_.notify_all();
    }
    take(*batch);
    {
      std::unique_lock lock(batch->mutex);
      batch->finished.wait(lock, [&] { return batch->done == batch->count; });
    }
    {
      std::lock_guard lock(mutex_);
      batch_.reset();
    }
    if (batch->error) std::rethrow_exception(batch->error);
  }

 private:
  struct Batch {
    Batch(const std::function<void(std::size_t)>& t, std::size_t n) : task(t), count(n) {}
    const std::function<void(std::size_t)>& task;
    const std::size_t count;
    std::atomic<std::size_t> next{0};
    std::size_t done = 0;  // under mutex
    std::exception_ptr error;
    std::mutex mutex;
    std::condition_variable finished;
  };

  static void take(Batch& batch) {
    for (std::size_t i; (i = batch.next.fetch_add(1)) < batch.count;) {
      std::exception_ptr error;
      try {
        batch.task(i);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(batch.mutex);
      if (error && !batch.error) batch.error = error;
      if (++batch.done == batch.count) batch.finished.notify_all();
    }
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Batch> batch;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && batch_); });
        if (stop_) return;
        seen = generation_;
        batch = batch_;
      }
      take(*batch);
    }
  }

  std::vector<std::thread> threads_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_;
  std::shared_ptr<Batch> batch_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool pool(std::max(1u, std::min(kDecodeThreads, std::thread::hardware_concurrency())) - 1);
  return pool;
}

// --- decoding -----------------------------------------------------------------------------------

// Inflates a zlib stream (HDF5's deflate filter) of exactly `size` bytes; false when it is not one.
bool inflate(const unsigned char* in, std::size_t in_size, unsigned char* out, std::size_t size) {
#ifdef FRUCTOSA_HAVE_LIBDEFLATE
  struct Free {
    void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
  };
  thread_local std::unique_ptr<libdeflate_decompressor, Free> decompressor(
      libdeflate_alloc_decompressor());
  if (!decompressor) throw std::bad_alloc();
  std::size_t actual = 0;
  return libdeflate_zlib_decompress(decompressor.get(), in, in_size, out, size, &actual) ==
             LIBDEFLATE_SUCCESS &&
         actual == size;
#else
  uLongf actual = size;
  return uncompress(out, &actual, in, in_size) == Z_OK && actual == size;
#endif
}

// The shuffle filter stores byte j of every element together: byte j of element e at j * n + e.
void unshuffle(const unsigned char* in, unsigned char* out, std::size_t elements,
               std::size_t element_size) {
  std::size_t e = 0;
#ifdef __SSE2__
  if (element_size == 8) {
    // 16 elements at a time: the planes' next 16 bytes interleaved by bytes, then by pairs of
    // bytes, then by 4 bytes (24 unpacks for 128 bytes).
    for (; e + 16 <= elements; e += 16) {
      __m128i p[8];
      for (std::size_t j = 0; j < 8; ++j)
        p[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j * elements + e));
      __m128i t[8], u[8];
      for (std::size_t j = 0; j < 4; ++j) {
        t[2 * j] = _mm_unpacklo_epi8(p[2 * j], p[2 * j + 1]);      // elements 0-7 of planes 2j, 2j+1
        t[2 * j + 1] = _mm_unpackhi_epi8(p[2 * j], p[2 * j + 1]);  // elements 8-15
      }
      for (std::size_t h = 0; h < 2; ++h)    // planes 0-3, then 4-7
        for (std::size_t k = 0; k < 2; ++k) {  // elements 0-7, then 8-15
          const __m128i a = t[4 * h + k], b = t[4 * h + 2 + k];
          u[4 * h + 2 * k] = _mm_unpacklo_epi16(a, b);
          u[4 * h + 2 * k + 1] = _mm_unpackhi_epi16(a, b);
        }
      auto* to = reinterpret_cast<__m128i*>(out + e * 8);
      for (std::size_t k = 0; k < 4; ++k) {  // elements 4k .. 4k + 3
        _mm_storeu_si128(to + 2 * k, _mm_unpacklo_epi32(u[k], u[4 + k]));
        _mm_storeu_si128(to + 2 * k + 1, _mm_unpackhi_epi32(u[k], u[4 + k]));
      }
    }
  }
#endif
  if (element_size == 8) {
    // 8 elements at a time: the 8 planes' next 8 bytes are an 8 x 8 byte matrix, transposed in
    // three steps of swapping 1-, 2- and 4-byte blocks (about 4 times faster than byte by byte).
    for (; e + 8 <= elements; e += 8) {
      std::uint64_t x[8];
      for (std::size_t j = 0; j < 8; ++j) std::memcpy(&x[j], in + j * elements + e, 8);
      for (std::size_t j = 0; j < 8; j += 2) {
        const std::uint64_t a = x[j], b = x[j + 1];
        x[j] = (a & 0x00FF00FF00FF00FFULL) | ((b << 8) & 0xFF00FF00FF00FF00ULL);
        x[j + 1] = ((a >> 8) & 0x00FF00FF00FF00FFULL) | (b & 0xFF00FF00FF00FF00ULL);
      }
      for (std::size_t j : {0, 1, 4, 5}) {
        const std::uint64_t a = x[j], b = x[j + 2];
        x[j] = (a & 0x0000FFFF0000FFFFULL) | ((b << 16) & 0xFFFF0000FFFF0000ULL);
        x[j + 2] = ((a >> 16) & 0x0000FFFF0000FFFFULL) | (b & 0xFFFF0000FFFF0000ULL);
      }
      for (std::size_t j = 0; j < 4; ++j) {
        const std::uint64_t a = x[j], b = x[j + 4];
        x[j] = (a & 0x00000000FFFFFFFFULL) | (b << 32);
        x[j + 4] = (a >> 32) | (b & 0xFFFFFFFF00000000ULL);
      }
      std::memcpy(out + e * 8, x, sizeof x);
    }
  }
  for (; e < elements; ++e)
    for (std::size_t j = 0; j < element_size; ++j) out[e * element_size + j] = in[j * elements + e];
}

}  // namespace

void run_parallel(std::size_t count, const std::function<void(std::size_t)>& task) {
  pool().run(count, task);
}

std::optional<ChunkDecoder> ChunkDecoder::open(hid_t dataset, hid_t memory_type) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  Handle space(H5Dget_space(dataset), H5Sclose);
  Handle creation(H5Dget_create_plist(dataset), H5Pclose);
  if (!type || !space || !creation || H5Sget_simple_extent_ndims(space.get()) != 1) return std::nullopt;
  ChunkDecoder decoder;
  if (H5Tget_class(memory_type) == H5T_STRING) {
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
      return std::nullopt;
  } else if (H5Tequal(type.get(), memory_type) <= 0) {
    return std::nullopt;
  }
  decoder.memory_type_ = memory_type;
  decoder.element_size_ = H5Tget_size(type.get());
  if (decoder.element_size_ == 0 || H5Pget_layout(creation.get()) != H5D_CHUNKED ||
      H5Pget_chunk(creation.get(), 1, &decoder.chunk_rows_) != 1 || decoder.chunk_rows_ == 0)
    return std::nullopt;
  const int filters = H5Pget_nfilters(creation.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t values = 0;
    const H5Z_filter_t filter = H5Pget_filter2(creation.get(), static_cast<unsigned>(i), &flags,
                                               &values, nullptr, 0, nullptr, &config);
    if (filter == H5Z_FILTER_SHUFFLE && !decoder.shuffled_ && !decoder.deflated_) {
      decoder.shuffled_ = true;
      decoder.shuffle_bit_ = 1u << i;
    } else if (filter == H5Z_FILTER_DEFLATE && !decoder.deflated_) {
      decoder.deflated_ = true;
      decoder.deflate_bit_ = 1u << i;
    } else {
      return std::nullopt;  // another filter, or these in another order
    }
  }
  return decoder;
}

bool ChunkDecoder::read(hid_t dataset, const std::vector<hsize_t>& chunks,
                        const std::function<void(std::size_t, const unsigned char*)>& use) const {
  // A batch's stored chunks are read here (HDF5 on this thread only), then decoded in parallel.
  constexpr std::size_t kBatch = 32;
  const std::size_t bytes = chunk_rows_ * element_size_;
  std::vector<std::vector<unsigned char>> stored(std::min(kBatch, chunks.size()));
  std::vector<std::uint32_t> masks(stored.size());
  for (std::size_t first = 0; first < chunks.size(); first += kBatch) {
    const std::size_t count = std::min(kBatch, chunks.size() - first);
    for (std::size_t k = 0; k < count; ++k) {
      const hsize_t offset = chunks[first + k] * chunk_rows_;
      hsize_t size = 0;
      if (H5Dget_chunk_storage_size(dataset, &offset, &size) < 0 || size == 0) return false;
      stored[k].resize(size);
      if (H5Dread_chunk(dataset, H5P_DEFAULT, &offset, &masks[k], stored[k].data()) < 0)
        return false;
      const bool inflated = deflated_ && !(masks[k] & deflate_bit_);
      if ((masks[k] & ~(shuffle_bit_ | deflate_bit_)) != 0 || (!inflated && size != bytes))
        return false;
    }
    run_parallel(count, [&](std::size_t k) {
      thread_local std::vector<unsigned char> inflated_bytes, unshuffled;
      const unsigned char* data = stored[k].data();
      if (deflated_ && !(masks[k] & deflate_bit_)) {
        inflated_bytes.resize(bytes);
        if (!inflate(data, stored[k].size(), inflated_bytes.data(), bytes))
          throw std::runtime_error("a chunk at row " + std::to_string(chunks[first + k] * chunk_rows_) +
                                   " does not inflate to its size");
        data = inflated_bytes.data();
      }
      if (shuffled_ && !(masks[k] & shuffle_bit_) && element_size_ > 1) {
        unshuffled.resize(bytes);
        unshuffle(data, unshuffled.data(), chunk_rows_, element_size_);
        data = unshuffled.data();
      }
      use(first + k, data);
    });
  }
  return true;
}

}  // namespace fructosa::report::hdf5_read
