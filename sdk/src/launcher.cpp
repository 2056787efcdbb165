#include "gossamer/launcher.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "gossamer/errors.hpp"

namespace gossamer {

LaunchResult launchLocalRanks(const LaunchOptions& o,
                              const std::function<std::vector<std::string>(int, const std::string&)>& argsFor,
                              const std::function<void(const std::string&)>& beforeCleanup) {
  using Clock = std::chrono::steady_clock;
  GOSSAMER_ENFORCE(o.worldSize >= 1, "world size " << o.worldSize);
  char tmpl[] = "/tmp/gossamer-rdv-XXXXXX";
  if (!mkdtemp(tmpl)) throw Error("cannot create a rendezvous directory in /tmp");
  const std::string rendezvous = tmpl;
  std::vector<pid_t> pids;
  for (int r = 0; r < o.worldSize; ++r) {
    std::vector<std::string> args = argsFor(r, rendezvous);  // built before fork: no allocation in the child
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      throw Error("fork failed while starting rank " + std::to_string(r));
    }
    if (pid == 0) {
      execv(o.executable.c_str(), argv.data());
      _exit(127);  // in the child only: exec failed
    }
    pids.push_back(pid);
  }
  LaunchResult result;
  const auto start = Clock::now();
  std::optional<Clock::time_point> firstFailure;
  std::size_t alive = pids.size();
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  while (alive > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      const auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      --alive;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        ++result.failures;
        const long rank = static_cast<long>(it - pids.begin());
        if (WIFSIGNALED(status))
          std::fprintf(stderr, "%s: rank %ld was killed by signal %d\n", o.name.c_str(), rank,
                       WTERMSIG(status));
        else
          std::fprintf(stderr, "%s: rank %ld exited with status %d\n", o.name.c_str(), rank,
                       WEXITSTATUS(status));
        if (!firstFailure) firstFailure = Clock::now();
      }
      continue;
    }
    const bool afterFailure = firstFailure && since(*firstFailure) > o.failureGraceSeconds;
    const bool late = o.deadlineSeconds > 0 && since(start) > o.deadlineSeconds;
    if (!result.killed && (afterFailure || late)) {
      std::fprintf(stderr, "%s: stopping ranks still running (%s)\n", o.name.c_str(),
                   afterFailure ? "after a failure" : "deadline exceeded");
      for (pid_t p : pids) kill(p, SIGKILL);
      result.killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (beforeCleanup) beforeCleanup(rendezvous);
  std::error_code ec;
  std::filesystem::remove_all(rendezvous, ec);
  if (result.failures)
    std::fprintf(stderr, "%s: %d of %d ranks failed\n", o.name.c_str(), result.failures, o.worldSize);
  return result;
}

}  // namespace gossamer
