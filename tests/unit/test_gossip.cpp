// SGP, Crossover-SGD modes and hierarchical leader groups over the inproc
// transport (threads, no sockets).
#include <catch2/catch.hpp>

#include <barrier>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "models.hpp"
#include "registry.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::consensusDistance;
using gossamer::testing::onEveryRank;
using gossamer::testing::randomModels;

namespace {

// Runs SGP with learning rate 0 (or random gradients) for `steps` steps on
// every rank; returns the final weights (after flush). The ranks wait for
// each other before flushing, so every push has been sent by then (inproc
// delivers at once) and flush() can take in all the mass still on its way.
std::vector<double> runSgp(const Topology& topo, optimizers::GossipMode mode,
                           std::vector<std::vector<float>>& xs, int steps, bool randomGradients) {
  const int n = topo.worldSize();
  auto fabric = inproc::makeFabric(n);
  std::vector<double> weights(static_cast<std::size_t>(n));
  std::barrier allSent(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::Sgp sgp(
        *t, topo, xs[0].size(),
        {.sgd = {randomGradients ? 0.01 : 0.0, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = mode});
    std::vector<float> g(xs[0].size(), 0.0f);
    std::mt19937 rng(static_cast<unsigned>(r));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int s = 0; s < steps; ++s) {
      if (randomGradients)
        for (auto& v : g) v = normal(rng);
      sgp.step(xs[static_cast<std::size_t>(r)], g);
      // Async never waits: without some work between steps a rank that the
      // scheduler favours would finish before its peers sent anything.
      if (mode == optimizers::GossipMode::kAsync) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    allSent.arrive_and_wait();
    sgp.flush(xs[static_cast<std::size_t>(r)]);
    weights[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
  });
  return weights;
}

// Push-sum prediction in double: x_k = P_k x_0, w_k = P_k 1, z = x / w.
std::vector<std::vector<double>> predictPushSum(const Topology& topo,
                                                const std::vector<std::vector<float>>& x0, int steps) {
  const int n = topo.worldSize();
  Eigen::MatrixXd x(n, static_cast<Eigen::Index>(x0[0].size()));
  for (int i = 0; i < n; ++i)
    for (std::size_t j = 0; j < x0[0].size(); ++j)
      x(i, static_cast<Eigen::Index>(j)) = x0[static_cast<std::size_t>(i)][j];
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n);
  for (int k = 0; k < steps; ++k) {
    const Eigen::MatrixXd m = topo.mixingMatrix(static_cast<std::uint64_t>(k));
    x = m * x;
    w = m * w;
  }
  std::vector<std::vector<double>> z(static_cast<std::size_t>(n), std::vector<double>(x0[0].size()));
  for (int i = 0; i < n; ++i)
    for (std::size_t j = 0; j < x0[0].size(); ++j)
      z[static_cast<std::size_t>(i)][j] = x(i, static_cast<Eigen::Index>(j)) / w(i);
  return z;
}

}  // namespace

TEST_CASE("SGP keeps the push-sum mass sum(w) = n over 1000 steps on every topology", "[sgp]") {
  const std::vector<std::pair<int, int>> chordRing = {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}, {0, 2}, {3, 1}};
  topologies::DirectedExponential expo8(8, 1), expo6two(6, 2), expo5(5, 1);
  topologies::ExplicitGraph graph(5, chordRing);
  topologies::Ring ring(4);
  topologies::FairRoulette roulette(6, 11);
  const Topology* topos[] = {&expo8, &expo6two, &expo5, &graph, &ring, &roulette};
  for (const Topology* topo : topos) {
    for (auto mode : {optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap}) {
      auto xs = randomModels(topo->worldSize(), 16, 5);
      const auto w = runSgp(*topo, mode, xs, 1000, true);
      double mass = 0;
      for (double v : w) mass += v;
      INFO(topo->name() << " n=" << topo->worldSize() << " mode " << int(mode));
      CHECK(mass == Approx(topo->worldSize()).margin(1e-6));
      for (double v : w) CHECK(v > 0);
    }
  }
}

TEST_CASE("SGP reaches consensus on pure averaging at the rate the mixing matrices predict", "[sgp]") {
  const std::vector<std::pair<int, int>> chordRing = {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}, {0, 2}, {3, 1}};
  topologies::DirectedExponential expo8(8, 1);
  topologies::ExplicitGraph graph(5, chordRing);  // not regular: the weights w drift from 1
  for (const Topology* topo : {static_cast<const Topology*>(&expo8), static_cast<const Topology*>(&graph)}) {
    for (int steps : {1, 2, 3, 6, 12}) {
      auto xs = randomModels(topo->worldSize(), 32, 9);
      const auto predicted = predictPushSum(*topo, xs, steps);
      runSgp(*topo, optimizers::GossipMode::kSync, xs, steps, false);
      INFO(topo->name() << " after " << steps << " steps");
      for (std::size_t i = 0; i < xs.size(); ++i)
        for (std::size_t j = 0; j < xs[i].size(); ++j)
          REQUIRE(xs[i][j] == Approx(predicted[i][j]).margin(1e-4));
    }
  }
  // The 1-peer exponential graph on 8 ranks averages exactly in log2(8) = 3 steps.
  auto xs = randomModels(8, 32, 10);
  const double before = consensusDistance(xs);
  runSgp(expo8, optimizers::GossipMode::kSync, xs, 3, false);
  CHECK(consensusDistance(xs) < 1e-10 * before);
}

