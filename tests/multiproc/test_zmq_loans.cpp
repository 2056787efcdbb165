// zmq's borrowed sends (payloads lent to ZeroMQ without a copy over tcp,
// pulled by the peer with single copy over ipc) to a peer that stops reading:
// a forked child is rank 1 and is SIGSTOPped, so the kernel's socket buffers
// fill (tcp) or the pull frame is never served (ipc), and the send cannot finish.
// - cancel() returns within the transport's timeout: the connection is torn
//   down, which makes ZeroMQ give the buffer back, and the peer counts as failed;
// - a peer killed meanwhile releases the send at once, not after a timeout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/zmq.hpp"
#include "process.hpp"

using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;

namespace {

constexpr double kTimeout = 1.5;
// More than loopback's socket buffers hold (4 MiB to send, 32 MiB to receive).
constexpr std::size_t kBytes = std::size_t{160} << 20;

gossamer::zmq::Options optionsFor(int rank, double timeout = kTimeout, double linger = 0.2,
                                  const std::string& protocol = "tcp") {
  gossamer::zmq::Options o;
  o.protocol = protocol;
  o.rank = rank;
  o.worldSize = 2;
  o.timeoutSeconds = timeout;
  o.lingerSeconds = linger;
  o.storePrefix = "loans";
  return o;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Forks rank 1, which joins and then idles (up to 60 s); returns its pid once
/// both ranks are connected, with rank 0's transport in `t`.
pid_t startIdlePeer(const TempDir& dir, std::unique_ptr<gossamer::Transport>& t, const std::string& protocol,
                    double timeout) {
  const pid_t child = fork();
  if (child == 0) {
    try {
      gossamer::FileStore store(dir / "rdv");
      auto mine = gossamer::zmq::makeTransport(optionsFor(1, timeout, 0.2, protocol), store);
      std::vector<std::byte> one(1);
      mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one);  // "connected"
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(child > 0);
  gossamer::FileStore store(dir / "rdv");
  t = gossamer::zmq::makeTransport(optionsFor(0, timeout, 0.2, protocol), store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  return child;
}

std::string describe(const std::optional<int>& st) {
  if (!st) return "timed out (killed)";
  if (WIFEXITED(*st)) return "exit " + std::to_string(WEXITSTATUS(*st));
  if (WIFSIGNALED(*st)) return "signal " + std::to_string(WTERMSIG(*st));
  return "status " + std::to_string(*st);
}

/// Rank 0's borrowed send of kBytes to rank 1 (forked, then SIGSTOPped),
/// which cannot finish: over tcp ZeroMQ finds the kernel's buffers full; over
/// ipc it goes as a pull frame (single copy) that the peer never reads. Both
/// ranks' transports time out after `timeout` seconds. The child is killed
/// and reaped by reap() or, whatever failed, by the destructor.
struct StuckSend {
  TempDir dir;
  std::unique_ptr<gossamer::Transport> t;
  pid_t child = -1;
  std::vector<std::byte> big = std::vector<std::byte>(kBytes, std::byte{3});
  gossamer::Request s;

  StuckSend(const std::string& protocol, double timeout) {
    child = startIdlePeer(dir, t, protocol, timeout);
    kill(child, SIGSTOP);
    if (protocol == "ipc")  // single copy needs ptrace rights over the child (Yama)
      REQUIRE(t->checksumReuseMinBytes() == std::numeric_limits<std::size_t>::max());
    s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE_FALSE(s.test());  // ZeroMQ still holds it: the peer reads nothing
  }
  StuckSend(const StuckSend&) = delete;
  StuckSend& operator=(const StuckSend&) = delete;
  ~StuckSend() { reap(); }
  /// Kills rank 1 (stopped or not) and waits for it, once.
  void reap() {
    if (child <= 0) return;
    kill(child, SIGKILL);
    waitBounded(child, 10);
    child = -1;
  }
};

}  // namespace

TEST_CASE("cancelling a zmq borrowed send that a stopped peer does not read returns within the timeout",
          "[multiproc][failure][zmq]") {
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  StuckSend stuck(protocol, kTimeout);
  auto& [dir, t, child, big, s] = stuck;
  const auto start = std::chrono::steady_clock::now();
  s.cancel();
  const double took = since(start);
  CHECK(took >= 0.9 * kTimeout);                    // it waited for the peer first
  CHECK(took < kTimeout + 60.0);                    // and then returned (no hang)
  std::fill(big.begin(), big.end(), std::byte{0});  // released: no longer read
  CHECK_THROWS_AS(s.wait(1), gossamer::Error);      // cancelled (or failed), not done
  // The connection is gone: the peer counts as failed.
  CHECK_THROWS_AS(t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 2), big), gossamer::PeerFailure);
  std::vector<std::byte> buf(1);
  CHECK_THROWS_AS(t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 3), buf).wait(5),
                  gossamer::PeerFailure);
  stuck.reap();
  t->close();
}

