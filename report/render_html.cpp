// fructosa-report --format html: one self-contained document (inline CSS, inline SVG plots; no
// script, no font, no address outside it), a section per job: its header, the verdict and its
// notes, the figures table, the metrics its processes pushed and, per node, its cores busy, its
// memory and its GPUs' utilization over time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "render.h"

namespace fructosa::report {
namespace {

// The plots' line colour, and the limit's: distinctive, so that a screenshot can be checked for
// them (tests/integration/test_report_html.py looks for kLineColour).
constexpr const char* kLineColour = "#d1007b";
constexpr const char* kLimitColour = "#f08c00";

constexpr const char* kStyle = R"(
body { font: 14px/1.4 sans-serif; color: #1d2733; background: #ffffff; margin: 24px; }
section.job { margin-bottom: 48px; }
h1 { font-size: 22px; margin: 0 0 8px; }
h2 { font-size: 17px; margin: 24px 0 8px; }
dl.header { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0 0 12px; }
dl.header dt { color: #5b6673; }
dl.header dd { margin: 0; }
p.verdict { font-size: 16px; margin: 12px 0 4px; }
p.verdict strong { padding: 1px 8px; border-radius: 4px; background: #fde9c8; }
p.verdict.healthy strong { background: #d6f2dc; }
table.figures { border-collapse: collapse; margin: 8px 0; }
table.figures th, table.figures td { border: 1px solid #c9d1da; padding: 4px 10px; text-align: left; vertical-align: top; }
table.figures thead th { background: #eef1f4; }
td.missing { color: #8a6d3b; font-style: italic; }
table.figures td.number { text-align: right; font-variant-numeric: tabular-nums; }
div.plots { display: flex; flex-wrap: wrap; gap: 16px; }
svg.plot { background: #ffffff; }
svg.plot text { font: 11px sans-serif; fill: #3a4552; }
svg.plot text.title { font: bold 13px sans-serif; fill: #1d2733; }
p.none { color: #8a6d3b; font-style: italic; }
)";

// Text as HTML shows it literally, in element content and in attribute values alike.
std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// "18:02:30" (UTC).
std::string clock_time(std::int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// 1, 2, 2.5 or 5 times a power of ten, the smallest at least `raw`.
double nice_step(double raw) {
  double power = std::pow(10, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (factor * power >= raw * (1 - 1e-9)) return factor * power;
  return 10 * power;
}

// Tick values from 0 to `top`, about `count` of them. Bytes step in round numbers of their unit.
std::vector<double> value_ticks(double top, bool bytes, int count = 5) {
  double unit = 1;
  while (bytes && top / unit >= 1024) unit *= 1024;
  double step = nice_step(top / unit / count) * unit;
  std::vector<double> ticks;
  for (double value = 0; value <= top * (1 + 1e-9); value += step) ticks.push_back(value);
  return ticks;
}

// Whole seconds between time ticks: at most 6 over `span_s`.
std::int64_t time_step(double span_s) {
  static const std::int64_t kSteps[] = {1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200};
  for (auto step : kSteps)
    if (span_s / static_cast<double>(step) <= 6) return step;
  return 86400 * static_cast<std::int64_t>(std::ceil(span_s / 86400 / 6));
}

struct Plot {
  std::string title;
  const Series* series;
  std::int64_t from_ns, to_ns;  // the x axis
  double top;                   // the y axis: 0 .. top
  bool bytes;                   // values in bytes (format_bytes) or plain (round_figure)
  std::optional<double> limit;  // drawn as a line
  bool percent = false;         // values 0..1 labelled as percentages
};

// One plot as an inline SVG: title, axes with ticks and labels, the series as a path (a NaN ends
// a segment), and the limit line.
std::string svg_plot(const Plot& plot) {
  constexpr double kWidth = 560, kHeight = 230, kLeft = 70, kRight = 530, kTop = 30, kBottom = 196;
  const double span_ns = static_cast<double>(std::max<std::int64_t>(plot.to_ns - plot.from_ns, 1'000'000'000));
  auto x_of = [&](std::int64_t ns) { return kLeft + (kRight - kLeft) * static_cast<double>(ns - plot.from_ns) / span_ns; };
  auto y_of = [&](double value) { return kBottom - (kBottom - kTop) * std::clamp(value / plot.top, 0.0, 1.0); };
  auto label = [&](double value) {
    if (plot.percent) return fmt::format("{:.0f}%", 100 * value);
    return plot.bytes ? format_bytes(value) : round_figure(value);
  };

  std::string out = fmt::format(
      "<svg class=\"plot\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "role=\"img\" aria-label=\"{2}\">\n<text class=\"title\" x=\"{3}\" y=\"18\">{2}</text>\n"
      "<rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" fill=\"#f4f7fa\"/>\n",
      kWidth, kHeight, escaped(plot.title), kLeft, kTop, kRight - kLeft, kBottom - kTop);
  for (double value : value_ticks(plot.top, plot.bytes)) {
    double y = y_of(value);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{2:.1f}\" x2=\"{1}\" y2=\"{2:.1f}\" stroke=\"#dde3ea\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, kRight, y, kLeft - 6, y + 4, escaped(label(value)));
  }
  const std::int64_t step = time_step(span_ns / 1e9);
  const std::int64_t from_s = plot.from_ns / 1'000'000'000, to_s = plot.to_ns / 1'000'000'000;
  for (std::int64_t s = (from_s + step - 1) / step * step; s <= to_s; s += step) {
    double x = x_of(s * 1'000'000'000);
    if (x < kLeft - 0.5) continue;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#5b6673\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, kBottom, kBottom + 5, kBottom + 18, clock_time(s));
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">time (UTC)</text>\n"
      "<path d=\"M{} {}V{}H{}\" fill=\"none\" stroke=\"#5b6673\"/>\n",
      kRight, kHeight - 4, kLeft, kTop, kBottom, kRight);
  if (plot.limit) {
    double y = y_of(*plot.limit);
    out += fmt::format(
        "<line class=\"limit\" x1=\"{0}\" y1=\"{2:.1f}\" x2=\"{1}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\" "
        "stroke-dasharray=\"8 4\"/><text x=\"{1}\" y=\"{4:.1f}\" text-anchor=\"end\">limit {5}</text>\n",
        kLeft, kRight, y, kLimitColour, y - 4, escaped(label(*plot.limit)));
  }
  std::string path;
  bool pen_down = false;
  for (std::size_t i = 0; i < plot.series->values.size(); ++i) {
    double value = plot.series->values[i];
    if (std::isnan(value)) {
      pen_down = false;
      continue;
    }
    path += fmt::format("{}{:.1f} {:.1f}", pen_down ? "L" : (path.empty() ? "M" : " M"), x_of(plot.series->time_ns[i]),
                        y_of(value));
    pen_down = true;
  }
  out += fmt::format(
      "<path class=\"series\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.5\" stroke-linejoin=\"round\" "
      "stroke-linecap=\"round\"/>\n</svg>\n",
      path, kLineColour);
  return out;
}

// A table cell: `text` of a figure, or what the job lacks it for.
std::string cell(const std::optional<std::string>& text, const JobFigures& figures, std::string_view what) {
  if (text) return "<td>" + escaped(*text) + "</td>";
  return "<td class=\"missing\">" + escaped(missing_text(figures, what)) + "</td>";
}

// A row per figure (render.h's figure_lines: CPU, CPU time, IPC, memory, I/O, delays, GPU,
// energy, network); columns the job in all, then each node when it has several.
std::string figures_table(const JobFigures& figures) {
  const std::vector<FigureLine> rows = figure_lines(figures);
  std::vector<std::vector<FigureLine>> nodes;
  if (figures.nodes.size() > 1)
    for (const auto& node : figures.nodes) nodes.push_back(figure_lines(node));
  std::string out = "<table class=\"figures\">\n<thead><tr><th></th><th>all nodes</th>";
  if (!nodes.empty())
    for (const auto& node : figures.nodes) out += "<th>" + escaped(node.host) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    out += fmt::format("<tr><th>{}</th>", escaped(row.label));
    out += cell(row.text, figures, row.name_if_missing);
    for (const auto& lines : nodes) {
      auto same = std::find_if(lines.begin(), lines.end(),
                               [&](const FigureLine& line) { return std::string_view(line.label) == row.label; });
      out += cell(same == lines.end() ? std::nullopt : same->text, figures, row.name_if_missing);
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

// What the job's processes pushed: a row per name in all (and, with several nodes, per node).
std::string user_metrics_table(const JobFigures& figures) {
  const auto rows = user_metric_rows(figures);
  if (rows.empty()) return {};
  std::string out =
      "<h2>User metrics</h2>\n<p>Pushed by the job's processes (<code>lagent push</code>); a pushed counter's "
      "total is its sum of samples.</p>\n<table class=\"figures user-metrics\">\n<thead><tr><th>name</th><th>node</th>";
  for (const char* column : kUserMetricColumns) out += fmt::format("<th>{}</th>", escaped(column));
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    out += fmt::format("<tr><th>{}</th><td>{}</td>", escaped(row.name), row.node.empty() ? "all nodes" : escaped(row.node));
    for (const auto& cell : row.cells) out += fmt::format("<td class=\"number\">{}</td>", escaped(cell));
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

std::string node_plots(const JobFigures& figures, const NodeFigures& node) {
  std::string out = fmt::format("<h3>{}</h3>\n<div class=\"plots\">\n", escaped(node.host));
  const Series& cores = node.cores_over_time;
  if (cores.values.empty()) {
    out += "<p class=\"none\">cores busy: " + escaped(missing_text(figures, "CPU time")) + "</p>\n";
  } else {
    double top = node.cpus && *node.cpus > 0 ? *node.cpus : series_max(cores).value_or(0);
    out += svg_plot({fmt::format("{}: cores busy{}", node.host,
                                 node.cpus ? fmt::format(" (of {} allocated)", round_figure(*node.cpus)) : ""),
                     &cores, node.first_ns, node.last_ns, top > 0 ? top : 1, false, std::nullopt});
  }
  const Series& memory = node.memory_over_time;
  if (memory.values.empty()) {
    out += "<p class=\"none\">memory: " + escaped(missing_text(figures, "memory")) + "</p>\n";
  } else {
    double high = std::max(node.memory_limit.value_or(0), series_max(memory).value_or(0));
    auto ticks = value_ticks(high > 0 ? high * 1.05 : 1, true);
    double step = ticks.size() > 1 ? ticks[1] : 1;
    double top = std::ceil((high > 0 ? high * 1.05 : 1) / step) * step;
    out += svg_plot({fmt::format("{}: memory{}", node.host,
                                 node.memory_limit ? fmt::format(" (limit {})", format_bytes(*node.memory_limit)) : ""),
                     &memory, node.first_ns, node.last_ns, top, true, node.memory_limit});
  }
  // Each GPU's utilization, 0 to 100%.
  for (const auto& gpu : node.gpus) {
    if (gpu.utilization_over_time.values.empty()) continue;
    out += svg_plot({fmt::format("{}: GPU {} busy (a kernel running){}", node.host, gpu.gpu,
                                 gpu.allocated && !gpu.used ? ", no process of the job" : ""),
                     &gpu.utilization_over_time, node.first_ns, node.last_ns, 1, false, std::nullopt, true});
  }
  return out + "</div>\n";
}

std::string job_section(const JobFigures& figures, const Verdict& verdict) {
  std::string hosts;
  for (const auto& node : figures.nodes) hosts += (hosts.empty() ? "" : ", ") + node.host;
  std::string out = fmt::format(
      "<section class=\"job\" id=\"job-{0}\">\n<h1>Job {0}</h1>\n<dl class=\"header\">\n"
      "<dt>user</dt><dd>{1}</dd>\n<dt>nodes</dt><dd>{2}: {3}</dd>\n<dt>start</dt><dd>{4}</dd>\n"
      "<dt>end</dt><dd>{5}</dd>\n<dt>elapsed</dt><dd>{6}</dd>\n</dl>\n",
      figures.id, escaped(figures.user.empty() ? "?" : figures.user), figures.nodes.size(), escaped(hosts),
      utc_time(figures.first_ns), utc_time(figures.last_ns), format_duration(figures.elapsed_s));
  out += fmt::format("<p class=\"verdict {0}\">Verdict: <strong>{0}</strong></p>\n", escaped(verdict.word));
  if (!verdict.notes.empty()) {
    out += "<ul class=\"notes\">\n";
    for (const auto& note : verdict.notes)
      out += fmt::format("<li data-rule=\"{}\">{}</li>\n", escaped(note.rule), escaped(note.text));
    out += "</ul>\n";
  }
  out += "<h2>Figures</h2>\n" + figures_table(figures);
  out += user_metrics_table(figures);
  out += "<h2>Over time</h2>\n";
  for (const auto& node : figures.nodes) out += node_plots(figures, node);
  return out + "</section>\n";
}

}  // namespace

std::string render_html(const std::vector<std::pair<JobFigures, Verdict>>& jobs) {
  std::string ids;
  for (const auto& [figures, verdict] : jobs) ids += (ids.empty() ? "" : ", ") + std::to_string(figures.id);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>fructosa-report: job{} {}</title>\n<style>{}</style>\n</head>\n<body>\n",
      jobs.size() == 1 ? "" : "s", ids, kStyle);
  for (const auto& [figures, verdict] : jobs) out += job_section(figures, verdict);
  return out + "</body>\n</html>\n";
}

}  // namespace fructosa::report
