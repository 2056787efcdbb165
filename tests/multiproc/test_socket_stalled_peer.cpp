// The socket transport's sends to a peer that stops reading while its
// connection stays open (a forked child, rank 1, SIGSTOPped):
// - once the kernel's buffers are full, what rank 0 sends queues in the
//   transport; a peer that takes none of it for the transport's timeout is
//   failed (PeerFailure), so that the queue stops growing and the peer counts
//   as failed, as a closed connection would make it;
// - a message lent to it over ipc (single copy) and cancelled is never
//   read from the caller's buffer once cancel() returned.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

}  // namespace

TEST_CASE("a socket peer that stops reading is failed once it took nothing for the timeout",
          "[multiproc][failure][socket]") {
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {
    try {
      gossamer::FileStore store(dir / "rdv");
      auto mine = gossamer::sock::makeTransport(optionsFor(1, protocol), store);
      std::vector<std::byte> one(1);
      mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(10);  // "connected"
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(child > 0);
  struct Reap {
    pid_t pid;
    ~Reap() {
      kill(pid, SIGKILL);
      waitBounded(pid, 10);
    }
  } reap{child};
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::sock::makeTransport(optionsFor(0, protocol), store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  REQUIRE(kill(child, SIGSTOP) == 0);
  int stopped = 0;  // kill() returns before every thread of the child has stopped
  REQUIRE(waitpid(child, &stopped, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(stopped));
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
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitBounded(pid, 10);
    }
  } reap{child};
  gossamer::FileStore store(dir / "rdv");
  auto t = gossamer::sock::makeTransport(optionsFor(0, "ipc", true), store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  // Single copy needs ptrace rights over the peer (Yama): without them this
  // test cannot test what it is for.
  REQUIRE(t->checksumReuseMinBytes() == std::numeric_limits<std::size_t>::max());
  REQUIRE(kill(child, SIGSTOP) == 0);
  int stopped = 0;  // kill() returns before every thread of the child has stopped
  REQUIRE(waitpid(child, &stopped, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(stopped));
  std::vector<std::byte> big(kBytes, std::byte{3});
  auto s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(s.test());  // the peer, stopped, has not pulled it
  const auto start = std::chrono::steady_clock::now();
  s.cancel();
  CHECK(since(start) < kTimeout + 30);
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
