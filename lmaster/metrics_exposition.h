// lmaster's own health for a Prometheus scrape ([lmaster] metrics_listen, metrics_endpoint.h):
// the `lmaster` sensor's sample in the Prometheus text exposition format (0.0.4, which
// OpenMetrics parsers read too). Each key is one metric family, named as the [prometheus]
// output names it (common/prometheus_name.h: `prometheus.sent` is
// fructosa_lmaster_prometheus_sent_total), with # HELP and # TYPE from lmaster's catalog
// (master_catalog.h) and the label host="<the master's host>", so that a scrape and
// remote_write give the same series names. Light: no Boost.
#pragma once

#include <string>
#include <string_view>

#include "metric.h"

namespace fructosa::master {

inline constexpr std::string_view kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

// `sample`'s metrics as exposition text (keys the catalog does not describe: gauges without
// unit, as the [prometheus] output sends them). Samples without a value (NaN) are written NaN.
std::string metrics_exposition(const Sample& sample);

// "127.0.0.1:9108", "[::1]:9108", "localhost:9108" -> host, port (0: any free port); false when
// the text is not HOST:PORT with a port of 0..65535.
bool split_listen_address(std::string_view text, std::string& host, unsigned& port);

}  // namespace fructosa::master
