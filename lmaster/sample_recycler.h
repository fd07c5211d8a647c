// Rounds of samples go to the outputs as one shared, read-only vector each. When the last output
// lets go of one, its samples come back here whole, strings and vectors with their memory, and
// the receiving thread fills them again instead of allocating: a vector per sample and a string
// per key of more than 15 bytes were allocated there and freed later by an output's thread
// (0.46 allocations per point; docs/performance.md, "Session 25: samples filled again").
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "codec.h"
#include "output_runner.h"

namespace fructosa::master {

class SampleRecycler {
 public:
  // At most this many rounds wait here to be filled again; past that a round is freed as before
  // (its samples are the memory of at most a few rounds: bounded, like the rounds themselves).
  static constexpr std::size_t kKeptRounds = 2;

  SampleRecycler();

  // `round` for the outputs; its samples come back when the last one lets go of it.
  SharedSamples share(std::vector<Sample>&& round);

  // Samples to fill again (MasterDictionary::resolve_batch takes them in order): a round that
  // came back, whenever the last one has been used up.
  ReusableSamples& reusable();

  // An empty vector for the next round, with the room of one that came back when there is one.
  std::vector<Sample> next_round();

  // Rounds waiting to be filled again (tests).
  std::size_t waiting() const;

 private:
  struct Returns;
  std::shared_ptr<Returns> returns_;  // shared with the rounds' deleters: they may outlive this
  ReusableSamples reusable_;
  std::vector<Sample> room_;  // a used-up round's vector: its capacity, no samples
};

}  // namespace fructosa::master
