// [prometheus]: Prometheus remote_write 1.0 over libcurl (docs/prometheus.md).
//
// Each point (one metric value of a sample) is one Prometheus sample of the series
//   fructosa_<sensor>_<key>[_<unit>][_total]{host="node07", job_id="4242", <item labels>}
// (common/prometheus_name.h; job_id only for a job's samples; a text label "<item>.<name>" of
// the sample goes on the series of the keys under "<item>."). A request is a protobuf
// WriteRequest, snappy-compressed (block format), POSTed with the headers the specification
// requires. Within one request a series has at most one sample, and a series' samples leave in
// time order: a request sent again after a timeout is then accepted as it is (Prometheus takes
// a sample equal to the series' newest one), and Prometheus never sees a series go back in time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "output.h"

namespace fructosa::master {

const OptionTable& prometheus_options();
// Throws ConfigError for a bad value (URL, unreadable credentials_file, bearer_token_file).
std::unique_ptr<Output> make_prometheus_output(const Options& options,
                                               const MetricInfoStore& infos);

// The pieces below are what the output sends; they are declared here for the tests.

struct PrometheusLabel {
  std::string name;
  std::string value;
  bool operator==(const PrometheusLabel&) const = default;
};

// The labels of the series of `key` of `sample`, sorted by name: __name__ = `metric_name`,
// host, job_id (job != 0), and the sample's text labels "<item>.<name>" whose <item> is a
// dotted prefix of `key` (the longest prefix wins a name two of them give; labels of the whole
// sample, without an item, are not sent: they describe a reading, not a series). Empty values
// are left out; values are made valid UTF-8.
void prometheus_series_labels(const Sample& sample, std::string_view key,
                              const std::string& metric_name, std::vector<PrometheusLabel>& out);

// Appends the protobuf bytes of `labels` as TimeSeries.labels fields (what a series sends with
// each of its points, encoded once).
void prometheus_encode_labels(const std::vector<PrometheusLabel>& labels, std::string& out);

// One WriteRequest being put together, its protobuf bytes written directly (the .proto is the
// schema); reused from request to request (its buffers keep their memory).
class PrometheusRequest {
 public:
  PrometheusRequest();
  ~PrometheusRequest();
  PrometheusRequest(const PrometheusRequest&) = delete;
  PrometheusRequest& operator=(const PrometheusRequest&) = delete;

  void clear();
  // One series with one sample (`time_ms` since the epoch). `labels` sorted by name.
  void add(const std::vector<PrometheusLabel>& labels, std::int64_t time_ms, double value);
  // The same with `labels` given as prometheus_encode_labels wrote them.
  void add_encoded(std::string_view labels, std::int64_t time_ms, double value);
  std::size_t points() const { return points_; }
  // The protobuf bytes of the WriteRequest.
  std::string serialized() const;
  // What is POSTed: the serialized request, snappy-compressed (block format). Valid until the
  // next call.
  const std::string& body();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::size_t points_ = 0;
};

// The snappy block format of `data` and back (uncompress throws std::runtime_error on input
// that is not snappy or would be over 256 MiB).
std::string prometheus_snappy_compress(std::string_view data);
std::string prometheus_snappy_uncompress(std::string_view data);

// True for a Prometheus answer that refuses a whole request because of some of its samples'
// times (out of order, duplicate timestamp, too old): the request is split to find them.
bool prometheus_refuses_times(std::string_view body);

}  // namespace fructosa::master
