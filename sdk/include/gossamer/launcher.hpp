// Starting every rank of a job as a process on this machine.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gossamer {

/// Options of launchLocalRanks.
struct LaunchOptions {
  int worldSize = 1;                          ///< Processes to start (>= 1).
  std::string executable = "/proc/self/exe";  ///< Program each rank runs.
  /// After the first rank fails, how long the others may take to notice and
  /// exit on their own (their transport timeout plus margin), seconds.
  double failureGraceSeconds = 40;
  /// Bound on the whole job, seconds (<= 0: none).
  double deadlineSeconds = 0;
  std::string name = "gossamer";  ///< Prefix of the launcher's messages on stderr.
};

/// What happened to the ranks.
struct LaunchResult {
  int failures = 0;     ///< Ranks that exited non-zero or were killed by a signal.
  bool killed = false;  ///< The launcher had to SIGKILL ranks still running.
  bool ok() const { return failures == 0 && !killed; }
};

/// Creates a fresh rendezvous directory under /tmp, starts one process per
/// rank running `options.executable` with the arguments `argsFor(rank,
/// rendezvousDir)` (argv[0] included), and waits for all of them. Each
/// failure is reported on stderr with the rank and its exit status or signal.
/// After a failure the others get `failureGraceSeconds` to stop by
/// themselves; ranks still running then (or past the deadline) are killed.
/// The rendezvous directory is removed at the end; `beforeCleanup` (if set)
/// runs just before, e.g. to read a result file written there.
/// @throws Error if the directory cannot be created or fork fails (ranks
///         already started are killed first).
LaunchResult launchLocalRanks(const LaunchOptions& options,
                              const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                              const std::function<void(const std::string&)>& beforeCleanup = {});

}  // namespace gossamer
