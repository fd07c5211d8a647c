#include "render.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string_view>

#include "utc_time.h"

namespace fructosa::report {
namespace {

// `text` after `first` ("  - "), wrapped at 80 columns, continued under its first word.
std::string wrapped(std::string_view first, std::string_view text) {
  constexpr std::size_t kColumns = 80;
  std::string out(first), indent(first.size(), ' ');
  std::size_t column = first.size();
  bool line_start = true;
  while (!text.empty()) {
    auto space = text.find(' ');
    std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view{} : text.substr(space + 1);
    if (!line_start && column + 1 + word.size() > kColumns) {
      out += "\n" + indent;
      column = indent.size();
      line_start = true;
    }
    if (!line_start) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_start = false;
  }
  return out + "\n";
}

std::string joined(const std::vector<std::string>& parts, std::string_view separator = ", ") {
  return fmt::format("{}", fmt::join(parts, separator));
}

// "3.1 of 32 cores (10%)", or what is known of it.
std::optional<std::string> cpu_text(const std::optional<double>& used, const std::optional<double>& cpus,
                                    const std::optional<double>& efficiency) {
  if (!used) return std::nullopt;
  if (!cpus) return fmt::format("{} cores busy on average (allocation unknown)", round_figure(*used));
  return fmt::format("{} of {} cores ({})", round_figure(*used), round_figure(*cpus), percent(efficiency.value_or(0)));
}

std::optional<std::string> memory_text(const std::optional<double>& peak, const std::optional<double>& limit) {
  if (!peak) return std::nullopt;
  if (!limit || *limit <= 0) return fmt::format("peak {} (no limit)", format_bytes(*peak));
  return fmt::format("peak {} of {} ({})", format_bytes(*peak), format_bytes(*limit), percent(*peak / *limit));
}

// "read 1.2 GiB (330 KiB/s), written 2 GiB (560 KiB/s)".
std::optional<std::string> io_text(const std::optional<double>& read, const std::optional<double>& written,
                                   const std::optional<double>& read_rate, const std::optional<double>& write_rate) {
  if (!read && !written) return std::nullopt;
  auto one = [](const char* what, const std::optional<double>& bytes, const std::optional<double>& rate) {
    if (!bytes) return fmt::format("{} not collected", what);
    return fmt::format("{} {}{}", what, format_bytes(*bytes), rate ? " (" + format_bytes(*rate) + "/s)" : "");
  };
  return one("read", read, read_rate) + ", " + one("written", written, write_rate);
}

std::optional<std::string> delays_text(const Delays& delays) {
  if (!delays.active_s) return std::nullopt;
  std::vector<std::string> parts;
  auto add = [&](const char* what, const std::optional<double>& delay) {
    if (auto share = delays.share(delay))
      parts.push_back(fmt::format("{} {}{}", what, percent(*share),
                                  *delay >= 1 ? " (" + format_duration(*delay) + ")" : ""));
  };
  add("block I/O", delays.blkio_s);
  add("CPU", delays.cpu_s);
  add("swap-in", delays.swapin_s);
  add("memory reclaim", delays.memory_s);
  if (parts.empty()) return std::nullopt;
  return "waiting for " + joined(parts) + " of the time its tasks ran or waited";
}

std::optional<std::string> ipc_text(const std::optional<double>& ipc, const std::optional<double>& miss_ratio) {
  if (!ipc) return std::nullopt;
  return fmt::format("{} instructions per cycle, {}", round_figure(*ipc),
                     miss_ratio ? fmt::format("{} of cache references missed", percent(*miss_ratio))
                                : std::string("cache misses not counted"));
}

std::optional<std::string> gpu_counts_text(const std::optional<double>& allocated, const std::optional<double>& used,
                                           const std::optional<double>& without) {
  if (!allocated && !used) return std::nullopt;
  if (allocated.value_or(0) == 0 && used.value_or(0) == 0) return "none used";
  std::vector<std::string> parts;
  if (allocated) parts.push_back(round_figure(*allocated) + " allocated");
  if (used) parts.push_back(round_figure(*used) + " used");
  if (without.value_or(0) > 0) parts.push_back(round_figure(*without) + " without a process of the job");
  return joined(parts);
}

std::optional<std::string> energy_text(const std::optional<double>& rapl, const std::optional<double>& ipmi,
                                       const std::string& attribution) {
  std::vector<std::string> parts;
  if (rapl) parts.push_back(format_energy(*rapl) + " by RAPL");
  if (ipmi) parts.push_back(format_energy(*ipmi) + " by IPMI");
  if (parts.empty()) return std::nullopt;
  return joined(parts) + " (" + attribution + ")";
}

std::optional<std::string> network_text(const std::optional<double>& sent, const std::optional<double>& received,
                                        const std::optional<double>& ib_sent, const std::optional<double>& ib_received) {
  std::vector<std::string> parts;
  auto pair = [](const char* what, const std::optional<double>& out, const std::optional<double>& in) {
    return fmt::format("{}sent {}, received {}", what, out ? format_bytes(*out) : "?", in ? format_bytes(*in) : "?");
  };
  if (sent || received) parts.push_back(pair("NICs ", sent, received));
  if (ib_sent || ib_received) parts.push_back(pair("InfiniBand ", ib_sent, ib_received));
  if (parts.empty()) return std::nullopt;
  return joined(parts, "; ");
}

const char* use_text(NodeUse use) {
  return use == NodeUse::shared ? "node shared" : use == NodeUse::alone ? "whole node" : "node sharing unknown";
}

// "time limit 2-00:00:00, partition debug, 32 CPUs, 64 GiB, 2 GPUs" (what is known of it).
std::string request_line(const SlurmRequest& request) {
  std::vector<std::string> parts;
  parts.push_back(request.time_limit_s ? "time limit " + format_duration(*request.time_limit_s) : "no time limit");
  if (!request.partition.empty()) parts.push_back("partition " + request.partition);
  if (request.cpus) parts.push_back(round_figure(*request.cpus) + (*request.cpus == 1 ? " CPU" : " CPUs"));
  if (request.memory_bytes) parts.push_back(format_bytes(*request.memory_bytes));
  if (request.gpus) parts.push_back(round_figure(*request.gpus) + (*request.gpus == 1 ? " GPU" : " GPUs"));
  return joined(parts);
}

bool listed_missing(const JobFigures& figures, std::string_view what) {
  return std::any_of(figures.not_collected.begin(), figures.not_collected.end(),
                     [&](const auto& entry) { return entry.first == what; });
}

// The user metrics as a table under their title, columns as wide as their widest cell (names
// left-aligned, figures right-aligned); "" when the job pushed none. A name too long for the
// table to fit in 80 columns gets a line of its own (longer than 80 only if the name is), its
// figures on the next.
std::string user_metrics_text(const JobFigures& figures) {
  constexpr std::size_t kColumns = 80, kIndent = 4, kGap = 2;
  const auto rows = user_metric_rows(figures);
  if (rows.empty()) return {};
  const bool per_node = figures.nodes.size() > 1;
  const std::size_t text_columns = per_node ? 2 : 1;
  std::vector<std::vector<std::string>> table{{"name"}};
  if (per_node) table[0].push_back("node");
  table[0].insert(table[0].end(), kUserMetricColumns.begin(), kUserMetricColumns.end());
  for (const auto& row : rows) {
    std::vector<std::string> line{row.name};
    if (per_node) line.push_back(row.node.empty() ? "all" : row.node);
    line.insert(line.end(), row.cells.begin(), row.cells.end());
    table.push_back(std::move(line));
  }
  std::vector<std::size_t> widths(table[0].size(), 0);
  for (const auto& line : table)
    for (std::size_t i = 1; i < line.size(); ++i) widths[i] = std::max(widths[i], line[i].size());
  std::size_t rest = kIndent;
  for (std::size_t i = 1; i < widths.size(); ++i) rest += kGap + widths[i];
  const std::size_t fits = rest < kColumns ? kColumns - rest : 0;
  for (const auto& line : table)
    if (line[0].size() <= fits) widths[0] = std::max(widths[0], line[0].size());
  std::string out = "  User metrics, pushed by the job (lagent push)\n";
  for (auto& line : table) {
    if (line[0].size() > widths[0]) {
      out += std::string(kIndent, ' ') + line[0] + "\n";
      line[0].clear();
    }
    std::string text(kIndent, ' ');
    for (std::size_t i = 0; i < line.size(); ++i)
      text += (i == 0 ? "" : "  ") + (i < text_columns ? fmt::format("{:<{}}", line[i], widths[i])
                                                       : fmt::format("{:>{}}", line[i], widths[i]));
    while (text.back() == ' ') text.pop_back();
    out += text + "\n";
  }
  return out;
}

}  // namespace

std::string utc_time(std::int64_t ns) { return utc_iso8601(ns); }

std::string user_value(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude > 0 && magnitude < 1) return fmt::format("{:.2g}", value);
  if (magnitude >= 1e7) return fmt::format("{:.3g}", value);
  return round_figure(value);
}

