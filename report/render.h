// fructosa-report's outputs: the text report (80 columns, a sparkline per metric and node), the
// JSON document (schema "fructosa-report/1", docs/report.md; render_json.cpp) and the --list table.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis.h"

namespace fructosa::report {

inline constexpr const char* kJsonSchema = "fructosa-report/1";

// The figures as the text report and the HTML table write them, for the job in all or one node;
// nullopt where there is no data ("not collected" then: missing_text). `name_if_missing`: the
// not_collected entry that says what would collect it.
struct FigureLine {
  const char* label;            // "CPU", "Memory", ...
  const char* name_if_missing;  // "CPU time", "memory", ...
  std::optional<std::string> text;
};
std::vector<FigureLine> figure_lines(const JobFigures& figures);
std::vector<FigureLine> figure_lines(const NodeFigures& node);
// "not collected (enable [sensor:JobCgroup])", naming what figures.not_collected says collects `what`.
std::string missing_text(const JobFigures& figures, std::string_view what);
// One GPU: "0: busy 45%, memory peak 30 GiB of 80 GiB" (what is known of it).
std::string gpu_text(const GpuFigures& gpu);

// The user metrics' table (sensor User; text and HTML): per name a row for the job in all
// (`node` ""), then, with several nodes, one per node that has it (`node` its host, `name` "").
inline constexpr std::array<const char*, 6> kUserMetricColumns{"samples", "last", "mean", "min", "max",
                                                               "sum of samples"};
struct UserMetricRow {
  std::string name, node;
  std::array<std::string, 6> cells;  // as kUserMetricColumns; min "-" where unknown
};
std::vector<UserMetricRow> user_metric_rows(const JobFigures& figures);
// A pushed value: round_figure's, but keeping two significant digits of small values and three
// of large ones ("0.0012", "1.23e+09"), which user metrics of any scale may have.
std::string user_value(double value);

std::string render_text(const JobFigures& figures, const Verdict& verdict);
std::string render_json(const JobFigures& figures, const Verdict& verdict);
// Every job in one self-contained HTML document (inline CSS and SVG plots; docs/report.md).
std::string render_html(const std::vector<std::pair<JobFigures, Verdict>>& jobs);
// One line, for Slurm's AdminComment (contrib/slurm/fructosa-epilog): the verdict, its notes,
// then CPU, memory and elapsed time: "cpu_underused: used 3.1 of 32 allocated cores on
// average: ask for 4 | CPU 3.1 of 32 cores (10%), memory peak 2.1 GiB of 64 GiB (3%), elapsed 1:02:03".
std::string render_summary(const JobFigures& figures, const Verdict& verdict);

struct ListedJob {
  JobSummary summary;
  std::string verdict;
  std::string application;
};
std::string render_list(const std::vector<ListedJob>& jobs);
std::string render_list_json(const std::vector<ListedJob>& jobs);

// `values` as `width` block characters from ▁ (lowest) to █ (highest), each the mean of its
// share of the values; `high` <= 0 scales to the largest value. NaN values are skipped.
std::string sparkline(const std::vector<double>& values, std::size_t width, double high = 0);
// "2026-11-25T18:00:00Z"
std::string utc_time(std::int64_t ns);

}  // namespace fructosa::report
