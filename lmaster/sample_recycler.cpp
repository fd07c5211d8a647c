#include "sample_recycler.h"

#include <mutex>
#include <utility>

namespace fructosa::master {

struct SampleRecycler::Returns {
  std::mutex mutex;
  std::vector<std::vector<Sample>> rounds;
};

SampleRecycler::SampleRecycler() : returns_(std::make_shared<Returns>()) {}

SharedSamples SampleRecycler::share(std::vector<Sample>&& round) {
  // The deleter runs on whichever thread lets go last (an output's, or this one's).
  return SharedSamples(new std::vector<Sample>(std::move(round)),
                       [returns = returns_](const std::vector<Sample>* shared) {
                         std::unique_ptr<std::vector<Sample>> round(const_cast<std::vector<Sample>*>(shared));
                         {
                           std::lock_guard lock(returns->mutex);
                           if (returns->rounds.size() < kKeptRounds) {
                             returns->rounds.push_back(std::move(*round));
                             return;
                           }
                         }
                         // Freed here, outside the lock.
                       });
}

ReusableSamples& SampleRecycler::reusable() {
  if (!reusable_.empty()) return reusable_;
  std::vector<Sample> came_back;
  {
    std::lock_guard lock(returns_->mutex);
    if (returns_->rounds.empty()) return reusable_;
    came_back = std::move(returns_->rounds.back());
    returns_->rounds.pop_back();
  }
  // What is left of the used-up round are moved-from shells: its vector's room is kept for the
  // next round.
  reusable_.samples.clear();
  if (room_.capacity() < reusable_.samples.capacity()) room_ = std::move(reusable_.samples);
  reusable_.samples = std::move(came_back);
  reusable_.next = 0;
  return reusable_;
}

std::vector<Sample> SampleRecycler::next_round() {
  std::vector<Sample> round = std::move(room_);
  room_ = {};
  round.clear();
  if (round.capacity() == 0) round.reserve(256);
  return round;
}

std::size_t SampleRecycler::waiting() const {
  std::lock_guard lock(returns_->mutex);
  return returns_->rounds.size();
}

}  // namespace fructosa::master
