// Placeholder while the elasticsearch output is being written (no shipped config enables it).
#include "elasticsearch_output.h"

#include <stdexcept>

namespace fructosa::master {

const OptionTable& elasticsearch_options() {
  static const OptionTable table;
  return table;
}

std::unique_ptr<Output> make_elasticsearch_output(const Options&, const MetricInfoStore&) {
  throw std::runtime_error("the elasticsearch output is not written yet");
}

}  // namespace fructosa::master
