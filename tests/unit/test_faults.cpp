// Fault injection (transports/faults): the `faults:` section wraps every
// Agent's transport, and the wrapper drops, duplicates, delays and reorders
// sends with the configured probabilities, reproducibly from its seed.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/faults.hpp"
#include "gossamer/transports/inproc.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

Registry registryWith(std::shared_ptr<inproc::Fabric> fabric) {
  Registry reg;
  inproc::registerWith(reg, std::move(fabric));
  faults::registerWith(reg);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  return reg;
}

// Rank 0 sends `n` numbered messages to rank 1 through a wrapped transport;
// returns how often each number arrived and the wrapper's counters.
std::pair<std::map<std::uint32_t, int>, faults::FaultStats> sendNumbered(const faults::FaultOptions& o,
                                                                         int n) {
  auto fabric = inproc::makeFabric(2);
  std::map<std::uint32_t, int> seen;
  faults::FaultStats stats;
  onEveryRank(2, [&](int r) {
    // Only rank 0's sends pass the injector; rank 1 answers reliably.
    std::unique_ptr<Transport> t = inproc::makeTransport(fabric, r, 10.0);
    if (r == 0) t = faults::wrap(std::move(t), o);
    const Tag tag = Tag::make(Op::kGossip, 0, 0);
    if (r == 0) {
      for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(n); ++i) {
        Request q = t->isend(1, tag, std::as_bytes(std::span<const std::uint32_t>(&i, 1)));
        q.wait(10.0);
      }
      stats = *faults::faultStats(*t);
      // The end marker may be dropped too: repeat it until rank 1 answers.
      std::uint32_t ack = 0;
      const std::uint32_t done = 0xFFFFFFFFu;
      Request a = t->irecv(1, Tag::make(Op::kGossip, 0, 2),
                           std::as_writable_bytes(std::span<std::uint32_t>(&ack, 1)));
      for (int k = 0; k < 200 && !a.test(); ++k) {
        Request q = t->isend(1, Tag::make(Op::kGossip, 0, 1),
                             std::as_bytes(std::span<const std::uint32_t>(&done, 1)));
        q.wait(10.0);
        a.waitFor(0.05);
      }
      RANK_REQUIRE(a.test());
    } else {
      std::uint32_t v = 0, done = 0;
      Request fin = t->irecv(0, Tag::make(Op::kGossip, 0, 1),
                             std::as_writable_bytes(std::span<std::uint32_t>(&done, 1)));
      for (;;) {
        Request q = t->irecv(0, tag, std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
        if (q.waitFor(0.5)) {
          ++seen[v];
          continue;
        }
        if (fin.test()) break;  // everything sent before the end marker has arrived
      }
      const std::uint32_t ack = 1;
      Request a =
          t->isend(0, Tag::make(Op::kGossip, 0, 2), std::as_bytes(std::span<const std::uint32_t>(&ack, 1)));
      a.wait(10.0);
    }
    t->close();
  });
  return {seen, stats};
}

}  // namespace

TEST_CASE("faults: sends are dropped and duplicated at the configured rates, reproducibly", "[faults]") {
  faults::FaultOptions o;
  o.dropProbability = 0.3;
  o.duplicateProbability = 0.2;
  o.seed = 11;
  const int n = 2000;
  const auto [seen, stats] = sendNumbered(o, n);
  int received = 0, twice = 0;
  for (const auto& [v, count] : seen) {
    REQUIRE(v < static_cast<std::uint32_t>(n));
    REQUIRE((count == 1 || count == 2));
    received += count;
    twice += count == 2 ? 1 : 0;
  }
  CHECK(static_cast<int>(seen.size()) == n - static_cast<int>(stats.dropped));
  CHECK(twice == static_cast<int>(stats.duplicated));
  CHECK(received == n - static_cast<int>(stats.dropped) + static_cast<int>(stats.duplicated));
  CHECK(stats.dropped == Approx(0.3 * n).epsilon(0.15));
  CHECK(stats.duplicated == Approx(0.2 * 0.7 * n).epsilon(0.2));
  // The same seed drops the same messages.
  const auto again = sendNumbered(o, n);
  CHECK(again.first == seen);
  o.seed = 12;
  CHECK(sendNumbered(o, n).first != seen);
}

