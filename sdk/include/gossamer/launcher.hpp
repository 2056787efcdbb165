// Starting every rank of a job as a process on this machine.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace gossamer {

/// Where launchLocalRanks lets each rank's process run.
enum class CpuBinding {
  kNone,  ///< Wherever the OS schedules it, within the launcher's own CPU affinity mask.
  /// Rank r on one logical CPU (hardware thread) only: the (r mod C)-th of
  /// the C CPUs in the launching thread's affinity mask, in ascending CPU
  /// number; more ranks than CPUs share them round robin. On a host without
  /// SMT this is `mpirun --map-by core --bind-to core:overload-allowed`. With
  /// more ranks than cores the OS otherwise moves processes between cores
  /// every few milliseconds, and which ranks share a core changes the time of
  /// a small allreduce by 20-40% (docs/collectives.md): bind for
  /// steady timings and a steady cost-model calibration. Two bound jobs
  /// started at once on one host pile onto the same CPUs.
  kCore,
};

/// "core" or "none" -> the CpuBinding (what `--bind` takes in the benchmarks
/// and gossamer-train). @throws InvalidArgument for any other name.
CpuBinding parseCpuBinding(std::string_view name);

/// The name parseCpuBinding takes: "core" or "none".
const char* toString(CpuBinding binding) noexcept;

/// Options of launchLocalRanks.
struct LaunchOptions {
  int worldSize = 1;                          ///< Processes to start (>= 1).
  std::string executable = "/proc/self/exe";  ///< Program each rank runs.
  /// After the first rank fails, how long the others may take to notice and
  /// exit on their own (their transport timeout plus margin), seconds.
  double failureGraceSeconds = 40;
  /// After the first rank exits with status 0 (the job has ended for it),
  /// how long the others may take to end too, seconds, and at least as long
  /// again as the job had run by then (a side of a partition that never
  /// healed trains to its own end, maybe slower); those still running then
  /// are killed (RankOutcome::kKilled): a rank the job removed that never
  /// exits (stopped, or hung) cannot hold the launcher for good. Infinity
  /// (the default): no bound.
  double finishGraceSeconds = std::numeric_limits<double>::infinity();
  /// Bound on the whole job, seconds, the processes followJob waits for
  /// included (<= 0: none).
  double deadlineSeconds = 0;
  std::string name = "gossamer";           ///< Prefix of the launcher's log messages (gossamer/log.hpp).
  CpuBinding binding = CpuBinding::kNone;  ///< Which CPUs each rank's process may run on.
  /// While the ranks run, SIGINT, SIGTERM and SIGHUP sent to the launcher
  /// are caught and forwarded to every rank still running (the previous
  /// handlers are restored on return). Off: the launcher's process keeps its
  /// own handling of them.
  bool forwardSignals = true;
  /// After forwarding a signal, how long the ranks may take to exit before
  /// they are killed, seconds.
  double stopGraceSeconds = 5;
  /// Once every rank's process has ended, and before the rendezvous
  /// directory goes, wait while a process that marked itself there
  /// (JobProcessMark) still runs: one started in place of a killed rank, or
  /// one that joined the job. It is the job's now, so a signal caught
  /// meanwhile is forwarded to it as to the ranks, and after
  /// stopGraceSeconds it is killed. Off: the directory goes at once, and
  /// such processes lose the job's rendezvous.
  bool followJob = false;
  /// With followJob: called once the job's processes are gone, before the
  /// rendezvous directory is removed, with that directory; returns the
  /// ranks that finished in a process started in place of the launcher's
  /// (e.g. read from a summary the job wrote there). Each of those whose
  /// launcher process was killed by a signal becomes RankOutcome::kReplaced
  /// and is not a failure. Unset: none.
  std::function<std::vector<int>(const std::string& rendezvous)> replacedRanks;
};

/// How one rank's process ended.
enum class RankOutcome {
  kFinished,     ///< Exited with status 0.
  kDied,         ///< Killed by a signal the launcher did not send, or the first rank to exit non-zero.
  kFollowed,     ///< Exited non-zero after another rank had died or failed (it left because of it).
  kKilled,       ///< Killed by the launcher: still running after the failure grace or the deadline.
  kInterrupted,  ///< Ended after the launcher forwarded it a signal (LaunchOptions::forwardSignals).
  kReplaced,     ///< Killed by a signal from outside, and a process restarted in its place finished
                 ///< the job (LaunchOptions::replacedRanks); not a failure.
};

