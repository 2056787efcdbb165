// A platform file is loaded first in a child process (platform.hpp:
// checkFile), because SimGrid 3.32 aborts the process on many files its XML
// parser accepts: its platform callbacks end in xbt_die or xbt_assert (an
// unknown routing, a tag it removed such as <include>, an actor whose
// function is not registered, a trace without content, a trace or state
// file that is missing, a route in a zone of routing "None", a WiFi link
// with a latency, ...), and an abort cannot be caught. A child that aborts
// loses nothing: the parent has not made its engine yet, so it reports the
// file's error and may still simulate.
//
// The child's stdout and stderr (SimGrid's log: the critical message it
// writes before an abort) and a last record of ours, after a marker, come
// back through one pipe: "ok", "error file|engine" and an exception's
// message, or "abort LINE" from the SIGABRT handler (LINE: where SimGrid's
// parser was).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <simgrid/s4u.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gossamer/errors.hpp"
#include "platform.hpp"

namespace gossamer::simgrid {

namespace s4u = ::simgrid::s4u;

namespace {

// Starts the child's last record; not in anything SimGrid writes.
constexpr char kMarker[] = "\x1egossamer-platform-check ";
constexpr std::size_t kMarkerLength = sizeof kMarker - 1;
// How much of SimGrid's message an error quotes.
constexpr std::size_t kQuoted = 2000;

int gReportFd = -1;                    // the child's end of the pipe
volatile std::sig_atomic_t gMade = 0;  // the child's engine is made: an abort is the file's

// Writes all of `data` (async-signal-safe: write(2) only).
void writeAll(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// The child's SIGABRT handler: SimGrid has written its critical message (to
// the pipe); this adds the record, with the line its parser had reached,
// and ends the child. Async-signal-safe: no allocation, write(2), _exit.
void onAbort(int /*signal*/) {
  char record[96];
  std::size_t n = 0;
  record[n++] = '\n';
  for (std::size_t i = 0; i < kMarkerLength; ++i) record[n++] = kMarker[i];
  const char* kind = gMade != 0 ? "abort " : "abort-engine ";
  for (const char* c = kind; *c != '\0'; ++c) record[n++] = *c;
  int line = parsingLine();
  char digits[16];
  std::size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + line % 10);
    line /= 10;
  } while (line > 0 && d < sizeof digits);
  while (d > 0) record[n++] = digits[--d];
  record[n++] = '\n';
  writeAll(gReportFd, record, n);
  ::_exit(3);
}

// The child: makes an engine from `args` and builds `p` as simulate() will,
// then writes its record to `fd` and ends. Never returns.
[[noreturn]] void runChild(const Platform& p, std::vector<std::string> args, int fd) noexcept {
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  gReportFd = fd;
  struct sigaction action {};
  action.sa_handler = &onAbort;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGABRT, &action, nullptr);
  std::string record;
  try {
    // SimGrid's critical message without its source location and backtrace.
    args.emplace_back("--log=no_loc");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(args.size());
    try {
      s4u::Engine engine(&argc, argv.data());
      gMade = 1;
      (void)build(p);
      record = "ok\n";
    } catch (const std::exception& e) {
      record = std::string(gMade != 0 ? "error file\n" : "error engine\n") + e.what();
    }
  } catch (...) {
    record = "error file\nsomething that is not a std::exception";
  }
  writeAll(fd, "\n", 1);
  writeAll(fd, kMarker, kMarkerLength);
  writeAll(fd, record.data(), record.size());
  // Nothing of the parent's (its atexit handlers, its buffered output) runs here.
  ::_exit(0);
}

// Reads `fd` to its end into `out`, for at most `seconds`; false when the
// time ran out first.
bool readToEnd(int fd, int seconds, std::string& out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return true;  // nothing more can be read: judged by what came
    if (ready == 0) return false;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

// What SimGrid said before it aborted: its critical message (from "CRITICAL]
// " on), else the end of its log.
std::string criticalOf(const std::string& log) {
  constexpr std::string_view kCritical = "CRITICAL] ";
  std::string s;
  if (const auto at = log.find(kCritical); at != std::string::npos)
    s = log.substr(at + kCritical.size());
  else
    s = log.size() > kQuoted ? log.substr(log.size() - kQuoted) : log;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.erase(0, 1);
  if (s.size() > kQuoted) s = s.substr(0, kQuoted) + " ...";
  return s.empty() ? "no message" : s;
}

// How the child ended, for an error.
std::string endOf(int status) {
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

}  // namespace

void checkFile(const Platform& p, const std::vector<std::string>& args) {
  const std::string where = "simgrid platform file " + p.file;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(where + ": cannot check it (pipe: " + std::strerror(errno) + ")");
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(where + ": cannot check it (fork: " + std::strerror(error) + ")");
  }
  if (pid == 0) {
    ::close(fds[0]);
    runChild(p, args, fds[1]);
  }
  ::close(fds[1]);
  std::string out;
  const bool ended = readToEnd(fds[0], kCheckSeconds, out);
  ::close(fds[0]);
  if (!ended) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!ended) throw Error(where + ": SimGrid did not load it within " + std::to_string(kCheckSeconds) + " s");
  const auto at = out.rfind(kMarker);
  if (at == std::string::npos)  // a crash other than an abort (SIGSEGV), or an exit() inside SimGrid
    throw InvalidArgument(where + ": SimGrid ended while loading it (" + endOf(status) +
                          "): " + criticalOf(out));
  const std::string log = out.substr(0, at);
  const std::string record = out.substr(at + kMarkerLength);
  const auto newline = record.find('\n');
  const std::string kind = record.substr(0, newline);
  const std::string rest = newline == std::string::npos ? std::string() : record.substr(newline + 1);
  if (kind == "ok") return;
  if (kind == "error file") throw InvalidArgument(rest);  // build()'s: it names the file (and line)
  if (kind == "error engine") throw InvalidArgument("SimGrid refused its configuration: " + rest);
  if (kind.rfind("abort-engine ", 0) == 0)
    throw InvalidArgument("SimGrid refused its configuration (it would have aborted the process): " +
                          criticalOf(log));
  if (kind.rfind("abort ", 0) == 0) {
    const int line = std::atoi(kind.c_str() + 6);
    std::string what = where;
    if (line > 0) what.append(":").append(std::to_string(line));
    throw InvalidArgument(what.append(": SimGrid cannot load it (it would have aborted the process): ")
                              .append(criticalOf(log)));
  }
  throw InvalidArgument(where + ": SimGrid's check of it ended with '" + kind + "'");
}

}  // namespace gossamer::simgrid
