// 16-bit model exchanges of the gossip optimizers (setExchangeType):
// SGP keeps its push-sum weight exact and its mass sum(w z) through the
// rounding; Crossover-SGD keeps the mean of a doubly stochastic mix; both
// reach consensus to within the rounding and send half of float32's bytes.
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "models.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::consensusDistance;
using gossamer::testing::meanOver;
using gossamer::testing::onEveryRank;
using gossamer::testing::randomModels;

namespace {

struct SgpRun {
  std::vector<double> weights;
  std::uint64_t bytesSent = 0;  // rank 0's, transport stats
};

// SGP at learning rate 0 on every rank for `steps` steps with `wire` on the
// wire, then flush (after every rank has pushed).
SgpRun runSgp(const Topology& topo, optimizers::GossipMode mode, DType wire,
              std::vector<std::vector<float>>& xs, int steps) {
  const int n = topo.worldSize();
  auto fabric = inproc::makeFabric(n);
  SgpRun run;
  run.weights.resize(static_cast<std::size_t>(n));
  std::barrier allSent(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::Sgp sgp(*t, topo, xs[0].size(),
                        {.sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = mode});
    RANK_REQUIRE(sgp.setExchangeType(wire));
    std::vector<float> g(xs[0].size(), 0.0f);
    for (int s = 0; s < steps; ++s) sgp.step(xs[static_cast<std::size_t>(r)], g);
    allSent.arrive_and_wait();
    sgp.flush(xs[static_cast<std::size_t>(r)]);
    run.weights[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
    if (r == 0) run.bytesSent = t->stats().bytesSent;
  });
  return run;
}

}  // namespace

TEST_CASE("SGP with 16-bit models on the wire keeps the push-sum weight exact and the mass sum(w z)",
          "[sgp][half]") {
  const DType wire = GENERATE(DType::kBfloat16, DType::kFloat16);
  const auto mode = GENERATE(optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap);
  INFO(dtypeName(wire) << ", mode " << int(mode));
  // Not regular: the weights drift from 1, so w is carried, not assumed.
  const std::vector<std::pair<int, int>> chordRing = {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}, {0, 2}, {3, 1}};
  topologies::ExplicitGraph graph(5, chordRing);
  const std::size_t p = 257;
  auto xs = randomModels(5, p, 7);
  const auto mean0 = meanOver(xs);
  const double before = consensusDistance(xs);
  const auto run = runSgp(graph, mode, wire, xs, 60);
  // The weights are float64 on the wire and never rounded to 16 bits.
  double mass = 0;
  for (double w : run.weights) {
    CHECK(w > 0);
    mass += w;
  }
  CHECK(mass == Approx(5.0).margin(1e-12));
  // The rounding error stays with its sender: sum_i w_i z_i is n times the
  // starting mean to float32 accuracy, not to 16-bit accuracy (2^-8 for
  // bfloat16 would be about 4e-3 here).
  for (std::size_t i = 0; i < p; ++i) {
    double numerator = 0;
    for (std::size_t r = 0; r < 5; ++r) numerator += run.weights[r] * xs[r][i];
    REQUIRE(numerator == Approx(5.0 * mean0[i]).margin(2e-4));
  }
  // Consensus to within the rounding: unit-variance models, 60 rounds.
  const double u = wire == DType::kBfloat16 ? 1.0 / 256 : 1.0 / 2048;
  CHECK(consensusDistance(xs) < 4 * u * u * before);
}

TEST_CASE("SGP with 16-bit models sends 8 + 2P bytes a push instead of 8 + 4P", "[sgp][half]") {
  topologies::DirectedExponential expo(4, 1);
  const std::size_t p = 1000;
  const int steps = 10;
  auto a = randomModels(4, p, 3), b = a;
  const auto f32 = runSgp(expo, optimizers::GossipMode::kSync, DType::kFloat32, a, steps);
  const auto b16 = runSgp(expo, optimizers::GossipMode::kSync, DType::kBfloat16, b, steps);
  // Rank 0 pushes to one peer per step (and takes part in flush's agreement,
  // the same in both runs): the difference is 2P bytes per push.
  CHECK(f32.bytesSent - b16.bytesSent == static_cast<std::uint64_t>(steps) * 2 * p);
}

