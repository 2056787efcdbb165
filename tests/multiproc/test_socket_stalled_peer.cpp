// The socket transport's sends to a peer that stops reading while its
// connection stays open (a forked child, rank 1, SIGSTOPped):
// - once the kernel's buffers are full, what rank 0 sends queues in the
//   transport; a peer that takes none of it for the transport's timeout is
//   failed (PeerFailure), so that the queue stops growing and the peer counts
//   as failed, as a closed connection would make it;
// - a message lent to it over ipc (single copy) and cancelled is never
//   read from the caller's buffer once cancel() returned, and cancel()'s
//   wait for its pull does not hold up the caller's other threads;
// - a send finds its peer's queue holding Options::sendQueueBytes: it waits
//   for room (a stopped peer is failed meanwhile, and a peer that reads
//   slowly costs the sender no more memory than the queue holds).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/socket.hpp"
#include "process.hpp"

using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;

namespace {

constexpr double kTimeout = 2.0;

gossamer::sock::Options optionsFor(int rank, const std::string& protocol, bool singleCopy = false) {
  gossamer::sock::Options o;
  o.protocol = protocol;
  o.rank = rank;
  o.worldSize = 2;
  o.timeoutSeconds = kTimeout;
  o.lingerSeconds = 0.2;
  o.singleCopy = singleCopy;  // (off: copies into the stream, whatever the protocol)
  o.storePrefix = "stalled";
  return o;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A forked child's process id: killed and reaped when it goes (a pid <= 0:
// nothing to do).
struct Peer {
  pid_t pid = -1;
  ~Peer() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitBounded(pid, 10);
  }
};

// Forks rank 1 with options `o`: it connects, says so (a 1-byte message, tag
// 0), then runs `body` on its transport and writes what body returns to
// `result`. Returns the child's pid.
template <class Body>
pid_t forkPeer(const TempDir& dir, const gossamer::sock::Options& o, const std::string& result, Body body) {
  const pid_t child = fork();
  if (child != 0) return child;
  std::string said;
  try {
    gossamer::FileStore store(dir / "rdv");
    auto mine = gossamer::sock::makeTransport(o, store);
    std::vector<std::byte> one(1);
    mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(10);
    said = body(*mine);
  } catch (const std::exception& e) {
    said = std::string("error: ") + e.what();
  }
  gossamer::testing::writeFile(result, said);
  _exit(0);
}

void stop(pid_t child) {
  REQUIRE(kill(child, SIGSTOP) == 0);
  int stopped = 0;  // kill() returns before every thread of the child has stopped
  REQUIRE(waitpid(child, &stopped, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(stopped));
}

// This process's peak resident set since the last resetPeak(), KiB.
long peakKb() {
  const std::string status = gossamer::testing::readFile("/proc/self/status");
  const auto at = status.find("VmHWM:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 6));
}

bool resetPeak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

// Rank 0's transport with options `o`, once rank 1 (forked into `peer`; it
// only connects) said it is connected and was stopped.
std::unique_ptr<gossamer::Transport> withStoppedPeer(const TempDir& dir, Peer& peer,
                                                     const gossamer::sock::Options& o) {
  peer.pid = forkPeer(dir, optionsFor(1, o.protocol), dir / "result", [](gossamer::Transport&) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return std::string();
  });
  REQUIRE(peer.pid > 0);
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::sock::makeTransport(o, store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  stop(peer.pid);
  return t;
}

}  // namespace

TEST_CASE("a socket peer that stops reading is failed once it took nothing for the timeout",
          "[multiproc][failure][socket]") {
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  TempDir dir;
  Peer peer;
  auto t = withStoppedPeer(dir, peer, optionsFor(0, protocol));
  // 4 MiB every 50 ms: the kernel's buffers fill within the first few, and
  // the rest queue in the transport until the peer is failed.
  std::vector<std::byte> block(std::size_t{4} << 20, std::byte{7});
  const auto start = std::chrono::steady_clock::now();
  double failedAfter = -1;
  std::string why;
  for (std::uint64_t step = 1; since(start) < 6 * kTimeout; ++step) {
    try {
      t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, step), block);
    } catch (const gossamer::PeerFailure& e) {
      failedAfter = since(start);
      why = e.what();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO("failed after " << failedAfter << " s: " << why);
  REQUIRE(failedAfter > 0);
  CHECK(failedAfter >= kTimeout);  // not before the peer had the timeout to read
  CHECK(why.find("queued for it") != std::string::npos);
  // A receive from it fails too, at once.
  std::vector<std::byte> buf(1);
  const auto before = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 999), buf).wait(30),
                  gossamer::PeerFailure);
  CHECK(since(before) < kTimeout);
  t->abort();
}

