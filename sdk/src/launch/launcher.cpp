#include "gossamer/launcher.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/proc_stat.hpp"
#include "gossamer/log.hpp"

namespace gossamer {

CpuBinding parseCpuBinding(std::string_view name) {
  if (name == "core") return CpuBinding::kCore;
  if (name == "none") return CpuBinding::kNone;
  throw InvalidArgument("unknown CPU binding '" + std::string(name) + "' (core or none)");
}

const char* toString(CpuBinding binding) noexcept { return binding == CpuBinding::kCore ? "core" : "none"; }

namespace {

// A cpu_set_t sized for `cpus` CPUs (CPU_ALLOC: hosts may have more than
// CPU_SETSIZE = 1024), freed on destruction.
class CpuSet {
 public:
  explicit CpuSet(int cpus) : count_(cpus), set_(CPU_ALLOC(cpus)), bytes_(CPU_ALLOC_SIZE(cpus)) {
    if (!set_) throw std::bad_alloc();
    CPU_ZERO_S(bytes_, set_);
  }
  ~CpuSet() { CPU_FREE(set_); }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  cpu_set_t* get() const { return set_; }
  std::size_t bytes() const { return bytes_; }
  int count() const { return count_; }

 private:
  int count_;
  cpu_set_t* set_;
  std::size_t bytes_;
};

}  // namespace

std::vector<int> allowedCpus() {
  // The kernel refuses (EINVAL) a mask smaller than its number of possible
  // CPUs: grow until it fits.
  for (int size = CPU_SETSIZE;; size *= 2) {
    CpuSet set(size);
    if (sched_getaffinity(0, set.bytes(), set.get()) != 0) {
      if (errno == EINVAL && size < (1 << 20)) continue;
      throw Error(std::string("cannot read the calling thread's CPU affinity: ") + std::strerror(errno));
    }
    std::vector<int> cpus;
    for (int c = 0; c < set.count(); ++c)
      if (CPU_ISSET_S(static_cast<std::size_t>(c), set.bytes(), set.get())) cpus.push_back(c);
    if (cpus.empty()) throw Error("the calling thread's CPU affinity mask is empty");
    return cpus;
  }
}

namespace {

constexpr int kCannotBind = 126, kCannotExec = 127;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// The signal the launcher caught (0: none). Set by the handler, read by the
// wait loop: lock-free and async-signal-safe.
volatile std::sig_atomic_t caughtSignal = 0;
extern "C" void onLauncherSignal(int sig) {
  if (caughtSignal == 0) caughtSignal = sig;
}

// Installs the forwarding handlers for its lifetime, then restores the
// previous ones.
class SignalForwarding {
 public:
  explicit SignalForwarding(bool on) : on_(on) {
    caughtSignal = 0;
    if (!on_) return;
    struct sigaction sa {};
    sa.sa_handler = onLauncherSignal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &sa, &previous_[i]);
  }
  ~SignalForwarding() {
    if (!on_) return;
    for (std::size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &previous_[i], nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  bool on_;
  struct sigaction previous_[std::size(kForwarded)]{};
};

// "0, 2, 5-7" for the ranks with `outcome`.
std::string ranksWith(const std::vector<RankExit>& ranks, RankOutcome outcome) {
  std::string out;
  std::size_t r = 0;
  while (r < ranks.size()) {
    if (ranks[r].outcome != outcome) {
      ++r;
      continue;
    }
    std::size_t e = r;
    while (e + 1 < ranks.size() && ranks[e + 1].outcome == outcome) ++e;
    out += (out.empty() ? "" : ", ") + std::to_string(r) + (e > r + 1 ? "-" + std::to_string(e) : "");
    if (e == r + 1) out += ", " + std::to_string(e);
    r = e + 1;
  }
  return out;
}

/// What the launcher's own exit statuses mean ("" for the program's).
std::string exitReason(int status, const LaunchOptions& o, const std::vector<int>& cpus, long rank) {
  if (status == kCannotBind && !cpus.empty()) {
    return " (cannot bind to CPU " + std::to_string(cpus[static_cast<std::size_t>(rank) % cpus.size()]) + ")";
  }
  if (status == kCannotExec) return " (cannot execute " + o.executable + ")";
  return "";
}

}  // namespace

const char* toString(RankOutcome outcome) noexcept {
  switch (outcome) {
    case RankOutcome::kFinished:
      return "finished";
    case RankOutcome::kDied:
      return "died";
    case RankOutcome::kFollowed:
      return "followed";
    case RankOutcome::kKilled:
      return "killed";
    case RankOutcome::kInterrupted:
      return "interrupted";
    case RankOutcome::kReplaced:
      return "replaced";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

// startRanks' loop: appends each child's pid to `pids` as it starts.
void startEachRank(const LaunchOptions& o,
                   const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                   const std::string& rendezvous, const std::vector<int>& cpus, CpuSet& bindTo,
                   std::vector<pid_t>& pids) {
  for (int r = 0; r < o.worldSize; ++r) {
    std::vector<std::string> args = argsFor(r, rendezvous);  // built before fork: no allocation in the child
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The mask is made before fork: the child only makes system calls.
    int cpu = -1;
    if (!cpus.empty()) {
      cpu = cpus[static_cast<std::size_t>(r) % cpus.size()];
      CPU_ZERO_S(bindTo.bytes(), bindTo.get());
      CPU_SET_S(static_cast<std::size_t>(cpu), bindTo.bytes(), bindTo.get());
    }
    const pid_t pid = fork();
    if (pid < 0)
      throw Error("fork failed while starting rank " + std::to_string(r) + ": " + std::strerror(errno));
    if (pid == 0) {
      // Before exec, so every thread of the rank inherits the mask.
      // Failures are told by the exit status only (after fork only
      // async-signal-safe calls are allowed, and the log hook lives in the
      // parent, which reports them): 126 = cannot bind, 127 = cannot exec.
      if (cpu >= 0 && sched_setaffinity(0, bindTo.bytes(), bindTo.get()) != 0) _exit(kCannotBind);
      execv(o.executable.c_str(), argv.data());
      _exit(kCannotExec);
    }
    pids.push_back(pid);
  }
}

// Forks and executes o.executable once per rank with argsFor(rank,
// rendezvous), each bound to its CPU of `cpus` (none when empty; `bindTo`
// is the mask's scratch); returns the children's pids by rank. If a fork
// fails or argsFor throws, kills and reaps the ranks already started and
// throws.
std::vector<pid_t> startRanks(const LaunchOptions& o,
                              const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                              const std::string& rendezvous, const std::vector<int>& cpus, CpuSet& bindTo) {
  std::vector<pid_t> pids;
  try {
    startEachRank(o, argsFor, rendezvous, cpus, bindTo, pids);
  } catch (...) {
    for (pid_t p : pids) kill(p, SIGKILL);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
    throw;
  }
  return pids;
}

// Waits for the started ranks to exit, polling every 20 ms: forwards a
// signal the launcher caught, records each rank's exit and outcome, and
// kills the ranks still running failureGraceSeconds after a failure, the
// finish grace after a rank finished, after
// deadlineSeconds, or stopGraceSeconds after a forwarded signal.
class RankSupervisor {
 public:
  // `pids`: the ranks' processes, by rank; `cpus`: their CPUs (for the
  // reasons of exit statuses).
  RankSupervisor(const LaunchOptions& o, const std::vector<int>& cpus, std::vector<pid_t> pids)
      : o_(o), cpus_(cpus), pids_(std::move(pids)), running_(pids_.size(), true), alive_(pids_.size()) {
    result_.ranks.resize(pids_.size());
  }

  // Returns once every rank has exited: how each one ended.
  LaunchResult waitAll() {
    while (alive_ > 0) {
      if (const int sig = caughtSignal; sig != 0 && !forwardedAt_) forward(sig);
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        const auto it = std::find(pids_.begin(), pids_.end(), pid);
        if (it != pids_.end()) recordExit(static_cast<std::size_t>(it - pids_.begin()), status);
        continue;
      }
      killIfOverdue();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::move(result_);
  }

 private:
  // Seconds since `t`.
  static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  // Sends the caught signal `sig` to the ranks still running.
  void forward(int sig) {
    GOSSAMER_LOG(kWarning, o_.name << ": caught signal " << sig << "; forwarding it to the ranks");
    result_.signal = sig;
    forwardedAt_ = Clock::now();
    for (std::size_t r = 0; r < pids_.size(); ++r)
      if (running_[r]) kill(pids_[r], sig);
  }

  // Records the exit of `rank` with wait status `status`, its outcome, and
  // logs a rank that died or followed a failed peer.
  void recordExit(std::size_t rank, int status) {
    --alive_;
    running_[rank] = false;
    RankExit& x = result_.ranks[rank];
    x.seconds = since(start_);
    if (WIFSIGNALED(status)) x.signal = WTERMSIG(status);
    if (WIFEXITED(status)) x.status = WEXITSTATUS(status);
    if (WIFEXITED(status) && x.status == 0) {  // kFinished
      if (!firstFinish_) firstFinish_ = Clock::now();
      return;
    }
    ++result_.failures;
    if (result_.killed && x.signal == SIGKILL)
      x.outcome = RankOutcome::kKilled;
    else if (forwardedAt_)
      x.outcome = RankOutcome::kInterrupted;
    else if (result_.killed)
      x.outcome = RankOutcome::kKilled;
    else if (firstFailure_ && !WIFSIGNALED(status))
      x.outcome = RankOutcome::kFollowed;
    else
      x.outcome = RankOutcome::kDied;
    if (x.outcome == RankOutcome::kDied || x.outcome == RankOutcome::kFollowed) {
      if (WIFSIGNALED(status))
        GOSSAMER_LOG(kError, o_.name << ": rank " << rank << " was killed by signal " << x.signal);
      else
        GOSSAMER_LOG(kError, o_.name << ": rank " << rank << " exited with status " << x.status
                                     << exitReason(x.status, o_, cpus_, static_cast<long>(rank))
                                     << (x.outcome == RankOutcome::kFollowed ? " after a failed peer" : ""));
    }
    if (!firstFailure_) firstFailure_ = Clock::now();
  }

  // Kills the ranks still running (once) when the grace after a failure,
  // the deadline or the grace after a forwarded signal has run out.
  void killIfOverdue() {
    const bool afterFailure =
        firstFailure_ && !forwardedAt_ && since(*firstFailure_) > o_.failureGraceSeconds;
    const bool afterFinish =
        firstFinish_ && !forwardedAt_ &&
        since(*firstFinish_) >
            std::max(o_.finishGraceSeconds, std::chrono::duration<double>(*firstFinish_ - start_).count());
    const bool late = o_.deadlineSeconds > 0 && since(start_) > o_.deadlineSeconds;
    const bool stopOverdue = forwardedAt_ && since(*forwardedAt_) > o_.stopGraceSeconds;
    if (result_.killed || !(afterFailure || afterFinish || late || stopOverdue)) return;
    GOSSAMER_LOG(kWarning, o_.name << ": killing the ranks still running ("
                                   << (stopOverdue    ? "they outlived the forwarded signal"
                                       : afterFailure ? "after a failure"
                                       : afterFinish  ? "still running well after a rank finished"
                                                      : "deadline exceeded")
                                   << ")");
    for (std::size_t r = 0; r < pids_.size(); ++r)
      if (running_[r]) kill(pids_[r], SIGKILL);
    result_.killed = true;
  }

  const LaunchOptions& o_;
  const std::vector<int>& cpus_;
  const std::vector<pid_t> pids_;  // by rank
  LaunchResult result_;
  std::vector<bool> running_;  // by rank
  const Clock::time_point start_ = Clock::now();
  std::optional<Clock::time_point> firstFailure_, firstFinish_, forwardedAt_;
  std::size_t alive_;  // ranks not yet reaped
};

// The processes marked in `dir` (JobProcessMark) that still run: their
// start time matches the mark's (no reused pid), and they are no zombie.
std::vector<pid_t> markedProcesses(const std::string& dir) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("process-", 0) != 0) continue;
    const std::string pid = name.substr(8);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    const auto mark = detail::readFileHead(entry.path(), 63);
    if (!mark) continue;
    const auto id = static_cast<pid_t>(std::stol(pid));
    const auto now = detail::readProcessStat(id);
    if (now && !now->zombie && now->startTime == *mark) out.push_back(id);
  }
  return out;
}

// LaunchOptions::followJob: waits while a process marked in `dir` runs; a
// caught signal is forwarded to them, and stopGraceSeconds later they are
// killed, as they are past the job's deadline (deadlineSeconds after
// `start`). Records a caught signal in `result`.
void followMarkedProcesses(const std::string& dir, const LaunchOptions& o, Clock::time_point start,
                           LaunchResult& result) {
  bool said = false;
  std::optional<Clock::time_point> forwardedAt;
  for (;;) {
    const std::vector<pid_t> alive = markedProcesses(dir);
    if (alive.empty()) return;
    if (!said) {
      GOSSAMER_LOG(kInfo,
                   o.name << ": its ranks' processes have ended; " << alive.size()
                          << " process(es) of the job started in their place or beside them still run: "
                             "waiting for them");
      said = true;
    }
    if (const int sig = caughtSignal; sig != 0 && !forwardedAt) {
      GOSSAMER_LOG(kWarning, o.name << ": caught signal " << sig << "; forwarding it to the job's processes");
      result.signal = sig;
      forwardedAt = Clock::now();
      for (pid_t p : alive) kill(p, sig);
    }
    const bool outlived = forwardedAt && std::chrono::duration<double>(Clock::now() - *forwardedAt).count() >
                                             o.stopGraceSeconds;
    const bool late = o.deadlineSeconds > 0 &&
                      std::chrono::duration<double>(Clock::now() - start).count() > o.deadlineSeconds;
    if (outlived || late) {
      GOSSAMER_LOG(kWarning, o.name << ": killing the job's processes still running ("
                                    << (outlived ? "they outlived the signal" : "deadline exceeded") << ")");
      for (pid_t p : alive) kill(p, SIGKILL);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The ranks the job's restarted processes finished for: each whose process
// was killed by a signal from outside is replaced, no longer a failure.
void markReplaced(LaunchResult& result, const std::vector<int>& finishedElsewhere) {
  for (int r : finishedElsewhere) {
    if (r < 0 || static_cast<std::size_t>(r) >= result.ranks.size()) continue;  // joined: not the launcher's
    RankExit& x = result.ranks[static_cast<std::size_t>(r)];
    if (x.outcome != RankOutcome::kDied || x.signal == 0) continue;
    x.outcome = RankOutcome::kReplaced;
    --result.failures;
  }
}

// Logs which ranks did not finish, by outcome; or, when every rank the
// launcher saw fail was replaced, which were.
void reportOutcomes(const LaunchOptions& o, const LaunchResult& result) {
  std::string report;
  bool replaced = false;
  for (auto outcome : {RankOutcome::kDied, RankOutcome::kFollowed, RankOutcome::kKilled,
                       RankOutcome::kInterrupted, RankOutcome::kReplaced, RankOutcome::kFinished}) {
    const std::string who = ranksWith(result.ranks, outcome);
    if (who.empty()) continue;
    replaced = replaced || outcome == RankOutcome::kReplaced;
    report += std::string(report.empty() ? "" : "; ") + toString(outcome) + ": " + who;
  }
  if (!result.ok())
    GOSSAMER_LOG(kError, o.name << ": " << result.failures << " of " << o.worldSize
                                << " ranks did not finish (" << report << ")");
  else if (replaced)
    GOSSAMER_LOG(kWarning, o.name << ": every rank finished, some in a process restarted in place of the "
                                     "launcher's ("
                                  << report << ")");
}

}  // namespace

namespace {
constexpr const char* kRendezvousPrefix = "/tmp/gossamer-rdv-";
// In a directory launchLocalRanks made: its processes mark themselves there.
constexpr const char* kLauncherFile = "+launcher";
}  // namespace

std::string jobIdOf(const std::string& rendezvous) {
  const std::string prefix = kRendezvousPrefix;
  if (rendezvous.size() != prefix.size() + 6 || rendezvous.rfind(prefix, 0) != 0) return {};
  return rendezvous.substr(prefix.size());
}

std::string jobRendezvous(const std::string& id) {
  if (id.size() != 6 ||
      !std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    throw InvalidArgument("job id '" + id + "' is not the six letters and digits the launcher printed");
  const std::string dir = kRendezvousPrefix + id;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("no job " + id + " runs on this host (" + dir +
                " is missing: the job ended, or runs elsewhere)");
  return dir;
}

JobProcessMark::JobProcessMark(const std::string& rendezvous) {
  std::error_code ec;
  // Only where a launcher waits: a directory launchLocalRanks made (a job's
  // own --rendezvous is removed by its last rank, which a mark would stop).
  if (rendezvous.rfind("tcp://", 0) == 0 || !std::filesystem::exists(rendezvous + "/" + kLauncherFile, ec))
    return;
  const auto start = detail::readProcessStat(::getpid());
  if (!start) return;
  const std::string path = rendezvous + "/process-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  const bool ok = std::fputs(start->startTime.c_str(), f) >= 0;
  if (std::fclose(f) == 0 && ok) path_ = path;
}

JobProcessMark::~JobProcessMark() {
  if (!path_.empty()) std::remove(path_.c_str());
}

LaunchResult launchLocalRanks(const LaunchOptions& o,
                              const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                              const std::function<void(const std::string&)>& beforeCleanup) {
  GOSSAMER_ENFORCE(o.worldSize >= 1, "world size " << o.worldSize);
  // Read before the directory exists, so that a failure leaves nothing behind.
  const std::vector<int> cpus = o.binding == CpuBinding::kCore ? allowedCpus() : std::vector<int>{};
  CpuSet bindTo(cpus.empty() ? 1 : cpus.back() + 1);
  std::string pattern = std::string(kRendezvousPrefix) + "XXXXXX";
  std::vector<char> tmpl(pattern.begin(), pattern.end());
  tmpl.push_back('\0');
  if (!mkdtemp(tmpl.data())) throw Error("cannot create a rendezvous directory in /tmp");
  const std::string rendezvous = tmpl.data();
  if (std::FILE* f = std::fopen((rendezvous + "/" + kLauncherFile).c_str(), "w");
      f == nullptr || std::fclose(f) != 0) {
    std::error_code ec;
    std::filesystem::remove_all(rendezvous, ec);
    throw Error("cannot write in the rendezvous directory " + rendezvous);
  }
  // Caught from here on; exec resets the children's handlers to the default.
  SignalForwarding forwarding(o.forwardSignals);
  const Clock::time_point start = Clock::now();
  std::vector<pid_t> pids;
  try {
    pids = startRanks(o, argsFor, rendezvous, cpus, bindTo);
  } catch (...) {  // no rank runs: nothing is left either
    std::error_code ec;
    std::filesystem::remove_all(rendezvous, ec);
    throw;
  }
  RankSupervisor supervisor(o, cpus, std::move(pids));
  LaunchResult result = supervisor.waitAll();
  if (o.followJob && result.signal == 0) followMarkedProcesses(rendezvous, o, start, result);
  if (o.followJob && o.replacedRanks && result.signal == 0) markReplaced(result, o.replacedRanks(rendezvous));
  if (beforeCleanup) beforeCleanup(rendezvous);
  std::error_code ec;
  std::filesystem::remove_all(rendezvous, ec);
  reportOutcomes(o, result);
  return result;
}

}  // namespace gossamer
