// ChildProcess, which runs IPMIPower's tools off the timer thread: command lines, program
// lookup, output, status, spawn errors and a deadline shared by parallel runs.
#include "sensor_round_support.h"

using namespace fructosa;
using namespace fructosa::sensors;
using namespace fructosa::test::sensor_rounds;
using fructosa::test::TempDir;

namespace {

TEST(ChildProcess, SplitsCommandLinesAndFindsPrograms) {
  EXPECT_EQ(split_command_line("  -D LAN_2_0  -u 'a b' -p \"c'd\" x''y "),
            (std::vector<std::string>{"-D", "LAN_2_0", "-u", "a b", "-p", "c'd", "xy"}));
  EXPECT_TRUE(split_command_line(" ").empty());
  EXPECT_EQ(find_program("sh").empty(), false);
  EXPECT_EQ(find_program("/bin/sh"), "/bin/sh");
  EXPECT_EQ(find_program("/nonexistent/tool"), "");
  EXPECT_EQ(find_program("fructosa-no-such-tool"), "");
}

TEST(ChildProcess, RunCapturesOutputStatusAndSpawnErrors) {
  auto ok = run_with_timeout({"/bin/sh", "-c", "echo out; echo err >&2; exit 0"}, 10);
  EXPECT_TRUE(ok.succeeded());
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");
  auto status = run_with_timeout({"/bin/sh", "-c", "exit 4"}, 10);
  EXPECT_EQ(status.exit_code, 4);
  EXPECT_EQ(status.failure("sh", 10), "sh exited with status 4");
  auto missing = run_with_timeout({"/nonexistent/tool"}, 10);
  if (missing.spawn_error == 0) {
    // posix_spawn done with fork+exec (e.g. under valgrind) can only say "exit status 127".
    EXPECT_EQ(missing.exit_code, 127);
  } else {
    EXPECT_EQ(missing.spawn_error, ENOENT);
    EXPECT_EQ(missing.failure("tool", 10), "tool: cannot run /nonexistent/tool: No such file or directory");
  }
  // Its own process group, stdin from /dev/null, no descriptor of ours beyond 0-2.
  auto setup = run_with_timeout({"/bin/sh", "-c", "cut -d' ' -f5 /proc/$$/stat; echo $$; cat; ls /proc/$$/fd"}, 10);
  std::istringstream lines(setup.out);
  std::string pgid, pid, fds, fd;
  std::getline(lines, pgid);
  std::getline(lines, pid);
  EXPECT_EQ(pgid, pid);
  while (std::getline(lines, fd)) fds += fd + " ";
  EXPECT_EQ(fds, "0 1 2 ") << setup.out;
}

TEST(ChildProcess, ParallelRunsShareOneDeadline) {
  Stragglers stragglers;
  auto results = run_in_parallel({{"/bin/sh", "-c", "echo a; echo b >&2"},
                                  {"/bin/sh", "-c", "exit 3"},
                                  {"/bin/sh", "-c", "echo started; sleep 600 & exec sleep 601"},
                                  {"/nonexistent/tool"},
                                  {"/bin/sh", "-c", "echo left; sleep 602 &"}},
                                 1.0, stragglers);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_TRUE(results[0].succeeded());
  EXPECT_EQ(results[0].out, "a\n");
  EXPECT_EQ(results[0].err, "b\n");
  EXPECT_EQ(results[1].exit_code, 3);
  EXPECT_FALSE(results[1].timed_out);
  // The hung one is killed at the deadline, with what it printed kept.
  EXPECT_TRUE(results[2].timed_out);
  EXPECT_EQ(results[2].out, "started\n");
  EXPECT_EQ(results[2].failure("sh", 1.0).find("sh did not finish within 1 s: killed"), 0u) << results[2].failure("sh", 1.0);
  EXPECT_NE(results[3].spawn_error == ENOENT, results[3].exit_code == 127);  // 127: fork+exec spawn
  // Exited, leaving a process that holds its output: done, not timed out.
  EXPECT_TRUE(results[4].succeeded()) << results[4].failure("sh", 1.0);
  EXPECT_EQ(results[4].out, "left\n");
  // A killed run not dead yet is reaped later, without waiting.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (stragglers.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    stragglers.reap();
  }
  EXPECT_EQ(stragglers.size(), 0u);
  EXPECT_EQ(::waitpid(results[2].pid, nullptr, WNOHANG), -1);  // reaped already (ECHILD)
}

}  // namespace