std::vector<UserMetricRow> user_metric_rows(const JobFigures& figures) {
  auto row = [](std::string name, std::string node, const UserMetric& metric) {
    const MetricSummary& s = metric.summary;
    return UserMetricRow{std::move(name), std::move(node),
                         {std::to_string(s.count), user_value(s.last), user_value(metric.mean()),
                          metric.min ? user_value(*metric.min) : "-", user_value(s.max), user_value(s.sum)}};
  };
  std::vector<UserMetricRow> rows;
  for (const auto& metric : figures.user_metrics) {
    rows.push_back(row(metric.name, "", metric));
    if (figures.nodes.size() < 2) continue;
    for (const auto& node : figures.nodes) {
      const auto& all = node.user_metrics;  // sorted by name
      auto mine = std::lower_bound(all.begin(), all.end(), metric.name,
                                   [](const UserMetric& one, const std::string& name) { return one.name < name; });
      if (mine != all.end() && mine->name == metric.name) rows.push_back(row("", node.host, *mine));
    }
  }
  return rows;
}

std::string missing_text(const JobFigures& figures, std::string_view what) {
  for (const auto& [name, enable] : figures.not_collected)
    if (name == what) return fmt::format("not collected (enable {})", enable);
  return "not collected";
}

std::string gpu_text(const GpuFigures& gpu) {
  std::vector<std::string> parts;
  if (gpu.allocated && !gpu.used) parts.push_back("no process of the job");
  if (gpu.utilization) parts.push_back("busy " + percent(*gpu.utilization));
  if (gpu.memory_peak)
    parts.push_back("memory peak " + format_bytes(*gpu.memory_peak) +
                    (gpu.memory_total ? " of " + format_bytes(*gpu.memory_total) : ""));
  else if (gpu.process_memory_peak)
    parts.push_back("its processes' memory peak " + format_bytes(*gpu.process_memory_peak));
  return gpu.gpu + ": " + (parts.empty() ? std::string("used") : joined(parts));
}

