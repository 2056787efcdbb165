// "In collectives a dead peer becomes PeerFailure on every rank, never a
// hang": one rank of eight stops with an error of its own (Transport::abort)
// while the others are inside a collective that needs it. Every survivor,
// also one that waits only on other survivors (held up by the dead rank),
// must fail with a PeerFailure naming the dead rank well before the
// transport's timeout: each collective wait asks its transport
// (Transport::peerFailure) whether a rank of the collective failed.
// Over inproc and the socket transport (ipc and tcp loopback), for every
// allreduce algorithm, broadcast, barrier and the non-blocking allreduce.
#include <catch2/catch.hpp>

#include "groups.hpp"
#include "threads.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr int kRanks = 8;
constexpr int kDead = 2;
/// The transports' timeout: far above the bound each survivor must meet.
constexpr double kTimeout = 20.0;
/// Each survivor's error must come within this many seconds of the abort.
constexpr double kBound = 5.0;
/// The survivors are inside the collective this long before the abort.
constexpr auto kBeforeAbort = std::chrono::milliseconds(330);

using gossamer::testing::Group;

Group inprocGroup(int n) { return gossamer::testing::inprocGroup(n, kTimeout); }
Group socketGroup(int n, const char* protocol) {
  return gossamer::testing::socketGroup(n, protocol, kTimeout);
}

using MakeGroup = std::function<Group(int)>;

/// What one survivor saw.
struct Outcome {
  std::string error = "returned without an error";
  int peer = -1;        ///< PeerFailure::peer(), or -1
  double seconds = -1;  ///< from the abort to the error
};

/// Rank kDead aborts kBeforeAbort after the others entered `collective`
/// (called with the rank's transport); checks each survivor's outcome.
void checkEverySurvivorFails(const MakeGroup& make, const std::string& what,
                             const std::function<void(Transport&)>& collective) {
  Group g = make(kRanks);
  std::vector<Outcome> out(kRanks);
  std::atomic<std::int64_t> abortedAt{0};
  const auto since = [&] {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    return std::chrono::duration<double>(now - std::chrono::nanoseconds(abortedAt.load())).count();
  };
  onEveryRank(kRanks, [&](int r) {
    auto& t = *g[static_cast<std::size_t>(r)];
    if (r == kDead) {
      std::this_thread::sleep_for(kBeforeAbort);
      abortedAt = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
      t.abort();
      return;
    }
    auto& o = out[static_cast<std::size_t>(r)];
    try {
      collective(t);
    } catch (const PeerFailure& e) {
      o.error = std::string("PeerFailure: ") + e.what();
      o.peer = e.peer();
    } catch (const std::exception& e) {
      o.error = e.what();
    }
    o.seconds = since();
  });
  std::ostringstream report;
  for (int r = 0; r < kRanks; ++r)
    if (r != kDead)
      report << "  rank " << r << ": " << out[static_cast<std::size_t>(r)].seconds << " s, "
             << out[static_cast<std::size_t>(r)].error << "\n";
  INFO(what << ", rank " << kDead << " aborted; each survivor, seconds after the abort:\n" << report.str());
  WARN(what << ":\n" << report.str());
  for (int r = 0; r < kRanks; ++r) {
    if (r == kDead) continue;
    const auto& o = out[static_cast<std::size_t>(r)];
    CHECK(o.peer == kDead);
    CHECK(o.seconds < kBound);
  }
  for (auto& t : g) t->abort();
}

/// A vector large enough that the survivors are still waiting at the abort.
constexpr std::size_t kLength = 100000;

void checkAllreduces(const MakeGroup& make, const std::string& kind) {
  const AllreduceAlgorithm algorithms[] = {
      AllreduceAlgorithm::kRing,         AllreduceAlgorithm::kRecursiveDoubling,
      AllreduceAlgorithm::kRabenseifner, AllreduceAlgorithm::kTorus2d,
      AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTga2d,
      AllreduceAlgorithm::kHips,         AllreduceAlgorithm::kAuto};
  for (auto a : algorithms) {
    DYNAMIC_SECTION(toString(a)) {
      checkEverySurvivorFails(make, kind + " " + toString(a) + " allreduce", [a](Transport& t) {
        std::vector<float> data(kLength, 1.0f);
        CollectiveOptions o{1, kTimeout, a, std::size_t{1} << 16};
        allreduce<float>(t, std::span<float>(data), ReduceOp::kSum, o);
      });
    }
  }
  SECTION("broadcast from the dead rank") {
    checkEverySurvivorFails(make, kind + " broadcast", [](Transport& t) {
      std::vector<float> data(kLength, 1.0f);
      broadcast<float>(t, std::span<float>(data), kDead, CollectiveOptions{1, kTimeout});
    });
  }
  SECTION("barrier") {
    checkEverySurvivorFails(make, kind + " barrier", [](Transport& t) {
      barrier(t, CollectiveOptions{1, kTimeout});
    });
  }
  SECTION("non-blocking allreduce") {
    checkEverySurvivorFails(make, kind + " iallreduce", [](Transport& t) {
      Communicator c(t, kTimeout);
      CollectiveOptions o;
      o.algorithm = AllreduceAlgorithm::kRing;
      c.setOptions(o);
      std::vector<float> data(kLength, 1.0f);
      c.iallreduce(std::span<float>(data)).wait();
    });
  }
}

}  // namespace

TEST_CASE("a rank that aborts inside a collective fails every survivor at once over inproc",
          "[collectives][failure]") {
  checkAllreduces(inprocGroup, "inproc");
}

TEST_CASE("a rank that aborts inside a collective fails every survivor at once over socket ipc",
          "[collectives][failure]") {
  checkAllreduces([](int n) { return socketGroup(n, "ipc"); }, "socket ipc");
}

TEST_CASE("a rank that aborts inside a collective fails every survivor at once over socket tcp",
          "[collectives][failure]") {
  checkAllreduces([](int n) { return socketGroup(n, "tcp"); }, "socket tcp");
}

// A rank known to be dead before the call: the binomial trees' ranks outside
// its subtree wait on no one it holds up, and must still fail rather than
// return as if the broadcast or reduce had succeeded everywhere.
TEST_CASE("a rank dead before a broadcast or reduce fails every survivor, outside its subtree too",
          "[collectives][failure]") {
  Group g = inprocGroup(kRanks);
  g[kDead]->abort();
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; r != kDead && i < 1000 && !g[static_cast<std::size_t>(r)]->peerFailure(kDead); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (const char* what : {"broadcast", "reduce"}) {
    std::vector<int> failedOn(kRanks, -1);
    onEveryRank(kRanks, [&](int r) {
      if (r == kDead) return;
      std::vector<float> data(16, static_cast<float>(r));
      const CollectiveOptions o{std::string(what) == "broadcast" ? 1u : 2u, kTimeout};
      try {
        if (std::string(what) == "broadcast")
          broadcast<float>(*g[static_cast<std::size_t>(r)], std::span<float>(data), 1, o);
        else
          reduce<float>(*g[static_cast<std::size_t>(r)], std::span<float>(data), 1, ReduceOp::kSum, o);
      } catch (const PeerFailure& e) {
        failedOn[static_cast<std::size_t>(r)] = e.peer();
      }
    });
    INFO(what);
    for (int r = 0; r < kRanks; ++r)
      if (r != kDead) CHECK(failedOn[static_cast<std::size_t>(r)] == kDead);
  }
  for (auto& t : g) t->abort();
}