TEST_CASE("faults: the section wraps an Agent's transport only when enabled, and is checked", "[faults]") {
  auto fabric = inproc::makeFabric(2);
  const Registry reg = registryWith(fabric);
  const Config on = reg.parse(
      "world_size: 2\ntransport: {kind: inproc}\nfaults:\n  enabled: true\n  drop: 0.05\n  duplicate: 0.01\n",
      "f.yaml");
  MemoryStore store;
  onEveryRank(2, [&](int r) {
    Agent a(on, r, store, reg);
    RANK_CHECK(a.transport().name() == "inproc+faults");
    RANK_CHECK(faults::faultStats(a.transport()).has_value());
    a.close();
  });
  const Config off = reg.parse("world_size: 1\ntransport: {kind: inproc}\n", "g.yaml");
  CHECK_FALSE(off.get<bool>("faults.enabled"));
  try {
    (void)reg.parse("world_size: 2\nfaults:\n  enabled: true\n  drop: 1.0\n", "bad.yaml");
    FAIL("drop 1.0 was accepted");
  } catch (const ConfigError& e) {
    CHECK(e.line() == 4);
    CHECK(e.key() == "faults.drop");
  }
  faults::FaultOptions bad;
  bad.dropProbability = 1.5;
  CHECK_THROWS_AS(faults::wrap(inproc::makeTransport(inproc::makeFabric(1), 0, 1.0), bad), InvalidArgument);
}

namespace {

// Averages random models (learning rate 0) on 4 ranks whose sends lose 5% and
// duplicate 1%; returns the largest |z_i - mean| over ranks and entries.
double averagingErrorUnderFaults(bool lossTolerant) {
  const int n = 4;
  const std::size_t p = 16;
  auto fabric = inproc::makeFabric(n);
  topologies::DirectedExponential expo(n, 1);
  std::vector<std::vector<float>> xs(n, std::vector<float>(p));
  std::vector<double> mean(p, 0.0);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < p; ++i) {
      xs[static_cast<std::size_t>(r)][i] =
          std::sin(static_cast<float>(7 * r + i)) * static_cast<float>(r + 1);
      mean[i] += xs[static_cast<std::size_t>(r)][i] / n;
    }
  std::barrier sync(n);
  onEveryRank(n, [&](int r) {
    // Gossip only: plain SGP's flush agrees through collectives, which
    // assume a reliable transport.
    faults::FaultOptions lossy;
    lossy.dropProbability = 0.05;
    lossy.duplicateProbability = 0.01;
    lossy.seed = 3;
    lossy.gossipOnly = true;
    auto t = faults::wrap(inproc::makeTransport(fabric, r, 10.0), lossy);
    // (Plain SGP's flush waits half this long for the messages lost on the way.)
    const optimizers::SgpOptions o{
        .sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 1.0, .mode = optimizers::GossipMode::kAsync};
    std::unique_ptr<DistributedOptimizer> opt;
    if (lossTolerant)
      opt = std::make_unique<optimizers::LossTolerantSgp>(*t, expo, p, o);
    else
      opt = std::make_unique<optimizers::Sgp>(*t, expo, p, o);
    auto& x = xs[static_cast<std::size_t>(r)];
    std::vector<float> g(p, 0.0f);
    for (int s = 0; s < 300; ++s) {
      opt->step(x, g);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (int k = 0; k < 2; ++k) {
      sync.arrive_and_wait();
      opt->flush(x);
    }
    sync.arrive_and_wait();
    t->close();
  });
  double err = 0;
  for (const auto& x : xs)
    for (std::size_t i = 0; i < p; ++i) err = std::max(err, std::abs(static_cast<double>(x[i]) - mean[i]));
  return err;
}

}  // namespace

TEST_CASE("faults: with 5% loss and 1% duplication, loss-tolerant SGP averages to the exact mean",
          "[faults][sgp]") {
  const double robust = averagingErrorUnderFaults(true);
  const double plain = averagingErrorUnderFaults(false);
  INFO("largest |z - mean|: loss-tolerant SGP " << robust << ", plain SGP " << plain);
  CHECK(robust < 1e-6);
  CHECK(plain > 100 * robust);  // plain push-sum loses the mass of the lost messages
}

namespace {
// 4 ranks: for the first `quietRounds` rounds rank 1 only sends (to 0) and
// the others gossip on the ring 0 -> 2 -> 3 -> 0, so rank 1 receives nothing;
// afterwards the ring 0 -> 1 -> 2 -> 3 -> 0.
class StarvesRankOne final : public Topology {
 public:
  explicit StarvesRankOne(std::uint64_t quietRounds) : quiet_(quietRounds) {}
  int worldSize() const override { return 4; }
  std::string name() const override { return "starves_rank_one"; }
  PeerSet peers(int rank, std::uint64_t step, int /*segment*/) const override {
    static const int kQuietNext[4] = {2, 0, 3, 0}, kRingNext[4] = {1, 2, 3, 0};
    PeerSet p;
    p.sendTo = {step < quiet_ ? kQuietNext[rank] : kRingNext[rank]};
    for (int q = 0; q < 4; ++q)
      if (q != rank && (step < quiet_ ? kQuietNext[q] : kRingNext[q]) == rank) p.recvFrom.push_back(q);
    return p;
  }

