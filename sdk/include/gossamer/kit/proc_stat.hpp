// One process's identity and state on this host from /proc/PID/stat: its
// start time (field 22, clock ticks after boot), which with the pid names the
// process also across pid reuse, and its state (field 3): a zombie ("Z"), or
// stopped ("T" by a signal, "t" by a debugger). For launchers, and for
// transports that watch a peer's process on the same host.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

namespace gossamer::detail {

/// What is read of /proc/PID/stat.
struct ProcessStat {
  std::string startTime;  ///< field 22: clock ticks after boot, as written there
  bool zombie = false;    ///< field 3 is "Z": exited, not yet reaped
  bool stopped = false;   ///< field 3 is "T" (SIGSTOP) or "t" (a debugger's stop)
};

/// The first `maxBytes` bytes of the file at `path` (a /proc file, a
/// marker); nullopt if it cannot be opened.
std::optional<std::string> readFileHead(const std::string& path, std::size_t maxBytes);

/// Reads /proc/`pid`/stat; nullopt if the process does not exist or the
/// line is not what proc(5) describes. Never throws on a missing process.
std::optional<ProcessStat> readProcessStat(pid_t pid);

}  // namespace gossamer::detail