TEST_CASE("a zmq peer killed while a borrowed send to it is stuck releases that send at once",
          "[multiproc][failure][zmq]") {
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  // A timeout far longer than the release takes, so that "at once" and
  // "after the timeout" are 30 s apart.
  constexpr double timeout = 30;
  StuckSend stuck(protocol, timeout);
  auto& [dir, t, child, big, s] = stuck;
  const auto killed = std::chrono::steady_clock::now();
  stuck.reap();
  // ZeroMQ gives the buffer back when the connection breaks (the send then
  // completes: like isend, completion does not promise delivery) or when the
  // peer is declared failed (PeerFailure). Either way, no timeout.
  std::string what = "completed";
  try {
    s.wait(2 * timeout);
  } catch (const gossamer::PeerFailure& e) {
    what = e.what();
    CHECK(e.peer() == 1);
  }
  const double took = since(killed);
  INFO("after " << took << " s: " << what);
  CHECK(took < timeout);
  std::vector<std::byte> buf(1);
  CHECK_THROWS_AS(t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 3), buf).wait(timeout),
                  gossamer::PeerFailure);
  CHECK(since(killed) < timeout);
  t->close();
}

// Guards cancel() against a close() on another thread. cancel() waits timeoutSeconds (1.5 s), then
// tears the peer's connection down. close() on another thread has by then
// closed that socket (after its 1 s bye wait) and lingers in zmq_ctx_term: a
// teardown that set an option on the closed socket would throw from cppzmq
// out of the noexcept Request::cancel() (std::terminate). Rank 0 runs in a
// forked child, so that a terminate shows as its exit status.
TEST_CASE("cancel() of a stuck borrowed send while close() lingers on another thread does not crash",
          "[multiproc][failure][zmq]") {
  TempDir dir;
  const double timeout = 1.5, linger = 1.0;
  const pid_t peer = fork();
  if (peer == 0) {
    try {
      gossamer::FileStore store(dir / "rdv");
      auto mine = gossamer::zmq::makeTransport(optionsFor(1, timeout, linger), store);
      std::vector<std::byte> one(1);
      mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one);
      std::this_thread::sleep_for(std::chrono::seconds(30));
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(peer > 0);
  const pid_t runner = fork();
  if (runner == 0) {
    int code = 0;
    try {
      gossamer::FileStore store(dir / "rdv");
      auto t = gossamer::zmq::makeTransport(optionsFor(0, timeout, linger), store);
      std::vector<std::byte> one(1);
      t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
      kill(peer, SIGSTOP);
      std::vector<std::byte> big(kBytes, std::byte{3});
      auto s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (s.test()) code = 4;  // not stuck: the scenario did not happen
      std::thread closer([&] { t->close(); });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s.cancel();  // its timeout ends while close() is in zmq_ctx_term
      closer.join();
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  REQUIRE(runner > 0);
  const auto st = waitBounded(runner, 30);
  kill(peer, SIGKILL);
  waitBounded(peer, 5);
  INFO("rank 0: " << describe(st));
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
}

// Guards a bye that arrives while a loan is registered. If lend() checked for a gone peer, checksummed
// the payload (no caller checksum: a pass over 1 GiB), and only then
// registered the loan. A bye handled in between found no loan to release, and
// the send stayed queued for a peer that had closed: TimeoutError instead of
// PeerFailure, and cancel() blocked for the whole timeout. Now lend() checks
// again after registering.
TEST_CASE("a borrowed send that races the peer's bye fails or is rejected, never stuck until the timeout",
          "[multiproc][failure][zmq]") {
  // Long, so that a cancel() that waits for the timeout is told apart from
  // one that does not however loaded the machine is.
  const double timeout = 20.0;
  gossamer::MemoryStore store;
  std::unique_ptr<gossamer::Transport> t0, t1;
  std::thread other([&] { t1 = gossamer::zmq::makeTransport(optionsFor(1, timeout, 0.5), store); });
  t0 = gossamer::zmq::makeTransport(optionsFor(0, timeout, 0.5), store);
  other.join();
  std::vector<std::byte> one(1);
  auto hello = t0->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one);
  t1->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(5);
  hello.wait(5);
  std::vector<std::byte> big(std::size_t{1} << 30, std::byte{1});
  std::thread closer([&] { t1->close(); });  // its bye reaches rank 0 while lend() checksums `big`
  std::string outcome = "completed";
  double waited = 0, cancelTook = 0;
  try {
    auto s = t0->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
    const auto w0 = std::chrono::steady_clock::now();
    try {
      s.wait(timeout);
    } catch (const gossamer::PeerFailure&) {
      outcome = "PeerFailure";
    } catch (const gossamer::TimeoutError&) {
      outcome = "TimeoutError";
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const auto c0 = std::chrono::steady_clock::now();
    s.cancel();
    cancelTook = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  } catch (const gossamer::PeerFailure&) {
    outcome = "rejected at once";
  }
  closer.join();
  INFO("outcome " << outcome << ", wait took " << waited << " s, cancel took " << cancelTook << " s");
  CHECK(outcome != "TimeoutError");
  CHECK(cancelTook < timeout / 2);
  t0->close();
}

// Single copy over ipc: a borrowed send of 64 KiB or more goes as a pull
// frame and the receiver copies it out of the sender's memory. The send
// completes only once the receiver has read it, so here the receive is posted
// after the send completed (the message waits in the Mailbox) or before.
TEST_CASE("zmq ipc: borrowed sends are pulled from the sender's memory (single copy), intact",
          "[multiproc][zmq]") {
  const bool singleCopy = GENERATE(true, false);
  const bool checksum = GENERATE(false, true);
  const bool postFirst = GENERATE(false, true);
  INFO("singleCopy " << singleCopy << ", checksumPulls " << checksum << ", receive posted first "
                     << postFirst);
  gossamer::MemoryStore store;
  auto options = [&](int rank) {
    auto o = optionsFor(rank, 10.0, 0.5, "ipc");
    o.singleCopy = singleCopy;
    o.checksumPulls = checksum;
    return o;
  };
  std::unique_ptr<gossamer::Transport> t0, t1;
  std::thread other([&] { t1 = gossamer::zmq::makeTransport(options(1), store); });
  t0 = gossamer::zmq::makeTransport(options(0), store);
  other.join();
  const std::size_t n = (std::size_t{1} << 20) + 7;  // not a multiple of any page or piece
  std::vector<std::byte> sent(n), got(n, std::byte{0});
  for (std::size_t i = 0; i < n; ++i) sent[i] = static_cast<std::byte>((i * 131 + 7) % 251);
  const auto tag = gossamer::Tag::make(gossamer::Op::kUser, 9);
  gossamer::Request r;
  if (postFirst) r = t1->irecv(0, tag, got);
  auto s = t0->isendBorrowed(1, tag, std::span<const std::byte>(sent), gossamer::DType::kBytes, {});
  s.wait(10);  // pulled: the receiver has read it (or, without single copy, ZeroMQ has sent it)
  if (!postFirst) r = t1->irecv(0, tag, got);
  r.wait(10);
  CHECK(got == sent);
  CHECK(t1->stats().messagesPulled == (singleCopy ? 1u : 0u));
  CHECK(t1->stats().bytesReceived == n);
  // Validated like any send: a length that is not a whole number of floats.
  CHECK_THROWS_AS(t0->isendBorrowed(1, tag, std::span<const std::byte>(sent), gossamer::DType::kFloat32, {}),
                  gossamer::InvalidArgument);
  // A small message is never pulled.
  std::vector<std::byte> small(100, std::byte{5}), smallGot(100);
  auto rs = t1->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, 10), smallGot);
  t0->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 10), std::span<const std::byte>(small),
                    gossamer::DType::kBytes, {})
      .wait(10);
  rs.wait(10);
  CHECK(smallGot == small);
  CHECK(t1->stats().messagesPulled == (singleCopy ? 1u : 0u));
  std::thread closer([&] { t1->close(); });
  t0->close();
  closer.join();
}

