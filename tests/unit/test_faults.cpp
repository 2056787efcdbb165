// Fault injection (transports/faults): the `faults:` section wraps every
// Agent's transport, and the wrapper drops and duplicates sends with the
// configured probabilities, reproducibly from its seed.
#include <barrier>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
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
      REQUIRE(a.test());
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
    CHECK(a.transport().name() == "inproc+faults");
    CHECK(faults::faultStats(a.transport()) != nullptr);
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
  CHECK_THROWS_AS(faults::wrap(inproc::makeTransport(inproc::makeFabric(1), 0, 1.0), {1.5, 0, 0}),
                  InvalidArgument);
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
    auto t =
        faults::wrap(inproc::makeTransport(fabric, r, 10.0), {0.05, 0.01, static_cast<std::uint64_t>(3)});
    const optimizers::SgpOptions o{{0.0, 0.0, 0.0}, 10.0, optimizers::GossipMode::kAsync};
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

TEST_CASE("faults: a partition drops sends between groups only while it is in force", "[faults]") {
  CHECK(faults::parsePartition("", 4).empty());
  CHECK(faults::parsePartition("0,1|2,3", 4) == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  for (const char* bad : {"0,1", "0,1|1,2", "0,1|4", "0,x|1", "0,1||2"}) {
    INFO(bad);
    CHECK_THROWS_AS(faults::parsePartition(bad, 4), InvalidArgument);
  }
  // Rank 0 (group {0}) sends to rank 1 (group {1}) before, during and after a
  // 0.4 s partition that starts 0.3 s in; rank 1 counts what arrives.
  auto fabric = inproc::makeFabric(2);
  faults::FaultOptions o;
  o.partitionGroups = {{0}, {1}};
  o.partitionStartSeconds = 0.3;
  o.partitionSeconds = 0.4;
  std::unique_ptr<Transport> sender = faults::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
  auto receiver = inproc::makeTransport(fabric, 1, 10.0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> sentAt;
  for (std::uint32_t i = 0;; ++i) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t > 1.0) break;
    sender->isend(1, Tag::make(Op::kGossip, i), std::as_bytes(std::span<const std::uint32_t>(&i, 1))).wait(5);
    sentAt.push_back(t);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::size_t arrived = 0, inside = 0;
  for (std::uint32_t i = 0; i < sentAt.size(); ++i) {
    std::uint32_t v = 0;
    Request r = receiver->irecv(0, Tag::make(Op::kGossip, i),
                                std::as_writable_bytes(std::span<std::uint32_t>(&v, 1)));
    const bool got = r.waitFor(0.02);
    // Clear of the window's edges (scheduling), a send arrives iff it was outside it.
    const double t = sentAt[i];
    if (t < 0.28 || t > 0.72) CHECK(got);
    if (t > 0.32 && t < 0.68) CHECK_FALSE(got);
    arrived += got ? 1 : 0;
    inside += (t > 0.32 && t < 0.68) ? 1 : 0;
  }
  CHECK(inside > 10);
  CHECK(faults::faultStats(*sender)->partitioned + arrived == sentAt.size());
  sender->close();
  receiver->close();
}
