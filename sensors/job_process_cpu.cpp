#include "job_process_cpu.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>

#include "procfs.h"

namespace fructosa::sensors {
namespace {

CpuTicks operator+(CpuTicks a, CpuTicks b) { return {a.user + b.user, a.system + b.system}; }

// How far a counter grew (a counter that went down, which the kernel's do not, counts anew).
std::uint64_t grown(std::uint64_t now, std::uint64_t before) { return now >= before ? now - before : now; }

// What a child counter's growth leaves once the time already counted for reaped children is
// taken from it; `credit` keeps what is still to be taken.
std::uint64_t after_credit(std::uint64_t growth, std::uint64_t& credit) {
  std::uint64_t taken = std::min(growth, credit);
  credit -= taken;
  return growth - taken;
}

}  // namespace

bool parse_process_stat(std::string_view stat, ProcessStat& out) {
  // Fields are counted after the ')' closing the command name, which may hold spaces and ')'.
  auto close = stat.rfind(')');
  if (close == std::string_view::npos) return false;
  std::string_view rest = stat.substr(close + 1);
  std::uint64_t field[23] = {};
  for (int number = 3; number <= 22; ++number) {
    std::string_view text = next_field(rest);
    if (text.empty()) return false;
    const bool wanted = number == 4 || (number >= 14 && number <= 17) || number == 22;
    // cutime and cstime are signed in the kernel's format; they are never negative.
    if (wanted && !parse_uint(text, field[number]) && !((number == 16 || number == 17) && text.front() == '-')) return false;
  }
  out.ppid = static_cast<int>(field[4]);
  out.self = {field[14], field[15]};
  out.children = {field[16], field[17]};
  out.start = field[22];
  return true;
}

void ProcessCpuTime::update(const std::string& proc_root, const std::vector<int>& pids) {
  now_.clear();
  for (int pid : pids) {
    Fd file(::open(fmt::format("{}/{}/stat", proc_root, pid).c_str(), O_RDONLY | O_CLOEXEC));
    ProcessStat stat;
    if (file.get() >= 0 && pread_whole(file.get(), buffer_, false) == 0 && parse_process_stat(buffer_, stat))
      now_.emplace(pid, stat);
  }
  update(now_);
}

void ProcessCpuTime::update(const std::unordered_map<int, ProcessStat>& now) {
  // The processes that ended: once reaped, their time shows again in their parent's children
  // counters; what they were counted for is taken from that growth rather than counted twice.
  for (const auto& [pid, before] : processes_) {
    auto found = now.find(pid);
    if (found == now.end() || found->second.start != before.start) {
      CpuTicks& credit = counted_reaped_[before.ppid];
      credit = credit + before.self + before.children;
    }
  }
  for (const auto& [pid, stat] : now) {
    auto found = processes_.find(pid);
    const bool known = found != processes_.end() && found->second.start == stat.start;
    const CpuTicks before_self = known ? found->second.self : CpuTicks{};
    const CpuTicks before_children = known ? found->second.children : CpuTicks{};
    CpuTicks credit;
    auto credited = counted_reaped_.find(pid);
    if (credited != counted_reaped_.end()) credit = credited->second;
    total_.user += grown(stat.self.user, before_self.user) +
                   after_credit(grown(stat.children.user, before_children.user), credit.user);
    total_.system += grown(stat.self.system, before_self.system) +
                     after_credit(grown(stat.children.system, before_children.system), credit.system);
    if (credited != counted_reaped_.end()) credited->second = credit;
  }
  // Credits are only kept for parents still in the job (one outside it never reaps into it).
  std::erase_if(counted_reaped_, [&](const auto& entry) {
    return !now.contains(entry.first) || (entry.second.user == 0 && entry.second.system == 0);
  });
  processes_ = now;
}

}  // namespace fructosa::sensors