 private:
  std::uint64_t quiet_;
};
}  // namespace

TEST_CASE(
    "faults: loss-tolerant SGP keeps a finite weight and model on a rank that receives nothing for "
    "5,000 steps, and the mass stays exact",
    "[faults][sgp]") {
  const int n = 4;
  const std::size_t p = 8;
  const std::uint64_t quiet = 5000;
  auto fabric = inproc::makeFabric(n);
  const StarvesRankOne topology(quiet);
  std::vector<std::vector<float>> xs(n, std::vector<float>(p));
  std::vector<double> mean(p, 0.0);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < p; ++i) {
      xs[static_cast<std::size_t>(r)][i] = static_cast<float>(r * 10 + static_cast<int>(i));
      mean[i] += xs[static_cast<std::size_t>(r)][i] / n;
    }
  std::vector<double> starvedWeight(n, 0.0);
  std::vector<int> finiteAfterQuiet(n, 0);
  const auto largestError = [&] {
    double err = 0;
    for (const auto& x : xs)
      for (std::size_t i = 0; i < p; ++i) err = std::max(err, std::abs(static_cast<double>(x[i]) - mean[i]));
    return err;
  };
  std::atomic<bool> agreed{false};
  std::barrier sync(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    const optimizers::SgpOptions o{
        .sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 1.0, .mode = optimizers::GossipMode::kAsync};
    optimizers::LossTolerantSgp opt(*t, topology, p, o);
    auto& x = xs[static_cast<std::size_t>(r)];
    const std::vector<float> g(p, 0.0f);
    for (std::uint64_t s = 0; s < quiet; ++s) opt.step(x, g);
    starvedWeight[static_cast<std::size_t>(r)] = opt.pushSumWeight();
    finiteAfterQuiet[static_cast<std::size_t>(r)] =
        std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); }) ? 1 : 0;
    sync.arrive_and_wait();  // every rank is past the quiet rounds before rank 1 hears anything
    // Rounds of 50 steps until the models agree (at most 60 rounds): how
    // many it takes depends on how the ranks' threads interleave, and on a
    // loaded machine one rank may run most of a round alone.
    for (int round = 0; round < 60 && !agreed.load(); ++round) {
      for (int s = 0; s < 50; ++s) {
        opt.step(x, g);
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the ranks' rounds interleave
      }
      sync.arrive_and_wait();  // every model still: rank 0 reads them all
      if (r == 0) agreed.store(largestError() < 1e-5);
      sync.arrive_and_wait();
    }
    for (int k = 0; k < 2; ++k) {
      sync.arrive_and_wait();
      opt.flush(x);
    }
    sync.arrive_and_wait();
    t->close();
  });
  INFO("rank 1's push-sum weight after 5,000 steps with no arrival: " << starvedWeight[1]);
  CHECK(starvedWeight[1] >= optimizers::SgpOptions{}.weightFloor / 2);  // one push below the floor at most
  CHECK(starvedWeight[1] < optimizers::SgpOptions{}.weightFloor);
  CHECK(finiteAfterQuiet == std::vector<int>(n, 1));
  const double err = largestError();
  INFO("largest |z - mean| after rank 1 hears from rank 0 again: " << err);
  CHECK(err < 1e-4);
}

