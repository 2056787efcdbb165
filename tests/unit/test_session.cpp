// The Session (gossamer/session.hpp) on inproc threads: it finds the
// membership service by the capability the service offers, so a transport
// service of the application's own, registered after the built-ins and
// wrapped around the membership service, leaves recovery working; its epoch
// protocol trains every epoch over the survivors of a rank that stops; and
// lockstep round programs roll back to the newest commit every survivor
// holds and finish over the new view; a replicated model counts a step
// whose average completed before it installs a view revoked meanwhile.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "forwarding.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/session.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/faults.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/membership.hpp"
#include "gossamer/transports/run.hpp"
#include "process.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::Forwarding;
using gossamer::testing::onEveryRank;

namespace {

// An application's own transport service: counts the messages this rank sends.
class CountingTransport final : public Forwarding {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, std::shared_ptr<std::atomic<long>> sent)
      : Forwarding(std::move(inner)), sent_(std::move(sent)) {}
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    ++*sent_;
    return Forwarding::isend(dst, tag, data, dtype);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    ++*sent_;
    return Forwarding::isendBorrowed(dst, tag, data, dtype, checksum);
  }

 private:
  std::shared_ptr<std::atomic<long>> sent_;
};

// Every built-in service, then the application's `counting:` service after them.
Registry registryWith(std::shared_ptr<inproc::Fabric> fabric, std::shared_ptr<std::atomic<long>> sent) {
  Registry reg;
  inproc::registerWith(reg, std::move(fabric));
  faults::registerWith(reg);
  run::registerWith(reg);
  membership::registerWith(reg);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  reg.addTransportService(
      "counting", "an application's own service: counts the messages sent",
      KeySet().boolean("enabled", true, "count them"),
      [sent](const TransportContext& ctx, std::unique_ptr<Transport> inner) {
        if (!ctx.config.get<bool>("counting.enabled")) return inner;
        return std::unique_ptr<Transport>(std::make_unique<CountingTransport>(std::move(inner), sent));
      });
  return reg;
}

std::string configText(int n, const std::string& algorithm) {
  return "world_size: " + std::to_string(n) +
         "\nseed: 5\ntransport:\n  kind: inproc\n  timeout_seconds: 20\nmembership:\n  enabled: true\n"
         "  heartbeat_seconds: 0.05\n  suspect_seconds: 2\nrun:\n  metrics: false\ntopology:\n  kind: " +
         std::string(algorithm == "allreduce_sgd" ? "ring" : "fair_roulette") +
         "\nalgorithm:\n  name: " + algorithm + "\ntraining:\n  learning_rate: 0.1\n  momentum: 0\n";
}

}  // namespace

TEST_CASE("session: a service registered after the built-ins leaves recovery to the membership service",
          "[session][membership]") {
  // 4 ranks train 6 epochs of 10 steps on f_r(x) = |x - r|^2 / 2, each epoch
  // ending with an evaluation (an allreduce of the model); rank 2 stops at
  // its 25th step. The application's service wraps the membership
  // service's transport: the Session still finds the membership handle, and
  // the survivors evaluate every epoch over {0, 1, 3}.
  const std::string algorithm = GENERATE(as<std::string>{}, "allreduce_sgd", "crossover_sgd");
  INFO(algorithm);
  const int n = 4, victim = 2, epochs = 6;
  const std::uint64_t spe = 10;
  auto sent = std::make_shared<std::atomic<long>>(0);
  auto fabric = inproc::makeFabric(n);
  const Registry reg = registryWith(fabric, sent);
  const Config config = reg.parse(configText(n, algorithm));
  MemoryStore store;
  std::vector<std::vector<int>> evaluated(static_cast<std::size_t>(n));
  std::vector<std::vector<int>> members(static_cast<std::size_t>(n));
  std::vector<float> averages(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    Session session(config, r, store, reg);
    if (!session.elastic()) throw std::runtime_error("the Session found no membership handle");
    std::vector<float> x(4, 0.0f), g(4), avg(4);
    TrainingPlan plan;
    plan.params = x;
    plan.tensorSizes = {4};
    plan.stepsPerEpoch = spe;
    plan.epochs = epochs;
    session.train(plan);
    while (session.nextEpoch()) {
      while (session.stepping()) {
        if (r == victim && session.steps() == 25) {
          session.abort();
          return;
        }
        for (std::size_t i = 0; i < x.size(); ++i) g[i] = x[i] - static_cast<float>(r);
        session.step(g, 0.5);
      }
      if (session.evaluate([&](const EpochEnd&) {
            avg = x;
            session.agent().average(avg);
          }))
        evaluated[static_cast<std::size_t>(r)].push_back(session.epoch());
    }
    session.finish();
    members[static_cast<std::size_t>(r)] = session.view().members;
    averages[static_cast<std::size_t>(r)] = avg[0];
    session.close();
  });
  CHECK(*sent > 0);  // the application's service was in the path
  for (int r : {0, 1, 3}) {
    INFO("rank " << r);
    CHECK(evaluated[static_cast<std::size_t>(r)] == std::vector<int>{1, 2, 3, 4, 5, 6});
    CHECK(members[static_cast<std::size_t>(r)] == std::vector<int>{0, 1, 3});
    CHECK(averages[static_cast<std::size_t>(r)] == averages[0]);
  }
}