TEST_CASE("a socket send lent to a stopped peer and cancelled is never delivered from the reused buffer",
          "[multiproc][failure][socket]") {
  // Over ipc a message of 64 KiB or more is lent (single copy): the peer
  // reads it from this process's memory when its pull frame comes up. Rank
  // 1 posts its receive, then is stopped; rank 0's cancel() returns after
  // the timeout and the buffer is overwritten (or freed); once rank 1 runs
  // again, its receive must fail (the sender withdrew the message) rather
  // than take the new bytes for the message (or fail the connection with a
  // protocol error).
  const bool freed = GENERATE(false, true);
  INFO((freed ? "freed" : "overwritten"));
  TempDir dir;
  const std::string result = dir / "result";
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  const pid_t child = fork();
  if (child == 0) {
    std::string said;
    try {
      gossamer::FileStore store(dir / "rdv");
      auto mine = gossamer::sock::makeTransport(optionsFor(1, "ipc", true), store);
      std::vector<std::byte> one(1), buf(kBytes, std::byte{9});
      auto posted = mine->irecv(0, gossamer::Tag::make(gossamer::Op::kUser, 1), buf);
      mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(10);  // "receive posted"
      try {
        posted.wait(30);
        std::size_t threes = 0;
        for (const auto b : buf) threes += b == std::byte{3} ? 1 : 0;
        said = "delivered: " + std::to_string(threes) + " of " + std::to_string(kBytes) +
               " bytes are the message's";
      } catch (const gossamer::PeerFailure& e) {
        said = std::string("failed: ") + e.what();
      }
    } catch (const std::exception& e) {
      said = std::string("error: ") + e.what();
    }
    gossamer::testing::writeFile(result, said);
    _exit(0);
  }
  REQUIRE(child > 0);
  Peer reap{child};
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::sock::makeTransport(optionsFor(0, "ipc", true), store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  // Single copy needs ptrace rights over the peer (Yama): without them this
  // test cannot test what it is for.
  REQUIRE(t->checksumReuseMinBytes() == std::numeric_limits<std::size_t>::max());
  stop(child);
  std::vector<std::byte> big(kBytes, std::byte{3});
  auto s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(s.test());  // the peer, stopped, has not pulled it
  // While cancel() waits for the pull, another thread's short wait on the
  // same transport returns at its own timeout, not after the cancel.
  std::atomic<bool> otherReturned{false}, cancelReturned{false};
  bool otherFirst = false;
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<std::byte> small(8);
    auto r = t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 7), small);
    try {
      r.waitFor(0.3);
    } catch (const std::exception&) {
    }
    otherFirst = !cancelReturned.load();
    otherReturned = true;
  });
  const auto start = std::chrono::steady_clock::now();
  s.cancel();
  cancelReturned = true;
  other.join();
  CHECK(since(start) < kTimeout + 30);
  CHECK(since(start) >= kTimeout);  // it did wait for the pull
  CHECK(otherReturned.load());
  CHECK(otherFirst);
  if (freed)
    std::vector<std::byte>().swap(big);  // the caller frees its buffer (1 MiB: unmapped)
  else
    std::fill(big.begin(), big.end(), std::byte{0});  // the caller reuses its buffer
  CHECK_THROWS_AS(t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 2), one), gossamer::PeerFailure);
  REQUIRE(kill(child, SIGCONT) == 0);
  reap.pid = -1;  // waitBounded reaps it, or kills and reaps it
  REQUIRE(waitBounded(child, 60).has_value());
  const std::string said = gossamer::testing::readFile(result);
  INFO("rank 1: " << said);
  CHECK(said.rfind("failed: ", 0) == 0);
  CHECK(said.find("withdrew") != std::string::npos);
  t->abort();
}

