// fructosa-report --format json (schema "fructosa-report/1", docs/report.md): one line per job,
// null for every figure the job has no data for. Fields are only ever added within the schema.
#include <nlohmann/json.hpp>

#include "render.h"

namespace fructosa::report {
namespace {

using nlohmann::json;

json number_or_null(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }
json text_or_null(const std::string& text) { return text.empty() ? json(nullptr) : json(text); }

json request_json(const std::optional<SlurmRequest>& request) {
  if (!request) return nullptr;
  return {{"time_limit_s", number_or_null(request->time_limit_s)},
          {"partition", text_or_null(request->partition)},
          {"cpus", number_or_null(request->cpus)},
          {"memory_bytes", number_or_null(request->memory_bytes)},
          {"gpus", number_or_null(request->gpus)},
          {"state", text_or_null(request->state)},
          {"source", request->source}};
}

json delays_json(const Delays& delays) {
  return {{"cpu_s", number_or_null(delays.cpu_s)},
          {"blkio_s", number_or_null(delays.blkio_s)},
          {"swapin_s", number_or_null(delays.swapin_s)},
          {"memory_s", number_or_null(delays.memory_s)},
          {"active_s", number_or_null(delays.active_s)},
          {"cpu_share", number_or_null(delays.share(delays.cpu_s))},
          {"blkio_share", number_or_null(delays.share(delays.blkio_s))},
          {"swapin_share", number_or_null(delays.share(delays.swapin_s))},
          {"memory_share", number_or_null(delays.share(delays.memory_s))}};
}

json gpu_json(const GpuFigures& gpu) {
  return {{"gpu", gpu.gpu},
          {"minor", number_or_null(gpu.minor)},
          {"allocated", gpu.allocated},
          {"used", gpu.used},
          {"utilization", number_or_null(gpu.utilization)},
          {"memory_peak_bytes", number_or_null(gpu.memory_peak)},
          {"memory_total_bytes", number_or_null(gpu.memory_total)},
          {"process_memory_peak_bytes", number_or_null(gpu.process_memory_peak)}};
}

// {"loss": {"samples": 61, "last": ..., "mean": ..., "min": ..., "max": ..., "sum": ...}}; {} when
// nothing was pushed.
json user_metrics_json(const std::vector<UserMetric>& metrics) {
  json out = json::object();
  for (const auto& metric : metrics)
    out[metric.name] = {{"samples", metric.summary.count}, {"last", metric.summary.last},
                        {"mean", metric.mean()},           {"min", number_or_null(metric.min)},
                        {"max", metric.summary.max},       {"sum", metric.summary.sum}};
  return out;
}

json use_json(NodeUse use) {
  return use == NodeUse::alone ? json("alone") : use == NodeUse::shared ? json("shared") : json(nullptr);
}

// The figures a node and the job in all share, under the same names.
template <typename Figures>
void add_common(json& out, const Figures& f) {
  out["cpu_seconds"] = number_or_null(f.cpu_seconds);
  out["cpus"] = number_or_null(f.cpus);
  out["cores_used"] = number_or_null(f.cores_used);
  out["cpu_efficiency"] = number_or_null(f.cpu_efficiency);
  out["memory_peak_bytes"] = number_or_null(f.memory_peak);
  out["memory_limit_bytes"] = number_or_null(f.memory_limit);
  out["read_bytes"] = number_or_null(f.read_bytes);
  out["write_bytes"] = number_or_null(f.write_bytes);
  out["read_bytes_per_s"] = number_or_null(f.read_rate);
  out["write_bytes_per_s"] = number_or_null(f.write_rate);
  out["ipc"] = number_or_null(f.ipc);
  out["cache_miss_ratio"] = number_or_null(f.cache_miss_ratio);
  out["delays"] = delays_json(f.delays);
  out["gpus_allocated"] = number_or_null(f.gpus_allocated);
  out["gpus_used"] = number_or_null(f.gpus_used);
  out["gpus_without_process"] = number_or_null(f.gpus_without_process);
  out["energy_rapl_j"] = number_or_null(f.rapl_joules);
  out["energy_ipmi_j"] = number_or_null(f.ipmi_joules);
  out["network_sent_bytes"] = number_or_null(f.net_sent);
  out["network_received_bytes"] = number_or_null(f.net_received);
  out["infiniband_sent_bytes"] = number_or_null(f.ib_sent);
  out["infiniband_received_bytes"] = number_or_null(f.ib_received);
  out["user_metrics"] = user_metrics_json(f.user_metrics);
}

json node_json(const NodeFigures& node) {
  json out = {{"host", node.host},
              {"start", utc_time(node.first_ns)},
              {"end", utc_time(node.last_ns)},
              {"elapsed_s", node.elapsed_s}};
  add_common(out, node);
  out["cpu_source"] = text_or_null(node.cpu_source);
  out["use"] = use_json(node.use);
  out["cpu_share_of_node"] = number_or_null(node.cpu_share);
  json gpus = json::array();
  for (const auto& gpu : node.gpus) gpus.push_back(gpu_json(gpu));
  out["gpus"] = gpus;
  out["energy_attribution"] =
      !node.rapl_joules && !node.ipmi_joules ? json(nullptr) : json(node.use == NodeUse::alone ? "whole" : "apportioned");
  out["network_attribution"] = !node.network_collected           ? json(nullptr)
                               : node.use == NodeUse::alone ? json("whole")
                                                            : json("not attributed");
  return out;
}

}  // namespace

std::string render_json(const JobFigures& figures, const Verdict& verdict) {
  json notes = json::array();
  for (const auto& note : verdict.notes) notes.push_back({{"rule", note.rule}, {"text", note.text}});
  json nodes = json::array();
  for (const auto& node : figures.nodes) nodes.push_back(node_json(node));
  json missing = json::array();
  for (const auto& [what, enable] : figures.not_collected) missing.push_back({{"what", what}, {"enable", enable}});
  json all;
  add_common(all, figures);
  all["cpu_efficiency_min_node"] = number_or_null(figures.efficiency_min);
  all["cpu_efficiency_max_node"] = number_or_null(figures.efficiency_max);
  all["gpu_utilization"] = number_or_null(figures.gpu_utilization);
  all["gpu_memory_peak_bytes"] = number_or_null(figures.gpu_memory_peak);
  all["energy_attribution"] = !figures.rapl_joules && !figures.ipmi_joules ? json(nullptr)
                              : figures.energy_apportioned                 ? json("apportioned")
                                                                           : json("whole");
  const bool any_network = figures.net_sent || figures.net_received || figures.ib_sent || figures.ib_received;
  all["network_attribution"] = figures.network_shared ? json("not attributed") : any_network ? json("whole") : json(nullptr);
  json document = {{"schema", kJsonSchema},
                   {"job", figures.id},
                   {"user", text_or_null(figures.user)},
                   {"application", text_or_null(figures.application)},
                   {"start", utc_time(figures.first_ns)},
                   {"end", utc_time(figures.last_ns)},
                   {"elapsed_s", figures.elapsed_s},
                   {"request", request_json(figures.request)},
                   {"verdict", verdict.word},
                   {"notes", notes},
                   {"figures", all},
                   {"nodes", nodes},
                   {"not_collected", missing}};
  return document.dump() + "\n";
}

std::string render_list_json(const std::vector<ListedJob>& jobs) {
  json list = json::array();
  for (const auto& job : jobs)
    list.push_back({{"job", job.summary.id},
                    {"user", text_or_null(job.summary.user)},
                    {"hosts", job.summary.hosts},
                    {"start", utc_time(job.summary.first_ns)},
                    {"end", utc_time(job.summary.last_ns)},
                    {"elapsed_s", static_cast<double>(job.summary.last_ns - job.summary.first_ns) / 1e9},
                    {"application", text_or_null(job.application)},
                    {"verdict", job.verdict}});
  return json{{"schema", kJsonSchema}, {"jobs", list}}.dump() + "\n";
}

}  // namespace fructosa::report