TEST_CASE(
    "session: async gossip with a rank ten times slower ends every epoch on every rank, the flush "
    "waiting for it past transport.timeout_seconds",
    "[session][membership]") {
  // 3 ranks, one epoch of 40 steps: rank 2 takes 60 ms a step, the others
  // 6 ms, so they reach the epoch's flush about 2 s before it, twice the
  // transport timeout of 1 s. The membership service hears rank 2's
  // heartbeats all along, so the flush waits for it instead of timing out;
  // every rank ends with the same push-sum average.
  const std::string algorithm = GENERATE(as<std::string>{}, "sgp", "crossover_sgd");
  INFO(algorithm);
  const int n = 3, slow = 2;
  const std::uint64_t spe = 40;
  auto sent = std::make_shared<std::atomic<long>>(0);
  auto fabric = inproc::makeFabric(n);
  const Registry reg = registryWith(fabric, sent);
  std::string text = configText(n, algorithm);
  text.replace(text.find("timeout_seconds: 20"), 19, "timeout_seconds: 1");
  const std::string name = "\nalgorithm:\n  name: " + algorithm + "\n";
  text.replace(text.find(name), name.size(), name + "  mode: async\n");
  const Config config = reg.parse(text);
  REQUIRE(config.get<double>("transport.timeout_seconds") == 1.0);
  REQUIRE(config.get<std::string>("algorithm.mode") == "async");
  MemoryStore store;
  std::vector<std::vector<float>> finals(static_cast<std::size_t>(n));
  std::vector<int> evaluated(static_cast<std::size_t>(n), 0);
  onEveryRank(n, [&](int r) {
    Session session(config, r, store, reg);
    std::vector<float> x(4, static_cast<float>(r)), g(4, 0.0f);
    TrainingPlan plan;
    plan.params = x;
    plan.tensorSizes = {4};
    plan.stepsPerEpoch = spe;
    plan.epochs = 1;
    session.train(plan);
    while (session.nextEpoch()) {
      while (session.stepping()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(r == slow ? 60 : 6));
        session.step(g, 0.0);
      }
      if (session.evaluate([](const EpochEnd&) {})) ++evaluated[static_cast<std::size_t>(r)];
    }
    session.finish();
    finals[static_cast<std::size_t>(r)] = x;
    session.close();
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(evaluated[static_cast<std::size_t>(r)] == 1);
    REQUIRE(finals[static_cast<std::size_t>(r)].size() == 4);
    for (float v : finals[static_cast<std::size_t>(r)])
      CHECK(v == Approx(1.0f).epsilon(1e-5));  // mean of 0, 1, 2
  }
}

namespace {

// A lockstep program of `rounds` rounds: each adds the sum over the view of
// (global rank + 1) to a replicated value, with an allreduce; it commits
// after every second round. Rank `victim` stops before round `stopAt`.
class Accumulate final : public RoundProgram {
 public:
  Accumulate(Session& s, int victim, std::uint64_t stopAt) : s_(s), victim_(victim), stopAt_(stopAt) {}
  bool run(std::uint64_t round) override {
    if (s_.agent().rank() == victim_ && round == stopAt_) {
      s_.abort();
      throw Expelled(victim_, "stops here");  // leaves runRounds on this rank
    }
    double contribution = s_.agent().rank() + 1.0;
    s_.agent().communicator().allreduce(std::span<double>(&contribution, 1), ReduceOp::kSum);
    value_ += contribution;
    return true;
  }
  bool commit(std::uint64_t rounds) override {
    if (rounds % 2 != 0) return false;
    previous_ = newest_;
    newest_ = {rounds, value_};
    return true;
  }
  void restore(std::uint64_t rounds, const ViewChange& change) override {
    value_ = newest_.first == rounds ? newest_.second : previous_.second;
    RANK_REQUIRE((newest_.first == rounds || previous_.first == rounds));  // on the rank's thread
    newest_ = previous_ = {rounds, value_};
    members_ = change.view.members;
    ++restores_;
  }
  double value() const { return value_; }
  int restores() const { return restores_; }
  const std::vector<int>& members() const { return members_; }