TEST_CASE(
    "sync SGP on a graph whose push-sum weights drift from 1 minimises the average of the ranks' losses",
    "[sgp]") {
  // f_r(x) = (x - r)^2 / 2 on 4 ranks: the average's minimiser is 1.5. A
  // step on z moved the numerator by w lr g, weighting each rank's gradient
  // by its push-sum weight: the ranks settled near 1.69 (sum w_r r / sum w_r).
  const topologies::ExplicitGraph graph(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {0, 2}});
  auto fabric = inproc::makeFabric(4);
  std::vector<float> final(4);
  onEveryRank(4, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::SgpOptions o;
    o.sgd = {0.02, 0.0, 0.0};
    optimizers::Sgp opt(*t, graph, 1, o);
    std::vector<float> x{0.0f}, g(1);
    for (int k = 0; k < 2000; ++k) {
      g[0] = x[0] - static_cast<float>(r);
      opt.step(x, g);
    }
    opt.flush(x);
    final[static_cast<std::size_t>(r)] = x[0];
  });
  // Constant step size: within O(lr) of the minimiser, not 0.19 away.
  for (float v : final) CHECK(v == Approx(1.5).margin(0.05));
}

TEST_CASE("SGP in async mode never waits, still mixes, and keeps the push-sum mass", "[sgp]") {
  topologies::DirectedExponential expo(4, 1);
  auto xs = randomModels(4, 16, 3);
  std::vector<double> mean0(16, 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < 16; ++i) mean0[i] += x[i] / 4.0;
  const double before = consensusDistance(xs);
  const auto w = runSgp(expo, optimizers::GossipMode::kAsync, xs, 200, false);
  // How much mixes depends on the schedule (it never waits); sync reaches
  // exact consensus in 2 steps here. Any real mixing cuts the distance 5x.
  CHECK(consensusDistance(xs) < 0.2 * before);
  // Mass: whatever order the pushes arrived in, once all are taken in the
  // weights sum to n and the weighted models (x = w z) to n times the mean.
  double mass = 0;
  for (double v : w) {
    CHECK(v > 0);
    mass += v;
  }
  CHECK(mass == Approx(4.0).margin(1e-9));
  for (std::size_t i = 0; i < 16; ++i) {
    double numerator = 0;
    for (std::size_t r = 0; r < 4; ++r) numerator += w[r] * xs[r][i];
    CHECK(numerator == Approx(4.0 * mean0[i]).margin(1e-4));
  }
}

TEST_CASE("Crossover-SGD in overlap and async modes keeps averaging the models", "[crossover]") {
  for (auto mode : {optimizers::GossipMode::kOverlap, optimizers::GossipMode::kAsync}) {
    const int n = 6;
    auto fabric = inproc::makeFabric(n);
    topologies::FairRoulette topo(n, 3);
    auto xs = randomModels(n, 120, 4);
    std::vector<double> mean0(120, 0.0);
    for (const auto& x : xs)
      for (std::size_t i = 0; i < 120; ++i) mean0[i] += x[i] / n;
    const double before = consensusDistance(xs);
    auto stepped = xs;  // each rank's model after its steps, before the flush
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      optimizers::CrossoverOptions o;
      o.sgd = {0.0, 0.0, 0.0};
      o.segments = 3;
      o.mode = mode;
      optimizers::CrossoverSgd opt(*t, topo, {40, 40, 40}, o);
      std::vector<float> g(120, 0.0f);
      for (int s = 0; s < 60; ++s) {
        opt.step(xs[static_cast<std::size_t>(r)], g);
        if (mode == optimizers::GossipMode::kAsync)  // work between steps, as in training
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      stepped[static_cast<std::size_t>(r)] = xs[static_cast<std::size_t>(r)];
      opt.flush(xs[static_cast<std::size_t>(r)]);
    });
    INFO("mode " << int(mode) << ": " << before << " -> " << consensusDistance(stepped) << " stepped, "
                 << consensusDistance(xs) << " flushed");
    // The steps themselves mix (the flush alone would average exactly).
    CHECK(consensusDistance(stepped) < 0.5 * before);
    // Async mixes whatever arrived; ranks that finish early stop mixing, so it ends less tight.
    CHECK(consensusDistance(xs) < (mode == optimizers::GossipMode::kAsync ? 0.05 : 1e-3) * before);
    if (mode == optimizers::GossipMode::kOverlap) {  // doubly stochastic: the mean is kept
      std::vector<double> mean1(120, 0.0);
      for (const auto& x : xs)
        for (std::size_t i = 0; i < 120; ++i) mean1[i] += x[i] / n;
      for (std::size_t i = 0; i < 120; ++i) REQUIRE(mean1[i] == Approx(mean0[i]).margin(1e-5));
    }
  }
}

