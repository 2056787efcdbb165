// A libfabric peer killed in the middle of a stream of large transfers: the
// receive waiting on it fails with PeerFailure within the timeout. Over
// tcp;ofi_rxm this usually comes from the completion queue's error entry (rxm
// fails the receive it was filling: "Operation canceled ... Transport endpoint
// is not connected") within milliseconds, otherwise from the heartbeat
// timeout; over shm from the pidfd watch or the CQ's "Input/output error".
// Two processes: this one receives (and sends the other nothing), a forked
// child streams 8 MiB messages and is SIGKILLed.
#include <catch2/catch.hpp>

#ifdef GOSSAMER_HAVE_LIBFABRIC

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/libfabric.hpp"
#include "process.hpp"

using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;

namespace {

constexpr std::size_t kMessageBytes = std::size_t{8} << 20;

gossamer::libfabric::Options optionsFor(const std::string& provider, int rank, double peerTimeout) {
  gossamer::libfabric::Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.provider = provider;
  o.timeoutSeconds = 20;
  o.peerTimeoutSeconds = peerTimeout;
  o.lingerSeconds = 0.5;
  o.storePrefix = "kill";
  return o;
}

}  // namespace

TEST_CASE("a libfabric peer killed mid-transfer fails the receive within the timeout",
          "[multiproc][failure][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "shm", "tcp");
  INFO("provider " << provider);
  const double peerTimeout = 3.0;  // the heartbeat bound (tcp); the CQ and the pidfd report in ms
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {  // rank 0: streams until it is killed (or 30 s, or an error)
    try {
      gossamer::FileStore store(dir / "rdv");
      auto t = gossamer::libfabric::makeTransport(optionsFor(provider, 0, peerTimeout), store);
      std::vector<std::byte> msg(kMessageBytes, std::byte{7});
      const auto start = std::chrono::steady_clock::now();
      for (std::uint64_t i = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(30); ++i)
        t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, i), msg);
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(child > 0);
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::libfabric::makeTransport(optionsFor(provider, 1, peerTimeout), store);
  std::vector<std::byte> buf(kMessageBytes);
  for (std::uint64_t i = 0; i < 2; ++i) {  // the stream is flowing
    auto r = t->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, i), buf);
    r.wait(20);
    REQUIRE(buf[kMessageBytes - 1] == std::byte{7});
  }
  auto next = t->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, 2), buf);
  kill(child, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  waitBounded(child, 5);
  gossamer::testing::removeShmRegionsOf(child);

  std::string what;
  bool failed = false;
  try {
    // Messages that were complete before the kill still arrive; the first one
    // cut off (or missing) fails.
    next.wait(20);
    for (std::uint64_t i = 3; i < 64; ++i) {
      auto r = t->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, i), buf);
      r.wait(20);
    }
  } catch (const gossamer::PeerFailure& e) {
    failed = true;
    what = e.what();
    CHECK(e.peer() == 0);
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  INFO("after " << took << " s: " << what);
  REQUIRE(failed);
  CHECK(took < 20);  // PeerFailure, before the receives' own 20 s bound
  const bool fromCq = what.find("libfabric failed a receive from it") != std::string::npos;
  const bool fromPidfd = what.find("its process exited") != std::string::npos;
  const bool fromHeartbeat = what.find("no heartbeat") != std::string::npos;
  CHECK((fromCq || fromPidfd || fromHeartbeat));
  if (provider == "shm") CHECK((fromCq || fromPidfd));  // shm: no heartbeats, the exit is watched
  t->abort();
}

namespace {

double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// One side of a busy small-message exchange: every turn posts 4 receives from
/// `peer`, sends it 4 messages of 64 bytes and waits for the receives (each
/// wait bounded by the transport timeout). Both processes keep taking the shm
/// locks of both regions, so a SIGKILL often lands while one is held. Returns
/// when an error ends the exchange: writes "<kind> <seconds at the error>
/// <seconds after close() returned> <message>" to `result` (kind: PeerFailure,
/// TimeoutError or Error), or "none" after 60 s.
void busyExchange(gossamer::Transport& t, int peer, const std::string& ready, const std::string& result) {
  std::vector<std::byte> out(64, std::byte{1});
  std::vector<std::vector<std::byte>> in(4, std::vector<std::byte>(64));
  std::string kind = "none", what;
  double failedAt = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    for (std::uint64_t i = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(60); ++i) {
      std::vector<gossamer::Request> recvs;
      for (std::uint64_t k = 0; k < 4; ++k)
        recvs.push_back(t.irecv(peer, gossamer::Tag::make(gossamer::Op::kUser, 4 * i + k), in[k]));
      for (std::uint64_t k = 0; k < 4; ++k)
        t.isend(peer, gossamer::Tag::make(gossamer::Op::kUser, 4 * i + k), out);
      for (auto& r : recvs) r.wait(t.timeoutSeconds());
      if (i == 200 && !ready.empty()) std::ofstream(ready) << "streaming\n";
    }
  } catch (const gossamer::PeerFailure& e) {
    kind = "PeerFailure";
    what = e.what();
  } catch (const gossamer::TimeoutError& e) {
    kind = "TimeoutError";
    what = e.what();
  } catch (const std::exception& e) {
    kind = "Error";
    what = e.what();
  }
  failedAt = monotonicSeconds();
  t.abort();  // must return even if the progress thread is stuck inside libfabric
  const double closedAt = monotonicSeconds();
  std::ofstream(result) << kind << ' ' << std::to_string(failedAt) << ' ' << std::to_string(closedAt) << ' '
                        << what << '\n';
}

}  // namespace

