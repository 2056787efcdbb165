// launchLocalRanks's CPU binding: each rank is a real process (/bin/sh) that
// writes the CPUs it may run on, as sched_getaffinity reports them (taskset
// -cp of its own pid); the test reads them back from the rendezvous directory.
#include <sched.h>
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/launcher.hpp"
#include "log_capture.hpp"
#include "process.hpp"

namespace {

// "0-2,5" -> {0, 1, 2, 5}
std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

// Launches `n` ranks under `binding`; returns each rank's allowed CPUs.
std::map<int, std::vector<int>> cpusOfRanks(int n, gossamer::CpuBinding binding) {
  gossamer::LaunchOptions o;
  o.worldSize = n;
  o.executable = "/bin/sh";
  o.deadlineSeconds = 30;
  o.binding = binding;
  o.name = "test-launcher";
  std::map<int, std::vector<int>> seen;
  const auto result = gossamer::launchLocalRanks(
      o,
      [](int r, const std::string& dir) {
        // "pid 123's current affinity list: 0,1" -> "0,1"
        return std::vector<std::string>{
            "sh", "-c", "taskset -cp $$ | sed 's/.*: //' > " + dir + "/cpus-" + std::to_string(r)};
      },
      [&](const std::string& dir) {
        for (int r = 0; r < n; ++r) {
          std::ifstream in(dir + "/cpus-" + std::to_string(r));
          std::string line;
          if (std::getline(in, line)) seen[r] = parseCpuList(line);
        }
      });
  REQUIRE(result.ok());
  return seen;
}

// Narrows the calling thread's affinity to `cpus` for the scope (what the
// launcher reads and what its children inherit), then restores it.
class NarrowedAffinity {
 public:
  explicit NarrowedAffinity(const std::vector<int>& cpus) {
    CPU_ZERO(&saved_);
    REQUIRE(sched_getaffinity(0, sizeof saved_, &saved_) == 0);
    cpu_set_t narrow;
    CPU_ZERO(&narrow);
    for (int c : cpus) CPU_SET(c, &narrow);
    REQUIRE(sched_setaffinity(0, sizeof narrow, &narrow) == 0);
  }
  ~NarrowedAffinity() { sched_setaffinity(0, sizeof saved_, &saved_); }
  NarrowedAffinity(const NarrowedAffinity&) = delete;
  NarrowedAffinity& operator=(const NarrowedAffinity&) = delete;

 private:
  cpu_set_t saved_;
};

void checkBound(const std::vector<int>& cpus, int n) {
  const auto seen = cpusOfRanks(n, gossamer::CpuBinding::kCore);
  REQUIRE(seen.size() == static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(seen.at(r) == std::vector<int>{cpus[static_cast<std::size_t>(r) % cpus.size()]});
  }
}

}  // namespace

TEST_CASE("launcher: kCore binds rank r to the (r mod C)-th allowed CPU, kNone leaves the mask alone",
          "[launcher]") {
  const auto cpus = gossamer::allowedCpus();
  REQUIRE_FALSE(cpus.empty());
  REQUIRE(std::is_sorted(cpus.begin(), cpus.end()));
  // More ranks than CPUs, so the round robin wraps (bounded on large hosts).
  const int n = std::min(static_cast<int>(cpus.size()) * 2 + 1, 9);

  SECTION("kCore, the whole mask") { checkBound(gossamer::allowedCpus(), n); }
  SECTION("kCore, a mask that does not start at CPU 0") {
    // The highest CPU alone (and, with 4 or more, also the second): "CPU r
    // mod C" and "the (r mod C)-th allowed CPU" then differ.
    std::vector<int> subset{cpus.back()};
    if (cpus.size() >= 4) subset.insert(subset.begin(), cpus[1]);
    INFO("allowed CPUs " << cpus.size() << ": with CPU 0 alone the mappings cannot be told apart");
    REQUIRE(subset.front() != 0);
    NarrowedAffinity narrowed(subset);
    REQUIRE(gossamer::allowedCpus() == subset);
    checkBound(subset, 5);
  }
  SECTION("kNone") {
    INFO("with one allowed CPU, kNone and kCore give the same mask");
    REQUIRE(cpus.size() > 1);
    const auto seen = cpusOfRanks(n, gossamer::CpuBinding::kNone);
    REQUIRE(seen.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(seen.at(r) == cpus);
    }
  }
}

