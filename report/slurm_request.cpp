#include "slurm_request.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <vector>

extern char** environ;

namespace fructosa::report {
namespace {

std::optional<double> number(std::string_view text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

// "16G", "500M", "1024K", "2T", "123" (MiB, Slurm's default unit) -> bytes.
std::optional<double> memory(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double scale = 1 << 20;
  switch (text.back()) {
    case 'K': scale = 1 << 10; break;
    case 'M': scale = 1 << 20; break;
    case 'G': scale = 1 << 30; break;
    case 'T': scale = double(1ull << 40); break;
    default: {
      auto mib = number(text);
      return mib ? std::optional<double>(*mib * scale) : std::nullopt;
    }
  }
  auto value = number(text.substr(0, text.size() - 1));
  return value ? std::optional<double>(*value * scale) : std::nullopt;
}

// The value of `key=` in whitespace-separated "Key=Value" text ("" when absent).
std::string_view field(std::string_view text, std::string_view key) {
  for (std::size_t at = 0; (at = text.find(key, at)) != std::string_view::npos; at += key.size()) {
    if (at != 0 && text[at - 1] != ' ' && text[at - 1] != '\n') continue;
    if (text.size() <= at + key.size() || text[at + key.size()] != '=') continue;
    std::string_view rest = text.substr(at + key.size() + 1);
    return rest.substr(0, rest.find_first_of(" \n"));
  }
  return {};
}

// Runs `program args...` found in PATH, without a shell; its standard output, or nullopt when
// it cannot run or exits non-zero.
std::optional<std::string> run(const std::vector<std::string>& args) {
  int out[2];
  if (::pipe(out) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int spawned = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string text;
  if (spawned == 0) {
    char buffer[4096];
    for (ssize_t got; (got = ::read(out[0], buffer, sizeof buffer)) != 0;) {
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) break;
      text.append(buffer, static_cast<std::size_t>(got));
    }
  }
  ::close(out[0]);
  if (spawned != 0) return std::nullopt;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

}  // namespace

bool SlurmRequest::ended_early() const {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "OUT_OF_MEMORY";
}

std::optional<double> parse_slurm_duration(std::string_view text) {
  if (text.empty() || text == "UNLIMITED" || text == "Partition_Limit" || text == "NONE") return std::nullopt;
  double days = 0;
  if (auto dash = text.find('-'); dash != std::string_view::npos) {
    auto parsed = number(text.substr(0, dash));
    if (!parsed) return std::nullopt;
    days = *parsed;
    text.remove_prefix(dash + 1);
  }
  std::vector<double> parts;
  while (true) {
    auto colon = text.find(':');
    auto parsed = number(text.substr(0, colon));
    if (!parsed) return std::nullopt;
    parts.push_back(*parsed);
    if (colon == std::string_view::npos) break;
    text.remove_prefix(colon + 1);
  }
  double seconds = 0;
  if (parts.size() == 3) seconds = parts[0] * 3600 + parts[1] * 60 + parts[2];
  else if (parts.size() == 2) seconds = days > 0 ? parts[0] * 3600 + parts[1] * 60 : parts[0] * 60 + parts[1];
  else if (parts.size() == 1) seconds = days > 0 ? parts[0] * 3600 : parts[0] * 60;
  else return std::nullopt;
  return days * 86400 + seconds;
}

void parse_tres(std::string_view tres, SlurmRequest& request) {
  while (!tres.empty()) {
    auto comma = tres.find(',');
    std::string_view item = tres.substr(0, comma);
    tres = comma == std::string_view::npos ? std::string_view{} : tres.substr(comma + 1);
    auto eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
    if (name == "cpu") request.cpus = number(value);
    else if (name == "mem") request.memory_bytes = memory(value);
    else if (name == "gres/gpu") request.gpus = number(value);
  }
}

std::optional<SlurmRequest> parse_sacct(std::string_view output, std::uint64_t id) {
  // JobID|Timelimit|Partition|ReqTRES|State, one line for the job (-X: no steps).
  const std::string wanted = std::to_string(id);
  while (!output.empty()) {
    auto newline = output.find('\n');
    std::string_view line = output.substr(0, newline);
    output = newline == std::string_view::npos ? std::string_view{} : output.substr(newline + 1);
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
      auto bar = line.find('|', start);
      fields.push_back(line.substr(start, bar - start));
      if (bar == std::string_view::npos) break;
      start = bar + 1;
    }
    if (fields.size() < 5 || fields[0] != wanted) continue;
    SlurmRequest request;
    request.source = "sacct";
    request.time_limit_s = parse_slurm_duration(fields[1]);
    request.partition = std::string(fields[2]);
    parse_tres(fields[3], request);
    request.state = std::string(fields[4].substr(0, fields[4].find(' ')));  // "CANCELLED by 0"
    return request;
  }
  return std::nullopt;
}

std::optional<SlurmRequest> parse_scontrol(std::string_view output) {
  if (field(output, "JobId").empty()) return std::nullopt;
  SlurmRequest request;
  request.source = "scontrol";
  request.time_limit_s = parse_slurm_duration(field(output, "TimeLimit"));
  request.partition = std::string(field(output, "Partition"));
  request.state = std::string(field(output, "JobState"));
  std::string_view tres = field(output, "ReqTRES");
  parse_tres(tres.empty() ? field(output, "TRES") : tres, request);
  return request;
}

std::optional<SlurmRequest> ask_slurm(std::uint64_t id) {
  const std::string job = std::to_string(id);
  if (auto out = run({"sacct", "-X", "-n", "-P", "-j", job, "-o", "JobID,Timelimit,Partition,ReqTRES,State"}))
    if (auto request = parse_sacct(*out, id)) return request;
  if (auto out = run({"scontrol", "show", "job", "-o", job})) return parse_scontrol(*out);
  return std::nullopt;
}

}  // namespace fructosa::report