/// "finished", "died", "followed", "killed", "interrupted" or "replaced".
const char* toString(RankOutcome outcome) noexcept;

/// How one rank ended.
struct RankExit {
  RankOutcome outcome = RankOutcome::kFinished;
  int status = 0;      ///< Exit status when it exited, else 0.
  int signal = 0;      ///< Signal that ended it when it was killed, else 0.
  double seconds = 0;  ///< When it ended, seconds after the launch.
};

/// What happened to the ranks.
struct LaunchResult {
  int failures = 0;             ///< Ranks that did not finish (exited non-zero or were killed by a signal).
  bool killed = false;          ///< The launcher had to SIGKILL ranks still running.
  int signal = 0;               ///< The first signal forwarded to the ranks (0: none).
  std::vector<RankExit> ranks;  ///< One per rank, in rank order.
  bool ok() const { return failures == 0 && !killed && signal == 0; }
};

/// The CPUs the calling thread may run on (its affinity mask,
/// sched_getaffinity; what a process it forks inherits), in ascending order:
/// what CpuBinding::kCore hands out to the ranks. Works on hosts with more
/// than CPU_SETSIZE (1024) CPUs.
/// @throws Error if the mask cannot be read or is empty.
std::vector<int> allowedCpus();

/// Creates a fresh rendezvous directory under /tmp, starts one process per
/// rank running `options.executable` with the arguments `argsFor(rank,
/// rendezvousDir)` (argv[0] included), and waits for all of them. Each
/// failure is reported through the log hook (gossamer/log.hpp, level error)
/// with the rank and its exit status or signal; at the end one line says
/// which ranks died, which stopped after them, which the launcher killed or
/// interrupted, which were replaced and which finished (LaunchResult::ranks):
/// at level error "N of W ranks did not finish (...)" when some failed, at
/// level warning "every rank finished, some in a process restarted in place
/// of the launcher's (replaced: ...; finished: ...)" when every failure was
/// replaced.
/// SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to the ranks
/// (forwardSignals); ranks still running `stopGraceSeconds` later are killed,
/// every rank is reaped and the directory removed before returning.
/// After a failure the others get `failureGraceSeconds` to stop by
/// themselves, after a rank finished `finishGraceSeconds` to end too; ranks
/// still running then (or past the deadline) are killed.
/// The rendezvous directory is removed at the end; `beforeCleanup` (if set)
/// runs just before, e.g. to read a result file written there.
/// With `binding` kCore each child binds itself (sched_setaffinity) before
/// exec, so every thread the rank starts inherits the one CPU; a child that
/// cannot bind exits with status 126 (a failed rank; the launcher logs
/// "cannot bind to CPU c" through the log hook), one that cannot execute the
/// program with 127.
/// @throws Error if the directory cannot be created, fork fails (ranks
///         already started are killed first; so they are if argsFor throws,
///         which passes on) or, with kCore, the calling
///         thread's affinity mask cannot be read (allowedCpus); then no
///         process is started and no directory is left.
LaunchResult launchLocalRanks(const LaunchOptions& options,
                              const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                              const std::function<void(const std::string&)>& beforeCleanup = {});

/// Marks this process, for as long as the object lives, as one of the job
/// whose rendezvous is `rendezvous`: a file "process-PID" in that directory
/// holding the process's start time (/proc/self/stat), which the launcher
/// that made the directory waits for (LaunchOptions::followJob). Nothing for
/// a rendezvous that is not such a directory (tcp://..., or one without the
/// launcher's file "+launcher"), and nothing if the file cannot be written
/// (the launcher then does not wait for this process).
class JobProcessMark {
 public:
  explicit JobProcessMark(const std::string& rendezvous);
  ~JobProcessMark();
  JobProcessMark(const JobProcessMark&) = delete;
  JobProcessMark& operator=(const JobProcessMark&) = delete;

 private:
  std::string path_;  // empty: nothing marked
};

/// The id of the job whose rendezvous directory launchLocalRanks made
/// (/tmp/gossamer-rdv-ID: the six characters after the prefix), which names
/// the job to processes that join it or restart one of its ranks
/// (jobRendezvous). Empty for a directory not made by launchLocalRanks.
std::string jobIdOf(const std::string& rendezvous);

/// The rendezvous directory of the running job `id` (jobIdOf) on this host.
/// @throws InvalidArgument if `id` is not six characters of [A-Za-z0-9];
///         Error if no such job runs here (the directory is missing).
std::string jobRendezvous(const std::string& id);

}  // namespace gossamer
