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

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

/// Starts `args[0]` with `args`, stdout and stderr redirected to files, and
/// this process's environment plus `extraEnv` ("NAME=VALUE" entries).
/// Returns the pid, or -1 if fork failed. Everything is built before the
/// fork: the child calls only async-signal-safe functions before it execs,
/// so it may be forked from a process with other threads.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& outFile,
                   const std::string& errFile, const std::vector<std::string>& extraEnv = {}) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const auto& e : extraEnv) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int out = open(outFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(errFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) dup2(out, 1);
  if (err >= 0) dup2(err, 2);
  execve(argv[0], argv.data(), envp.data());
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

/// The last `limit` characters of `text` (a long log's end says why it stopped).
inline std::string tailOf(const std::string& text, std::size_t limit = 8000) {
  return text.size() <= limit ? text : "[...]" + text.substr(text.size() - limit);
}

/// What a sanitizer wrote for process `pid` to its own file: with log_path=P in
/// TSAN_OPTIONS (scripts/tsan.sh sets it), ASAN_OPTIONS or UBSAN_OPTIONS, a
/// process's reports and fatal messages go to P.<pid>, not to its stderr.
/// Empty when there is none.
inline std::string sanitizerLogOf(pid_t pid) {
  std::string found;
  for (const char* var : {"TSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS"}) {
    const char* options = std::getenv(var);
    const char* at = options != nullptr ? std::strstr(options, "log_path=") : nullptr;
    if (at == nullptr) continue;
    at += std::strlen("log_path=");
    const std::string path(at, std::strcspn(at, " ,:\t\n"));  // the sanitizers' separators
    const std::string file = path + "." + std::to_string(pid);
    std::ifstream in(file);
    if (!in) continue;
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!text.empty()) found += "\n[" + file + ":]\n" + tailOf(text);
  }
  return found;
}

/// Why child `pid` failed, for a test's message: how it ended (wait status
/// `status`, or nullopt: killed after `seconds`), then what a sanitizer wrote
/// for it (sanitizerLogOf). Exit code 66 is ThreadSanitizer's (scripts/tsan.sh)
/// when it made a report or died (say, on threads started after a fork from
/// a process with other threads): its text is on the child's stderr or in its
/// log_path file.
inline std::string describeChildEnd(pid_t pid, std::optional<int> status, double seconds) {
  std::string how;
  if (!status)
    how = "[child " + std::to_string(pid) + " killed after " + std::to_string(seconds) + " s]";
  else if (WIFSIGNALED(*status))
    how = "[child " + std::to_string(pid) + " killed by signal " + std::to_string(WTERMSIG(*status)) + "]";
  else
    how = "[child " + std::to_string(pid) + " exited with code " + std::to_string(WEXITSTATUS(*status)) +
          (WEXITSTATUS(*status) == 66 ? " (ThreadSanitizer's: a report, or it died)" : "") + "]";
  return how + sanitizerLogOf(pid);
}

/// What `body` returned (empty: it passed), or what it threw, as text.
inline std::string resultOf(const std::function<std::string()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  } catch (...) {
    return "threw something that is not a std::exception";
  }
}

/// Runs `body` in a forked child process and returns what it returned (by
/// convention empty: it passed; or what failed), or why the child did not
/// finish. Waits at most `seconds` for the child's report and its exit, then
/// kills it. The child reports through a pipe, not through Catch's handlers.
/// Its stderr goes to a file: copied to this process's stderr when the child
/// ended well, made part of the returned text when not (with a sanitizer's
/// log file for it), so that a sanitizer's report of the child is never lost.
/// The child is a fork only: from a process with other threads it may run only
/// code that starts no thread (ThreadSanitizer kills a child that does, with
/// exit code 66); inFreshProcess runs such code.
inline std::string inChild(const std::function<std::string()>& body, double seconds = 120) {
  std::error_code ec;
  std::string errPath = (std::filesystem::temp_directory_path(ec) / "gossamer-child-err-XXXXXX").string();
  if (ec) errPath = "/tmp/gossamer-child-err-XXXXXX";
  const int errFd = ::mkstemp(errPath.data());
  if (errFd < 0) return "mkstemp() failed for the child's stderr";
  ::unlink(errPath.c_str());  // read through errFd; gone with it
  int fds[2];
  if (::pipe(fds) != 0) {
    ::close(errFd);
    return "pipe() failed";
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (const int fd : {fds[0], fds[1], errFd}) ::close(fd);
    return "fork() failed";
  }
  if (pid == 0) {
    for (const int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM}) std::signal(sig, SIG_DFL);
    ::close(fds[0]);
    ::dup2(errFd, 2);
    ::close(errFd);
    const std::string out = resultOf(body);
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
  std::string err;
  for (ssize_t n; (n = ::pread(errFd, buf, sizeof buf, static_cast<off_t>(err.size()))) > 0;)
    err.append(buf, static_cast<std::size_t>(n));
  ::close(errFd);
  if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
    std::fwrite(err.data(), 1, err.size(), stderr);  // as if the child had written it here
    return out;
  }
  return out + " " + describeChildEnd(pid, status, seconds) +
         (err.empty() ? "" : "\n[its stderr:]\n" + tailOf(err));
}

/// The environment variable that makes inFreshProcess run its body: it names
/// the file for the body's result.
inline constexpr const char* kFreshProcessResultEnv = "GOSSAMER_TEST_FRESH_PROCESS_RESULT";

/// The current test case's name as a Catch2 test spec that selects it alone
/// (its commas, brackets, quotes and backslashes escaped).
inline std::string currentTestSpec() {
  std::string spec;
  for (const char c : Catch::getResultCapture().getCurrentTestName()) {
    if (c == ',' || c == '[' || c == ']' || c == '"' || c == '\\') spec += '\\';
    spec += c;
  }
  return spec;
}

/// Runs `body` in a fresh process of this test binary and returns what it
/// returned (by convention empty: it passed; or what failed), or why that
/// process failed. Unlike inChild's fork alone, the fresh process (a fork that
/// execs this binary at once) is safe to fork from a process with other
/// threads (say, a simulation engine's, started by an earlier case), and may
/// start threads of its own under ThreadSanitizer. The process runs the
/// current test case again, alone, with kFreshProcessResultEnv set: there, this
/// call runs `body` itself, writes its result to the file named, and returns it
/// (for the case's own checks). The case runs whatever precedes this call in
/// both processes. Waits at most `seconds`, then kills the process.
inline std::string inFreshProcess(const std::function<std::string()>& body, double seconds = 120) {
  if (const char* resultFile = std::getenv(kFreshProcessResultEnv)) {  // the fresh process
    const std::string out = resultOf(body);
    std::ofstream(resultFile) << out;
    return out;
  }
  TempDir dir;
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || dir.path().empty()) return "cannot find this test binary, or make a directory";
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = spawn({self, currentTestSpec()}, dir / "out", dir / "err",
                          {std::string(kFreshProcessResultEnv) + "=" + (dir / "result")});
  if (pid < 0) return "fork() failed";
  const auto status = waitBounded(pid, seconds);
  std::ifstream in(dir / "result");
  const bool wrote = in.is_open();  // no file: the process never ran the body (say, the spec matched nothing)
  const std::string result{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0 && wrote) return result;
  std::ifstream out(dir / "out"), err(dir / "err");
  return result + (wrote ? " " : "[the fresh process wrote no result] ") +
         describeChildEnd(pid, status, seconds) + "\n[its stdout:]\n" +
         tailOf({std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>()}) +
         "\n[its stderr:]\n" +
         tailOf({std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>()});
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