std::vector<FigureLine> figure_lines(const JobFigures& f) {
  std::vector<FigureLine> lines{
      {"CPU", "CPU time", cpu_text(f.cores_used, f.cpus, f.cpu_efficiency)},
      {"CPU time", "CPU time", f.cpu_seconds ? std::optional(format_duration(*f.cpu_seconds)) : std::nullopt},
      {"IPC", "IPC", ipc_text(f.ipc, f.cache_miss_ratio)},
      {"Memory", "memory", memory_text(f.memory_peak, f.memory_limit)},
      {"I/O", "I/O", io_text(f.read_bytes, f.write_bytes, f.read_rate, f.write_rate)},
      {"Delays", "delays", delays_text(f.delays)}};
  // GPUs where the job has some, or is said to lack their figures: a CPU job has no GPU line.
  if (f.gpus_allocated || f.gpus_used || listed_missing(f, "GPU")) {
    auto text = gpu_counts_text(f.gpus_allocated, f.gpus_used, f.gpus_without_process);
    if (text && f.gpu_utilization) *text += ", busy " + percent(*f.gpu_utilization) + " on average";
    if (text && f.gpu_memory_peak) *text += ", memory peak " + format_bytes(*f.gpu_memory_peak);
    lines.push_back({"GPU", "GPU", text});
  }
  lines.push_back({"Energy", "energy",
                   energy_text(f.rapl_joules, f.ipmi_joules,
                               f.energy_apportioned ? "apportioned by its share of shared nodes' CPU time"
                                                    : f.nodes.size() == 1 ? "whole node" : "whole nodes")});
  lines.push_back({"Network", "network",
                   f.network_shared ? std::optional<std::string>("not attributed: node shared")
                                    : network_text(f.net_sent, f.net_received, f.ib_sent, f.ib_received)});
  return lines;
}

