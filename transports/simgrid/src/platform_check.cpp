// A platform file is loaded first in a child process (platform.hpp:
// checkFile), because SimGrid 3.32 aborts the process on many files its XML
// parser accepts: its platform callbacks end in xbt_die or xbt_assert (an
// unknown routing, a tag it removed such as <include>, an actor whose
// function is not registered, a trace without content, a trace or state
// file that is missing, a route in a zone of routing "None", a WiFi link
// with a latency, ...), and an abort cannot be caught. A child that aborts
// loses nothing: the parent has not made its engine yet, so it reports the
// file's error and may still simulate. The child then asks for the route of
// every pair of the job's hosts: over a Dijkstra zone in which a host
// cannot reach another, SimGrid crashes (SIGSEGV), loops without end or
// throws when it computes that route, which the simulation would do. The
// configuration items are checked the same way (checkConfig), file or not:
// SimGrid aborts on a model it does not know.
//
// The child's stdout and stderr (SimGrid's log: the critical message it
// writes before an abort) come back through one pipe, the child's record
// through another that nothing of SimGrid's writes to: SimGrid's messages
// quote the file (a host's name), so a record found in its log could be the
// file's. The record, ended by a NUL: "ok", "error file|engine" and an
// exception's message, "abort LINE" from the SIGABRT handler or "exit LINE"
// from an exit() inside SimGrid (LINE: where SimGrid's parser was; the
// kinds "abort-engine" and "exit-engine" while the engine was being made),
// "route SRC DST abort|exit|crash|stall" while the route from rank SRC to
// rank DST was asked for (crash: from the handler of SIGSEGV and kin; stall:
// from the SIGALRM handler, that route took kRouteStallSeconds).
#include <fcntl.h>
#include <poll.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "gossamer/errors.hpp"
#include "platform.hpp"