TEST_CASE("hierarchical leader groups keep members equal to their leader and leaders mixing",
          "[hierarchical]") {
  for (const std::string inter : {"crossover_sgd", "sgp"}) {
    const int n = 7;  // groups {0,1,2}, {3,4,5}, {6}: uneven on purpose
    auto fabric = inproc::makeFabric(n);
    auto xs = randomModels(n, 50, 8);
    const double before = consensusDistance({xs[0], xs[3], xs[6]});
    std::vector<std::vector<float>> grads = randomModels(n, 50, 9);
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      auto groups = topologies::makeGroups(n, 3);
      std::unique_ptr<Topology> topo;
      if (inter == "sgp")
        topo = std::make_unique<topologies::DirectedExponential>(3, 1);
      else
        topo = std::make_unique<topologies::FairRoulette>(3, 1);
      optimizers::CrossoverOptions o;
      o.sgd = {0.01, 0.0, 0.0};
      o.segments = 2;
      optimizers::Hierarchical h(*t, groups, inter, std::move(topo), {25, 25}, o);
      RANK_CHECK(h.isLeader() == (r == 0 || r == 3 || r == 6));
      for (int s = 0; s < 40; ++s)
        h.step(xs[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)]);
      h.flush(xs[static_cast<std::size_t>(r)]);
    });
    INFO(inter);
    for (int r : {1, 2}) CHECK(xs[static_cast<std::size_t>(r)] == xs[0]);
    for (int r : {4, 5}) CHECK(xs[static_cast<std::size_t>(r)] == xs[3]);
    // Leaders gossip: from random starts their models come close together.
    const double after = consensusDistance({xs[0], xs[3], xs[6]});
    INFO("leaders' consensus distance " << before << " -> " << after);
    CHECK(after < 1e-3 * before);
  }
}

TEST_CASE("makeGroups splits consecutively or validates an explicit partition", "[hierarchical]") {
  CHECK(topologies::makeGroups(5, 2) == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4}});
  CHECK(topologies::makeGroups(4, 2, {{3, 1}, {2, 0}}) == std::vector<std::vector<int>>{{0, 2}, {1, 3}});
  CHECK_THROWS_AS(topologies::makeGroups(4, 2, {{0, 1}, {1, 2, 3}}), InvalidArgument);
  CHECK_THROWS_AS(topologies::makeGroups(4, 2, {{0, 1}, {2}}), InvalidArgument);
  CHECK_THROWS_AS(topologies::makeGroups(4, 0), InvalidArgument);
}