// A dead out-peer that the topology keeps naming: its share stays with the
// sender, or push-sum mass would drain into that edge's sums round after
// round and the survivors would settle on a wrong average.
TEST_CASE("faults: loss-tolerant SGP keeps the survivors' mass with a rank that died before the first step",
          "[faults][sgp]") {
  const int n = 4;
  const int dead = 3;
  const std::size_t p = 4;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(inproc::makeTransport(fabric, r, 10.0));
  ts[dead]->abort();
  const topologies::DirectedExponential topology(n, 1);
  std::vector<double> weight(n, 0.0);
  std::vector<std::vector<float>> xs(n);
  std::barrier sync(n - 1);
  onEveryRank(n - 1, [&](int r) {
    optimizers::SgpOptions o;
    o.timeoutSeconds = 1.0;
    optimizers::LossTolerantSgp opt(*ts[static_cast<std::size_t>(r)], topology, p, o);
    auto& x = xs[static_cast<std::size_t>(r)];
    x.assign(p, static_cast<float>(r));
    for (int s = 0; s < 40; ++s) {
      opt.mixParameters(x);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int k = 0; k < 2; ++k) {
      sync.arrive_and_wait();
      opt.flush(x);
    }
    weight[static_cast<std::size_t>(r)] = opt.pushSumWeight();
    sync.arrive_and_wait();
    ts[static_cast<std::size_t>(r)]->close();
  });
  // The mass, not the consensus: how far the ranks' models agree after 40
  // unsynchronised rounds depends on how their threads were scheduled (on a
  // loaded machine one rank can run most of its rounds alone), but whatever
  // the interleaving, the weights sum to 3 and the numerators w z to
  // 0 + 1 + 2. (A share sent to the dead rank drains both: 0.016 of 3.)
  INFO("survivors' weights " << weight[0] << ", " << weight[1] << ", " << weight[2]);
  CHECK(weight[0] + weight[1] + weight[2] == Approx(3.0).epsilon(1e-9));
  for (std::size_t i = 0; i < p; ++i) {
    double numerator = 0;
    for (int r = 0; r < n - 1; ++r)
      numerator += weight[static_cast<std::size_t>(r)] * xs[static_cast<std::size_t>(r)][i];
    CHECK(numerator == Approx(3.0).epsilon(1e-5));
  }
}