 private:
  Session& s_;
  int victim_;
  std::uint64_t stopAt_;
  double value_ = 0;
  std::pair<std::uint64_t, double> newest_{0, 0}, previous_{0, 0};
  std::vector<int> members_;
  int restores_ = 0;
};

}  // namespace

TEST_CASE("session: round programs roll back to the newest commit every survivor holds and finish",
          "[session][membership]") {
  const int n = 4, victim = 2;
  const std::uint64_t rounds = 12, stopAt = 5;
  auto sent = std::make_shared<std::atomic<long>>(0);
  auto fabric = inproc::makeFabric(n);
  Registry reg = registryWith(fabric, sent);
  reg.setKeyDefault("membership", "rejoin", false);  // as gossamer-sparse and gossamer-admm do
  const Config config = reg.parse(configText(n, "allreduce_sgd"));
  MemoryStore store;
  std::vector<double> values(static_cast<std::size_t>(n));
  std::vector<std::uint64_t> done(static_cast<std::size_t>(n));
  std::vector<int> restores(static_cast<std::size_t>(n));
  std::vector<std::vector<int>> members(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    Session session(config, r, store, reg);
    Accumulate program(session, victim, stopAt);
    try {
      done[static_cast<std::size_t>(r)] = session.runRounds(rounds, program);
    } catch (const Expelled&) {
      if (r != victim) throw;
      return;
    }
    values[static_cast<std::size_t>(r)] = program.value();
    restores[static_cast<std::size_t>(r)] = program.restores();
    members[static_cast<std::size_t>(r)] = program.members();
    session.close();
  });
  // Rounds 0..4 over all four ranks (1 + 2 + 3 + 4 each); round 5 failed on
  // every survivor, so they went back to the commit after round 4 (rounds
  // 0..3) and ran rounds 4..11 over {0, 1, 3} (1 + 2 + 4 each).
  const double expected = 4 * 10.0 + 8 * 7.0;
  for (int r : {0, 1, 3}) {
    INFO("rank " << r);
    CHECK(done[static_cast<std::size_t>(r)] == rounds);
    CHECK(values[static_cast<std::size_t>(r)] == expected);
    CHECK(restores[static_cast<std::size_t>(r)] == 1);
    CHECK(members[static_cast<std::size_t>(r)] == std::vector<int>{0, 1, 3});
  }
}

// A program of allreduces whose round on rank 1 raises PeerFailure every
// time though every peer is alive (it stops the loop at 20 calls).
class FailingRounds final : public RoundProgram {
 public:
  struct Looped {};
  explicit FailingRounds(Session& s) : s_(s) {}
  bool run(std::uint64_t) override {
    if (s_.agent().rank() == 1) {
      if (++calls > 20) throw Looped{};
      throw PeerFailure(0, "rank 0: a link that keeps failing");
    }
    double one = 1;
    s_.agent().communicator().allreduce(std::span<double>(&one, 1), ReduceOp::kSum);
    sum += one;
    return true;
  }
  bool commit(std::uint64_t) override { return true; }
  void restore(std::uint64_t, const ViewChange&) override { sum = 0; }
  int calls = 0;
  double sum = 0;

 private:
  Session& s_;
};

TEST_CASE(
    "session: a round program lets out a PeerFailure of its own that comes back after empty view changes",
    "[session][membership]") {
  // The round twin of the survive() case: runRounds used to agree on a view
  // and roll back for good. Rank 1 lets the PeerFailure out after
  // kMaxEmptyViewChanges empty view changes and leaves; ranks 0 and 2 roll
  // back and run their 3 rounds over {0, 2}.
  const int n = 3;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  reg.setKeyDefault("membership", "rejoin", false);  // as gossamer-sparse and gossamer-admm do
  const Config config = reg.parse(configText(n, "allreduce_sgd"));
  MemoryStore store;
  std::atomic<bool> rank1PeerFailure{false}, looped{false};
  std::atomic<int> rank1Calls{0};
  std::vector<double> sums(n, 0);
  onEveryRank(n, [&](int r) {
    Session s(config, r, store, reg);
    FailingRounds program(s);
    try {
      if (s.runRounds(3, program) == 3) sums[static_cast<std::size_t>(r)] = program.sum;
    } catch (const FailingRounds::Looped&) {
      looped = true;
    } catch (const PeerFailure& e) {
      if (r == 1) rank1PeerFailure = e.peer() == 0;
    }
    if (r == 1) rank1Calls = program.calls;
    s.abort();
  });
  CHECK_FALSE(looped);
  CHECK(rank1PeerFailure);
  CHECK(rank1Calls == 1 + kMaxEmptyViewChanges);
  CHECK(sums[0] == 3 * 2.0);  // three rounds over {0, 2}, after the roll-back
  CHECK(sums[2] == 3 * 2.0);
}