TEST_CASE("launcher: CPU binding names round-trip, and an unknown one is refused", "[launcher]") {
  for (auto b : {gossamer::CpuBinding::kCore, gossamer::CpuBinding::kNone})
    CHECK(gossamer::parseCpuBinding(gossamer::toString(b)) == b);
  CHECK(std::string(gossamer::toString(gossamer::CpuBinding::kCore)) == "core");
  CHECK_THROWS_AS(gossamer::parseCpuBinding("socket"), gossamer::InvalidArgument);
  CHECK_THROWS_WITH(gossamer::parseCpuBinding(""), Catch::Contains("core or none"));
}

namespace {

// Launches one /bin/sh rank per script; returns the result and the
// rendezvous directory (removed by then).
std::pair<gossamer::LaunchResult, std::string> launchScripts(const std::vector<std::string>& scripts,
                                                             double failureGrace = 20,
                                                             const std::vector<int>& replaced = {}) {
  gossamer::LaunchOptions o;
  if (!replaced.empty()) {
    o.followJob = true;
    o.replacedRanks = [replaced](const std::string&) { return replaced; };
  }
  o.worldSize = static_cast<int>(scripts.size());
  o.executable = "/bin/sh";
  o.deadlineSeconds = 60;
  o.failureGraceSeconds = failureGrace;
  o.stopGraceSeconds = 2;
  o.name = "test-launcher";
  std::string dir;
  auto result = gossamer::launchLocalRanks(o, [&](int r, const std::string& d) {
    dir = d;
    return std::vector<std::string>{"sh", "-c", scripts[static_cast<std::size_t>(r)]};
  });
  return {result, dir};
}

}  // namespace