TEST_CASE("faults: a partition drops sends between groups only while it is in force", "[faults]") {
  CHECK(faults::parsePartition("", 4).empty());
  CHECK(faults::parsePartition("0,1|2,3", 4) == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  for (const char* bad : {"0,1", "0,1|1,2", "0,1|4", "0,x|1", "0,1||2"}) {
    INFO(bad);
    CHECK_THROWS_AS(faults::parsePartition(bad, 4), InvalidArgument);
    try {
      faults::parsePartition(bad, 4);
    } catch (const InvalidArgument& e) {
      // What a user sees (a ConfigError at load quotes it): no internal check's text.
      CHECK(std::string(e.what()).rfind("partition '", 0) == 0);
    }
  }
  // Rank 0 (group {0}) sends to rank 1 (group {1}) before, during and after a
  // 2 s partition that starts 0.5 s in; rank 1 counts what arrives. The
  // wrapper's clock starts when it is made, between `start` and `made`: a
  // send whose whole call lies clear of the window on that clock must arrive
  // (before, after) or be dropped (inside), however the threads are
  // scheduled; one that straddles an edge may do either.
  auto fabric = inproc::makeFabric(2);
  faults::FaultOptions o;
  o.partitionGroups = {{0}, {1}};
  o.partitionStartSeconds = 0.5;
  o.partitionSeconds = 2.0;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Transport> sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
  const auto since = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double made = since();
  auto receiver = inproc::makeTransport(fabric, 1, 10.0);
  std::vector<std::pair<double, double>> sentAt;  // [earliest, latest] on the wrapper's clock
  for (std::uint32_t i = 0;; ++i) {
    const double before = since();
    if (before > 3.0) break;
    sender->isend(1, Tag::make(Op::kGossip, i), std::as_bytes(std::span<const std::uint32_t>(&i, 1))).wait(5);
    sentAt.emplace_back(before - made, since());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::size_t arrived = 0, inside = 0, outside = 0;
  for (std::uint32_t i = 0; i < sentAt.size(); ++i) {
    std::uint32_t v = 0;
    Request r = receiver->irecv(0, Tag::make(Op::kGossip, i),
                                std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
    const bool got = r.waitFor(0.02);
    const auto [earliest, latest] = sentAt[i];
    INFO("send " << i << " between " << earliest << " and " << latest << " s");
    const bool before = latest<0.5, after = earliest> 2.5, during = earliest > 0.5 && latest < 2.5;
    if (before || after) CHECK(got);
    if (during) CHECK_FALSE(got);
    arrived += got ? 1 : 0;
    inside += during ? 1 : 0;
    outside += (before || after) ? 1 : 0;
  }
  CHECK(inside > 0);
  CHECK(outside > 0);
  CHECK(faults::faultStats(*sender)->partitioned + arrived == sentAt.size());
  sender->close();
  receiver->close();
}

namespace {

const Tag kNumbered = Tag::make(Op::kGossip, 0, 0);

Request sendNumber(Transport& t, int dst, const Tag& tag, std::uint32_t v) {
  return t.isend(dst, tag, std::as_bytes(std::span<const std::uint32_t>(&v, 1)));
}

// Receives numbers from rank `src` under `tag` in arrival order, until none
// arrives for `quietSeconds`, `most` arrived, or `src` has left and nothing
// of it is left to receive.
std::vector<std::uint32_t> receiveNumbers(Transport& t, int src, const Tag& tag, double quietSeconds,
                                          std::size_t most) {
  std::vector<std::uint32_t> got;
  while (got.size() < most) {
    std::uint32_t v = 0;
    Request r = t.irecv(src, tag, std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
    try {
      if (!r.waitFor(quietSeconds)) break;
    } catch (const PeerFailure&) {
      break;
    }
    got.push_back(v);
  }
  return got;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rank 0 sends 0..n-1 under one tag to rank 1 through a wrapper with `o`;
// returns the numbers in the order rank 1 received them, and the counters.
std::pair<std::vector<std::uint32_t>, faults::FaultStats> arrivalOrder(const faults::FaultOptions& o,
                                                                       std::uint32_t n) {
  auto fabric = inproc::makeFabric(2);
  auto sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
  auto receiver = inproc::makeTransport(fabric, 1, 10.0);
  for (std::uint32_t i = 0; i < n; ++i) CHECK(sendNumber(*sender, 1, kNumbered, i).test());
  // Every fault was drawn when its message was sent, so the counters say how
  // many arrive; held messages that nothing overtook go out after
  // delaySeconds at most. Anything beyond them is received too.
  const faults::FaultStats stats = *faults::faultStats(*sender);
  const std::size_t expected = n - stats.dropped + stats.duplicated;
  auto got = receiveNumbers(*receiver, 0, kNumbered, o.delaySeconds + 2.0, expected);
  for (std::uint32_t extra : receiveNumbers(*receiver, 0, kNumbered, 0.2, n)) got.push_back(extra);
  sender->close();
  receiver->close();
  return {got, stats};
}

// How many numbers arrived after a larger one.
std::size_t overtaken(const std::vector<std::uint32_t>& order) {
  std::size_t count = 0;
  std::uint32_t largest = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i > 0 && order[i] < largest) ++count;
    largest = std::max(largest, order[i]);
  }
  return count;
}

std::vector<std::uint32_t> upTo(std::uint32_t n) {
  std::vector<std::uint32_t> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

TEST_CASE("faults: a delayed send arrives late, once, with its payload", "[faults][delay]") {
  auto fabric = inproc::makeFabric(2);
  faults::FaultOptions o;
  o.delayProbability = 1;
  o.delaySeconds = 0.2;
  o.seed = 13;
  auto sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
  auto receiver = inproc::makeTransport(fabric, 1, 10.0);

  std::uint32_t v = 0;
  Request r = receiver->irecv(0, kNumbered, std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
  const auto start = std::chrono::steady_clock::now();
  // The send is accepted at once although nothing is on the wire yet (seed 13
  // draws 0.196 s for the first send: looked at before 0.1 s, it is not there).
  CHECK(sendNumber(*sender, 1, kNumbered, 7).test());
  const bool there = r.test();  // then the clock: a pause between them only skips the check
  if (secondsSince(start) < 0.1) CHECK_FALSE(there);
  // Polled every few milliseconds (at most 30 s), it is not there before its
  // delay; a busy machine only makes it look later.
  for (int k = 0; k < 6000 && !r.test(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double late = secondsSince(start);
  REQUIRE(r.test());
  CHECK(v == 7);
  CHECK(late >= 0.1);

  // Every message arrives exactly once.
  const std::uint32_t n = 100;
  for (std::uint32_t i = 0; i < n; ++i) CHECK(sendNumber(*sender, 1, kNumbered, i).test());
  std::vector<std::uint32_t> got = receiveNumbers(*receiver, 0, kNumbered, 30.0, n);
  CHECK(receiveNumbers(*receiver, 0, kNumbered, 0.3, 1).empty());  // nothing more
  std::sort(got.begin(), got.end());
  CHECK(got == upTo(n));
  CHECK(faults::faultStats(*sender)->delayed == n + 1);
  CHECK(faults::faultStats(*sender)->reordered == 0);
  CHECK(faults::faultStats(*sender)->dropped == 0);
  sender->close();
  receiver->close();
}

TEST_CASE("faults: a seed drops the same sends to a peer whatever another thread sends meanwhile",
          "[faults]") {
  // Rank 0 sends 0..n-1 to rank 1 under one op, once alone and once while a
  // second thread sends as many to rank 2 and to rank 1 under another op (as
  // the membership service's heartbeats and a communication thread do):
  // rank 1 receives the same numbers both times.
  faults::FaultOptions o;
  o.dropProbability = 0.3;
  o.seed = 11;
  const std::uint32_t n = 400;
  const Tag other = Tag::make(Op::kControl, 0, 0);
  const auto run = [&](bool busy) {
    auto fabric = inproc::makeFabric(3);
    auto sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
    auto one = inproc::makeTransport(fabric, 1, 10.0);
    auto two = inproc::makeTransport(fabric, 2, 10.0);
    std::thread noise;
    if (busy)
      noise = std::thread([&] {
        for (std::uint32_t i = 0; i < n; ++i) {
          sendNumber(*sender, 2, kNumbered, i);
          sendNumber(*sender, 1, other, i);
        }
      });
    for (std::uint32_t i = 0; i < n; ++i) CHECK(sendNumber(*sender, 1, kNumbered, i).test());
    if (noise.joinable()) noise.join();
    auto got = receiveNumbers(*one, 0, kNumbered, 0.5, n);
    sender->close();
    one->close();
    two->close();
    return got;
  };
  const auto alone = run(false);
  CHECK(alone.size() < n);  // some were dropped
  CHECK(alone.size() > n / 2);
  for (int round = 0; round < 3; ++round) CHECK(run(true) == alone);
}

TEST_CASE("faults: held sends are overtaken by later ones under the same tag, none is lost",
          "[faults][reorder]") {
  const std::uint32_t n = 200;
  faults::FaultOptions o;
  o.reorderProbability = 0.5;
  o.delaySeconds = 1.0;
  o.seed = 9;
  const auto [order, stats] = arrivalOrder(o, n);
  std::vector<std::uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == upTo(n));  // each once
  CHECK(order != upTo(n));
  CHECK(stats.reordered == Approx(0.5 * n).epsilon(0.2));
  CHECK(stats.delayed == 0);
  // Only held messages are overtaken; each is, unless every later one was
  // held too (a run of held messages at the end leaves after delaySeconds).
  const std::size_t late = overtaken(order);
  INFO("overtaken " << late << ", held " << stats.reordered);
  CHECK(late <= stats.reordered);
  CHECK(late + 10 >= stats.reordered);
  // The same seed holds the same messages.
  CHECK(arrivalOrder(o, n).second.reordered == stats.reordered);

  o.reorderProbability = 0;
  const auto [inOrder, none] = arrivalOrder(o, n);
  CHECK(inOrder == upTo(n));
  CHECK(none.reordered == 0);
}

TEST_CASE("faults: drops, duplicates, delays and holds are counted as they happen", "[faults][delay]") {
  faults::FaultOptions o;
  o.dropProbability = 0.1;
  o.duplicateProbability = 0.1;
  o.delayProbability = 0.2;
  o.delaySeconds = 0.05;
  o.reorderProbability = 0.2;
  o.seed = 21;
  const std::uint32_t n = 1000;
  const auto [order, stats] = arrivalOrder(o, n);
  std::map<std::uint32_t, int> seen;
  for (std::uint32_t v : order) ++seen[v];
  int twice = 0;
  for (const auto& [v, count] : seen) {
    REQUIRE(v < n);
    REQUIRE((count == 1 || count == 2));
    twice += count == 2 ? 1 : 0;
  }
  CHECK(seen.size() == n - stats.dropped);
  CHECK(twice == static_cast<int>(stats.duplicated));
  CHECK(order.size() == n - stats.dropped + stats.duplicated);
  const double kept = 0.9 * n;  // not dropped
  CHECK(stats.dropped == Approx(0.1 * n).epsilon(0.3));
  CHECK(stats.duplicated == Approx(0.1 * kept).epsilon(0.3));
  CHECK(stats.delayed == Approx(0.2 * kept).epsilon(0.3));
  CHECK(stats.reordered == Approx(0.2 * 0.8 * kept).epsilon(0.3));
  CHECK(stats.partitioned == 0);
  // The same seed gives the same faults (the arrival order may differ: the
  // worker's timing is the scheduler's).
  const auto [again, sameStats] = arrivalOrder(o, n);
  std::map<std::uint32_t, int> seenAgain;
  for (std::uint32_t v : again) ++seenAgain[v];
  CHECK(seenAgain == seen);
  CHECK(sameStats.delayed == stats.delayed);
  CHECK(sameStats.reordered == stats.reordered);
}

TEST_CASE("faults: delay and reorder options are checked", "[faults][delay]") {
  const auto bad = [](double delay, double delaySeconds, double reorder) {
    faults::FaultOptions o;
    o.delayProbability = delay;
    o.delaySeconds = delaySeconds;
    o.reorderProbability = reorder;
    return faults::wrap(inproc::makeTransport(inproc::makeFabric(1), 0, 1.0), o);
  };
  CHECK_THROWS_WITH(bad(-0.1, 0.1, 0), Catch::Contains("delay probability -0.1"));
  CHECK_THROWS_WITH(bad(1.5, 0.1, 0), Catch::Contains("delay probability 1.5"));
  CHECK_THROWS_AS(bad(std::nan(""), 0.1, 0), InvalidArgument);
  CHECK_THROWS_WITH(bad(0, 0.1, 1.0), Catch::Contains("reorder probability 1"));
  CHECK_THROWS_AS(bad(0, 0.1, -0.5), InvalidArgument);
  CHECK_THROWS_WITH(bad(0.5, 0, 0), Catch::Contains("delay_seconds 0"));
  CHECK_THROWS_AS(bad(0.5, -1, 0), InvalidArgument);
  CHECK_THROWS_AS(bad(0.5, std::numeric_limits<double>::infinity(), 0), InvalidArgument);
  CHECK_NOTHROW(bad(1, 0.1, 0.9));

  const Registry reg = registryWith(inproc::makeFabric(2));
  for (const char* key : {"reorder: 1.0", "delay: 1.5", "delay_seconds: 0"}) {
    INFO(key);
    try {
      (void)reg.parse(std::string("world_size: 2\nfaults:\n  enabled: true\n  ") + key + "\n", "bad.yaml");
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK(e.line() == 4);
      CHECK(e.key() == "faults." + std::string(key).substr(0, std::string(key).find(':')));
    }
  }
}

TEST_CASE("faults: the section's delay reaches an Agent's gossip sends only, with messages: gossip",
          "[faults][delay]") {
  auto fabric = inproc::makeFabric(2);
  const Registry reg = registryWith(fabric);
  const Config c = reg.parse(
      "world_size: 2\ntransport: {kind: inproc}\nfaults:\n  enabled: true\n  delay: 1\n  delay_seconds: "
      "0.05\n"
      "  messages: gossip\n",
      "d.yaml");
  CHECK(c.get<double>("faults.reorder") == 0);
  MemoryStore store;
  onEveryRank(2, [&](int r) {
    Agent a(c, r, store, reg);
    Transport& t = a.transport();
    std::uint32_t v = 0;
    if (r == 0) {
      RANK_CHECK(sendNumber(t, 1, kNumbered, 42).test());
      RANK_CHECK(sendNumber(t, 1, Tag::make(Op::kUser, 0, 0), 43).test());
    } else {
      Request g = t.irecv(0, kNumbered, std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
      RANK_REQUIRE(g.waitFor(5.0));
      RANK_CHECK(v == 42);
      Request u =
          t.irecv(0, Tag::make(Op::kUser, 0, 0), std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
      RANK_REQUIRE(u.waitFor(5.0));
      RANK_CHECK(v == 43);
    }
    std::uint32_t one = 1;
    Request b =
        t.isend(1 - r, Tag::make(Op::kUser, 0, 1), std::as_bytes(std::span<const std::uint32_t>(&one, 1)));
    Request d =
        t.irecv(1 - r, Tag::make(Op::kUser, 0, 1), std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
    RANK_REQUIRE(d.waitFor(5.0));  // both ranks are done before either closes
    const auto s = faults::faultStats(t);
    RANK_REQUIRE(s.has_value());
    RANK_CHECK(s->delayed == (r == 0 ? 1u : 0u));
    a.close();
  });
}

TEST_CASE("faults: close() sends what is still held at once, abort() drops it, both promptly",
          "[faults][delay][reorder]") {
  for (const bool orderly : {true, false}) {
    INFO((orderly ? "close" : "abort"));
    auto fabric = inproc::makeFabric(2);
    faults::FaultOptions o;
    o.delayProbability = 0.5;
    o.reorderProbability = 0.9;
    o.delaySeconds = 60;  // nothing leaves on its own during the test
    o.seed = 3;
    auto sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
    auto receiver = inproc::makeTransport(fabric, 1, 10.0);
    const std::uint32_t n = 20;
    for (std::uint32_t i = 0; i < n; ++i) CHECK(sendNumber(*sender, 1, kNumbered, i).test());
    const faults::FaultStats stats = *faults::faultStats(*sender);
    CHECK(stats.delayed + stats.reordered > n / 2);
    const auto start = std::chrono::steady_clock::now();
    if (orderly)
      sender->close();
    else
      sender->abort();
    CHECK(secondsSince(start) < 30.0);  // not the held sends' 60 s
    CHECK_THROWS_AS(sendNumber(*sender, 1, kNumbered, n), Cancelled);
    std::vector<std::uint32_t> got = receiveNumbers(*receiver, 0, kNumbered, 0.3, 2 * n);
    std::sort(got.begin(), got.end());
    if (orderly) {
      CHECK(got == upTo(n));
    } else {
      // Only what went out before abort() arrives: the messages never held.
      CHECK(got.size() < n);
    }
    receiver->close();
  }
}

TEST_CASE("faults: an island delay holds every send to another island for its link's delay, in order",
          "[faults][delay]") {
  // Ranks 0, 1 in one island, 2 in the other: rank 0's sends to 2 wait
  // 0.15 s, whatever their kind; its sends to 1 do not wait.
  auto fabric = inproc::makeFabric(3);
  const Registry reg = registryWith(fabric);
  const Config c = reg.parse(
      "world_size: 3\ntransport: {kind: inproc}\nnetwork:\n  islands: [[0, 1], [2]]\n  between_delay_ms: "
      "150\n"
      "faults:\n  enabled: true\n  island_delay: true\n  messages: gossip\n",
      "island.yaml");
  MemoryStore store;
  const std::uint32_t n = 50;
  std::atomic<std::chrono::steady_clock::rep> sentAt{0};  // rank 0's first send, on the clock all ranks share
  onEveryRank(3, [&](int r) {
    Agent a(c, r, store, reg);
    Transport& t = a.transport();
    if (r == 0) {
      // Collective traffic (Op::kUser) is delayed too: propagation is not drawn.
      sentAt = std::chrono::steady_clock::now().time_since_epoch().count();
      for (std::uint32_t i = 0; i < n; ++i)
        RANK_CHECK(sendNumber(t, 2, Tag::make(Op::kUser, 0, 0), i).test());
      RANK_CHECK(sendNumber(t, 1, kNumbered, 7).test());
      // close() would send what still waits at once: wait for rank 2 first.
      std::uint32_t done = 0;
      Request ack = t.irecv(2, kNumbered, std::as_writable_bytes(std::span<std::uint32_t>(&done, 1)));
      RANK_REQUIRE(ack.waitFor(5.0));
    } else if (r == 2) {
      std::uint32_t first = 0;
      Request q =
          t.irecv(0, Tag::make(Op::kUser, 0, 0), std::as_writable_bytes(std::span<std::uint32_t>(&first, 1)));
      RANK_REQUIRE(q.waitFor(5.0));
      // Not here sooner than the delay allows after it was sent (a busy
      // machine only makes it later).
      const std::chrono::steady_clock::time_point sent{std::chrono::steady_clock::duration(sentAt.load())};
      RANK_CHECK(secondsSince(sent) >= 0.15);
      RANK_CHECK(first == 0);
      // (A gap of up to 10 s between them is a starved worker, not the end.)
      const auto rest = receiveNumbers(t, 0, Tag::make(Op::kUser, 0, 0), 10.0, n - 1);
      RANK_CHECK(rest == [&] {
        std::vector<std::uint32_t> v;
        for (std::uint32_t i = 1; i < n; ++i) v.push_back(i);
        return v;
      }());  // in the order sent
      RANK_CHECK(sendNumber(t, 0, kNumbered, 1).test());
    } else {
      std::uint32_t v = 0;
      Request g = t.irecv(0, kNumbered, std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
      RANK_REQUIRE(g.waitFor(5.0));
      RANK_CHECK(v == 7);
    }
    const auto s = faults::faultStats(t);
    RANK_REQUIRE(s.has_value());
    RANK_CHECK(s->linkDelayed == (r == 0 ? n : r == 2 ? 1u : 0u));
    RANK_CHECK(s->delayed == 0);
    a.close();
  });
}

TEST_CASE("faults: link delays are checked", "[faults][delay]") {
  auto fabric = inproc::makeFabric(2);
  faults::FaultOptions o;
  o.linkDelaySeconds = {0.0, -1.0};
  CHECK_THROWS_WITH(faults::wrap(inproc::makeTransport(fabric, 0, 1.0), o), Catch::Contains("link delay -1"));
  o.linkDelaySeconds = {0.0, 0.1, 0.2};
  CHECK_THROWS_WITH(faults::wrap(inproc::makeTransport(fabric, 1, 1.0), o),
                    Catch::Contains("3 link delays for a world of 2"));
}
