// The communication-only form of the optimizers (reduceGradients, a local
// step made elsewhere, mixParameters) must reproduce step() exactly, so that
// a torch.optim optimizer wrapped by the Python binding trains like the C++
// optimizer does.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "registry.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr int kRanks = 4;
constexpr int kSteps = 7;
const std::vector<std::size_t> kTensors = {40, 24, 36};  // 100 parameters

// A rank's gradient at x: pulls towards a target of its own, so the ranks
// disagree and mixing matters.
void gradientAt(int rank, int step, const std::vector<float>& x, std::vector<float>& g) {
  for (std::size_t i = 0; i < x.size(); ++i)
    g[i] = 0.5f * (x[i] - static_cast<float>(rank + 1) * std::sin(static_cast<float>(i + 1))) +
           0.01f * static_cast<float>(step);
}

// Runs kSteps on every rank of an inproc job with `yaml`; returns each
// rank's final parameters. `split` selects the communication-only form.
std::vector<std::vector<float>> runJob(const std::string& yaml, bool split) {
  auto fabric = inproc::makeFabric(kRanks);
  Registry reg;
  inproc::registerWith(reg, fabric);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  const Config c =
      reg.parse("world_size: 4\ntransport: {kind: inproc, timeout_seconds: 20}\n" + yaml, "test");
  MemoryStore store;
  std::vector<std::vector<float>> out(kRanks);
  onEveryRank(kRanks, [&](int r) {
    Agent agent(c, r, store, reg);
    auto& opt = agent.makeOptimizer(kTensors);
    opt.setTotalSteps(kSteps);
    optimizers::LocalSgd sgd(100, {0.05, 0.9, 0.001});
    std::vector<float> x(100, 0.25f), g(100);
    for (int s = 0; s < kSteps; ++s) {
      gradientAt(r, s, x, g);
      if (split) {
        RANK_REQUIRE(opt.hasCommunicationOnlyForm());
        opt.reduceGradients(g);
        sgd.apply(x, g);
        opt.mixParameters(x);
      } else {
        opt.step(x, g);
      }
    }
    opt.flush(x);
    RANK_CHECK(opt.steps() == static_cast<std::uint64_t>(kSteps));
    out[static_cast<std::size_t>(r)] = x;
    agent.close();
  });
  return out;
}

const char* kLocalStep = "training: {learning_rate: 0.05, momentum: 0.9, weight_decay: 0.001}\n";

}  // namespace

TEST_CASE("reduceGradients, a local step and mixParameters reproduce step() bit for bit", "[optimizer]") {
  const std::string algo = GENERATE(as<std::string>{},                                               //
                                    "algorithm: {name: allreduce_sgd}",                              //
                                    "algorithm: {name: crossover_sgd, segments: 3}",                 //
                                    "algorithm: {name: crossover_sgd, mode: overlap}",               //
                                    "algorithm: {name: crossover_sgd, interval: 2}",                 //
                                    "algorithm: {name: sgp}",                                        //
                                    "algorithm: {name: sgp, mode: overlap}",                         //
                                    "algorithm: {name: hierarchical, group_size: 2}",                //
                                    "algorithm: {name: allreduce_sgd}\ncompression: {kind: topk}",   //
                                    "algorithm: {name: allreduce_sgd}\ncompression: {kind: qsgd}",   //
                                    "algorithm: {name: crossover_sgd}\ncompression: {kind: a2sgd}",  //
                                    "algorithm: {name: diloco, inner_steps: 3}",                     //
                                    "algorithm: {name: diloco, inner_steps: 2, outer: gossip}",      //
                                    "algorithm: {name: diloco, inner_steps: 2, overlap: true}");
  CAPTURE(algo);
  const std::string yaml = algo + "\n" + kLocalStep;
  const auto whole = runJob(yaml, false);
  const auto split = runJob(yaml, true);
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    CHECK(split[static_cast<std::size_t>(r)] == whole[static_cast<std::size_t>(r)]);
  }
  // The ranks talked to each other: rank 0 did not end where local steps
  // alone would have taken it.
  optimizers::LocalSgd sgd(100, {0.05, 0.9, 0.001});
  std::vector<float> x(100, 0.25f), g(100);
  for (int s = 0; s < kSteps; ++s) {
    gradientAt(0, s, x, g);
    sgd.apply(x, g);
  }
  CHECK(whole[0] != x);
}

