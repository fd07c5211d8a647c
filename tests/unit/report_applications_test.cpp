// The application of a job from its command names (report/applications.*): the built-in table,
// launchers and shells skipped, unknown commands, a site's pattern file and its errors.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>

#include "applications.h"
#include "test_support.h"

using namespace fructosa::report;
using fructosa::test::TempDir;

namespace {

std::string write(const TempDir& dir, const std::string& text) {
  std::string path = dir.file("applications.conf");
  std::ofstream(path) << text;
  return path;
}

// The message of what load_app_patterns throws, "" when it does not.
std::string load_error(const std::string& path) {
  try {
    load_app_patterns(path);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(ReportApplications, BuiltInEntriesNameTheApplication) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"gmx", "gromacs"},         {"gmx_mpi", "gromacs"},     {"mdrun", "gromacs"},
      {"lmp", "lammps"},          {"lmp_mpi", "lammps"},      {"lmp_serial", "lammps"},
      {"vasp", "vasp"},           {"vasp_std", "vasp"},       {"vasp_gam", "vasp"},
      {"vasp_ncl", "vasp"},       {"namd2", "namd"},          {"namd3", "namd"},
      {"cp2k.psmp", "cp2k"},      {"cp2k", "cp2k"},           {"pw.x", "quantum espresso"},
      {"ph.x", "quantum espresso"}, {"simpleFoam", "openfoam"}, {"icoFoam", "openfoam"},
      {"pimpleFoam", "openfoam"}, {"python", "python"},       {"python3", "python"},
      {"python3.11", "python"},   {"julia", "julia"},         {"R", "R"},
      {"MATLAB", "matlab"},       {"java", "java"}};
  for (const auto& [command, application] : cases) EXPECT_EQ(application_of({command}), application) << command;
}

TEST(ReportApplications, LaunchersAndShellsAreSkipped) {
  EXPECT_EQ(application_of({"srun", "slurm_script", "bash", "gmx_mpi"}), "gromacs");
  EXPECT_EQ(application_of({"mpirun", "orted", "hydra_pmi_proxy", "mpiexec", "lmp"}), "lammps");
  EXPECT_EQ(application_of({"slurmstepd", "sh", "zsh", "tcsh", "python3"}), "python");
  // The first real program names it, even when a later one is known.
  EXPECT_EQ(application_of({"bash", "python3", "gmx_mpi"}), "python");
  EXPECT_EQ(application_of({"gmx_mpi", "python3", "bash"}), "gromacs");
}

TEST(ReportApplications, UnknownIsTheFirstRealCommandAndNoneIsEmpty) {
  EXPECT_EQ(application_of({"srun", "my_solver", "gmx_mpi"}), "my_solver");
  EXPECT_EQ(application_of({"bash", "slurm_script", "srun"}), "");
  EXPECT_EQ(application_of({}), "");
  EXPECT_EQ(application_of({"", "bash"}), "");
}

TEST(ReportApplications, SplitsTheLabel) {
  EXPECT_EQ(split_commands("gmx_mpi,python3,bash"), (std::vector<std::string>{"gmx_mpi", "python3", "bash"}));
  EXPECT_EQ(split_commands("sleep"), (std::vector<std::string>{"sleep"}));
  EXPECT_TRUE(split_commands("").empty());
  EXPECT_EQ(application_of(split_commands("srun,slurm_script,vasp_std")), "vasp");
}

TEST(ReportApplications, SiteEntriesComeFirstAndCanSkipWrappers) {
  TempDir dir;
  auto site = load_app_patterns(write(dir,
                                      "# site applications\n"
                                      "\n"
                                      "mysolver  my_solver  my_solver_*   # our code\n"
                                      "  gromacs-plumed\tgmx_plumed\n"
                                      "gromacs-site gmx_mpi\n"
                                      "- apptainer starter*\n"));
  ASSERT_EQ(site.size(), 4u);
  EXPECT_EQ(site[0].name, "mysolver");
  EXPECT_EQ(site[0].globs, (std::vector<std::string>{"my_solver", "my_solver_*"}));
  EXPECT_EQ(site[1].name, "gromacs-plumed");
  EXPECT_EQ(site[1].globs, (std::vector<std::string>{"gmx_plumed"}));

  EXPECT_EQ(application_of({"srun", "my_solver_v2"}, site), "mysolver");
  EXPECT_EQ(application_of({"gmx_plumed"}, site), "gromacs-plumed");
  EXPECT_EQ(application_of({"gmx_mpi"}, site), "gromacs-site");      // before the built-in gromacs
  EXPECT_EQ(application_of({"gmx"}, site), "gromacs");               // the built-in table still counts
  EXPECT_EQ(application_of({"starter-suid", "apptainer", "lmp"}, site), "lammps");
  EXPECT_EQ(application_of({"starter-suid", "lmp"}), "starter-suid");  // without the site's entries
}

TEST(ReportApplications, PatternFileErrorsNameTheFileAndLine) {
  TempDir dir;
  std::string path = write(dir, "gromacs gmx\n# fine\nlonely   # a name without a glob\n");
  std::string error = load_error(path);
  EXPECT_NE(error.find(path + ":3:"), std::string::npos) << error;
  EXPECT_NE(error.find("lonely"), std::string::npos) << error;

  std::string missing = dir.file("none.conf");
  error = load_error(missing);
  EXPECT_NE(error.find(missing), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;

  EXPECT_TRUE(load_app_patterns(write(dir, "# only comments\n\n   \n")).empty());
}

TEST(ReportApplications, DocsTableListsEveryBuiltInEntry) {
  // docs/report.md's "Applications" table: one row per entry, in the same order.
  std::ifstream docs(std::string(FRUCTOSA_SOURCE_DIR) + "/docs/report.md");
  ASSERT_TRUE(docs) << "docs/report.md";
  std::vector<std::string> rows;
  bool in_section = false;
  for (std::string line; std::getline(docs, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Applications";
    else if (in_section && line.rfind("| ", 0) == 0 && line.find("---") == std::string::npos) rows.push_back(line);
  }
  const auto& table = builtin_app_patterns();
  ASSERT_EQ(rows.size(), table.size() + 1);  // and the header row
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& entry = table[i];
    EXPECT_FALSE(entry.globs.empty()) << entry.name;
    std::string row = "| " + (entry.name == "-" ? std::string("`-` (skipped)") : entry.name) + " |";
    for (const auto& glob : entry.globs) row += " `" + glob + "`";
    EXPECT_EQ(rows[i + 1], row + " |");
  }
}

}  // namespace
