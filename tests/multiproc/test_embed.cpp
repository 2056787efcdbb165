// Embeddability: installs this build into a temporary prefix, builds the
// stand-alone project examples/embed against it with find_package(gossamer),
// and trains with its 4 peers over ZeroMQ on loopback; with the C ABI
// built, its C program links the installed libgossamer_c (gossamer::c).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "build_paths.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// Exit code reported for a process that was killed after its deadline.
constexpr int kTimedOut = -1;

/// A fresh directory under the system temp dir, removed (recursively) on scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "gossamer-embed-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// Whole contents of a text file ("" if it cannot be read).
std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Starts `argv` (argv[0] is a path, not looked up in PATH) in its own process
/// group with stdout and stderr going to `log`. Returns the pid.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // own group, so a kill also reaches make/g++

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::system_error(rc, std::generic_category(), "posix_spawn " + argv[0]);
  return pid;
}

/// Polls the children with waitpid(WNOHANG) until all have exited or
/// `timeout` passed; then SIGKILLs the process groups of the rest and reaps
/// them. Returns one exit code per pid: the exit status, 128 + signal for a
/// child killed by a signal, or kTimedOut.
std::vector<int> waitAll(const std::vector<pid_t>& pids, std::chrono::seconds timeout) {
  std::vector<int> codes(pids.size(), kTimedOut);
  std::vector<bool> done(pids.size(), false);
  std::size_t left = pids.size();
  const auto deadline = Clock::now() + timeout;
  while (left > 0 && Clock::now() < deadline) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(-pids[i], SIGKILL);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
  }
  return codes;
}

/// Runs one command to completion (bounded by `timeout`), output into `log`.
int run(const std::vector<std::string>& argv, const fs::path& log,
        std::chrono::seconds timeout = std::chrono::seconds(240)) {
  return waitAll({spawn(argv, log)}, timeout).front();
}

}  // namespace

TEST_CASE("installed package builds and runs examples/embed", "[embed]") {
  const std::string cmake = gossamer::testing::cmakeCommand();
  const fs::path source = gossamer::testing::sourceDir();
  const TempDir tmp;
  const fs::path prefix = tmp.path() / "prefix";
  const fs::path build = tmp.path() / "build";

  // (a) Install headers, static libraries and the package config.
  {
    const fs::path log = tmp.path() / "install.log";
    const int rc =
        run({cmake, "--install", gossamer::testing::binaryDir(), "--prefix", prefix.string()}, log);
    INFO("cmake --install output:\n" << slurp(log));
    REQUIRE(rc == 0);
    REQUIRE(fs::exists(prefix / "include" / "gossamer" / "session.hpp"));
    REQUIRE(fs::exists(prefix / "include" / "gossamer" / "kit" / "wire.hpp"));
    CHECK_FALSE(fs::exists(prefix / "include" / "gossamer" / "kit" / "detail"));  // not installed
  }

  // (b) Configure and build examples/embed against the prefix only.
  {
    const fs::path log = tmp.path() / "configure.log";
    const int rc = run({cmake, "-S", (source / "examples" / "embed").string(), "-B", build.string(),
                        "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + prefix.string()},
                       log);
    INFO("configure output:\n" << slurp(log));
    REQUIRE(rc == 0);
  }
  {
    const fs::path log = tmp.path() / "build.log";
    const int rc = run({cmake, "--build", build.string(), "-j", "2"}, log);
    INFO("build output:\n" << slurp(log));
    REQUIRE(rc == 0);
  }
  const fs::path exe = build / "embed_train";
  REQUIRE(fs::exists(exe));

  // (b') A build with the C ABI installs gossamer.h and exports gossamer::c:
  // the embed project's C program links the installed library and agrees
  // with its header.
  if (fs::exists(prefix / "include" / "gossamer" / "gossamer.h")) {
    const fs::path cExe = build / "embed_c_version";
    REQUIRE(fs::exists(cExe));
    const fs::path log = tmp.path() / "c_version.log";
    const int rc = run({cExe.string()}, log, std::chrono::seconds(30));
    const std::string out = slurp(log);
    INFO("embed_c_version output:\n" << out);
    CHECK(rc == 0);
    CHECK(out.find("gossamer C API version ") == 0);
  }

  // (c) Four peers rendezvous through a fresh directory and train 20 epochs.
  const int kPeers = 4;
  const std::string config = (source / "examples" / "embed" / "peer.yaml").string();
  const std::string rdv = (tmp.path() / "rdv").string();
  std::vector<pid_t> pids;
  std::vector<fs::path> logs;
  for (int r = 0; r < kPeers; ++r) {
    logs.push_back(tmp.path() / ("peer" + std::to_string(r) + ".log"));
    pids.push_back(spawn({exe.string(), config, std::to_string(r), rdv}, logs.back()));
  }
  const std::vector<int> codes = waitAll(pids, std::chrono::seconds(60));
  for (int r = 0; r < kPeers; ++r) {
    const std::string out = slurp(logs[r]);
    INFO("rank " << r << " exit code " << codes[r] << " (" << kTimedOut << " = killed after 60 s), output:\n"
                 << out);
    CHECK(codes[r] == 0);
    const std::string expected =
        "rank " + std::to_string(r) + ": done after 1000 steps, " + std::to_string(kPeers) + " ranks left";
    const bool printedOk = out.find(expected) != std::string::npos;
    CHECK(printedOk);
  }
}