TEST_CASE("session: an optimizer for no tensors, an empty one, or more elements than memory holds is refused",
          "[session]") {
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(1), sent);
  const Config config = reg.parse(configText(1, "crossover_sgd"));
  MemoryStore store;
  Session session(config, 0, store, reg);
  CHECK_THROWS_WITH(session.makeOptimizer({}), Catch::Contains("no tensor sizes"));
  CHECK_THROWS_WITH(session.makeOptimizer({3, 0}), Catch::Contains("tensor 1 has 0 elements"));
  // A sum that wraps around (2^64 - 1 + 2 = 1) would otherwise pass as a
  // 1-element model and segment it into 2^64 pieces.
  const std::size_t most = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_AS(session.makeOptimizer({most, 2}), InvalidArgument);
  CHECK_THROWS_WITH(session.makeOptimizer({most / 8, most / 8}), Catch::Contains("at tensor"));
  CHECK_NOTHROW(session.makeOptimizer({3, 4}));
  session.close();
}

TEST_CASE("session: with checkpoints on, train() refuses an optimizer that cannot save its state",
          "[session]") {
  // An optimizer registered by an application that keeps no checkpoint (here
  // loss-tolerant SGP under a name of its own, without the built-in's config
  // rule) is refused at train(), with the key, instead of at the first save.
  // The built-in ones are refused when the config is read.
  gossamer::testing::TempDir dir;
  const std::string checkpoints = "checkpoint:\n  every_steps: 2\n  dir: " + dir.path() + "\n";
  for (const std::string algorithm : {"unsaved", "crossover_sgd"}) {
    INFO(algorithm);
    const bool refused = algorithm == "unsaved";
    for (const bool resume : {false, true}) {
      auto sent = std::make_shared<std::atomic<long>>(0);
      Registry reg = registryWith(inproc::makeFabric(1), sent);
      reg.addOptimizer("unsaved", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        std::size_t n = 0;
        for (auto s : ctx.tensorSizes) n += s;
        return std::make_unique<optimizers::LossTolerantSgp>(ctx.transport, ctx.topology, n,
                                                             optimizers::SgpOptions{});
      });
      std::string text = configText(1, algorithm);
      text += resume ? "checkpoint:\n  resume: true\n  dir: " + dir.path() + "\n" : checkpoints;
      const Config config = reg.parse(text);
      MemoryStore store;
      Session session(config, 0, store, reg);
      std::vector<float> p(4, 1.0f);
      TrainingPlan plan;
      plan.params = p;
      plan.tensorSizes = {4};
      plan.stepsPerEpoch = 2;
      plan.epochs = 1;
      if (refused) {
        try {
          session.train(plan);
          FAIL("train() accepted an optimizer that cannot be checkpointed");
        } catch (const ConfigError& e) {
          CHECK(e.key() == (resume ? "checkpoint.resume" : "checkpoint.every_steps"));
          CHECK_THAT(e.what(), Catch::Contains("cannot be checkpointed"));
        }
      } else {
        CHECK_NOTHROW(session.train(plan));
      }
      session.close();
    }
  }
}

TEST_CASE("session: survive gives up with TimeoutError when the survivors cannot agree on a view",
          "[session][membership]") {
  // Rank 2 aborts; rank 1 enters survive() while rank 0 stays out of it
  // until rank 1 is done (at most 30 s), past agreement_seconds (1 s). The
  // agreement's TimeoutError used to be taken for one from f, and survive()
  // recovered again and again: rank 1 then waited for rank 0, and agreed
  // with it once it came.
  const int n = 3;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  const Config config = reg.parse(configText(n, "allreduce_sgd"), "agree.yaml",
                                  {"membership.agreement_seconds=1", "membership.suspect_seconds=1"});
  MemoryStore store;
  std::atomic<bool> rank1Threw{false};
  std::mutex mu;
  std::condition_variable cv;
  bool rank1Done = false;
  onEveryRank(n, [&](int r) {
    Session s(config, r, store, reg);
    s.agent().communicator().barrier();
    if (r == 2) {
      s.abort();
      return;
    }
    if (r == 0) {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait_for(lk, std::chrono::seconds(30), [&] { return rank1Done; });
    }
    double x = 1;
    try {
      s.survive([&] { s.agent().communicator().allreduce(std::span<double>(&x, 1)); });
    } catch (const TimeoutError&) {
      if (r == 1) rank1Threw = true;
    } catch (const Error&) {  // rank 0, whose peers are gone by now: an error, and no hang
    }
    if (r == 1) {
      {
        std::lock_guard<std::mutex> lk(mu);
        rank1Done = true;
      }
      cv.notify_all();
    }
    s.abort();
  });
  CHECK(rank1Threw);
}

