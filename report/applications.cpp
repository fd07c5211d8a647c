// The application of a job from its command names (applications.h). Keep docs/report.md's
// table ("Applications") in step with kBuiltin.
#include "applications.h"

#include <fnmatch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fructosa::report {
namespace {

const std::vector<AppPattern> kBuiltin{
    // Skipped: MPI launchers and process managers, Slurm's, shells and wrappers, so that the
    // application is the first real program.
    {"-", {"mpirun", "mpiexec", "mpiexec.*", "orted", "prted", "prterun", "hydra_pmi_proxy", "pmi_proxy",
           "srun", "slurmstepd", "slurm_script"}},
    {"-", {"bash", "sh", "dash", "zsh", "ksh", "csh", "tcsh"}},
    {"-", {"env", "time", "timeout", "nohup", "numactl", "taskset", "stdbuf"}},
    // Simulation codes.
    {"gromacs", {"gmx", "gmx_*", "mdrun", "mdrun_*"}},
    {"lammps", {"lmp", "lmp_*"}},
    {"vasp", {"vasp", "vasp_*"}},
    {"namd", {"namd2", "namd3"}},
    {"cp2k", {"cp2k*"}},
    {"quantum espresso", {"pw.x", "ph.x", "cp.x", "pp.x", "neb.x", "hp.x", "epw.x", "projwfc.x", "dos.x", "bands.x"}},
    {"openfoam", {"*Foam"}},
    {"amber", {"pmemd", "pmemd.*", "sander", "sander.*"}},
    {"gaussian", {"g16", "g09", "l[0-9]*.exe"}},
    {"orca", {"orca", "orca_*"}},
    {"nwchem", {"nwchem"}},
    {"abinit", {"abinit"}},
    {"siesta", {"siesta"}},
    {"wrf", {"wrf.exe", "real.exe"}},
    // Languages and environments.
    {"python", {"python", "python2*", "python3*", "ipython*"}},
    {"julia", {"julia"}},
    {"R", {"R", "Rscript"}},
    {"matlab", {"matlab", "MATLAB"}},
    {"java", {"java"}},
};

const AppPattern* match(const std::vector<AppPattern>& table, const std::string& command) {
  for (const auto& entry : table)
    for (const auto& glob : entry.globs)
      if (::fnmatch(glob.c_str(), command.c_str(), 0) == 0) return &entry;
  return nullptr;
}

}  // namespace

const std::vector<AppPattern>& builtin_app_patterns() { return kBuiltin; }

std::vector<AppPattern> load_app_patterns(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  std::vector<AppPattern> patterns;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    AppPattern entry;
    std::size_t at = 0;
    while (true) {
      at = line.find_first_not_of(" \t\r", at);
      if (at == std::string::npos || line[at] == '#') break;
      std::size_t end = line.find_first_of(" \t\r", at);
      std::string word = line.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (entry.name.empty()) entry.name = std::move(word);
      else entry.globs.push_back(std::move(word));
      at = end;
    }
    if (entry.name.empty()) continue;
    if (entry.globs.empty())
      throw std::runtime_error(path + ":" + std::to_string(number) + ": '" + entry.name +
                               "' has no pattern (a line is: name glob [glob...])");
    patterns.push_back(std::move(entry));
  }
  if (file.bad()) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  return patterns;
}

std::string application_of(const std::vector<std::string>& commands, const std::vector<AppPattern>& site) {
  for (const auto& command : commands) {
    if (command.empty()) continue;
    const AppPattern* entry = match(site, command);
    if (!entry) entry = match(kBuiltin, command);
    if (!entry) return command;
    if (entry->name != "-") return entry->name;
  }
  return "";
}

std::vector<std::string> split_commands(std::string_view label) {
  std::vector<std::string> commands;
  while (!label.empty()) {
    auto comma = label.find(',');
    commands.emplace_back(label.substr(0, comma));
    if (comma == std::string_view::npos) break;
    label.remove_prefix(comma + 1);
  }
  return commands;
}

}  // namespace fructosa::report