TEST_CASE("a socket send to a stopped peer whose queue is full waits for room, and the peer is failed",
          "[multiproc][failure][socket]") {
  // Options::sendQueueBytes 4 MiB: once that much waits for the stopped
  // peer, the next send waits (instead of copying more), and the peer is
  // failed at its timeout. Without the bound, the sends all return at once
  // and the queue holds what they sent (up to 400 MiB here). While a send
  // waits, another thread's small sends (under 64 KiB: heartbeats, control
  // messages) are queued at once.
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  TempDir dir;
  Peer peer;
  auto o = optionsFor(0, protocol);
  o.sendQueueBytes = std::size_t{4} << 20;
  auto t = withStoppedPeer(dir, peer, o);
  const std::vector<std::byte> block(std::size_t{1} << 20, std::byte{7});
  std::atomic<int> sent{0}, smallSent{0};
  std::atomic<bool> looping{true}, smallWhileWaiting{false};
  std::thread small([&] {
    // Once the large sends stopped returning (one waits for room); the
    // first four always return, as they fit in the 4 MiB queue:
    for (int last = -1; looping && (sent < 4 || sent != last);) {
      last = sent;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    const std::vector<std::byte> tiny(1024, std::byte{1});
    for (std::uint64_t k = 0; k < 100 && looping; ++k) {
      try {
        t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 1000 + k), tiny);
        ++smallSent;
      } catch (const gossamer::Error&) {
        break;
      }
    }
    smallWhileWaiting = looping.load();
  });
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t step = 1; step <= 400; ++step) {
    try {
      t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, step), block);
      ++sent;
    } catch (const gossamer::PeerFailure& e) {
      why = e.what();
      break;
    }
  }
  looping = false;
  small.join();
  INFO(sent << " sends returned; then: " << why << "; small sends: " << smallSent);
  CHECK(smallSent == 100);
  CHECK(smallWhileWaiting);
  REQUIRE_FALSE(why.empty());
  CHECK(why.find("queued for it") != std::string::npos);
  CHECK(since(start) >= kTimeout);  // the peer had its timeout
  // 4 MiB queued, plus what the kernel's socket buffers took.
  CHECK(sent < 64);
  t->abort();
}

TEST_CASE("a socket peer that reads slower than it is sent to costs the sender at most its send queue",
          "[multiproc][socket]") {
  // Rank 1 runs 200 ms of every 1.2 s (SIGSTOP/SIGCONT): it takes
  // everything, slowly, and its connection never stalls for the timeout,
  // 6 s here: on a loaded machine a 200 ms window may pass with rank 1 never
  // scheduled, and only four such windows in a row make it look hung.
  // Rank 0 sends 120 messages of 1 MiB as fast as its sends return, with
  // a send queue of 4 MiB: its peak memory grows by far less than the 120
  // MiB an unbounded queue would hold, and every message arrives intact.
  constexpr int kMessages = 120;
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  TempDir dir;
  const std::string result = dir / "result";
  Peer peer;
  constexpr double kSlowTimeout = 6.0;
  auto peerOptions = optionsFor(1, "ipc");
  peerOptions.timeoutSeconds = kSlowTimeout;
  peer.pid = forkPeer(dir, peerOptions, result, [&](gossamer::Transport& mine) {
    std::vector<std::byte> buf(kBytes);
    int intact = 0;
    for (int k = 1; k <= kMessages; ++k) {
      mine.irecv(0, gossamer::Tag::make(gossamer::Op::kUser, static_cast<std::uint64_t>(k)), buf).wait(60);
      const auto want = static_cast<std::byte>(k & 0xFF);
      intact += std::all_of(buf.begin(), buf.end(), [&](std::byte b) { return b == want; }) ? 1 : 0;
    }
    return "received " + std::to_string(intact) + " intact";
  });
  REQUIRE(peer.pid > 0);
  gossamer::FileStore store(dir / "rdv");
  auto o = optionsFor(0, "ipc");
  o.sendQueueBytes = std::size_t{4} << 20;
  o.timeoutSeconds = kSlowTimeout;
  auto t = gossamer::sock::makeTransport(o, store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  std::vector<std::byte> block(kBytes);
  // The peak since now (otherwise it may be an earlier one, and the check
  // below would hold whatever this send costs).
  if (!resetPeak()) FAIL("/proc/self/clear_refs must be writable to reset the peak resident set");
  const long before = peakKb();
  std::atomic<bool> sending{true};
  std::thread slow([&] {
    while (sending) {
      kill(peer.pid, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      kill(peer.pid, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::string why;
  for (int k = 1; k <= kMessages && why.empty(); ++k) {
    std::fill(block.begin(), block.end(), static_cast<std::byte>(k & 0xFF));
    try {
      t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, static_cast<std::uint64_t>(k)), block);
    } catch (const gossamer::PeerFailure& e) {
      why = e.what();
    }
  }
  const long grew = peakKb() - before;
  sending = false;
  slow.join();
  kill(peer.pid, SIGCONT);
  INFO("the peak grew by " << grew << " KiB; failure: " << why);
  CHECK(why.empty());
  REQUIRE(before > 0);
  CHECK(grew < 48 * 1024);
  const pid_t child = std::exchange(peer.pid, -1);
  REQUIRE(waitBounded(child, 60).has_value());
  CHECK(gossamer::testing::readFile(result) == "received " + std::to_string(kMessages) + " intact");
  t->abort();
}