TEST_CASE(
    "session: survive lets out a PeerFailure that keeps coming back after view changes that lost nobody",
    "[session][membership]") {
  // Rank 1's f raises PeerFailure every time though every peer is alive
  // (a link that fails while heartbeats go through, or the caller's own
  // code): each recovery agrees on a view with the same members. survive()
  // used to recover and run f again for good, taking every other rank
  // through a view change each time; it lets the PeerFailure out after
  // kMaxEmptyViewChanges such changes in a row. f counts its calls and
  // stops the loop at 20 (throwing Looped) so that the old code fails the
  // test instead of hanging it.
  struct Looped {};
  const int n = 3;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  const Config config = reg.parse(configText(n, "allreduce_sgd"));
  MemoryStore store;
  std::atomic<int> calls{0};
  std::atomic<bool> rank1PeerFailure{false};
  std::atomic<bool> looped{false};
  std::vector<double> sums(n, 0);
  onEveryRank(n, [&](int r) {
    Session s(config, r, store, reg);
    s.agent().communicator().barrier();
    double x = 1;
    try {
      const bool completed = s.survive([&] {
        if (r != 1) {
          x = 1;
          s.agent().communicator().allreduce(std::span<double>(&x, 1));
          return;
        }
        if (++calls > 20) throw Looped{};
        throw PeerFailure(0, "rank 0: a link that keeps failing");
      });
      if (completed) sums[static_cast<std::size_t>(r)] = x;
    } catch (const PeerFailure& e) {
      if (r == 1) rank1PeerFailure = e.peer() == 0;
    } catch (const Looped&) {
      looped = true;
    }
    s.abort();
  });
  CHECK_FALSE(looped);
  CHECK(rank1PeerFailure);
  CHECK(calls == 1 + kMaxEmptyViewChanges);
  // Ranks 0 and 2 recover from every view change rank 1 started (ViewChanged),
  // then from its leaving, and complete f over the view {0, 2}.
  CHECK(sums[0] == 2);
  CHECK(sums[2] == 2);
}

// An optimizer whose step on global rank 1 raises PeerFailure every time
// though every peer is alive; the others' step is a barrier. Each rank's
// thread sets globalRank (a view's ranks are renumbered).
class FailingOnRank1 final : public DistributedOptimizer {
 public:
  explicit FailingOnRank1(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "failing_on_rank_1"; }
  void step(std::span<float>, std::span<const float>) override {
    if (globalRank == 1) {
      if (++calls > 20) throw std::logic_error("the step ran 20 times");
      throw PeerFailure(0, "rank 0: a link that keeps failing");
    }
    comm_.barrier();
    ++steps_;
  }
  std::uint64_t steps() const override { return steps_; }
  static inline std::atomic<int> calls{0};
  static inline thread_local int globalRank = -1;

 private:
  Communicator& comm_;
  std::uint64_t steps_ = 0;
};

TEST_CASE("session: a step lets out a PeerFailure that keeps coming back after view changes that lost nobody",
          "[session][membership]") {
  // The step's twin of the survive() case above: the step used to be redone
  // for good. Rank 1's step lets the PeerFailure out, its model as it was,
  // after kMaxEmptyViewChanges empty view changes; rank 1 then leaves, and
  // the others, whose steps failed with ViewChanged, step over the view
  // without it.
  const int n = 3;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  reg.addOptimizer("failing_on_rank_1",
                   [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
                     return std::make_unique<FailingOnRank1>(ctx.communicator);
                   });
  const Config config =
      reg.parse(configText(n, "failing_on_rank_1"), "failing.yaml", {"membership.suspect_seconds=1"});
  MemoryStore store;
  FailingOnRank1::calls = 0;
  std::vector<std::uint64_t> steps(n, 0);
  std::atomic<bool> rank1PeerFailure{false};
  std::atomic<bool> modelKept{false};
  onEveryRank(n, [&](int r) {
    FailingOnRank1::globalRank = r;
    Session s(config, r, store, reg);
    std::vector<float> x(4, 1.0f), g(4, 0.5f);
    DistributedOptimizer& opt = s.makeOptimizer({4});
    try {
      opt.step(x, g);
      steps[static_cast<std::size_t>(r)] = opt.steps();
    } catch (const PeerFailure& e) {
      if (r == 1) {
        rank1PeerFailure = e.peer() == 0;
        modelKept = x == std::vector<float>(4, 1.0f);
      }
    }
    s.abort();
  });
  CHECK(rank1PeerFailure);
  CHECK(modelKept);
  CHECK(FailingOnRank1::calls == 1 + kMaxEmptyViewChanges);
  CHECK(steps[0] == 1);
  CHECK(steps[2] == 1);
}

