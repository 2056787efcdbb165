// Test support: child processes with bounded waits, temp directories.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gossamer::testing {

/// A fresh directory under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gossamer-test-XXXXXX";
    const char* p = mkdtemp(tmpl);
    path_ = p ? p : "";
  }
  // GOSSAMER_KEEP_TEST_DIRS=1 keeps the directory (the ranks' output and
  // records) for a look after a failure.
  ~TempDir() {
    std::error_code ec;
    if (path_.empty()) return;
    if (const char* keep = std::getenv("GOSSAMER_KEEP_TEST_DIRS"); keep != nullptr && *keep == '1')
      std::fprintf(stderr, "kept %s\n", path_.c_str());
    else
      std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Starts `args[0]` with `args`, stdout and stderr redirected to files.
/// Returns the pid, or -1 if fork failed.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& outFile,
                   const std::string& errFile) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int out = open(outFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(errFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) dup2(out, 1);
  if (err >= 0) dup2(err, 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

/// Waits up to `seconds` for `pid`; returns its wait status, or nullopt after
/// killing it with SIGKILL when the time ran out.
inline std::optional<int> waitBounded(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Removes what the libfabric shm provider left in /dev/shm for a process that
/// was killed: its regions are named "gossamer-<pid>-..." and only a clean
/// close unlinks them (the next shm transport made would remove them too).
inline void removeShmRegionsOf(pid_t pid) {
  std::error_code ec;
  const std::string prefix = "gossamer-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A process's stderr for a failure message: its lines that say "error"
/// first (a log cut short still shows why the process stopped), then the rest.
inline std::string errorsFirst(const std::string& text) {
  std::istringstream in(text);
  std::string line, errors, rest;
  while (std::getline(in, line)) (line.find("error") != std::string::npos ? errors : rest) += line + "\n";
  return errors.empty() ? rest : errors + "(the whole log:)\n" + rest;
}

inline void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

}  // namespace gossamer::testing