TEST_CASE("directed exponential graph: offsets, degrees and doubly stochastic matrices", "[topology]") {
  topologies::DirectedExponential one(12, 1), two(12, 2);
  CHECK(one.offsets() == std::vector<int>{1, 2, 4, 8});
  for (std::uint64_t k = 0; k < 8; ++k) {
    const auto p = one.peers(5, k);
    REQUIRE(p.sendTo.size() == 1);
    CHECK(p.sendTo[0] == (5 + one.offsets()[k % 4]) % 12);
    CHECK(two.peers(5, k).sendTo.size() == 2);
    for (const Topology* t : {static_cast<const Topology*>(&one), static_cast<const Topology*>(&two)}) {
      const Eigen::MatrixXd m = t->mixingMatrix(k);
      CHECK((m.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
      CHECK((m.colwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
    }
  }
  CHECK_THROWS_AS(topologies::DirectedExponential(4, 3), InvalidArgument);
  CHECK_THROWS_AS(topologies::ExplicitGraph(3, {{0, 0}}), InvalidArgument);
  CHECK_THROWS_AS(topologies::ExplicitGraph(3, {{0, 1}, {0, 1}}), InvalidArgument);
  CHECK_THROWS_AS(topologies::ExplicitGraph(3, {{0, 3}}), InvalidArgument);
  // Explicit graphs are column-stochastic (push-sum): mass is conserved.
  topologies::ExplicitGraph g(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {0, 2}});
  const Eigen::MatrixXd m = g.mixingMatrix(0);
  CHECK((m.colwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
}

namespace {
// Pearson chi-square of observed sender->receiver counts against expected
// marginals `t` over `steps` draws (off-diagonal cells only).
double chiSquare(const topologies::FairRoulette& r, const Eigen::MatrixXd& t, int steps, int segment,
                 bool& fair) {
  const int n = r.worldSize();
  Eigen::MatrixXd counts = Eigen::MatrixXd::Zero(n, n);
  fair = true;
  for (int s = 0; s < steps; ++s) {
    const auto dest = r.destinations(static_cast<std::uint64_t>(s), segment);
    std::vector<int> received(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      const int d = dest[static_cast<std::size_t>(i)];
      fair = fair && d != i;
      ++received[static_cast<std::size_t>(d)];
      counts(i, d) += 1;
    }
    for (int c : received) fair = fair && c == 1;
  }
  double chi2 = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double e = steps * t(i, j);
      if (e > 0)
        chi2 += (counts(i, j) - e) * (counts(i, j) - e) / e;
      else
        CHECK(counts(i, j) == 0);
    }
  return chi2;
}
}  // namespace

TEST_CASE("a roulette probability table is followed exactly by the matched selection (chi-square)",
          "[topology][roulette]") {
  // Two "datacenters" {0,1} and {2,3}: the fast pairs weigh 4, the WAN pairs 1.
  const std::vector<std::vector<double>> dc = {{0, 4, 1, 1}, {4, 0, 1, 1}, {1, 1, 0, 4}, {1, 1, 4, 0}};
  // A doubly stochastic table that is not symmetric (a 3-cycle preference).
  const std::vector<std::vector<double>> cyc = {
      {0, 0.7, 0.2, 0.1}, {0.1, 0, 0.7, 0.2}, {0.2, 0.1, 0, 0.7}, {0.7, 0.2, 0.1, 0}};
  for (const auto* table : {&dc, &cyc}) {
    topologies::FairRoulette r(4, 2024, *table, topologies::FairRoulette::Selection::kMatched);
    // The table is already doubly stochastic (after row normalisation), so it is the target.
    Eigen::MatrixXd t(4, 4);
    for (int i = 0; i < 4; ++i) {
      double rowSum = 0;
      for (int j = 0; j < 4; ++j)
        rowSum += (*table)[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      for (int j = 0; j < 4; ++j)
        t(i, j) = (*table)[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] / rowSum;
    }
    CHECK((r.matchedMarginals() - t).cwiseAbs().maxCoeff() < 1e-9);
    for (int segment : {0, 3}) {
      bool fair = false;
      const double chi2 = chiSquare(r, t, 10000, segment, fair);
      INFO("chi-square " << chi2 << " over 12 cells (8 degrees of freedom)");
      CHECK(fair);
      CHECK(chi2 < 26.12);  // p = 0.001 critical value for 8 degrees of freedom
    }
  }
  // The sequential draw (the paper's Algorithm 2) does not follow the same table: show the gap.
  topologies::FairRoulette seq(4, 2024, cyc, topologies::FairRoulette::Selection::kSequential);
  bool fair = false;
  Eigen::MatrixXd t(4, 4);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) t(i, j) = cyc[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  CHECK(chiSquare(seq, t, 10000, 0, fair) > 100);
  CHECK(fair);
}

TEST_CASE("the matched selection balances a table that is not doubly stochastic and rejects impossible ones",
          "[topology][roulette]") {
  // Rank 0 strongly prefers rank 1, nobody else cares: balanced into the nearest fair target.
  topologies::FairRoulette r(4, 1, {{0, 20, 1, 1}, {1, 0, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, 0}},
                             topologies::FairRoulette::Selection::kMatched);
  const Eigen::MatrixXd& t = r.matchedMarginals();
  CHECK((t.rowwise().sum().array() - 1).abs().maxCoeff() < 1e-9);
  CHECK((t.colwise().sum().array() - 1).abs().maxCoeff() < 1e-9);
  CHECK(t(0, 1) > 0.6);
  bool fair = false;
  CHECK(chiSquare(r, t, 10000, 0, fair) < 26.12);
  CHECK(fair);
  // Nobody may send to rank 3: no fair assignment exists.
  CHECK_THROWS_AS(topologies::FairRoulette(3, 1, {{0, 1, 0}, {1, 0, 0}, {1, 1, 0}},
                                           topologies::FairRoulette::Selection::kMatched),
                  InvalidArgument);
}

TEST_CASE("the matched selection takes a table whose nonzero entries are not all on a derangement",
          "[topology][roulette]") {
  // 0 -> 1 -> 2 -> 0 is the only derangement on this support: the other
  // entries (0 -> 2, 1 -> 0) can carry no probability in a fair assignment.
  // Sinkhorn balancing alone converges on them too slowly to finish.
  const topologies::FairRoulette r(3, 1, {{0, 1, 1}, {1, 0, 1}, {1, 0, 0}},
                                   topologies::FairRoulette::Selection::kMatched);
  for (std::uint64_t step = 0; step < 50; ++step) CHECK(r.destinations(step, 0) == std::vector<int>{1, 2, 0});
  const Eigen::MatrixXd& t = r.matchedMarginals();
  CHECK(t(0, 1) == Approx(1.0));
  CHECK(t(0, 2) == 0.0);
  CHECK(t(1, 0) == 0.0);
  // A larger support with a part on no derangement: balanced exactly on the rest.
  const topologies::FairRoulette big(
      5, 2, {{0, 1, 1, 0, 0}, {1, 0, 1, 0, 0}, {1, 1, 0, 0, 5}, {0, 0, 0, 0, 1}, {0, 0, 0, 1, 0}},
      topologies::FairRoulette::Selection::kMatched);
  const Eigen::MatrixXd& b = big.matchedMarginals();
  CHECK((b.rowwise().sum().array() - 1).abs().maxCoeff() < 1e-9);
  CHECK((b.colwise().sum().array() - 1).abs().maxCoeff() < 1e-9);
  CHECK(b(2, 4) == 0.0);  // rank 4 receives from rank 3 in every derangement
  // No derangement at all: refused, at load with the key named.
  CHECK_THROWS_AS(topologies::FairRoulette(3, 1, {{0, 1, 0}, {1, 0, 0}, {1, 0, 0}},
                                           topologies::FairRoulette::Selection::kMatched),
                  InvalidArgument);
  try {
    gossamer::test::trainRegistry().parse(
        "world_size: 3\ntopology:\n  kind: fair_roulette\n  probabilities: [[0, 1, 0], [1, 0, 0], [1, 0, "
        "0]]\n",
        "t.yaml");
    FAIL("a table without a derangement was taken");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "topology.probabilities");
    CHECK(std::string(e.what()).find("no derangement") != std::string::npos);
  }
}

TEST_CASE(
    "hierarchical: the leader steps with its group's gradient weighted by its size, then the leaders mix",
    "[hierarchical]") {
  // Groups {0,1,2} and {3,4}; leaders 0 and 3 run SGP on the 2-rank
  // exponential graph (each keeps half and sends half: one step averages
  // them exactly). Learning rate 0.5, no momentum. Groups of unequal sizes
  // step with their gradients' sum times L/N = 2/5, so that every rank's
  // gradient counts alike: after one step every rank holds
  // ((x0 - lr 6/5 mean(g0,g1,g2)) + (x3 - lr 4/5 mean(g3,g4))) / 2, which is
  // the average model minus lr times the mean of all five gradients.
  const int n = 5;
  const std::size_t p = 12;
  const float lr = 0.5f;
  const std::vector<std::vector<int>> groups{{0, 1, 2}, {3, 4}};
  auto fabric = inproc::makeFabric(n);
  auto xs = randomModels(n, p, 21);
  const auto grads = randomModels(n, p, 22);
  std::vector<double> expected(p);
  for (std::size_t i = 0; i < p; ++i) {
    const double meanA = (grads[0][i] + grads[1][i] + grads[2][i]) / 3.0;
    const double meanB = (grads[3][i] + grads[4][i]) / 2.0;
    expected[i] = ((xs[0][i] - lr * 1.2 * meanA) + (xs[3][i] - lr * 0.8 * meanB)) / 2.0;
  }
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::CrossoverOptions o;
    o.sgd = {lr, 0.0, 0.0};
    optimizers::Hierarchical h(*t, groups, "sgp", std::make_unique<topologies::DirectedExponential>(2, 1),
                               {p}, o);
    h.step(xs[static_cast<std::size_t>(r)], grads[static_cast<std::size_t>(r)]);
    h.flush(xs[static_cast<std::size_t>(r)]);
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    for (std::size_t i = 0; i < p; ++i)
      CHECK(xs[static_cast<std::size_t>(r)][i] == Approx(expected[i]).margin(1e-5));
  }
}

TEST_CASE("SGP in async mode routes around a peer that left: the others keep stepping and mixing", "[sgp]") {
  // Rank 3 closes its transport after 5 steps. Pushes to it then fail with
  // PeerFailure, which async SGP absorbs by keeping that share, so the
  // survivors neither wait for it nor stop; a sync-mode rank would raise
  // PeerFailure instead. The exchange timeout (5 s) bounds any wait a bug
  // would add: it would surface here as an exception.
  const int n = 4;
  topologies::DirectedExponential expo(n, 1);
  auto fabric = inproc::makeFabric(n);
  auto xs = randomModels(n, 16, 31);
  const double before = consensusDistance({xs[0], xs[1], xs[2]});
  std::vector<double> weights(n, 0.0);
  std::vector<int> stepsDone(n, 0);
  std::barrier survivorsDone(n - 1);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 5.0);
    optimizers::Sgp sgp(
        *t, expo, 16,
        {.sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 5.0, .mode = optimizers::GossipMode::kAsync});
    const std::vector<float> g(16, 0.0f);
    const int steps = r == 3 ? 5 : 300;
    for (int s = 0; s < steps; ++s) {
      sgp.step(xs[static_cast<std::size_t>(r)], g);
      stepsDone[static_cast<std::size_t>(r)] = s + 1;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (r == 3) {
      t->close();
      return;
    }
    survivorsDone.arrive_and_wait();
    sgp.flush(xs[static_cast<std::size_t>(r)]);
    weights[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(stepsDone[static_cast<std::size_t>(r)] == 300);
    CHECK(weights[static_cast<std::size_t>(r)] > 0);
    for (float v : xs[static_cast<std::size_t>(r)]) CHECK(std::isfinite(v));
  }
  const double after = consensusDistance({xs[0], xs[1], xs[2]});
  INFO("survivors' consensus distance " << before << " -> " << after);
  CHECK(after < 0.2 * before);
}

// Async SGP on `xs` (one model per rank, 8 elements) over the 1-peer
// exponential graph, rank r taking steps[r] steps with gradient g = 1 at
// learning rate `lr`; ranks other than 0 pause `pause` after each step, then
// every rank flushes. Returns each rank's weight after the flush; `lowest`
// gets each rank's lowest weight after any step.
std::vector<double> runAsyncSgpAhead(std::vector<std::vector<float>>& xs, const std::vector<int>& steps,
                                     double lr, std::chrono::microseconds pause, double waitSeconds,
                                     std::vector<double>& lowest) {
  const int n = static_cast<int>(xs.size());
  topologies::DirectedExponential expo(n, 1);
  auto fabric = inproc::makeFabric(n);
  std::vector<double> weights(static_cast<std::size_t>(n));
  lowest.assign(static_cast<std::size_t>(n), 1.0);
  std::barrier allSent(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::SgpOptions o{
        .sgd = {lr, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = optimizers::GossipMode::kAsync};
    o.asyncWaitSeconds = waitSeconds;
    optimizers::Sgp sgp(*t, expo, 8, o);
    const std::vector<float> g(8, 1.0f);
    auto& x = xs[static_cast<std::size_t>(r)];
    for (int s = 0; s < steps[static_cast<std::size_t>(r)]; ++s) {
      sgp.step(x, g);
      lowest[static_cast<std::size_t>(r)] =
          std::min(lowest[static_cast<std::size_t>(r)], sgp.pushSumWeight());
      if (r != 0) std::this_thread::sleep_for(pause);
    }
    allSent.arrive_and_wait();
    sgp.flush(x);
    weights[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
  });
  return weights;
}

TEST_CASE("SGP in async mode keeps every push-sum weight clear of underflow when one rank runs far ahead",
          "[sgp]") {
  // Rank 0 steps 1500 times without pause (nor the bounded wait) while the
  // others step 40 times, slowly: it could push far more often than anyone
  // pushes to it. Pushing at every step would halve its weight each time
  // until it underflowed to 0, after which its messages carry nothing and
  // the mass it held is gone.
  const int n = 4;
  auto xs = randomModels(n, 8, 5);
  std::vector<double> mean0(8, 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < 8; ++i) mean0[i] += x[i] / n;
  std::vector<double> lowest;
  const auto weights =
      runAsyncSgpAhead(xs, {1500, 40, 40, 40}, 0.0, std::chrono::milliseconds(2), 0.0, lowest);
  double mass = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(lowest[static_cast<std::size_t>(r)] > 1e-4);  // never near underflow
    mass += weights[static_cast<std::size_t>(r)];
  }
  CHECK(mass == Approx(4.0).margin(1e-9));
  for (std::size_t i = 0; i < 8; ++i) {
    double numerator = 0;
    for (std::size_t r = 0; r < 4; ++r) numerator += weights[r] * xs[r][i];
    CHECK(numerator == Approx(4.0 * mean0[i]).margin(1e-4));
  }
}

TEST_CASE(
    "async Crossover-SGD and async SGP average 1, 2, 3 at learning rate 0 to 2, also with a rank running "
    "ahead",
    "[crossover][sgp]") {
  const int n = 3;
  for (const bool crossover : {true, false}) {
    for (const bool ahead : {false, true}) {
      CAPTURE(crossover, ahead);
      auto fabric = inproc::makeFabric(n);
      topologies::FairRoulette roulette(n, 7);
      topologies::DirectedExponential expo(n, 1);
      std::vector<std::vector<float>> xs(n);
      std::vector<double> lowest(n, 1.0);
      onEveryRank(n, [&](int r) {
        auto t = inproc::makeTransport(fabric, r, 10.0);
        auto& x = xs[static_cast<std::size_t>(r)];
        x.assign(30, static_cast<float>(r + 1));
        std::vector<float> g(30, 0.0f);
        std::unique_ptr<DistributedOptimizer> opt;
        optimizers::CrossoverSgd* cx = nullptr;
        optimizers::Sgp* sgp = nullptr;
        if (crossover) {
          optimizers::CrossoverOptions o;
          o.sgd = {0.0, 0.0, 0.0};
          o.segments = 3;
          o.mode = optimizers::GossipMode::kAsync;
          auto c = std::make_unique<optimizers::CrossoverSgd>(*t, roulette,
                                                              std::vector<std::size_t>{10, 10, 10}, o);
          cx = c.get();
          opt = std::move(c);
        } else {
          // The rank running ahead does not wait for pushes (it would
          // wait at most 1500 x 5 ms while the others are done).
          optimizers::SgpOptions o{
              .sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = optimizers::GossipMode::kAsync};
          if (ahead) o.asyncWaitSeconds = 0.0;
          auto s = std::make_unique<optimizers::Sgp>(*t, expo, 30, o);
          sgp = s.get();
          opt = std::move(s);
        }
        // With `ahead`, rank 0 steps 10 times as often as the others and without pause.
        const int steps = ahead && r == 0 ? 1500 : 150;
        for (int s = 0; s < steps; ++s) {
          opt->step(x, g);
          if (cx)
            for (double w : cx->asyncWeights())
              lowest[static_cast<std::size_t>(r)] = std::min(lowest[static_cast<std::size_t>(r)], w);
          if (sgp)
            lowest[static_cast<std::size_t>(r)] =
                std::min(lowest[static_cast<std::size_t>(r)], sgp->pushSumWeight());
          if (!(ahead && r == 0)) std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
        // The ranks finish at different times with different models; the
        // flush (a collective) takes in what is in flight and gives every
        // rank the push-sum average, which the async steps kept.
        opt->flush(x);
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(lowest[static_cast<std::size_t>(r)] > 4e-4);  // above floor / (out-degree + 1)
        for (float v : xs[static_cast<std::size_t>(r)]) REQUIRE(v == Approx(2.0).margin(1e-6));
      }
    }
  }
}

TEST_CASE("SGP in async mode pushes only with a weight of at least 1/2 and waits a bounded time for mass",
          "[sgp]") {
  // Rank 1 does not step (nor receive) until rank 0 has stepped 50 times.
  // Rank 0 pushes half its mass twice (weight 1, then 1/2) and then keeps
  // its weight of 1/4, waiting up to asyncWaitSeconds at each later step for
  // a push that does not come; once rank 1 has pushed back, it pushes again.
  // The dyadic weights are exact in float64.
  const int n = 2;
  const double wait = 0.002;
  topologies::DirectedExponential expo(n, 1);
  auto fabric = inproc::makeFabric(n);
  auto xs = randomModels(n, 8, 17);
  std::vector<double> weightsAhead(n), weightsAfter(n), weights(n);
  double aheadSeconds = 0;
  std::barrier ahead(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::SgpOptions o{
        .sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = optimizers::GossipMode::kAsync};
    o.asyncWaitSeconds = wait;
    optimizers::Sgp sgp(*t, expo, 8, o);
    const std::vector<float> g(8, 0.0f);
    auto& x = xs[static_cast<std::size_t>(r)];
    if (r == 0) {
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < 50; ++s) sgp.step(x, g);
      aheadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    weightsAhead[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
    ahead.arrive_and_wait();
    if (r == 1) sgp.step(x, g);  // takes both pushes in (weight 1.75) and pushes back 0.875
    ahead.arrive_and_wait();
    if (r == 0) sgp.step(x, g);  // takes 0.875 in (weight 1.125) and pushes half of it
    weightsAfter[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
    ahead.arrive_and_wait();
    sgp.flush(x);
    weights[static_cast<std::size_t>(r)] = sgp.pushSumWeight();
  });
  CHECK(weightsAhead[0] == 0.25);
  CHECK(weightsAhead[1] == 1.0);
  CHECK(aheadSeconds >= 48 * wait);  // each step after the second waited
  CHECK(weightsAfter[0] == 0.5625);
  CHECK(weightsAfter[1] == 0.875);
  CHECK(weights[0] + weights[1] == Approx(2.0).margin(1e-12));
  for (std::size_t i = 0; i < 8; ++i) CHECK(xs[0][i] == Approx(xs[1][i]).margin(1e-6));
}

TEST_CASE("SGP in async mode steps the numerator: each step moves sum_i w_i z_i by -lr g", "[sgp]") {
  // Alg. 1 applies the step to x = w z. A constant gradient g = 1 at
  // learning rate lr (no momentum) then moves the push-sum numerator
  // sum_i w_i z_i by -lr per step of any rank, whatever the weights were at
  // the time; stepping z itself moved it by -lr w instead.
  const int n = 3;
  auto xs = randomModels(n, 8, 23);
  std::vector<double> sum0(8, 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < 8; ++i) sum0[i] += x[i];
  const double lr = 0.01;
  const std::vector<int> steps = {300, 60, 60};  // rank 0 runs ahead
  std::vector<double> lowest;
  const auto weights = runAsyncSgpAhead(xs, steps, lr, std::chrono::microseconds(500), 0.001, lowest);
  double mass = 0;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(lowest[static_cast<std::size_t>(r)] >= 0.25);  // 1/2 / (out-degree + 1)
    mass += weights[static_cast<std::size_t>(r)];
  }
  CHECK(mass == Approx(3.0).margin(1e-9));
  const double moved = lr * (steps[0] + steps[1] + steps[2]);
  for (std::size_t i = 0; i < 8; ++i) {
    double numerator = 0;
    for (std::size_t r = 0; r < 3; ++r) numerator += weights[r] * xs[r][i];
    CHECK(numerator == Approx(sum0[i] - moved).margin(1e-3));
  }
}

TEST_CASE(
    "a peer whose models hold NaN is refused by SGP and Crossover-SGD: the others stay finite and count it",
    "[sgp][crossover][screen]") {
  const int n = 4, p = 24, poisoned = 2;
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::string algorithm : {"sgp", "crossover_sgd"}) {
    for (auto mode : {optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap}) {
      for (bool check : {true, false}) {
        auto fabric = inproc::makeFabric(n);
        topologies::DirectedExponential expo(n, 1);
        topologies::FairRoulette roulette(n, 5);
        auto xs = randomModels(n, p, 21);
        xs[poisoned][3] = nan;  // one corrupt peer (or one that diverged)
        std::vector<std::uint64_t> rejected(n, 0);
        onEveryRank(n, [&](int r) {
          auto t = inproc::makeTransport(fabric, r, 10.0);
          std::unique_ptr<DistributedOptimizer> opt;
          if (algorithm == "sgp") {
            optimizers::SgpOptions o{.sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 10.0, .mode = mode};
            o.checkReceived = check;
            opt = std::make_unique<optimizers::Sgp>(*t, expo, p, o);
          } else {
            optimizers::CrossoverOptions o;
            o.sgd = {0.0, 0.0, 0.0};
            o.segments = 2;
            o.mode = mode;
            o.checkReceived = check;
            opt =
                std::make_unique<optimizers::CrossoverSgd>(*t, roulette, std::vector<std::size_t>{12, 12}, o);
          }
          std::vector<float> g(p, 0.0f);
          for (int s = 0; s < 20; ++s) opt->step(xs[static_cast<std::size_t>(r)], g);
          opt->flush(xs[static_cast<std::size_t>(r)]);
          rejected[static_cast<std::size_t>(r)] = opt->rejectedMessages();
        });
        INFO(algorithm << ", mode " << int(mode) << ", check_received " << check);
        bool othersFinite = true;
        std::uint64_t refused = 0;
        for (int r = 0; r < n; ++r) {
          if (r == poisoned) continue;
          for (float v : xs[static_cast<std::size_t>(r)]) othersFinite = othersFinite && std::isfinite(v);
          refused += rejected[static_cast<std::size_t>(r)];
        }
        if (check) {
          CHECK(othersFinite);
          CHECK(refused > 0);
        } else {  // what the screen prevents: the NaN reaches the other models
          CHECK_FALSE(othersFinite);
          CHECK(refused == 0);
        }
      }
    }
  }
}

TEST_CASE("SGP in async mode refuses a push-sum message of the wrong length and takes the next one",
          "[sgp]") {
  // Rank 1 sends rank 0 a message of 8 bytes on the async exchange's tag,
  // then an ordinary one: the short one is refused with ProtocolError (not
  // folded in with the rest of the buffer), the next call goes on.
  const int n = 2;
  const std::size_t p = 4;
  topologies::Ring ring(n);
  auto fabric = inproc::makeFabric(n);
  auto t0 = inproc::makeTransport(fabric, 0, 5.0);
  auto t1 = inproc::makeTransport(fabric, 1, 5.0);
  const optimizers::SgpOptions o{
      .sgd = {0.0, 0.0, 0.0}, .timeoutSeconds = 5.0, .mode = optimizers::GossipMode::kAsync};
  optimizers::Sgp sgp(*t0, ring, p, o);
  std::vector<float> z(p, 1.0f);
  const std::vector<std::byte> shortMessage(8);
  t1->isend(0, Tag::make(Op::kGossip, 0, 0), shortMessage).wait(5.0);
  std::string error;
  try {
    for (int k = 0; k < 50 && error.empty(); ++k) {
      sgp.mixParameters(z);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } catch (const ProtocolError& e) {
    error = e.what();
    CHECK(e.peer() == 1);
  }
  INFO(error);
  CHECK(error.find("push-sum message of 8 bytes") != std::string::npos);
  for (float v : z) CHECK(std::isfinite(v));
  CHECK_NOTHROW(sgp.mixParameters(z));  // the exchange goes on
  t0->abort();
  t1->abort();
}

namespace {

// How one rank's hierarchical step ended: the rank a PeerFailure named (-1:
// none), the error's text and the seconds it took.
struct StepEnd {
  int failed = -1;
  std::string error;
  double seconds = 0.0;
};

// Groups {0, 1} and {2, 3} of 4 inproc ranks, hierarchical gossip with
// `inter` among the leaders and a `timeout` of 20 s. Rank `victim` takes no
// step: it aborts at once (dieAfterMs 0, before the others step) or
// dieAfterMs into their step. The others step once; how each step ended.
std::vector<StepEnd> hierarchicalStepWithADeadRank(const char* inter, int victim, int dieAfterMs,
                                                   double timeout) {
  const int n = 4;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(inproc::makeTransport(fabric, r, timeout));
  std::vector<std::unique_ptr<optimizers::Hierarchical>> opts(n);
  onEveryRank(n, [&](int r) {
    optimizers::CrossoverOptions o;
    o.timeoutSeconds = timeout;
    o.segments = 1;
    opts[static_cast<std::size_t>(r)] = std::make_unique<optimizers::Hierarchical>(
        *ts[static_cast<std::size_t>(r)], std::vector<std::vector<int>>{{0, 1}, {2, 3}}, inter,
        std::make_unique<topologies::DirectedExponential>(2, 1), std::vector<std::size_t>{8}, o);
  });
  if (dieAfterMs == 0) ts[static_cast<std::size_t>(victim)]->abort();
  std::vector<StepEnd> ends(n);
  onEveryRank(n, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(dieAfterMs));
      ts[i]->abort();
      return;
    }
    std::vector<float> p(8, 1.0f), g(8, 0.1f);
    const auto start = std::chrono::steady_clock::now();
    try {
      opts[i]->step(p, g);
    } catch (const PeerFailure& e) {
      ends[i].failed = e.peer();
      ends[i].error = e.what();
    } catch (const std::exception& e) {
      ends[i].error = e.what();
    }
    ends[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  opts.clear();
  for (auto& t : ts) t->abort();
  return ends;
}

}  // namespace

TEST_CASE(
    "hierarchical gossip: a dead leader fails every survivor with PeerFailure, its own group's and the "
    "other group's members too, well before the timeout",
    "[hierarchical]") {
  // Groups {0, 1} and {2, 3}; leader 2 dies. Leader 0's gossip with it
  // fails, so 0 never broadcasts to its member 1, whose group is alive: 1
  // must still learn of the failure rather than wait out the 20 s timeout.
  const double timeout = 20.0;
  for (const char* inter : {"sgp", "crossover_sgd"}) {
    INFO("inter-group algorithm " << inter);
    const auto ends = hierarchicalStepWithADeadRank(inter, 2, 0, timeout);
    for (int r : {0, 1, 3}) {
      const auto& e = ends[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << e.seconds << " s: " << e.error);
      CHECK(e.failed == 2);
      CHECK(e.seconds < timeout / 2);
    }
  }
}

TEST_CASE(
    "hierarchical gossip: a dead member of another group fails the leader that gossips with its group's "
    "leader with PeerFailure, well before the timeout",
    "[hierarchical]") {
  // Groups {0, 1} and {2, 3}; member 3 takes no step and dies 0.5 s in.
  // Leader 2's reduce within its group fails, so 2 never gossips: leader 0,
  // whose group is alive and whose in-peer (2) is too, waits on 2's message
  // and must learn of rank 3's failure rather than wait out the 20 s timeout
  // (and then fail with a TimeoutError).
  const double timeout = 20.0;
  for (const char* inter : {"sgp", "crossover_sgd"}) {
    INFO("inter-group algorithm " << inter);
    const auto ends = hierarchicalStepWithADeadRank(inter, 3, 500, timeout);
    for (int r : {0, 1, 2}) {
      const auto& e = ends[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << e.seconds << " s: " << e.error);
      CHECK(e.failed == 3);
      CHECK(e.seconds < timeout / 2);
    }
  }
}