TEST_CASE(
    "session: a resume from a checkpoint at an epoch's end runs that epoch's evaluation, and counts its loss "
    "once",
    "[session][checkpoint]") {
  // Checkpoints every 2 steps, 2 steps an epoch: the one at step 4 is written
  // in epoch 2's last step, before its evaluation, with its loss sum. A
  // resume used to skip epoch 2's evaluation and add that sum to epoch 3's.
  const int n = 2;
  gossamer::testing::TempDir dir;
  const auto run = [&](bool resume) {
    auto sent = std::make_shared<std::atomic<long>>(0);
    Registry reg = registryWith(inproc::makeFabric(n), sent);
    const Config config =
        reg.parse(configText(n, "allreduce_sgd") + "checkpoint:\n  every_steps: 2\n  dir: " + dir.path() +
                  "\n  resume: " + (resume ? "true" : "false") + "\n");
    MemoryStore store;
    std::mutex mu;
    std::vector<std::pair<int, double>> seen;  // rank 0's (epoch, loss)
    onEveryRank(n, [&](int r) {
      Session s(config, r, store, reg);
      std::vector<float> p(4, 1.0f), g(4, 0.01f);
      TrainingPlan plan;
      plan.params = p;
      plan.tensorSizes = {4};
      plan.stepsPerEpoch = 2;
      plan.epochs = 3;
      s.train(plan);
      while (s.nextEpoch()) {
        while (s.stepping()) s.step(g, 1.0);
        s.evaluate([&](const EpochEnd& e) {
          std::lock_guard<std::mutex> lk(mu);
          if (r == 0) seen.emplace_back(e.epoch, e.loss);
        });
      }
      s.finish();
      s.close();
    });
    return seen;
  };
  CHECK(run(false) == std::vector<std::pair<int, double>>{{1, 1.0}, {2, 1.0}, {3, 1.0}});
  CHECK(run(true) == std::vector<std::pair<int, double>>{{2, 1.0}, {3, 1.0}});
  // Rank 0 holds only step 4's checkpoint, rank 1 only step 2's (it was
  // lost after step 2, and not restarted): no step every rank has, so from
  // scratch (the lower of their newest, 2, used to be taken, and rank 0 has
  // none of it: an error).
  REQUIRE(std::filesystem::exists(dir / "rank-0-step-2.ckpt"));
  std::filesystem::remove(dir / "rank-0-step-2.ckpt");
  std::filesystem::remove(dir / "rank-1-step-4.ckpt");
  CHECK(run(true) == std::vector<std::pair<int, double>>{{1, 1.0}, {2, 1.0}, {3, 1.0}});
  // A file of a step above those this rank writes (its side of a partition
  // was ahead, or an earlier job's): gone at the next save, and the two
  // written last are kept (the two highest numbers were, which dropped the
  // new ones).
  std::filesystem::copy_file(dir / "rank-0-step-4.ckpt", dir / "rank-0-step-100.ckpt");
  run(false);
  CHECK_FALSE(std::filesystem::exists(dir / "rank-0-step-100.ckpt"));
  CHECK(std::filesystem::exists(dir / "rank-0-step-2.ckpt"));
  CHECK(std::filesystem::exists(dir / "rank-0-step-4.ckpt"));
}

TEST_CASE("session: inproc jobs of different world sizes run one after another on one registry",
          "[session]") {
  // The registry's own fabric (inproc::registerWith without one), as the C
  // and Python bindings use it: a job of 1, then a job of 2, then 1 again.
  Registry reg;
  inproc::registerWith(reg);
  membership::registerWith(reg);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  for (const int n : {1, 2, 1}) {
    INFO("world of " << n);
    const Config config = reg.parse(configText(n, "allreduce_sgd"));
    MemoryStore store;
    std::vector<double> sums(static_cast<std::size_t>(n));
    onEveryRank(n, [&](int r) {
      Session session(config, r, store, reg);
      double x = r + 1;
      session.agent().communicator().allreduce(std::span<double>(&x, 1));
      sums[static_cast<std::size_t>(r)] = x;
      session.close();
    });
    for (double s : sums) CHECK(s == n * (n + 1) / 2);
  }
}

