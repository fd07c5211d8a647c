#include "render.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string_view>
#include <nlohmann/json.hpp>

#include "utc_time.h"

namespace fructosa::report {
namespace {

using nlohmann::json;

json number_or_null(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

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

std::string percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

// "3.1 of 32 cores (10%)", or what is known of it.
std::string cpu_line(const std::optional<double>& used, const std::optional<double>& cpus,
                     const std::optional<double>& efficiency) {
  if (!used) return "not collected";
  if (!cpus) return fmt::format("{} cores busy on average (allocation unknown)", round_figure(*used));
  return fmt::format("{} of {} cores ({})", round_figure(*used), round_figure(*cpus), percent(efficiency.value_or(0)));
}

std::string memory_line(const std::optional<double>& peak, const std::optional<double>& limit) {
  if (!peak) return "not collected";
  if (!limit) return fmt::format("peak {} (no limit)", format_bytes(*peak));
  return fmt::format("peak {} of {} ({})", format_bytes(*peak), format_bytes(*limit), percent(*peak / *limit));
}

// "time limit 2-00:00:00, partition debug, 32 CPUs, 64 GiB, 2 GPUs" (what is known of it).
std::string request_line(const SlurmRequest& request) {
  std::vector<std::string> parts;
  parts.push_back(request.time_limit_s ? "time limit " + format_duration(*request.time_limit_s) : "no time limit");
  if (!request.partition.empty()) parts.push_back("partition " + request.partition);
  if (request.cpus) parts.push_back(round_figure(*request.cpus) + (*request.cpus == 1 ? " CPU" : " CPUs"));
  if (request.memory_bytes) parts.push_back(format_bytes(*request.memory_bytes));
  if (request.gpus) parts.push_back(round_figure(*request.gpus) + (*request.gpus == 1 ? " GPU" : " GPUs"));
  return fmt::format("{}", fmt::join(parts, ", "));
}

json request_json(const std::optional<SlurmRequest>& request) {
  if (!request) return nullptr;
  return {{"time_limit_s", number_or_null(request->time_limit_s)},
          {"partition", request->partition.empty() ? json(nullptr) : json(request->partition)},
          {"cpus", number_or_null(request->cpus)},
          {"memory_bytes", number_or_null(request->memory_bytes)},
          {"gpus", number_or_null(request->gpus)},
          {"state", request->state.empty() ? json(nullptr) : json(request->state)},
          {"source", request->source}};
}

json figures_json(const NodeFigures& node) {
  return {{"host", node.host},
          {"start", utc_time(node.first_ns)},
          {"end", utc_time(node.last_ns)},
          {"elapsed_s", node.elapsed_s},
          {"cpu_seconds", number_or_null(node.cpu_seconds)},
          {"cpus", number_or_null(node.cpus)},
          {"cores_used", number_or_null(node.cores_used)},
          {"cpu_efficiency", number_or_null(node.cpu_efficiency)},
          {"memory_peak_bytes", number_or_null(node.memory_peak)},
          {"memory_limit_bytes", number_or_null(node.memory_limit)},
          {"read_bytes", number_or_null(node.read_bytes)},
          {"write_bytes", number_or_null(node.write_bytes)},
          {"cpu_source", node.cpu_source.empty() ? json(nullptr) : json(node.cpu_source)}};
}

}  // namespace

std::string utc_time(std::int64_t ns) { return utc_iso8601(ns); }

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
  out += fmt::format("  CPU      {}\n", cpu_line(figures.cores_used, figures.cpus, figures.cpu_efficiency));
  if (figures.cpu_seconds) out += fmt::format("           CPU time {}\n", format_duration(*figures.cpu_seconds));
  out += fmt::format("  Memory   {}\n", memory_line(figures.memory_peak, figures.memory_limit));
  if (figures.read_bytes || figures.write_bytes)
    out += fmt::format("  I/O      read {}, written {}\n", format_bytes(figures.read_bytes.value_or(0)),
                       format_bytes(figures.write_bytes.value_or(0)));
  else
    out += "  I/O      not collected\n";