namespace gossamer::simgrid {

namespace s4u = ::simgrid::s4u;

namespace {

// Ends the child's record (nothing in an exception's message).
constexpr char kRecordEnd = '\0';
// How much of SimGrid's message an error quotes.
constexpr std::size_t kQuoted = 2000;

int gRecordFd = -1;                        // the child's end of the record pipe
volatile std::sig_atomic_t gMade = 0;      // the child's engine is made: an abort is the file's
volatile std::sig_atomic_t gRecorded = 0;  // the child has written its record
// The pair whose route the child asks for (-1: none), and a count of the
// routes asked (each SIGALRM sees whether it moved).
volatile std::sig_atomic_t gRouteSrc = -1, gRouteDst = -1, gRouteCount = 0;
std::sig_atomic_t gRouteSeen = 0, gRouteStill = 0;  // the SIGALRM handler's

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

// Appends `text`, then `value` in decimal (a non-negative int), to
// `record` at `n` (async-signal-safe).
void append(char* record, std::size_t& n, const char* text, int value) noexcept {
  for (const char* c = text; *c != '\0'; ++c) record[n++] = *c;
  if (value < 0) return;
  char digits[16];
  std::size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && d < sizeof digits);
  while (d > 0) record[n++] = digits[--d];
}

// Writes the record "route SRC DST `kind`" while a route is asked for, else
// "`kind`-engine LINE" (before the engine is made) or "`kind` LINE", LINE
// where SimGrid's parser was. Async-signal-safe: no allocation, write(2)
// only.
void writeEndRecord(const char* kind) noexcept {
  char record[96];
  std::size_t n = 0;
  if (gRouteSrc >= 0) {
    append(record, n, "route ", gRouteSrc);
    append(record, n, " ", gRouteDst);
    append(record, n, " ", -1);
    append(record, n, kind, -1);
  } else {
    append(record, n, kind, -1);
    append(record, n, gMade != 0 ? " " : "-engine ", parsingLine());
  }
  record[n++] = kRecordEnd;
  writeAll(gRecordFd, record, n);
  gRecorded = 1;
}

// The child's handler of SIGSEGV, SIGBUS, SIGFPE and SIGILL (reset to the
// default on entry): while a route is asked for, writes its record; then
// the signal ends the child as it would have (raised again).
void onCrash(int signal) {
  if (gRecorded == 0 && gRouteSrc >= 0) writeEndRecord("crash");
  ::raise(signal);
}

// The child's SIGALRM handler, each second while routes are asked for: a
// count of routes that has not moved for kRouteStallSeconds is SimGrid
// looping over a missing route (a Dijkstra zone's); the record names it.
void onAlarm(int /*signal*/) {
  if (gRouteSrc < 0) return;
  if (gRouteCount != gRouteSeen) {
    gRouteSeen = gRouteCount;
    gRouteStill = 0;
    return;
  }
  if (++gRouteStill < kRouteStallSeconds) return;
  if (gRecorded == 0) writeEndRecord("stall");
  ::_exit(6);
}

// The child's SIGABRT handler: SimGrid has written its critical message (to
// the log pipe); this writes the record and ends the child.
void onAbort(int /*signal*/) {
  if (gRecorded == 0) writeEndRecord("abort");
  ::_exit(3);
}

// The child's atexit handler: an exit() inside SimGrid (its --cfg=...:help,
// flex's fatal error) would otherwise go on to the handlers and static
// destructors of the parent's state that the child copied. Registered
// first, so it runs after handlers registered later (statics first built
// while loading); SimGrid's own, which would shut its engine down over a
// half-built platform, is turned off (debug/clean-atexit:no). What the
// child printed is flushed into the log first (the help text goes to a
// buffered stdout).
void onExit() {
  std::fflush(nullptr);
  if (gRecorded == 0) writeEndRecord("exit");
  ::_exit(4);
}

// What the child does once its engine is made (it throws on an error).
using Body = std::function<void()>;

// The child: makes an engine from `args` and runs `body` (which builds the
// platform as simulate() will), then writes its record to `recordFd` and
// ends; its stdout and stderr go to `logFd`. Never returns.
[[noreturn]] void runChild(const Body& body, const std::vector<std::string>& args, int logFd,
                           int recordFd) noexcept {
  gRecordFd = recordFd;
  (void)std::atexit(&onExit);
  ::dup2(logFd, STDOUT_FILENO);
  ::dup2(logFd, STDERR_FILENO);
  struct sigaction action {};
  action.sa_handler = &onAbort;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGABRT, &action, nullptr);
  std::string record;
  try {
    // Copied here, where a throw is caught: one out of a noexcept function
    // would end in std::terminate.
    std::vector<std::string> argsOwn(args);
    // SimGrid's critical message without its source location and backtrace.
    argsOwn.emplace_back("--log=no_loc");
    // No shutdown of the engine at exit() (see onExit).
    argsOwn.emplace_back("--cfg=debug/clean-atexit:no");
    std::vector<char*> argv;
    argv.reserve(argsOwn.size() + 1);
    for (auto& a : argsOwn) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(argsOwn.size());
    try {
      // Never deleted: its destructor shuts SimGrid down over a platform
      // that may be half built, and could crash before the record is
      // written (hiding the file's error); _exit follows.
      (void)new s4u::Engine(&argc, argv.data());
      gMade = 1;
      body();
      record = "ok";
    } catch (const std::exception& e) {
      record = std::string(gMade != 0 ? "error file\n" : "error engine\n") + e.what();
    }
  } catch (...) {
    record = "error file\nsomething that is not a std::exception";
  }
  writeAll(recordFd, record.data(), record.size());
  writeAll(recordFd, &kRecordEnd, 1);
  gRecorded = 1;
  // Nothing of the parent's (its atexit handlers, its buffered output) runs here.
  ::_exit(0);
}

// Whether `zone` or a zone under it has routing Dijkstra, DijkstraCache or
// Floyd: those compute a route when it is asked for (the others look it up,
// and throw or give none for a missing one, which the simulation reports as
// the error of the rank that sent). (Their classes are private to SimGrid:
// known by their types' names.)
bool computesRoutes(const s4u::NetZone* zone) {
  const std::string_view type = typeid(*zone->get_impl()).name();
  if (type.find("DijkstraZone") != std::string_view::npos || type.find("FloydZone") != std::string_view::npos)
    return true;
  const auto children = zone->get_children();
  return std::any_of(children.begin(), children.end(),
                     [](const s4u::NetZone* c) { return computesRoutes(c); });
}

