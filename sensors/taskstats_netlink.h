// The kernel's per-task statistics (Documentation/accounting/taskstats.rst) over a raw
// generic-netlink socket: the "TASKSTATS" family is resolved once with CTRL_CMD_GETFAMILY,
// then every TASKSTATS_CMD_GET asks for one task (a thread id) and gets back the kernel's
// struct taskstats for it.
//
// The struct only ever grows at its end (a new version appends fields), so the reply's
// payload is copied into a zeroed struct taskstats of the version these headers know:
// fields the kernel did not send stay zero, and covers() tells which ones it sent. A newer
// kernel's extra fields are ignored.
//
// TASKSTATS_CMD_GET needs CAP_NET_ADMIN (the family's command is GENL_ADMIN_PERM); without
// it the reply is EPERM. The family is not registered in network namespaces other than the
// initial one (CTRL_CMD_GETFAMILY answers ENOENT there).
#pragma once

#include <linux/taskstats.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fructosa::sensors {

class TaskstatsSocket {
 public:
  // Opens the socket and resolves the family. Throws SensorUnavailable naming the call and
  // the errno text when that fails.
  TaskstatsSocket();
  ~TaskstatsSocket();
  TaskstatsSocket(const TaskstatsSocket&) = delete;
  TaskstatsSocket& operator=(const TaskstatsSocket&) = delete;

  enum class Result { ok, gone };
  // Statistics of task `tid` (TASKSTATS_CMD_ATTR_PID: one thread, not its thread group).
  // `gone` when the task no longer exists (ESRCH, or EINVAL for a task already past the
  // point where the kernel can report it). Throws SensorUnavailable on EPERM (with the
  // CAP_NET_ADMIN hint) and on any other error.
  Result query(int tid, taskstats& stats);

  // Bytes of struct taskstats the last successful reply carried.
  std::size_t payload_size() const { return payload_size_; }
  // Whether the last reply carried the field at [offset, offset + size).
  bool covers(std::size_t offset, std::size_t size) const { return offset + size <= payload_size_; }

  std::uint16_t family_id() const { return family_; }

 private:
  // Sends `length` bytes of request_ and waits for the reply with the same sequence number;
  // returns its payload (after the netlink header) or a negative errno from NLMSG_ERROR.
  int transact(std::size_t length, const char* what);

  int fd_ = -1;
  std::uint16_t family_ = 0;
  std::uint32_t sequence_ = 0;
  std::size_t payload_size_ = 0;
  std::vector<char> request_;
  std::vector<char> reply_;
  // Where the reply's message starts in reply_ and how long it is, after transact().
  std::size_t reply_offset_ = 0;
  std::size_t reply_length_ = 0;
};

}  // namespace fructosa::sensors
