// zmq's borrowed sends (payloads lent to ZeroMQ without a copy) to a peer
// that stops reading: a forked child is rank 1 and is SIGSTOPped, so the
// kernel's socket buffers fill and ZeroMQ cannot finish the send.
// - cancel() returns within the transport's timeout: the connection is torn
//   down, which makes ZeroMQ give the buffer back, and the peer counts as failed;
// - a peer killed meanwhile releases the send at once, not after a timeout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
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

gossamer::zmq::Options optionsFor(int rank) {
  gossamer::zmq::Options o;
  o.rank = rank;
  o.worldSize = 2;
  o.timeoutSeconds = kTimeout;
  o.lingerSeconds = 0.2;
  o.storePrefix = "loans";
  return o;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Forks rank 1, which joins and then idles (up to 60 s); returns its pid once
/// both ranks are connected, with rank 0's transport in `t`.
pid_t startIdlePeer(const TempDir& dir, std::unique_ptr<gossamer::Transport>& t) {
  const pid_t child = fork();
  if (child == 0) {
    try {
      gossamer::FileStore store(dir / "rdv");
      auto mine = gossamer::zmq::makeTransport(optionsFor(1), store);
      std::vector<std::byte> one(1);
      mine->isend(0, gossamer::Tag::make(gossamer::Op::kUser, 0), one);  // "connected"
      std::this_thread::sleep_for(std::chrono::seconds(60));
    } catch (...) {
    }
    _exit(0);
  }
  REQUIRE(child > 0);
  gossamer::FileStore store(dir / "rdv");
  t = gossamer::zmq::makeTransport(optionsFor(0), store);
  std::vector<std::byte> one(1);
  t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), one).wait(20);
  return child;
}

}  // namespace

TEST_CASE("cancelling a zmq borrowed send that a stopped peer does not read returns within the timeout",
          "[multiproc][failure][zmq]") {
  TempDir dir;
  std::unique_ptr<gossamer::Transport> t;
  const pid_t child = startIdlePeer(dir, t);
  kill(child, SIGSTOP);
  std::vector<std::byte> big(kBytes, std::byte{3});
  auto s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(s.test());  // ZeroMQ still holds it: the peer reads nothing
  const auto start = std::chrono::steady_clock::now();
  s.cancel();
  const double took = since(start);
  CHECK(took >= 0.9 * kTimeout);  // it waited for the peer first
  CHECK(took < kTimeout + 3.0);
  std::fill(big.begin(), big.end(), std::byte{0});  // released: no longer read
  CHECK_THROWS_AS(s.wait(1), gossamer::Error);      // cancelled (or failed), not done
  // The connection is gone: the peer counts as failed.
  CHECK_THROWS_AS(t->isend(1, gossamer::Tag::make(gossamer::Op::kUser, 2), big), gossamer::PeerFailure);
  std::vector<std::byte> buf(1);
  CHECK_THROWS_AS(t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 3), buf).wait(5),
                  gossamer::PeerFailure);
  kill(child, SIGKILL);
  waitBounded(child, 5);
  t->close();
}

TEST_CASE("a zmq peer killed while a borrowed send to it is stuck releases that send at once",
          "[multiproc][failure][zmq]") {
  TempDir dir;
  std::unique_ptr<gossamer::Transport> t;
  const pid_t child = startIdlePeer(dir, t);
  kill(child, SIGSTOP);
  std::vector<std::byte> big(kBytes, std::byte{4});
  auto s = t->isendBorrowed(1, gossamer::Tag::make(gossamer::Op::kUser, 1), big);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE_FALSE(s.test());
  kill(child, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  waitBounded(child, 5);
  // ZeroMQ gives the buffer back when the connection breaks (the send then
  // completes: like isend, completion does not promise delivery) or when the
  // peer is declared failed (PeerFailure). Either way, no timeout.
  std::string what = "completed";
  try {
    s.wait(10);
  } catch (const gossamer::PeerFailure& e) {
    what = e.what();
    CHECK(e.peer() == 1);
  }
  const double took = since(killed);
  INFO("after " << took << " s: " << what);
  CHECK(took < kTimeout);
  std::vector<std::byte> buf(1);
  CHECK_THROWS_AS(t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 3), buf).wait(5),
                  gossamer::PeerFailure);
  CHECK(since(killed) < 2 * kTimeout);
  t->close();
}