// In the child, over `p`'s built file: asks SimGrid for the route of every
// ordered pair of the job's hosts (routeOf throws for one it cannot give),
// for at most kRouteSeconds. A crash or a stall on one is the record's
// (onCrash, onAlarm: ticks of one second).
void checkRoutes(const Platform& p) {
  // As Engine::run() does first: a Dijkstra zone numbers its graph's nodes then.
  s4u::Engine::get_instance()->seal_platform();
  if (p.hosts < 2 || !computesRoutes(s4u::Engine::get_instance()->get_netzone_root())) return;
  std::vector<const s4u::Host*> hosts;
  for (int r = 0; r < p.hosts; ++r) hosts.push_back(s4u::Host::by_name("rank-" + std::to_string(r)));
  struct sigaction crash {};
  crash.sa_handler = &onCrash;
  crash.sa_flags = SA_RESETHAND;
  sigemptyset(&crash.sa_mask);
  for (const int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(signal, &crash, nullptr);
  struct sigaction alarm {};
  alarm.sa_handler = &onAlarm;
  alarm.sa_flags = SA_RESTART;
  sigemptyset(&alarm.sa_mask);
  ::sigaction(SIGALRM, &alarm, nullptr);
  const itimerval second{{1, 0}, {1, 0}};
  ::setitimer(ITIMER_REAL, &second, nullptr);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kRouteSeconds);
  bool more = true;  // false once kRouteSeconds have passed: the rest is left to the simulation
  for (int src = 0; src < p.hosts && more; ++src) {
    for (int dst = 0; dst < p.hosts && more; ++dst) {
      if (src == dst) continue;
      gRouteSrc = src;
      gRouteDst = dst;
      gRouteCount = gRouteCount + 1;
      (void)routeOf(p.file, hosts[static_cast<std::size_t>(src)], hosts[static_cast<std::size_t>(dst)], src,
                    dst);
      more = std::chrono::steady_clock::now() < end;
    }
  }
  gRouteSrc = -1;
  const itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
}

// In the child, with an engine made from the configuration items: a
// generated platform of two hosts, a flow between them and an execution,
// run (a model may fail only when used).
void useEngine() {
  Platform two;
  two.hosts = 2;
  (void)build(two);
  s4u::Host* from = s4u::Host::by_name("rank-0");
  s4u::Host* to = s4u::Host::by_name("rank-1");
  s4u::Actor::create("gossamer-config-check", from, [from, to] {
    s4u::Comm::sendto(from, to, 1000);
    s4u::this_actor::execute(1000);
  });
  s4u::Engine::get_instance()->run();
}

// The child and the parent's ends of its pipes. Its destructor, on every
// way out of checkFile (a throw included), kills a child not yet reaped
// (SIGKILL, so the blocking wait that follows ends) and closes what is open.
struct Child {
  pid_t pid = -1;
  int logRead = -1, logWrite = -1, recordRead = -1, recordWrite = -1;
  bool reaped = false;
  int status = 0;

  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    for (const int fd : {logRead, logWrite, recordRead, recordWrite})
      if (fd >= 0) ::close(fd);
  }
};

// Appends what `fd` (non-blocking) holds now to `out`, at most `reads`
// reads of it (a child that writes without pause does not hold the caller
// past its deadline); closes it (and sets it to -1) at its end of file.
// With `capped` (the log; not the record, whose start says its kind),
// keeps the last kKept to 2 kKept bytes of a longer stream (a child that
// floods its log holds no more of the parent's memory; the errors quote
// its end). Returns errno on a failure, else 0.
int drain(int& fd, std::string& out, int reads, bool capped) {
  constexpr std::size_t kKept = std::size_t{1} << 20;
  char buffer[4096];
  for (; fd >= 0 && reads > 0; --reads) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
      if (capped && out.size() > 2 * kKept) out.erase(0, out.size() - kKept);
    } else if (n == 0) {
      ::close(fd);
      fd = -1;
    } else if (errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno;
    }
  }
  return 0;
}

enum class Collected { kEnded, kTimedOut, kFailed };

