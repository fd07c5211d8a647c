// A hash table from 64-bit hashes to small values, open addressing with linear probing: one
// array, no node per entry, no division. The Prometheus output keeps one entry per series (a
// few hundred thousand, looked up per point); std::unordered_map's node allocations, modulo and
// pointer chasing were most of its CPU at a million points per second (docs/performance.md).
// Keys are hashes already (mixed again for the slot); entries are only added, or removed all at
// once (clear, erase_if).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <algorithm>
#include <utility>
#include <vector>

namespace fructosa::master {

// A 64-bit hash of `text` continuing `seed`, 8 bytes at a time (its length mixed in, so that
// "a","bc" and "ab","c" differ). Not for untrusted keys that could be chosen to collide.
inline std::uint64_t hash_bytes(std::string_view text, std::uint64_t seed) {
  constexpr std::uint64_t k = 0x9E3779B97F4A7C15ull;
  std::uint64_t hash = (seed ^ text.size()) * k;
  const char* at = text.data();
  std::size_t left = text.size();
  auto mix = [&](std::uint64_t word) {
    hash = (hash ^ word) * 0xBF58476D1CE4E5B9ull;
    hash ^= hash >> 31;
  };
  for (; left >= 8; at += 8, left -= 8) {
    std::uint64_t word;
    std::memcpy(&word, at, 8);
    mix(word);
  }
  if (left > 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, at, left);
    mix(word);
  }
  return hash ^ (hash >> 29);
}

template <typename Value>
class FlatHashMap {
 public:
  struct Entry {
    std::uint64_t first = 0;
    Value second{};
    bool used = false;
  };

  std::size_t size() const { return size_; }
  void clear() {
    for (auto& entry : entries_) entry.used = false;
    size_ = 0;
  }
  Entry* find(std::uint64_t key) {
    if (entries_.empty()) return nullptr;
    for (std::size_t at = slot(key);; at = (at + 1) & mask_) {
      Entry& entry = entries_[at];
      if (!entry.used) return nullptr;
      if (entry.first == key) return &entry;
    }
  }
  // Asks the CPU to load the first slot `key` would be looked up in (a find coming shortly).
  void prefetch(std::uint64_t key) const {
    if (!entries_.empty()) __builtin_prefetch(&entries_[slot(key)]);
  }
  // The entry of `key`, added with `value` when absent (then `true`).
  std::pair<Entry*, bool> try_emplace(std::uint64_t key, Value value) {
    if (2 * (size_ + 1) > entries_.size()) grow();
    for (std::size_t at = slot(key);; at = (at + 1) & mask_) {
      Entry& entry = entries_[at];
      if (entry.used && entry.first == key) return {&entry, false};
      if (!entry.used) {
        entry = {key, std::move(value), true};
        ++size_;
        return {&entry, true};
      }
    }
  }
  Value& operator[](std::uint64_t key) { return try_emplace(key, Value{}).first->second; }
  template <typename Predicate>
  void erase_if(Predicate remove) {
    auto old = std::move(entries_);
    entries_.assign(old.size(), Entry{});
    size_ = 0;
    for (auto& entry : old)
      if (entry.used && !remove(entry)) try_emplace(entry.first, std::move(entry.second));
  }

 private:
  std::size_t slot(std::uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void grow() {
    std::size_t capacity = entries_.empty() ? 1024 : 2 * entries_.size();
    auto old = std::move(entries_);
    entries_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (auto& entry : old)
      if (entry.used) try_emplace(entry.first, std::move(entry.second));
  }

  std::vector<Entry> entries_;
  std::size_t size_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace fructosa::master
