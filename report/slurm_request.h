// What a Slurm job asked for (time limit, partition, CPUs, memory, GPUs), from Slurm itself:
// `sacct` (the accounting database, for jobs long gone) or else `scontrol show job` (slurmctld
// keeps an ended job for MinJobAge, 300 s by default: what the epilog sees). The report then
// says what to ask for next time, as jobstats does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fructosa::report {

struct SlurmRequest {
  std::optional<double> time_limit_s;  // nullopt: no limit
  std::string partition;
  std::optional<double> cpus, memory_bytes, gpus;  // the whole job's (TRES)
  std::string state;   // COMPLETED, RUNNING, TIMEOUT, ... (the first word of sacct's State)
  std::string source;  // "sacct" or "scontrol"
  // Ended before its time limit could matter: COMPLETED, FAILED, CANCELLED, OUT_OF_MEMORY.
  bool ended_early() const;
};

// Slurm's time formats: "UNLIMITED", "[days-]hours:minutes:seconds", "minutes:seconds",
// "minutes"; nullopt for no limit or what is not one.
std::optional<double> parse_slurm_duration(std::string_view text);
// "cpu=4,mem=16G,node=1,billing=4,gres/gpu=2" -> cpus, memory, gpus of the request.
void parse_tres(std::string_view tres, SlurmRequest& request);
// One line of `sacct -X -n -P -o JobID,Timelimit,Partition,ReqTRES,State`.
std::optional<SlurmRequest> parse_sacct(std::string_view output, std::uint64_t id);
// `scontrol show job -o <id>`.
std::optional<SlurmRequest> parse_scontrol(std::string_view output);

// Asks `sacct`, then `scontrol`, found in PATH; nullopt when neither knows the job (or neither
// is installed: a site without Slurm, or a host that is not its client).
std::optional<SlurmRequest> ask_slurm(std::uint64_t id);

}  // namespace fructosa::report
