// The socket transport's sends to a peer that stops reading while its
// connection stays open (a forked child, rank 1, SIGSTOPped): once the
// kernel's buffers are full, what rank 0 sends queues in the transport. A
// peer that takes none of it for the transport's timeout is failed
// (PeerFailure), so that the queue stops growing and the peer counts as
// failed, as a closed connection would make it.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
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

gossamer::sock::Options optionsFor(int rank, const std::string& protocol) {
  gossamer::sock::Options o;
  o.protocol = protocol;
  o.rank = rank;
  o.worldSize = 2;
  o.timeoutSeconds = kTimeout;
  o.lingerSeconds = 0.2;
  o.singleCopy = false;  // copies into the stream, whatever the protocol
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