TEST_CASE(
    "launcher: the report tells the rank that died from those that stopped after it and those that finished",
    "[launcher]") {
  gossamer::testing::LogCapture log(gossamer::LogLevel::kError);
  // rank 1 dies at once; ranks 0 and 2 exit 1 once it is gone (its pid,
  // which it leaves in a file, is reaped: at most 40 s); rank 3 finishes.
  gossamer::testing::TempDir marks;
  const std::string pidFile = marks / "rank1";
  const std::string follow = "i=0; while [ ! -s " + pidFile +
                             " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; " + "p=$(cat " +
                             pidFile + "); while kill -0 \"$p\" 2>/dev/null && [ $i -lt 800 ]; do " +
                             "sleep 0.05; i=$((i+1)); done; exit 1";
  const auto [result, dir] = launchScripts(
      {follow, "echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + "; kill -9 $$", follow,
       "exit 0"},
      60);
  REQUIRE(result.ranks.size() == 4);
  CHECK(result.ranks[1].outcome == gossamer::RankOutcome::kDied);
  CHECK(result.ranks[1].signal == SIGKILL);
  CHECK(result.ranks[0].outcome == gossamer::RankOutcome::kFollowed);
  CHECK(result.ranks[0].status == 1);
  CHECK(result.ranks[2].outcome == gossamer::RankOutcome::kFollowed);
  CHECK(result.ranks[3].outcome == gossamer::RankOutcome::kFinished);
  CHECK(result.failures == 3);
  CHECK_FALSE(result.ok());
  bool summary = false;
  for (const auto& [level, text] : log.lines())
    if (text.find("3 of 4 ranks did not finish (died: 1; followed: 0, 2; finished: 3)") != std::string::npos)
      summary = true;
  CHECK(summary);
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("launcher: a rank killed from outside whose restarted process finished is replaced, not a failure",
          "[launcher]") {
  gossamer::testing::LogCapture log(gossamer::LogLevel::kWarning);
  // Rank 1 is killed; the job says that rank 1 (killed), rank 2 (finished
  // itself) and a rank 6 that joined (not the launcher's) finished.
  const auto [result, dir] =
      launchScripts({"sleep 0.3; exit 0", "kill -9 $$", "sleep 0.3; exit 0", "exit 0"}, 20, {1, 2, 6});
  REQUIRE(result.ranks.size() == 4);
  CHECK(result.ranks[1].outcome == gossamer::RankOutcome::kReplaced);
  CHECK(result.ranks[1].signal == SIGKILL);
  CHECK(result.ranks[2].outcome == gossamer::RankOutcome::kFinished);
  CHECK(result.failures == 0);
  CHECK(result.ok());
  bool summary = false, error = false;
  for (const auto& [level, text] : log.lines()) {
    summary = summary || text.find(
                             "every rank finished, some in a process restarted in place of the launcher's "
                             "(replaced: 1; finished: 0, 2, 3)") != std::string::npos;
    error = error || text.find("did not finish") != std::string::npos;
  }
  CHECK(summary);
  CHECK_FALSE(error);
}

TEST_CASE("launcher: ranks it cannot start all leave nothing behind: no process, no directory",
          "[launcher]") {
  gossamer::LaunchOptions o;
  o.worldSize = 3;
  o.executable = "/bin/sh";
  o.deadlineSeconds = 60;
  o.name = "test-launcher";
  std::string dir;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(gossamer::launchLocalRanks(o,
                                               [&](int r, const std::string& d) {
                                                 dir = d;
                                                 if (r == 2)
                                                   throw gossamer::InvalidArgument("no args for rank 2");
                                                 return std::vector<std::string>{"sh", "-c", "exec sleep 30"};
                                               }),
                    Catch::Contains("no args for rank 2"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));  // ranks 0 and 1 were killed
  REQUIRE_FALSE(dir.empty());
  CHECK_FALSE(std::filesystem::exists(dir));
  errno = 0;
  CHECK(waitpid(-1, nullptr, WNOHANG) == -1);  // and reaped: this process has no child left
  CHECK(errno == ECHILD);
}

TEST_CASE("launcher: a rank still running well after another finished is killed, not waited for without end",
          "[launcher]") {
  gossamer::testing::LogCapture log(gossamer::LogLevel::kWarning);
  // Rank 0 finishes after 0.5 s; rank 1 stops itself (as a rank the job
  // removed that was stopped); rank 2 finishes 0.8 s after rank 0, well
  // within the grace. Rank 1 is killed max(4 s, 0.5 s) after rank 0 finished.
  gossamer::LaunchOptions o;
  o.worldSize = 3;
  o.executable = "/bin/sh";
  o.deadlineSeconds = 60;
  o.finishGraceSeconds = 4.0;
  o.name = "test-launcher";
  const std::vector<std::string> scripts{"sleep 0.5; exit 0", "kill -STOP $$; exit 0", "sleep 1.3; exit 0"};
  const auto t0 = std::chrono::steady_clock::now();
  const auto result = gossamer::launchLocalRanks(o, [&](int r, const std::string&) {
    return std::vector<std::string>{"sh", "-c", scripts[static_cast<std::size_t>(r)]};
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(result.ranks.size() == 3);
  CHECK(result.ranks[0].outcome == gossamer::RankOutcome::kFinished);
  CHECK(result.ranks[1].outcome == gossamer::RankOutcome::kKilled);
  CHECK(result.ranks[1].signal == SIGKILL);
  CHECK(result.ranks[2].outcome == gossamer::RankOutcome::kFinished);
  CHECK(result.failures == 1);
  CHECK(result.killed);
  CHECK(seconds >= 4.5);
  CHECK(seconds < 30);  // well before the deadline
  bool said = false;
  for (const auto& [level, text] : log.lines())
    said = said || text.find("still running well after a rank finished") != std::string::npos;
  CHECK(said);
}

TEST_CASE("launcher: a SIGTERM to the launcher is forwarded, every rank is reaped and the directory removed",
          "[launcher]") {
  gossamer::testing::LogCapture log(gossamer::LogLevel::kError);
  // Ranks 0 and 1 exit on SIGTERM; rank 2 ignores it and is killed after the stop grace.
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  // The signal goes once every rank runs (each leaves a file first): the
  // launcher's handler is in place before it starts any.
  gossamer::testing::TempDir marks;
  std::thread sender([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline &&
           !(std::filesystem::exists(marks / "0") && std::filesystem::exists(marks / "1") &&
             std::filesystem::exists(marks / "2")))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(getpid(), SIGTERM);  // caught by the launcher's handler, not by this test process
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto [result, dir] = launchScripts({"touch " + (marks / "0") + "; exec sleep 30",
                                            "touch " + (marks / "1") + "; exec sleep 30",
                                            "trap '' TERM; touch " + (marks / "2") + "; exec sleep 30"});
  sender.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(result.signal == SIGTERM);
  CHECK(result.ranks[0].outcome == gossamer::RankOutcome::kInterrupted);
  CHECK(result.ranks[0].signal == SIGTERM);
  CHECK(result.ranks[1].outcome == gossamer::RankOutcome::kInterrupted);
  CHECK(result.ranks[2].outcome == gossamer::RankOutcome::kKilled);
  CHECK(result.ranks[2].signal == SIGKILL);
  CHECK(result.killed);
  CHECK(seconds < 28);  // before the ranks' 30 s sleeps end: they were stopped
  CHECK_FALSE(std::filesystem::exists(dir));
  // The handler was the launcher's only while it ran: the previous one is back.
  struct sigaction now {};
  sigaction(SIGTERM, nullptr, &now);
  CHECK(now.sa_handler == before.sa_handler);
}