// The shm hazard (docs/libfabric.md): a process killed while it holds a spin
// lock in shared memory (its own region's, or the survivor's) leaves it held,
// and a thread that then waits for it inside libfabric spins forever. The
// survivor's application thread never calls into libfabric, so it must still
// get an error within the timeout, and close() must return. Repeated, the
// kill landing at random points of a busy two-way exchange.
TEST_CASE("a shm peer killed during a busy two-way exchange never hangs the survivor",
          "[multiproc][failure][libfabric]") {
  const double timeout = 2.0;
  std::mt19937 rng(12345);
  int fromPidfd = 0, fromCq = 0, timedOut = 0;
  for (int run = 0; run < 10; ++run) {
    INFO("run " << run);
    TempDir dir;
    // Rank `rank` as a child process exchanging with `peer`; a failure to set
    // up is written to its result file like busyExchange's outcome.
    const auto spawn = [&](int rank, int peer, const std::filesystem::path& ready,
                           const std::filesystem::path& result) {
      const pid_t pid = fork();
      if (pid == 0) {
        try {
          gossamer::FileStore store(dir / "rdv");
          auto o = optionsFor("shm", rank, 0);
          o.timeoutSeconds = timeout;
          auto t = gossamer::libfabric::makeTransport(o, store);
          busyExchange(*t, peer, ready, result);
        } catch (const std::exception& e) {
          std::ofstream(result) << "Setup 0 0 " << e.what() << '\n';
        }
        _exit(0);
      }
      return pid;
    };
    const pid_t victim = spawn(0, 1, "", dir / "victim");
    REQUIRE(victim > 0);
    const pid_t survivor = spawn(1, 0, dir / "ready", dir / "survivor");
    REQUIRE(survivor > 0);
    const auto start = std::chrono::steady_clock::now();
    while (!std::filesystem::exists(dir / "ready") &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool streaming = std::filesystem::exists(dir / "ready");
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    kill(victim, SIGKILL);
    const double killedAt = monotonicSeconds();
    waitBounded(victim, 5);
    gossamer::testing::removeShmRegionsOf(victim);
    const auto status = waitBounded(survivor, 4 * timeout + 5);  // kills it if it hangs
    std::string kind, what;
    double failedAt = 0, closedAt = 0;
    {
      std::ifstream in(dir / "survivor");
      in >> kind >> failedAt >> closedAt;
      std::getline(in, what);
    }
    INFO("survivor: " << kind << what << " (" << failedAt - killedAt << " s after the kill, close took "
                      << closedAt - failedAt << " s)");
    REQUIRE(streaming);
    REQUIRE(status.has_value());  // it did not hang, not even in close() or at exit
    REQUIRE((kind == "PeerFailure" || kind == "TimeoutError"));
    CHECK(failedAt - killedAt < timeout + 30);  // the receive's own bound (no hang)
    CHECK(closedAt - failedAt < 30);            // close() gives up on a stuck progress thread after 2 s
    if (what.find("its process exited") != std::string::npos) ++fromPidfd;
    if (what.find("libfabric failed") != std::string::npos) ++fromCq;
    if (kind == "TimeoutError") ++timedOut;
  }
  WARN("10 kills: " << fromPidfd << " reported by the pidfd watch, " << fromCq << " by a CQ error entry, "
                    << timedOut << " by the receive timeout (a progress thread stuck on a dead peer's lock)");
}

namespace {

/// Stops `pid` (SIGSTOP) at a moment when each of its threads is inside a
/// system call, so that none holds a spin lock of libfabric's shm regions
/// (one held by a stopped process would stall the survivor's progress thread
/// inside libfabric, a hazard of its own, docs/libfabric.md). Tries for up to
/// `seconds`; returns whether it stopped so.
bool stopInSystemCalls(pid_t pid, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    if (kill(pid, SIGSTOP) != 0) return false;
    int status = 0;  // kill() returns before every thread has stopped
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) return false;
    bool inCalls = true;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      std::string call;  // the system call number, -1 in user space, "running"
      std::ifstream(task.path() / "syscall") >> call;
      inCalls = inCalls && !call.empty() && call != "-1" && call != "running";
    }
    if (inCalls) return true;
    kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  return false;
}

}  // namespace