// Between two processes: rank 1 (forked) sends 1 MiB borrowed; rank 0 pulls
// it out of rank 1's memory. Rank 1's send completes only once rank 0 has
// read it; the child reports that in its exit status.
TEST_CASE("zmq ipc: a pull between two processes delivers the bytes and completes the sender's send",
          "[multiproc][zmq]") {
  TempDir dir;
  const std::size_t n = (std::size_t{1} << 20) + 3;
  auto pattern = [](std::size_t i) { return static_cast<std::byte>((i * 7 + 1) % 253); };
  const auto tag = gossamer::Tag::make(gossamer::Op::kUser, 4);
  const pid_t child = fork();
  if (child == 0) {
    int code = 0;
    try {
      gossamer::FileStore store(dir / "rdv");
      auto t = gossamer::zmq::makeTransport(optionsFor(1, 10.0, 0.5, "ipc"), store);
      std::vector<std::byte> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = pattern(i);
      t->isendBorrowed(0, tag, std::span<const std::byte>(data), gossamer::DType::kBytes, {}).wait(10);
      std::vector<std::byte> done(1);
      t->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, 5), done).wait(10);  // rank 0 checked it
      t->close();
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  REQUIRE(child > 0);
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::zmq::makeTransport(optionsFor(0, 10.0, 0.5, "ipc"), store);
  std::vector<std::byte> got(n);
  t->irecv(1, tag, got).wait(10);
  bool intact = true;
  for (std::size_t i = 0; i < n && intact; ++i) intact = got[i] == pattern(i);
  CHECK(intact);
  // Rank 0 may read rank 1, its child, under any Yama ptrace_scope below 2.
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  yama >> scope;
  INFO("Yama ptrace_scope " << scope << " (single copy needs one below 2)");
  CHECK(t->stats().messagesPulled == 1);
  std::vector<std::byte> one(1);
  t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 5), one).wait(10);
  const auto st = waitBounded(child, 20);
  INFO("rank 1: " << describe(st));
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  t->close();
}

