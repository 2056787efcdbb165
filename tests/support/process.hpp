// Test support: child processes with bounded waits, temp directories.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gossamer::testing {

/// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::error_code ec;
    std::string tmpl = (std::filesystem::temp_directory_path(ec) / "gossamer-test-XXXXXX").string();
    if (ec) tmpl = "/tmp/gossamer-test-XXXXXX";
    const char* p = mkdtemp(tmpl.data());
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

/// Waits up to `seconds` for `pid` as waitBounded; returns its exit code, or
/// nullopt when it was killed (by a signal, or after the time ran out).
inline std::optional<int> exitCodeWithin(pid_t pid, double seconds) {
  const auto status = waitBounded(pid, seconds);
  return status && WIFEXITED(*status) ? std::optional<int>(WEXITSTATUS(*status)) : std::nullopt;
}

/// Runs `body` in a forked child process and returns what it returned (by
/// convention empty: it passed; or what failed), or why the child did not
/// finish. Waits at most `seconds` for the child's report and its exit, then
/// kills it. The child reports through a pipe, not through Catch's handlers.
inline std::string inChild(const std::function<std::string()>& body, double seconds = 120) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe() failed";
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) return "fork() failed";
  if (pid == 0) {
    for (const int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM}) std::signal(sig, SIG_DFL);
    ::close(fds[0]);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("threw: ") + e.what();
    } catch (...) {
      out = "threw something that is not a std::exception";
    }
    for (std::size_t at = 0; at < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string out;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child closed its end (or exited)
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  const double rest =
      std::max(0.1, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
  const auto status = waitBounded(pid, rest);
  if (!status) return out + " [child killed after " + std::to_string(seconds) + " s]";
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0)
    return out + " [child ended with status " + std::to_string(*status) + "]";
  return out;
}

/// Descriptors this process has open now (entries of /proc/self/fd).
inline long openDescriptors() {
  return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                       std::filesystem::directory_iterator{});
}

/// A TCP port on 127.0.0.1 that nothing listens on or holds now, below
/// Linux's ephemeral range (32768-60999) so that no client connection of
/// another test or process takes it before the caller binds it; tried from
/// a point derived from the pid. Returns 0 if none in 20000-32767 is free.
inline int freeLowPort() {
  const int start = static_cast<int>(::getpid() % 12768);
  for (int i = 0; i < 12768; ++i) {
    const int port = 20000 + (start + i * 7919) % 12768;  // 7919 is prime to 12768: every port once
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (bound) return port;
  }
  return 0;
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