// Reads the child's log and record until it has exited (reaped into `c`),
// then what its pipes still hold, for at most `seconds`. Not until their
// end of file: a process forked meanwhile (by another thread) may hold
// their write ends for long after. Sets `error` (an errno) when poll, read
// or waitpid failed.
Collected collect(Child& c, int seconds, std::string& log, std::string& record, int& error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    const pid_t r = ::waitpid(c.pid, &c.status, WNOHANG);
    // ECHILD: reaped already (SIGCHLD ignored, or a wait of another thread's):
    // it has ended, and what came is judged.
    if (r == c.pid || (r < 0 && errno == ECHILD)) {
      c.reaped = true;
      // Nothing more is written: all that the pipes hold is read.
      error = drain(c.logRead, log, std::numeric_limits<int>::max(), true);
      if (error == 0) error = drain(c.recordRead, record, std::numeric_limits<int>::max(), false);
      return error == 0 ? Collected::kEnded : Collected::kFailed;
    }
    if (r < 0 && errno != EINTR) {
      error = errno;
      return Collected::kFailed;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Collected::kTimedOut;
    pollfd fds[2];
    nfds_t open = 0;
    for (const int fd : {c.logRead, c.recordRead})
      if (fd >= 0) fds[open++] = pollfd{fd, POLLIN, 0};
    // Both pipes at their end: the child is exiting (checked again soon).
    // Else a wait for data, cut short now and then to see whether the child
    // exited without their end of file coming.
    const int slice = open > 0 ? 50 : 2;
    const int ready = ::poll(fds, open, static_cast<int>(std::min<std::int64_t>(left.count(), slice)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      error = errno;
      return Collected::kFailed;
    }
    for (nfds_t k = 0; k < open; ++k) {
      if (fds[k].revents == 0) continue;
      int& fd = fds[k].fd == c.logRead ? c.logRead : c.recordRead;
      error = (fds[k].revents & POLLNVAL) != 0
                  ? EBADF
                  : drain(fd, fd == c.logRead ? log : record, 16, fd == c.logRead);
      if (error != 0) return Collected::kFailed;
    }
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
std::string endOf(const Child& c) {
  const int status = c.status;
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

// Starts the child with its two pipes (the parent's read ends non-blocking).
void start(Child& c, const Body& body, const std::vector<std::string>& args, const std::string& where) {
  const auto failed = [&where](const char* call) {
    const int error = errno;
    return Error(where + ": cannot check it (" + call + ": " + std::strerror(error) + ")");
  };
  int logPipe[2], recordPipe[2];
  if (::pipe2(logPipe, O_CLOEXEC) != 0) throw failed("pipe");
  c.logRead = logPipe[0];
  c.logWrite = logPipe[1];
  if (::pipe2(recordPipe, O_CLOEXEC) != 0) throw failed("pipe");
  c.recordRead = recordPipe[0];
  c.recordWrite = recordPipe[1];
  std::fflush(nullptr);  // nothing buffered is written twice
  c.pid = ::fork();
  if (c.pid < 0) throw failed("fork");
  if (c.pid == 0) {
    ::close(c.logRead);
    ::close(c.recordRead);
    runChild(body, args, c.logWrite, c.recordWrite);
  }
  ::close(c.logWrite);
  ::close(c.recordWrite);
  c.logWrite = c.recordWrite = -1;
  for (const int fd : {c.logRead, c.recordRead}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// What a check's child came back with.
struct Verdict {
  std::string kind;    // its record's first line; empty when it ended without a record
  std::string rest;    // what follows that line
  std::string log;     // its stdout and stderr (SimGrid's log)
  std::string ending;  // how it ended (endOf)
};

// Runs `body` in a child with an engine made from `args` and returns what
// came back. `where` starts the Errors; `task` says what the child does
// ("load it"), for its timeout's.
Verdict runCheck(const Body& body, const std::vector<std::string>& args, const std::string& where,
                 const char* task) {
  Child c;
  start(c, body, args, where);
  Verdict v;
  std::string record;
  int error = 0;
  const Collected got = collect(c, kCheckSeconds, v.log, record, error);
  if (got == Collected::kTimedOut)
    throw Error(where + ": SimGrid did not " + task + " within " + std::to_string(kCheckSeconds) + " s");
  if (got == Collected::kFailed)
    throw Error(where + ": cannot check it (reading from its check: " + std::strerror(error) + ")");
  v.ending = endOf(c);
  if (record.empty() || record.back() != kRecordEnd) return v;  // a crash other than an abort (SIGSEGV)
  record.pop_back();
  const auto newline = record.find('\n');
  v.kind = record.substr(0, newline);
  if (newline != std::string::npos) v.rest = record.substr(newline + 1);
  return v;
}

// " (it would have aborted the process)" for an abort record's `end`
// ("abort"), " (it would have ended, by exit(), the process)" for an exit's.
std::string wouldHave(const std::string& end) {
  return std::string(" (it would have ") + (end == "abort" ? "aborted" : "ended, by exit(),") +
         " the process)";
}

// The first line of `what` (SimGrid's "Bad config key" goes on with a list
// of every key).
std::string firstLine(const std::string& what) { return what.substr(0, what.find('\n')); }

// checkFile's error for the record `v` of a route ("route SRC DST how").
// (SimGrid 3.32's Dijkstra routing crashes on a host without routes, and
// from a host that cannot reach every node of its zone it follows a node's
// route to itself without end: it takes the unreachable cost for the
// largest number and adds to it.)
std::string routeError(const std::string& where, const Verdict& v) {
  int src = -1, dst = -1;
  char how[16] = {};
  (void)std::sscanf(v.kind.c_str(), "route %d %d %15s", &src, &dst, how);
  const std::string end = how;
  std::string what = where + ": SimGrid cannot compute the route from rank-" + std::to_string(src) +
                     " to rank-" + std::to_string(dst) + " (";
  if (end == "crash")
    what += "it would have crashed the process: " + v.ending;
  else if (end == "stall")
    what += "it computed it for " + std::to_string(kRouteStallSeconds) + " s without end";
  else
    what += std::string("it would have ") + (end == "abort" ? "aborted" : "ended, by exit(),") +
            " the process: " + criticalOf(v.log);
  return what +
         "); in a zone of routing Dijkstra, DijkstraCache or Floyd, each host must reach every host of its "
         "zone";
}

// The reason SimGrid refuses the configuration items `items` (after
// `base`), to follow "SimGrid refused its configuration item ...", or ""
// when it takes them.
std::string configError(const std::vector<std::string>& base, const std::vector<std::string>& items) {
  std::vector<std::string> args(base);
  for (const auto& item : items) args.push_back("--cfg=" + item);
  const Verdict v = runCheck(&useEngine, args, "SimGrid configuration", "check it");
  if (v.kind == "ok") return "";
  if (v.kind.empty()) return " (it would have ended the process: " + v.ending + "): " + criticalOf(v.log);
  if (v.kind.rfind("error ", 0) == 0) return ": " + firstLine(v.rest);
  return wouldHave(v.kind.substr(0, v.kind.find_first_of(" -"))) + ": " + criticalOf(v.log);
}

}  // namespace

void checkFile(const Platform& p, const std::vector<std::string>& args) {
  const std::string where = "simgrid platform file " + p.file;
  const Verdict v = runCheck(
      [&p] {
        (void)build(p);
        checkRoutes(p);
      },
      args, where, "load it");
  if (v.kind.empty())
    throw InvalidArgument(where + ": SimGrid ended while loading it (" + v.ending +
                          "): " + criticalOf(v.log));
  if (v.kind == "ok") return;
  if (v.kind == "error file") throw InvalidArgument(v.rest);  // build()'s or routeOf's: they name the file
  if (v.kind == "error engine")
    throw InvalidArgument("SimGrid refused its configuration: " + firstLine(v.rest));
  if (v.kind.rfind("route ", 0) == 0) throw InvalidArgument(routeError(where, v));
  for (const std::string end : {"abort", "exit"}) {
    if (v.kind.rfind(end + "-engine ", 0) == 0)
      throw InvalidArgument("SimGrid refused its configuration" + wouldHave(end) + ": " + criticalOf(v.log));
    if (v.kind.rfind(end + " ", 0) == 0) {
      const int line = std::atoi(v.kind.c_str() + end.size() + 1);
      std::string what = where;
      if (line > 0) what.append(":").append(std::to_string(line));
      throw InvalidArgument(what.append(": SimGrid cannot load it")
                                .append(wouldHave(end))
                                .append(": ")
                                .append(criticalOf(v.log)));
    }
  }
  throw InvalidArgument(where + ": SimGrid's check of it ended with '" + v.kind + "'");
}

void checkConfig(const std::vector<std::string>& base, const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::string why = configError(base, items);
  if (why.empty()) return;
  std::string named;
  if (items.size() == 1) named = "item '" + items.front() + "'";
  for (std::size_t k = 0; named.empty() && k < items.size(); ++k) {
    std::string alone = configError(base, {items[k]});
    if (alone.empty()) continue;
    named = "item '" + items[k] + "'";
    why = std::move(alone);
  }
  if (named.empty()) {  // refused together only
    named = "items";
    for (const auto& item : items) named += (named.size() > 5 ? ", '" : " '") + item + "'";
  }
  throw InvalidArgument("SimGrid refused its configuration " + named + why);
}

}  // namespace gossamer::simgrid