// A shm peer that stops (SIGSTOP) with its process alive: shm has no
// heartbeats and the pidfd says nothing, so what shows it is that it takes
// nothing sent to it, and its process's state. Rank 0 sends rank 1 4 MiB
// every 50 ms; once the provider has refused or left unfinished every send
// for the transport's timeout, rank 1 is failed, so that the queue for it
// stops growing. Meanwhile rank 0 sends rank 2, which runs, 1 MiB each turn
// and waits for its answer: shm completes an endpoint's large sends in
// order, so the stopped rank holds back the completions of those sends too,
// and rank 2 must not be failed for it.
TEST_CASE("a stopped shm peer is failed once it took nothing sent to it for the timeout, and only it",
          "[multiproc][failure][libfabric]") {
  constexpr double kTimeout = 2.0;
  constexpr std::size_t kLarge = std::size_t{1} << 20;
  TempDir dir;
  const auto options = [&](int rank) {
    auto o = optionsFor("shm", rank, 0);
    o.worldSize = 3;
    o.timeoutSeconds = kTimeout;
    o.storePrefix = "stopped";
    return o;
  };
  const auto tag = [](std::uint64_t step) { return gossamer::Tag::make(gossamer::Op::kUser, step); };
  const pid_t stopped = fork();
  if (stopped == 0) {  // rank 1: says it is connected, then idles
    try {
      gossamer::FileStore store(dir / "rdv");
      auto t = gossamer::libfabric::makeTransport(options(1), store);
      std::vector<std::byte> one(1);
      t->isend(0, tag(0), one).wait(10);
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(stopped > 0);
  const pid_t running = fork();
  if (running == 0) {  // rank 2: answers each message from rank 0 with 8 bytes, until one of 1 byte
    int code = 1;
    try {
      gossamer::FileStore store(dir / "rdv");
      auto t = gossamer::libfabric::makeTransport(options(2), store);
      std::vector<std::byte> in(kLarge), answer(8);
      for (std::uint64_t step = 1;; ++step) {
        auto r = t->irecv(0, tag(step), in);
        r.wait(30);
        if (r.bytes() == 1) break;
        t->isend(0, tag(step), answer);
      }
      t->close();
      code = 0;
    } catch (...) {
    }
    _exit(code);
  }
  struct Reap {
    std::vector<pid_t> pids;
    ~Reap() {
      for (const pid_t pid : pids) {
        if (pid <= 0) continue;
        kill(pid, SIGKILL);
        waitBounded(pid, 10);
        gossamer::testing::removeShmRegionsOf(pid);
      }
    }
  } reap{{stopped, running}};
  REQUIRE(running > 0);
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::libfabric::makeTransport(options(0), store);
  std::vector<std::byte> one(1);
  t->irecv(1, tag(0), one).wait(20);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its threads go idle
  REQUIRE(stopInSystemCalls(stopped, 20));
  std::vector<std::byte> block(std::size_t{4} << 20, std::byte{7}), large(kLarge, std::byte{5}), answer(8);
  const auto start = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double failedAfter = -1;
  std::string why, rank2;
  std::uint64_t answered = 0;
  // Until rank 1 failed, and then for the timeout twice more (rank 2 must
  // not follow it).
  for (std::uint64_t step = 1; since(start) < 8 * kTimeout; ++step) {
    if (failedAfter < 0) {
      try {
        t->isend(1, tag(step), block);
      } catch (const gossamer::PeerFailure& e) {
        failedAfter = since(start);
        why = e.what();
      }
    } else if (since(start) > failedAfter + 2 * kTimeout) {
      break;
    }
    try {
      t->isend(2, tag(step), large);
      t->irecv(2, tag(step), answer).wait(2 * kTimeout);
      ++answered;
    } catch (const std::exception& e) {
      rank2 = e.what();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO("rank 1 failed after " << failedAfter << " s: " << why);
  INFO("rank 2 answered " << answered << " messages; then: " << rank2);
  REQUIRE(failedAfter > 0);
  CHECK(failedAfter >= kTimeout);  // not before the peer had the timeout to take something
  CHECK(why.find("its process is stopped") != std::string::npos);
  CHECK(rank2.empty());
  // A receive from rank 1 fails too, at once.
  std::vector<std::byte> buf(1);
  const auto before = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(t->irecv(1, tag(999999), buf).wait(30), gossamer::PeerFailure);
  CHECK(since(before) < kTimeout);
  // Rank 2 ends cleanly.
  if (rank2.empty()) t->isend(2, tag(answered + 1), one);
  const auto status = waitBounded(running, 30);
  reap.pids[1] = -1;
  CHECK((status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  t->abort();
}

#endif  // GOSSAMER_HAVE_LIBFABRIC
