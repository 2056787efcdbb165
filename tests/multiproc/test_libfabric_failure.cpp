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

#include <chrono>
#include <cstring>
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
  CHECK(took < 2 * peerTimeout);  // within the timeout, no hang
  const bool fromCq = what.find("libfabric failed a receive from it") != std::string::npos;
  const bool fromPidfd = what.find("its process exited") != std::string::npos;
  const bool fromHeartbeat = what.find("no heartbeat") != std::string::npos;
  CHECK((fromCq || fromPidfd || fromHeartbeat));
  if (provider == "shm") CHECK((fromCq || fromPidfd));  // shm: no heartbeats, the exit is watched
  t->abort();
}

#endif  // GOSSAMER_HAVE_LIBFABRIC