  constexpr std::size_t kSpark = 40;
  for (const auto& node : figures.nodes) {
    out += fmt::format("\n  {}  {}\n", node.host, cpu_line(node.cores_used, node.cpus, node.cpu_efficiency));
    if (!node.cores_over_time.values.empty())
      out += fmt::format("    cores  {}  max {}\n", sparkline(node.cores_over_time.values, kSpark, node.cpus.value_or(0)),
                         round_figure(node.cpus ? *node.cpus : series_max(node.cores_over_time).value_or(0)));
    if (!node.memory_over_time.values.empty()) {
      double high = node.memory_limit ? *node.memory_limit : series_max(node.memory_over_time).value_or(0);
      out += fmt::format("    memory {}  max {}\n", sparkline(node.memory_over_time.values, kSpark, high),
                         format_bytes(high));
    }
  }
  if (!figures.not_collected.empty()) {
    out += "\n";
    for (const auto& [what, enable] : figures.not_collected)
      out += wrapped("  ", fmt::format("{}: not collected (enable {})", what, enable));
  }
  return out;
}

std::string render_json(const JobFigures& figures, const Verdict& verdict) {
  json notes = json::array();
  for (const auto& note : verdict.notes) notes.push_back({{"rule", note.rule}, {"text", note.text}});
  json nodes = json::array();
  for (const auto& node : figures.nodes) nodes.push_back(figures_json(node));
  json missing = json::array();
  for (const auto& [what, enable] : figures.not_collected) missing.push_back({{"what", what}, {"enable", enable}});
  json document = {
      {"schema", kJsonSchema},
      {"job", figures.id},
      {"user", figures.user.empty() ? json(nullptr) : json(figures.user)},
      {"application", figures.application.empty() ? json(nullptr) : json(figures.application)},
      {"start", utc_time(figures.first_ns)},
      {"end", utc_time(figures.last_ns)},
      {"elapsed_s", figures.elapsed_s},
      {"request", request_json(figures.request)},
      {"verdict", verdict.word},
      {"notes", notes},
      {"figures",
       {{"cpu_seconds", number_or_null(figures.cpu_seconds)},
        {"cpus", number_or_null(figures.cpus)},
        {"cores_used", number_or_null(figures.cores_used)},
        {"cpu_efficiency", number_or_null(figures.cpu_efficiency)},
        {"cpu_efficiency_min_node", number_or_null(figures.efficiency_min)},
        {"cpu_efficiency_max_node", number_or_null(figures.efficiency_max)},
        {"memory_peak_bytes", number_or_null(figures.memory_peak)},
        {"memory_limit_bytes", number_or_null(figures.memory_limit)},
        {"read_bytes", number_or_null(figures.read_bytes)},
        {"write_bytes", number_or_null(figures.write_bytes)}}},
      {"nodes", nodes},
      {"not_collected", missing}};
  return document.dump() + "\n";
}

std::string render_summary(const JobFigures& figures, const Verdict& verdict) {
  std::string out = verdict.word;
  for (std::size_t i = 0; i < verdict.notes.size(); ++i) out += (i == 0 ? ": " : "; ") + verdict.notes[i].text;
  out += fmt::format(" | CPU {}, memory {}, elapsed {}\n", cpu_line(figures.cores_used, figures.cpus, figures.cpu_efficiency),
                     memory_line(figures.memory_peak, figures.memory_limit), format_duration(figures.elapsed_s));
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

std::string render_list_json(const std::vector<ListedJob>& jobs) {
  json list = json::array();
  for (const auto& job : jobs)
    list.push_back({{"job", job.summary.id},
                    {"user", job.summary.user.empty() ? json(nullptr) : json(job.summary.user)},
                    {"hosts", job.summary.hosts},
                    {"start", utc_time(job.summary.first_ns)},
                    {"end", utc_time(job.summary.last_ns)},
                    {"elapsed_s", static_cast<double>(job.summary.last_ns - job.summary.first_ns) / 1e9},
                    {"application", job.application.empty() ? json(nullptr) : json(job.application)},
                    {"verdict", job.verdict}});
  return json{{"schema", kJsonSchema}, {"jobs", list}}.dump() + "\n";
}

}  // namespace fructosa::report
