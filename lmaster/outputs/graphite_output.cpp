// Placeholder while the graphite output is being written (no shipped config enables it).
#include "graphite_output.h"

#include <stdexcept>

namespace fructosa::master {

const OptionTable& graphite_options() {
  static const OptionTable table;
  return table;
}

std::unique_ptr<Output> make_graphite_output(const Options&, const MetricInfoStore&) {
  throw std::runtime_error("the graphite output is not written yet");
}

}  // namespace fructosa::master
