// One process's identity on this host from /proc/PID/stat: its start time
// (field 22, clock ticks after boot), which with the pid names the process
// also across pid reuse, and whether it is a zombie (field 3 "Z").
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

namespace gossamer::detail {

/// What launchers read of /proc/PID/stat.
struct ProcessStat {
  std::string startTime;  ///< field 22: clock ticks after boot, as written there
  bool zombie = false;    ///< field 3 is "Z": exited, not yet reaped
};

/// The first `maxBytes` bytes of the file at `path` (a /proc file, a
/// marker); nullopt if it cannot be opened.
std::optional<std::string> readFileHead(const std::string& path, std::size_t maxBytes);

/// Reads /proc/`pid`/stat; nullopt if the process does not exist or the
/// line is not what proc(5) describes. Never throws on a missing process.
std::optional<ProcessStat> readProcessStat(pid_t pid);

}  // namespace gossamer::detail