std::vector<FigureLine> figure_lines(const NodeFigures& n) {
  std::vector<FigureLine> lines{
      {"CPU", "CPU time", cpu_text(n.cores_used, n.cpus, n.cpu_efficiency)},
      {"CPU time", "CPU time", n.cpu_seconds ? std::optional(format_duration(*n.cpu_seconds)) : std::nullopt},
      {"IPC", "IPC", ipc_text(n.ipc, n.cache_miss_ratio)},
      {"Memory", "memory", memory_text(n.memory_peak, n.memory_limit)},
      {"I/O", "I/O", io_text(n.read_bytes, n.write_bytes, n.read_rate, n.write_rate)},
      {"Delays", "delays", delays_text(n.delays)}};
  auto gpus = gpu_counts_text(n.gpus_allocated, n.gpus_used, n.gpus_without_process);
  std::vector<std::string> each;
  for (const auto& gpu : n.gpus) each.push_back(gpu_text(gpu));
  if (gpus && !each.empty()) *gpus += "; " + joined(each, "; ");
  lines.push_back({"GPU", "GPU", gpus});
  std::string attribution = n.use == NodeUse::alone
                                ? "whole node"
                                : fmt::format("{} of the node's CPU time: {}", n.cpu_share ? percent(*n.cpu_share) : "?",
                                              use_text(n.use));
  lines.push_back({"Energy", "energy", energy_text(n.rapl_joules, n.ipmi_joules, attribution)});
  lines.push_back({"Network", "network",
                   n.network_collected && n.use != NodeUse::alone
                       ? std::optional<std::string>(std::string("not attributed: ") + use_text(n.use))
                       : network_text(n.net_sent, n.net_received, n.ib_sent, n.ib_received)});
  return lines;
}

std::string sparkline(const std::vector<double>& values, std::size_t width, double high) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::vector<double> numbers;
  for (double value : values)
    if (!std::isnan(value)) numbers.push_back(value);
  if (numbers.empty() || width == 0) return {};
  width = std::min(width, numbers.size());
  if (high <= 0) high = *std::max_element(numbers.begin(), numbers.end());
  std::string out;
  for (std::size_t column = 0; column < width; ++column) {
    std::size_t begin = column * numbers.size() / width, end = (column + 1) * numbers.size() / width;
    double sum = 0;
    for (std::size_t i = begin; i < end; ++i) sum += numbers[i];
    double mean = sum / static_cast<double>(end - begin);
    double level = high > 0 ? std::clamp(mean / high, 0.0, 1.0) : 0;
    out += kBlocks[static_cast<std::size_t>(std::lround(level * 7))];
  }
  return out;
}