namespace {
/// Rank 1 over ipc in a forked process: waits for a byte on `gate` (if not
/// -1), joins, sends `data` borrowed to rank 0, then idles until killed
/// (`idle`) or waits for rank 0's word and closes. Exit status 0, or 3 when
/// something threw.
pid_t forkRank1(const TempDir& dir, int gate, const std::vector<std::byte>& data, bool idle) {
  const pid_t child = fork();
  if (child != 0) return child;
  int code = 0;
  try {
    char go = 0;
    if (gate >= 0 && ::read(gate, &go, 1) != 1) _exit(4);
    gossamer::FileStore store(dir / "rdv");
    auto t = gossamer::zmq::makeTransport(optionsFor(1, 10.0, 0.5, "ipc"), store);
    t->isendBorrowed(0, gossamer::Tag::make(gossamer::Op::kUser, 6), std::span<const std::byte>(data),
                     gossamer::DType::kBytes, {})
        .wait(10);
    if (idle) std::this_thread::sleep_for(std::chrono::seconds(120));
    std::vector<std::byte> done(1);
    t->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, 7), done).wait(10);
    t->close();
  } catch (...) {
    code = 3;
  }
  _exit(code);
}
}  // namespace

// The survivor probed rank 1's first process for single copy and pulled from
// it. The process started in place of it (a later process, not in the
// start-up's probe) must not send pull frames naming itself: the survivor
// knows only the old process id, and would refuse them and fail the rank
// again. Its 1 MiB borrowed send arrives as a copy, and rank 1 stays alive.
TEST_CASE(
    "zmq ipc: a rank restarted in place sends a large borrowed message to a survivor that pulled from "
    "its old process",
    "[multiproc][zmq][rejoin]") {
  TempDir dir;
  const std::size_t n = (std::size_t{1} << 20) + 3;
  auto filled = [n](int round) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(round)) % 251);
    return v;
  };
  int gate[2] = {-1, -1};
  REQUIRE(::pipe(gate) == 0);
  // Both of rank 1's processes are forked before this one starts threads;
  // the second waits at the gate.
  const pid_t first = forkRank1(dir, -1, filled(1), true);
  const pid_t second = forkRank1(dir, gate[0], filled(2), false);
  ::close(gate[0]);
  // Whatever fails, the children not yet reaped are killed and reaped.
  struct Reap {
    pid_t pids[2];
    int gate;
    ~Reap() {
      ::close(gate);
      for (pid_t p : pids)
        if (p > 0) (void)waitBounded(p, 0);
    }
  } reap{{first, second}, gate[1]};
  REQUIRE(first > 0);
  REQUIRE(second > 0);
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::zmq::makeTransport(optionsFor(0, 10.0, 0.5, "ipc"), store);
  const auto tag = gossamer::Tag::make(gossamer::Op::kUser, 6);
  std::vector<std::byte> got(n);
  t->irecv(1, tag, got).wait(10);
  CHECK(got == filled(1));
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  yama >> scope;
  INFO("Yama ptrace_scope " << scope << " (single copy needs one below 2)");
  REQUIRE(t->stats().messagesPulled == 1);  // (else this would not test what it says)

  kill(first, SIGKILL);
  reap.pids[0] = -1;
  REQUIRE(waitBounded(first, 10));
  for (int i = 0; i < 1000 && !t->peerFailure(1); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(t->peerFailure(1));
  REQUIRE(::write(gate[1], "g", 1) == 1);
  // Until rank 0 has read the new process's hello, a receive from rank 1 fails at once.
  std::string failure;
  bool received = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!received && std::chrono::steady_clock::now() < until) {
    try {
      t->irecv(1, tag, got).wait(10);
      received = true;
    } catch (const gossamer::PeerFailure& e) {
      failure = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const std::exception& e) {
      failure = e.what();
      break;
    }
  }
  INFO("last failure: " << failure);
  REQUIRE(received);
  CHECK(got == filled(2));
  CHECK_FALSE(t->peerFailure(1));
  CHECK(t->stats().messagesPulled == 1);  // the new process's send was a copy
  std::vector<std::byte> one(1);
  t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 7), one).wait(10);
  reap.pids[1] = -1;
  const auto st = waitBounded(second, 20);
  INFO("restarted rank 1: " << describe(st));
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  t->close();
}