TEST_CASE("an optimizer without a communication-only form says so", "[optimizer]") {
  struct StepOnly final : DistributedOptimizer {
    std::string name() const override { return "step_only"; }
    void step(std::span<float>, std::span<const float>) override {}
    std::uint64_t steps() const override { return 0; }
  } opt;
  std::vector<float> v(3);
  CHECK_FALSE(opt.hasCommunicationOnlyForm());
  CHECK_THROWS_WITH(opt.reduceGradients(v), Catch::Contains("'step_only' has no communication-only form"));
  CHECK_THROWS_AS(opt.mixParameters(v), InvalidArgument);
}

TEST_CASE("the communication-only form checks lengths", "[optimizer]") {
  auto fabric = inproc::makeFabric(2);
  Registry reg;
  inproc::registerWith(reg, fabric);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  const Config c = reg.parse("world_size: 2\ntransport: {kind: inproc, timeout_seconds: 20}\n", "test");
  MemoryStore store;
  onEveryRank(2, [&](int r) {
    Agent agent(c, r, store, reg);
    auto& opt = agent.makeOptimizer({10});
    std::vector<float> shortVec(9);
    RANK_CHECK_THROWS_WITH(opt.reduceGradients(shortVec), Catch::Contains("expected 10 gradients, got 9"));
    RANK_CHECK_THROWS_WITH(opt.mixParameters(shortVec), Catch::Contains("expected 10 parameters, got 9"));
    agent.close();
  });
}

TEST_CASE("async push-sum's closing agreement allreduces with the job's collectives.allreduce",
          "[sgp][crossover]") {
  // Messages each rank sends in flush(): the agreement's two allreduces and
  // nothing else. Over 8 ranks a ring allreduce is 2 (8 - 1) messages per
  // rank, recursive doubling log2 8 = 3.
  constexpr int kEight = 8;
  const auto flushMessages = [](const std::string& algorithm, const std::string& allreduce) {
    auto fabric = inproc::makeFabric(kEight);
    Registry reg;
    inproc::registerWith(reg, fabric);
    topologies::registerBuiltins(reg);
    optimizers::registerBuiltins(reg);
    const Config c = reg.parse(
        "world_size: 8\ntransport: {kind: inproc, timeout_seconds: 20}\n"
        "topology: {kind: ring}\nalgorithm: {name: " +
            algorithm + ", mode: async}\ncollectives: {allreduce: " + allreduce + "}\n",
        "test");
    MemoryStore store;
    std::vector<std::uint64_t> sent(kEight);
    std::vector<std::vector<float>> models(kEight);
    onEveryRank(kEight, [&](int r) {
      Agent agent(c, r, store, reg);
      auto& opt = agent.makeOptimizer(kTensors);
      std::vector<float> x(100, static_cast<float>(r)), g(100, 0.0f);
      for (int s = 0; s < kSteps; ++s) opt.step(x, g);
      const auto before = agent.transport().stats().messagesSent;
      opt.flush(x);
      sent[static_cast<std::size_t>(r)] = agent.transport().stats().messagesSent - before;
      models[static_cast<std::size_t>(r)] = x;
      agent.close();
    });
    // The agreement's end: every rank holds the push-sum average of the
    // starts 0..7 (zero gradients), 3.5.
    for (const auto& m : models)
      for (const float v : m) CHECK(v == Approx(3.5f).epsilon(1e-5));
    return sent;
  };
  // Hierarchical groups of one: every rank leads, and the leaders' gossip
  // (over a view of the transport) is all that sends.
  for (const std::string algorithm :
       {"sgp", "crossover_sgd", "hierarchical, inter_algorithm: sgp, group_size: 1",
        "hierarchical, inter_algorithm: crossover_sgd, group_size: 1"}) {
    INFO(algorithm);
    for (const auto n : flushMessages(algorithm, "ring")) CHECK(n == 2 * 2 * (kEight - 1));
    for (const auto n : flushMessages(algorithm, "recursive_doubling")) CHECK(n == 2 * 3);
    // Algorithms that build views of their own need sequences below 2^32,
    // which the agreement's are not: it runs them as recursive doubling.
    for (const std::string views : {"torus2d", "hips", "hierarchical", "tga2d"}) {
      INFO(views);
      for (const auto n : flushMessages(algorithm, views)) CHECK(n == 2 * 3);
    }
  }
}