std::string render_text(const JobFigures& figures, const Verdict& verdict) {
  std::string out = fmt::format("Job {}   user {}   {} node{}{}\n", figures.id, figures.user.empty() ? "?" : figures.user,
                                figures.nodes.size(), figures.nodes.size() == 1 ? "" : "s",
                                figures.application.empty() ? "" : "   ran " + figures.application);
  out += fmt::format("  {} -> {}   elapsed {}\n", utc_time(figures.first_ns), utc_time(figures.last_ns),
                     format_duration(figures.elapsed_s));
  out += fmt::format("Verdict: {}\n", verdict.word);
  for (const auto& note : verdict.notes) out += wrapped("  - ", note.text);
  out += "\n";
  if (figures.request) out += wrapped("  Asked    ", request_line(*figures.request));
  std::vector<std::string_view> shown;  // not_collected entries said on their line
  for (const auto& line : figure_lines(figures)) {
    if (std::string_view(line.label) == "CPU time") {  // under the CPU line, when known
      if (line.text) out += fmt::format("           CPU time {}\n", *line.text);
      continue;
    }
    if (!line.text) shown.push_back(line.name_if_missing);
    out += wrapped(fmt::format("  {:<9}", line.label), line.text ? *line.text : missing_text(figures, line.name_if_missing));
  }

  if (auto user = user_metrics_text(figures); !user.empty()) out += "\n" + user;

  constexpr std::size_t kSpark = 40;
  for (const auto& node : figures.nodes) {
    out += fmt::format("\n  {}  {}\n", node.host,
                       cpu_text(node.cores_used, node.cpus, node.cpu_efficiency).value_or("CPU not collected"));
    if (!node.cores_over_time.values.empty())
      out += fmt::format("    cores  {}  max {}\n", sparkline(node.cores_over_time.values, kSpark, node.cpus.value_or(0)),
                         round_figure(node.cpus ? *node.cpus : series_max(node.cores_over_time).value_or(0)));
    if (!node.memory_over_time.values.empty()) {
      double high = node.memory_limit ? *node.memory_limit : series_max(node.memory_over_time).value_or(0);
      out += fmt::format("    memory {}  max {}\n", sparkline(node.memory_over_time.values, kSpark, high),
                         format_bytes(high));
    }
    for (const auto& gpu : node.gpus)
      if (!gpu.utilization_over_time.values.empty() && gpu.gpu.size() <= 3)
        out += fmt::format("    gpu{:<4}{}  busy {}\n", gpu.gpu, sparkline(gpu.utilization_over_time.values, kSpark, 1),
                           percent(gpu.utilization.value_or(0)));
    if (!node.gpus.empty()) {
      std::vector<std::string> each;
      for (const auto& gpu : node.gpus) each.push_back(gpu_text(gpu));
      out += wrapped("    GPUs   ", joined(each, "; "));
    }
    if (figures.nodes.size() > 1)
      for (const auto& line : figure_lines(node))
        if ((std::string_view(line.label) == "Energy" || std::string_view(line.label) == "Network") && line.text)
          out += wrapped(fmt::format("    {:<8}", std::string_view(line.label) == "Energy" ? "energy" : "network"),
                         *line.text);
  }
  std::string rest;
  for (const auto& [what, enable] : figures.not_collected)
    if (std::find(shown.begin(), shown.end(), what) == shown.end())
      rest += wrapped("  ", fmt::format("{}: not collected (enable {})", what, enable));
  if (!rest.empty()) out += "\n" + rest;
  return out;
}

std::string render_summary(const JobFigures& figures, const Verdict& verdict) {
  std::string out = verdict.word;
  for (std::size_t i = 0; i < verdict.notes.size(); ++i) out += (i == 0 ? ": " : "; ") + verdict.notes[i].text;
  out += fmt::format(" | CPU {}, memory {}",
                     cpu_text(figures.cores_used, figures.cpus, figures.cpu_efficiency).value_or("not collected"),
                     memory_text(figures.memory_peak, figures.memory_limit).value_or("not collected"));
  // "1 of 2 GPUs used (busy 30%)": what is known of it.
  if (figures.gpus_used.value_or(0) > 0 || figures.gpus_allocated.value_or(0) > 0) {
    if (figures.gpus_used && figures.gpus_allocated)
      out += fmt::format(", {} of {} GPUs used", round_figure(*figures.gpus_used), round_figure(*figures.gpus_allocated));
    else if (figures.gpus_used)
      out += fmt::format(", {} GPU{} used", round_figure(*figures.gpus_used), *figures.gpus_used == 1 ? "" : "s");
    else
      out += fmt::format(", {} GPU{} allocated, use not collected", round_figure(*figures.gpus_allocated),
                         *figures.gpus_allocated == 1 ? "" : "s");
    if (figures.gpu_utilization) out += " (busy " + percent(*figures.gpu_utilization) + ")";
  }
  if (figures.rapl_joules || figures.ipmi_joules)
    out += ", energy " + format_energy(figures.ipmi_joules ? *figures.ipmi_joules : *figures.rapl_joules);
  out += fmt::format(", elapsed {}\n", format_duration(figures.elapsed_s));
  return out;
}

std::string render_list(const std::vector<ListedJob>& jobs) {
  constexpr const char* kRow = "{:<10} {:<10} {:<12} {:>5}  {:<20}  {:<20}  {:>10}  {}\n";
  std::string out = fmt::format(kRow, "JOBID", "USER", "APP", "NODES", "FIRST", "LAST", "DURATION", "VERDICT");
  for (const auto& job : jobs) {
    const JobSummary& s = job.summary;
    out += fmt::format(kRow, s.id, s.user.empty() ? "?" : s.user, job.application.empty() ? "?" : job.application,
                       s.hosts.size(), utc_time(s.first_ns), utc_time(s.last_ns),
                       format_duration(static_cast<double>(s.last_ns - s.first_ns) / 1e9), job.verdict);
  }
  return out;
}

}  // namespace fructosa::report
