// Tells a service manager (systemd, Type=notify) what state this process is in, with the
// sd_notify(3) datagram protocol on $NOTIFY_SOCKET. Everything here does nothing when the
// variable is unset, i.e. when the process was not started by a service manager that asked.
#pragma once

#include <memory>
#include <string_view>

namespace spdlog {
class formatter;
}

namespace fructosa {

// Sends `state`, newline-separated KEY=VALUE assignments. True when it was delivered (or there
// is nobody to tell); a failure is logged once and the service goes on.
bool notify_service_manager(std::string_view state);

// READY=1: the service does what it is for (lmaster: bound; lagent: sampling and spooling).
void notify_ready(std::string_view status = {});
// RELOADING=1 (with MONOTONIC_USEC, which systemd's Type=notify-reload wants); READY=1 ends it.
void notify_reloading(std::string_view status = {});
// STOPPING=1: shutting down on purpose (the manager then does not treat the exit as a crash).
void notify_stopping(std::string_view status = {});
// STATUS=...: one line shown by `systemctl status`.
void notify_status(std::string_view status);

// True when stderr is connected to the systemd journal ($JOURNAL_STREAM names its device and
// inode), so log lines need no timestamp of their own.
bool stderr_is_journal();

// Formats log lines for the journal: a "<N>" syslog priority prefix (which journald turns into
// the entry's priority, see sd-daemon(3)), no timestamp, then "level: message".
std::unique_ptr<spdlog::formatter> journal_line_formatter();

}  // namespace fructosa