TEST_CASE("Crossover-SGD with 16-bit segments keeps the mean, reaches consensus and halves the bytes",
          "[crossover][half]") {
  const DType wire = GENERATE(DType::kFloat32, DType::kBfloat16, DType::kFloat16);
  const auto mode = GENERATE(optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap);
  INFO(dtypeName(wire) << ", mode " << int(mode));
  const int n = 6, steps = 40;
  const std::size_t p = 121;  // segments of 40, 40, 41 elements
  auto fabric = inproc::makeFabric(n);
  topologies::FairRoulette topo(n, 3);
  auto xs = randomModels(n, p, 4);
  const auto mean0 = meanOver(xs);
  const double before = consensusDistance(xs);
  std::uint64_t bytes = 0;
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::CrossoverOptions o;
    o.sgd = {0.0, 0.0, 0.0};
    o.segments = 3;
    o.mode = mode;
    optimizers::CrossoverSgd opt(*t, topo, {40, 40, 41}, o);
    RANK_REQUIRE(opt.setExchangeType(wire));
    std::vector<float> g(p, 0.0f);
    for (int s = 0; s < steps; ++s) opt.step(xs[static_cast<std::size_t>(r)], g);
    opt.flush(xs[static_cast<std::size_t>(r)]);
    if (r == 0) bytes = t->stats().bytesSent;
  });
  // Every exchange sends each of the 3 segments to one peer: P elements.
  CHECK(bytes == static_cast<std::uint64_t>(steps) * p * (wire == DType::kFloat32 ? 4 : 2));
  // The fair roulette is symmetric and doubly stochastic: the difference
  // form keeps the mean (to float32 arithmetic).
  const auto mean1 = meanOver(xs);
  for (std::size_t i = 0; i < p; ++i) REQUIRE(mean1[i] == Approx(mean0[i]).margin(1e-5));
  const double u = wire == DType::kBfloat16 ? 1.0 / 256 : wire == DType::kFloat16 ? 1.0 / 2048 : 1e-4;
  CHECK(consensusDistance(xs) < 4 * u * u * before);
}

TEST_CASE("16-bit model exchanges send a value beyond binary16's range as its largest, keeping models finite",
          "[crossover][sgp][half]") {
  // Rank 0 holds 70000 (binary16's largest finite value is 65504): rounded
  // to infinity, it was refused by the receiver and, through the sender's
  // own correction term, made the sender's model infinite (Crossover-SGD)
  // or NaN (SGP).
  const std::string algorithm = GENERATE(as<std::string>{}, "crossover_sgd", "sgp");
  INFO(algorithm);
  auto fabric = inproc::makeFabric(2);
  topologies::FairRoulette topo(2, 1);
  std::vector<std::vector<float>> xs{{70000.0f, 1.0f}, {0.0f, 1.0f}};
  onEveryRank(2, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    auto& x = xs[static_cast<std::size_t>(r)];
    std::vector<float> g(2, 0.0f);
    std::unique_ptr<DistributedOptimizer> opt;
    if (algorithm == "sgp") {
      optimizers::SgpOptions o;
      o.sgd = {0.0, 0.0, 0.0};
      opt = std::make_unique<optimizers::Sgp>(*t, topo, 2, o);
    } else {
      optimizers::CrossoverOptions o;
      o.sgd = {0.0, 0.0, 0.0};
      opt = std::make_unique<optimizers::CrossoverSgd>(*t, topo, std::vector<std::size_t>{2}, o);
    }
    RANK_REQUIRE(opt->setExchangeType(DType::kFloat16));
    for (int s = 0; s < 3; ++s) opt->step(x, g);
    opt->flush(x);
    RANK_CHECK(opt->rejectedMessages() == 0);
  });
  for (const auto& x : xs)
    for (float v : x) CHECK(std::isfinite(v));
  CHECK(xs[0][1] == 1.0f);
  CHECK(xs[1][1] == 1.0f);
}

TEST_CASE("16-bit exchange types: async Crossover-SGD declines, other types are refused", "[half]") {
  auto fabric = inproc::makeFabric(2);
  auto t = inproc::makeTransport(fabric, 0, 1.0);
  topologies::FairRoulette topo(2, 1);
  optimizers::CrossoverOptions o;
  o.mode = optimizers::GossipMode::kAsync;
  optimizers::CrossoverSgd async(*t, topo, {8}, o);
  CHECK_FALSE(async.setExchangeType(DType::kBfloat16));
  CHECK(async.setExchangeType(DType::kFloat32));
  o.mode = optimizers::GossipMode::kSync;
  optimizers::CrossoverSgd sync(*t, topo, {8}, o);
  CHECK_THROWS_AS(sync.setExchangeType(DType::kInt32), InvalidArgument);
  optimizers::Sgp sgp(*t, topo, 8, {});
  CHECK_THROWS_AS(sgp.setExchangeType(DType::kFloat64), InvalidArgument);
}