TEST_CASE("session: round programs refuse settings they cannot honour", "[session]") {
  auto sent = std::make_shared<std::atomic<long>>(0);
  for (const std::string extra : {"  rejoin: true\n", "checkpoint:\n  every_steps: 5\n  dir: /tmp/x\n"}) {
    INFO(extra);
    Registry reg = registryWith(inproc::makeFabric(1), sent);
    reg.setKeyDefault("membership", "rejoin", false);  // as gossamer-sparse and gossamer-admm do
    std::string text = configText(1, "allreduce_sgd");
    text.insert(text.find("  heartbeat_seconds"), extra.starts_with("  ") ? extra : "");
    if (!extra.starts_with("  ")) text += extra;
    const Config config = reg.parse(text);
    MemoryStore store;
    Session session(config, 0, store, reg);
    Accumulate program(session, -1, 0);
    CHECK_THROWS_AS(session.runRounds(3, program), ConfigError);
    session.close();
  }
}

TEST_CASE(
    "session: a replicated model counts a step whose average completed before it installs a view "
    "revoked meanwhile",
    "[session][membership]") {
  // 3 ranks, AllReduce-SGD in its communication-only form. Step 1's
  // gradient average completes on every rank, then rank 2 stops. Rank 0's
  // mixParameters, the view revoked already, counts step 1 and returns
  // without an agreement (before, it installed the view first and reported
  // step 1 as not taken though its model held it); only then does rank 1
  // call its own. Step 2 installs the view {0, 1} on both, equal.
  const int n = 3, victim = 2;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  std::mutex mu;
  std::vector<Membership*> handles(static_cast<std::size_t>(n), nullptr);
  reg.addTransportService("spy", "keeps each rank's membership handle", KeySet(),
                          [&](const TransportContext& ctx, std::unique_ptr<Transport> inner) {
                            std::lock_guard<std::mutex> lk(mu);
                            handles[static_cast<std::size_t>(ctx.rank)] =
                                ctx.capabilities != nullptr ? ctx.capabilities->membership() : nullptr;
                            return inner;
                          });
  const Config config = reg.parse(configText(n, "allreduce_sgd"));
  MemoryStore store;
  std::atomic<bool> rank0Counted{false};
  std::vector<std::vector<float>> finals(static_cast<std::size_t>(n));
  std::vector<std::uint64_t> steps(static_cast<std::size_t>(n), 0);
  // A bounded wait for `done`, polled every 5 ms.
  const auto within = [](const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done();
  };
  onEveryRank(n, [&](int r) {
    Session session(config, r, store, reg);
    DistributedOptimizer& opt = session.makeOptimizer({4});
    std::vector<float> x(4, 1.0f), g(4, 0.0f);
    const auto exchangeAndStep = [&](float gradient) {
      std::fill(g.begin(), g.end(), gradient);
      opt.reduceGradients(g);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] -= 0.1f * g[i];
    };
    for (int step = 0; step < 2; ++step) {
      exchangeAndStep(static_cast<float>(r + step));
      if (step == 1) {
        if (r == victim) {
          session.abort();
          return;
        }
        Membership* m = nullptr;
        {
          std::lock_guard<std::mutex> lk(mu);
          m = handles[static_cast<std::size_t>(r)];
        }
        RANK_REQUIRE(m != nullptr);
        RANK_REQUIRE(within([m] { return m->revoked(); }));
        if (r == 1) RANK_CHECK(within([&] { return rank0Counted.load(); }));
      }
      opt.mixParameters(x);
      if (step == 1 && r == 0) {
        RANK_CHECK(opt.steps() == 2);
        rank0Counted = true;
      }
    }
    exchangeAndStep(static_cast<float>(r));  // over the survivors: the view {0, 1} is installed here
    opt.mixParameters(x);
    finals[static_cast<std::size_t>(r)] = x;
    steps[static_cast<std::size_t>(r)] = opt.steps();
    session.close();
  });
  // x: 1 - 0.1 * mean(0, 1, 2) - 0.1 * mean(1, 2, 3) - 0.1 * mean(0, 1).
  for (int r : {0, 1}) {
    INFO("rank " << r);
    CHECK(steps[static_cast<std::size_t>(r)] == 3);
    REQUIRE(finals[static_cast<std::size_t>(r)].size() == 4);
    for (float v : finals[static_cast<std::size_t>(r)]) CHECK(v == Approx(0.65f).epsilon(1e-6));
  }
}

namespace {
// Rank `rank`'s receives through this service: once armed, its `nth`
// allreduce receive waits for a tag nobody sends instead (the message it
// was for arrives and is never read), so that this rank alone never
// completes that allreduce.
class WithheldReceive final : public Forwarding {
 public:
  WithheldReceive(std::unique_ptr<Transport> inner, std::shared_ptr<std::atomic<int>> armedCount, int nth)
      : Forwarding(std::move(inner)), count_(std::move(armedCount)), nth_(nth) {}
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return Forwarding::irecv(sources, withheld(tag) ? gossamer::testing::kTagNobodySends : tag, buffer);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    return Forwarding::irecvView(source, withheld(tag) ? gossamer::testing::kTagNobodySends : tag, buffer);
  }

 private:
  // Counts the allreduce receives once armed (count_ >= 0).
  bool withheld(const Tag& tag) { return tag.op == Op::kAllreduce && *count_ >= 0 && ++*count_ == nth_; }
  std::shared_ptr<std::atomic<int>> count_;
  int nth_;
};
}  // namespace

TEST_CASE(
    "session: a rank that a view change finds behind in reduceGradients is told to make no local "
    "step and ends with the survivors' model",
    "[session][membership]") {
  // 3 ranks, AllReduce-SGD (ring) in its communication-only form. In step
  // 1 rank 1 never reads the last piece of the gradient average, which
  // ranks 0 and 2 complete; rank 2 then stops, and rank 0 counts step 1.
  // The view {0, 1} finds rank 1 one step behind: its reduceGradients
  // returns with the model of rank 0 and skipsLocalStep(), and a caller
  // that honours it holds rank 0's model (a local update on top of it, as
  // the torch wrapper once made, would leave rank 1's model apart).
  const bool metrics = GENERATE(false, true);  // the metered optimizer forwards the question
  INFO("run.metrics " << metrics);
  gossamer::testing::TempDir runDir;
  const int n = 3, victim = 2, behind = 1;
  auto sent = std::make_shared<std::atomic<long>>(0);
  Registry reg = registryWith(inproc::makeFabric(n), sent);
  auto armed = std::make_shared<std::atomic<int>>(-1);
  // Ring allreduce over 3 ranks: 2 (N - 1) = 4 receives; the 4th is the last.
  reg.addTransportService(
      "withheld", "withholds one allreduce receive of rank 1", KeySet(),
      [armed](const TransportContext& ctx, std::unique_ptr<Transport> inner) {
        if (ctx.rank != behind) return inner;
        return std::unique_ptr<Transport>(std::make_unique<WithheldReceive>(std::move(inner), armed, 4));
      });
  std::string text = configText(n, "allreduce_sgd") + "collectives:\n  allreduce: ring\n";
  if (metrics) text.replace(text.find("  metrics: false"), 16, "  metrics: true\n  dir: " + runDir.path());
  const Config config = reg.parse(text);
  MemoryStore store;
  std::vector<std::vector<float>> afterSkip(static_cast<std::size_t>(n)), finals(static_cast<std::size_t>(n));
  std::vector<std::uint64_t> steps(static_cast<std::size_t>(n), 0);
  std::atomic<bool> skipped{false}, rank0Stepped{false};
  onEveryRank(n, [&](int r) {
    Session session(config, r, store, reg);
    DistributedOptimizer& opt = session.makeOptimizer({4});
    std::vector<float> x(4, 1.0f), g(4, 0.0f);
    for (int step = 0; step < 3; ++step) {
      if (r == victim && step == 2) {
        // Once rank 0 counted step 1 (a view revoked before would have it
        // recover inside step 1 too, and nobody would be behind).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!rank0Stepped && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        session.abort();
        return;
      }
      if (r == behind && step == 1) *armed = 0;
      std::fill(g.begin(), g.end(), static_cast<float>(step < 2 ? r + step : r));
      opt.reduceGradients(g);
      if (opt.skipsLocalStep()) {
        RANK_CHECK(r == behind);
        RANK_CHECK(step == 1);
        RANK_CHECK(opt.steps() == 1);
        skipped = true;
      } else {
        for (std::size_t i = 0; i < x.size(); ++i) x[i] -= 0.1f * g[i];
      }
      opt.mixParameters(x);
      RANK_CHECK(!opt.skipsLocalStep());
      if (step == 1) afterSkip[static_cast<std::size_t>(r)] = x;
      if (step == 1 && r == 0) rank0Stepped = true;
    }
    finals[static_cast<std::size_t>(r)] = x;
    steps[static_cast<std::size_t>(r)] = opt.steps();
    session.close();
  });
  CHECK(skipped);
  // Step 1 as rank 0 took it: 1 - 0.1 * mean(0, 1, 2) - 0.1 * mean(1, 2, 3).
  CHECK(afterSkip[behind] == afterSkip[0]);
  for (float v : afterSkip[0]) CHECK(v == Approx(0.7f).epsilon(1e-6));
  // Step 2 over {0, 1}: - 0.1 * mean(0, 1).
  for (int r : {0, 1}) {
    INFO("rank " << r);
    CHECK(steps[static_cast<std::size_t>(r)] == 3);
    REQUIRE(finals[static_cast<std::size_t>(r)].size() == 4);
    for (float v : finals[static_cast<std::size_t>(r)]) CHECK(v == Approx(0.65f).epsilon(1e-6));
  }
}
