// The bandwidth-aware fair roulette (topologies/src/bandwidth_roulette.cpp;
// the Crossover-SGD paper, Sec. 3.2, Algorithm 2): symmetric pairings
// every round, drawn the same on every rank, slow links between islands drawn
// less often by the designed (exactly computed) probabilities, uniform with
// one island, a doubly stochastic expected mixing matrix with a spectral gap,
// the YAML keys and their errors, and Crossover-SGD over it.
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "registry.hpp"
#include "threads.hpp"

namespace {

using gossamer::Config;
using gossamer::ConfigError;
using gossamer::InvalidArgument;
using gossamer::NetworkLayout;
using gossamer::topologies::BandwidthRoulette;
using gossamer::topologies::FairRoulette;

std::size_t at(int v) { return static_cast<std::size_t>(v); }

// 8 ranks in two islands of 4: 10 Gbit/s inside, 0.1 between.
NetworkLayout twoIslands() { return NetworkLayout(8, {{0, 1, 2, 3}, {4, 5, 6, 7}}, 10.0, 0.1); }

// The same as a config, with more lines in the topology section if given.
std::string twoIslandsYaml(const std::string& topologyLines = "") {
  return "world_size: 8\nseed: 7\ntopology:\n  kind: bandwidth_roulette\n" + topologyLines +
         "network:\n  islands: [[0, 1, 2, 3], [4, 5, 6, 7]]\n  inside_gbps: 10\n  between_gbps: 0.1\n";
}

Config parse(const std::string& yaml) {
  return gossamer::test::trainRegistry().parse(yaml, "bandwidth-roulette.yaml");
}

// Whether `partner` is an involution with N mod 2 fixed points (a perfect
// matching, or a matching that leaves exactly one rank out).
bool isMaximumMatching(const std::vector<int>& partner) {
  const int n = static_cast<int>(partner.size());
  int alone = 0;
  for (int i = 0; i < n; ++i) {
    const int j = partner[at(i)];
    if (j < 0 || j >= n || partner[at(j)] != i) return false;
    alone += j == i;
  }
  return alone == n % 2;
}

// Second largest eigenvalue of a symmetric matrix.
double secondEigenvalue(const Eigen::MatrixXd& m) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(m, Eigen::EigenvaluesOnly);
  return eig.eigenvalues()(m.rows() - 2);
}

// The documented draw, exhaustively: while two or more ranks are unpaired,
// the caller is uniform among them and picks its partner with probability
// proportional to linkWeight. Returns the matrix pairProbabilities() claims.
Eigen::MatrixXd bruteForcePairs(const BandwidthRoulette& t) {
  const int n = t.worldSize();
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(n, n);
  std::function<void(std::vector<int>, std::vector<std::pair<int, int>>, double)> rec =
      [&](std::vector<int> unpaired, std::vector<std::pair<int, int>> pairs, double p) {
        if (unpaired.size() < 2) {
          for (auto [i, j] : pairs) out(i, j) += p, out(j, i) += p;
          for (int r : unpaired) out(r, r) += p;
          return;
        }
        for (std::size_t a = 0; a < unpaired.size(); ++a) {
          const int i = unpaired[a];
          double sum = 0;
          for (int j : unpaired)
            if (j != i) sum += t.linkWeight(i, j);
          for (int j : unpaired) {
            if (j == i) continue;
            std::vector<int> rest;
            for (int r : unpaired)
              if (r != i && r != j) rest.push_back(r);
            auto more = pairs;
            more.emplace_back(i, j);
            rec(rest, more, p / static_cast<double>(unpaired.size()) * t.linkWeight(i, j) / sum);
          }
        }
      };
  std::vector<int> all(at(n));
  for (int r = 0; r < n; ++r) all[at(r)] = r;
  rec(all, {}, 1.0);
  return out;
}

}  // namespace

TEST_CASE("bandwidth roulette: every round is a symmetric matching, perfect for an even world size",
          "[topology][bandwidth_roulette]") {
  struct Layout {
    int n;
    std::vector<std::vector<int>> islands;
  };
  const std::vector<Layout> layouts = {{2, {}},
                                       {2, {{0}, {1}}},
                                       {3, {}},
                                       {8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                                       {8, {{0, 1, 2}, {3, 4, 5, 6, 7}}},
                                       {9, {{0, 1, 2, 3}, {4, 5, 6, 7, 8}}},
                                       {7, {{0}, {1}, {2, 3}, {4, 5, 6}}},
                                       {16, {{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}}},
                                       {33, {}}};
  for (const auto& l : layouts) {
    const BandwidthRoulette t(NetworkLayout(l.n, l.islands, 10.0, 0.1), 42, 1.0);
    for (std::uint64_t step = 0; step < 60; ++step) {
      for (int seg = 0; seg < 4; ++seg) {
        const auto partner = t.partners(step, seg);
        INFO("N " << l.n << " islands " << l.islands.size() << " step " << step << " segment " << seg);
        REQUIRE(isMaximumMatching(partner));
        const Eigen::MatrixXd w = t.mixingMatrix(step, seg);
        REQUIRE((w - w.transpose()).cwiseAbs().maxCoeff() == 0.0);
        REQUIRE((w.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-15);
        REQUIRE((w.colwise().sum().array() - 1.0).abs().maxCoeff() < 1e-15);
        for (int i = 0; i < l.n; ++i) {
          const auto p = t.peers(i, step, seg);
          const int j = partner[at(i)];
          if (j == i) {
            REQUIRE(p.sendTo.empty());
            REQUIRE(p.recvFrom.empty());
            REQUIRE(p.selfWeight == 1.0);
          } else {
            REQUIRE(p.sendTo == std::vector<int>{j});
            REQUIRE(p.recvFrom == std::vector<int>{j});
            REQUIRE(p.selfWeight == 0.5);
            REQUIRE(p.recvWeights == std::vector<double>{0.5});
          }
        }
      }
    }
  }
}

TEST_CASE("bandwidth roulette: every rank, computing alone from the config, agrees on the pairing",
          "[topology][bandwidth_roulette]") {
  const Config c = parse(twoIslandsYaml());
  const auto& factory = gossamer::test::trainRegistry().topology("bandwidth_roulette");
  constexpr std::uint64_t kSteps = 300;
  constexpr int kSegments = 4;
  // seen[rank][step * kSegments + segment] = whom that rank swaps with, as it computed it.
  std::vector<std::vector<int>> seen(8, std::vector<int>(kSteps * kSegments));
  gossamer::testing::onEveryRank(8, [&](int rank) {
    const auto topology = factory(c);  // each rank its own object, as each process builds its own
    RANK_REQUIRE(topology->name() == "bandwidth_roulette");
    for (std::uint64_t step = 0; step < kSteps; ++step)
      for (int seg = 0; seg < kSegments; ++seg) {
        const auto p = topology->peers(rank, step, seg);
        seen[at(rank)][step * kSegments + at(seg)] = p.sendTo.empty() ? rank : p.sendTo[0];
      }
  });
  for (std::size_t k = 0; k < kSteps * kSegments; ++k) {
    std::vector<int> partner(8);
    for (int r = 0; r < 8; ++r) partner[at(r)] = seen[at(r)][k];
    INFO("round " << k);
    REQUIRE(isMaximumMatching(partner));
  }
  // The same seed gives the same rounds, another seed other ones.
  const BandwidthRoulette same(twoIslands(), 7, 1.0), other(twoIslands(), 8, 1.0);
  int differ = 0;
  for (std::uint64_t step = 0; step < 50; ++step) {
    std::vector<int> agreed(8);
    for (int r = 0; r < 8; ++r) agreed[at(r)] = seen[at(r)][step * kSegments + 1];
    REQUIRE(same.partners(step, 1) == agreed);
    differ += other.partners(step, 1) != agreed;
  }
  CHECK(differ > 25);
}

TEST_CASE("bandwidth roulette: the exact pairing probabilities are those of the documented draw",
          "[topology][bandwidth_roulette]") {
  const std::vector<NetworkLayout> layouts = {twoIslands(),
                                              NetworkLayout(6, {{0, 1, 2}, {3, 4, 5}}, 10.0, 1.0),
                                              NetworkLayout(7, {{0, 1, 2}, {3, 4}, {5, 6}}, 10.0, 0.5),
                                              NetworkLayout(5, {{0}, {1, 2, 3, 4}}, 1.0, 4.0)};
  for (const auto& net : layouts) {
    for (double exponent : {0.0, 0.5, 1.0, 2.0}) {
      const BandwidthRoulette t(net, 1, exponent);
      const Eigen::MatrixXd exact = t.pairProbabilities();
      INFO("N " << net.worldSize() << " exponent " << exponent);
      CHECK((exact - bruteForcePairs(t)).cwiseAbs().maxCoeff() < 1e-12);
      CHECK((exact - exact.transpose()).cwiseAbs().maxCoeff() < 1e-15);
      CHECK((exact.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
    }
  }
}

TEST_CASE("bandwidth roulette: pairs across islands are rarer than uniform roulette's, at the designed rate",
          "[topology][bandwidth_roulette]") {
  const BandwidthRoulette t(twoIslands(), 42, 1.0);
  const Eigen::MatrixXd designed = t.pairProbabilities();
  const double designedShare = t.expectedCrossIslandShare();
  // Rounds are independent draws: each pair's count over R rounds is
  // binomial(R, p), and the round's share of crossing pairs is in [0, 1], so
  // its variance is at most q (1 - q). Five standard errors apart would happen
  // by chance with probability < 6e-7 per comparison.
  constexpr std::uint64_t kRounds = 100000;
  Eigen::MatrixXd count = Eigen::MatrixXd::Zero(8, 8);
  double crossPairs = 0;
  for (std::uint64_t r = 0; r < kRounds; ++r) {
    const auto partner = t.partners(r / 4, static_cast<int>(r % 4));
    for (int i = 0; i < 8; ++i) {
      count(i, partner[at(i)]) += 1;
      if (i < partner[at(i)] && (i < 4) != (partner[at(i)] < 4)) crossPairs += 1;
    }
  }
  const auto rounds = static_cast<double>(kRounds);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      const double p = designed(i, j), se = std::sqrt(p * (1 - p) / rounds);
      INFO("pair " << i << "," << j << ": designed " << p << ", seen " << count(i, j) / rounds);
      CHECK(std::abs(count(i, j) / rounds - p) <= 5 * se + 1e-12);
    }
  const double share = crossPairs / (4 * rounds);
  const double se = std::sqrt(designedShare * (1 - designedShare) / rounds);
  INFO("share of pairs across islands: designed " << designedShare << ", seen " << share);
  CHECK(std::abs(share - designedShare) <= 5 * se);
  // The design itself: a cross link weighs (0.1 / 10)^1 = 0.01.
  CHECK(t.linkWeight(0, 4) == Approx(0.01));
  CHECK(t.linkWeight(0, 1) == 1.0);
  CHECK(designedShare >
        0.01);  // 2.15%: a caller's first pick crosses with 0.04 / 3.04, later ones more often
  CHECK(designedShare < 0.03);

  // Uniform fair roulette (Algorithm 2 as FairRoulette draws it) over the same rounds.
  const FairRoulette uniform(8, 42);
  double uniformCross = 0;
  for (std::uint64_t r = 0; r < kRounds; ++r) {
    const auto dest = uniform.destinations(r / 4, static_cast<int>(r % 4));
    for (int i = 0; i < 8; ++i) uniformCross += (i < 4) != (dest[at(i)] < 4);
  }
  const double uniformShare = uniformCross / (8 * rounds);
  INFO("uniform fair roulette: " << uniformShare);
  CHECK(uniformShare > 0.5);
  CHECK(share < uniformShare / 20);
  // The larger the exponent, the fewer crossings; exponent 0 is uniform (4/7).
  double previous = 1;
  for (double e : {0.0, 0.5, 1.0, 2.0, 4.0}) {
    const double s = BandwidthRoulette(twoIslands(), 42, e).expectedCrossIslandShare();
    CHECK(s < previous);
    previous = s;
  }
  CHECK(BandwidthRoulette(twoIslands(), 42, 0.0).expectedCrossIslandShare() ==
        Approx(4.0 / 7.0).epsilon(1e-12));
}

TEST_CASE("bandwidth roulette: with one island it is the uniform distribution the fair roulette aims at",
          "[topology][bandwidth_roulette]") {
  for (int n : {2, 3, 4, 5, 6, 8, 11, 16}) {
    // No islands, one island given, or equal bandwidths: all the same uniform draw.
    for (const auto& net : {NetworkLayout::uniform(n), NetworkLayout(n, {}, 10.0, 0.1),
                            NetworkLayout(n,
                                          {{0},
                                           [n] {
                                             std::vector<int> rest;
                                             for (int r = 1; r < n; ++r) rest.push_back(r);
                                             return rest;
                                           }()},
                                          3.0, 3.0)}) {
      const BandwidthRoulette t(net, 5, 1.0);
      const Eigen::MatrixXd p = t.pairProbabilities();
      const double pair = n % 2 == 0 ? 1.0 / (n - 1) : 1.0 / n;  // odd: each rank sits out with 1/N
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          INFO("N " << n << " (" << i << "," << j << ")");
          CHECK(std::abs(p(i, j) - (i != j ? pair : (n % 2 == 0 ? 0.0 : 1.0 / n))) < 1e-12);
        }
      if (n % 2 == 0) {
        // The same E[W] as the fair roulette drawn with exact uniform marginals.
        const FairRoulette matched(n, 5, {}, FairRoulette::Selection::kMatched);
        const Eigen::MatrixXd fair = (Eigen::MatrixXd::Identity(n, n) + matched.matchedMarginals()) / 2;
        CHECK((t.expectedMixingMatrix() - fair).cwiseAbs().maxCoeff() < 1e-9);
      }
    }
  }
  // The whole distribution, not only the pairs: for N = 6 each of the 15
  // perfect matchings comes up 1/15 of the time (chi-square, 14 degrees of
  // freedom: 40 is beyond its 99.97th percentile).
  const BandwidthRoulette t(NetworkLayout::uniform(6), 11, 1.0);
  std::map<std::vector<int>, double> seen;
  constexpr int kRounds = 60000;
  for (int r = 0; r < kRounds; ++r) seen[t.partners(static_cast<std::uint64_t>(r), 0)] += 1;
  REQUIRE(seen.size() == 15);
  double chi2 = 0;
  for (const auto& [m, k] : seen) chi2 += (k - kRounds / 15.0) * (k - kRounds / 15.0) / (kRounds / 15.0);
  CHECK(chi2 < 40);
  // Exponent 0 with two islands is the same uniform draw, round for round.
  const BandwidthRoulette flat(twoIslands(), 3, 0.0), one(NetworkLayout::uniform(8), 3, 0.0);
  CHECK((flat.pairProbabilities() - one.pairProbabilities()).cwiseAbs().maxCoeff() < 1e-12);
}

TEST_CASE("bandwidth roulette: the expected mixing matrix is doubly stochastic with a spectral gap",
          "[topology][bandwidth_roulette][mixing]") {
  double previousGap = 1;
  for (double exponent : {0.0, 0.5, 1.0, 2.0, 3.0, 5.5}) {
    const BandwidthRoulette t(twoIslands(), 42, exponent);
    const Eigen::MatrixXd w = t.expectedMixingMatrix();
    INFO("exponent " << exponent);
    CHECK((w - w.transpose()).cwiseAbs().maxCoeff() < 1e-15);
    CHECK((w.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
    CHECK((w.colwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12);
    CHECK(w.minCoeff() > 0);  // every pair, across the islands too
    const double gap = 1 - secondEigenvalue(w);
    CHECK(gap > 0);
    CHECK(gap < previousGap);  // avoiding slow links costs mixing
    previousGap = gap;
  }
  // 6 is the largest exponent these bandwidths allow (weight 1e-12); at 5.5
  // the gap is tiny but still positive.
  CHECK(previousGap > 0);
  // For two islands of equal size the difference of the islands is an
  // eigenvector of E[W] with eigenvalue 1 - (share of segments that cross):
  // the gap between the islands is exactly the share that crosses.
  for (double exponent : {0.0, 1.0, 2.0}) {
    const BandwidthRoulette t(twoIslands(), 42, exponent);
    CHECK(1 - secondEigenvalue(t.expectedMixingMatrix()) ==
          Approx(t.expectedCrossIslandShare()).epsilon(1e-9));
  }
}

TEST_CASE("bandwidth roulette: keys and bad values are refused naming the key",
          "[topology][bandwidth_roulette][config]") {
  SECTION("the factory reads the network and the exponent") {
    const Config c = parse(twoIslandsYaml() + "  between_delay_ms: 5\n");
    CHECK(c.get<double>("topology.bandwidth_exponent") == 1.0);  // the default
    const auto t = gossamer::test::trainRegistry().topology("bandwidth_roulette")(c);
    const auto* b = dynamic_cast<const BandwidthRoulette*>(t.get());
    REQUIRE(b != nullptr);
    CHECK(b->worldSize() == 8);
    CHECK(b->network().islands().size() == 2);
    CHECK(b->linkWeight(3, 4) == Approx(0.01));
    const Config two = parse(twoIslandsYaml("  bandwidth_exponent: 2\n"));
    CHECK(two.get<double>("topology.bandwidth_exponent") == 2.0);
    // One rank: nothing to mix.
    const auto single = gossamer::test::trainRegistry().topology("bandwidth_roulette")(
        parse("world_size: 1\ntopology:\n  kind: bandwidth_roulette\n"));
    CHECK(single->worldSize() == 1);
  }
  const auto refused = [](const std::string& yaml, const std::string& what) {
    try {
      parse(yaml);
      FAIL("accepted: " << yaml);
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find("topology.bandwidth_exponent") != std::string::npos);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  SECTION("a negative exponent") {
    refused("world_size: 8\ntopology:\n  kind: bandwidth_roulette\n  bandwidth_exponent: -1\n", ">= 0");
  }
  SECTION("an exponent that would starve the slow links") {
    // (0.1 / 10)^7 = 1e-14 < 1e-12: at most 6.
    refused(twoIslandsYaml("  bandwidth_exponent: 7\n"), "at most 6");
  }
  SECTION("the key under another topology") {
    refused("world_size: 8\ntopology:\n  kind: fair_roulette\n  bandwidth_exponent: 2\n",
            "bandwidth_roulette");
  }
  SECTION("in code") {
    CHECK_THROWS_WITH(BandwidthRoulette(twoIslands(), 1, -0.5),
                      Catch::Contains("topology.bandwidth_exponent"));
    CHECK_THROWS_WITH(BandwidthRoulette(twoIslands(), 1, std::nan("")),
                      Catch::Contains("topology.bandwidth_exponent"));
    CHECK_THROWS_WITH(BandwidthRoulette(twoIslands(), 1, 7.0), Catch::Contains("at most 6"));
    CHECK_THROWS_AS(BandwidthRoulette(NetworkLayout::uniform(1), 1, 1.0), InvalidArgument);
    CHECK_THROWS_AS(BandwidthRoulette(twoIslands(), 1, 1.0).peers(8, 0), InvalidArgument);
  }
  SECTION("islands that are not a partition are the network's error") {
    try {
      parse(
          "world_size: 8\ntopology:\n  kind: bandwidth_roulette\nnetwork:\n  islands: [[0, 1, 2], [4, 5, 6, "
          "7]]\n");
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find("network.islands") != std::string::npos);
    }
  }
}

TEST_CASE("bandwidth roulette: Crossover-SGD over it keeps the average and mixes across islands",
          "[topology][bandwidth_roulette][crossover]") {
  using namespace gossamer;
  for (auto mode : {optimizers::GossipMode::kSync, optimizers::GossipMode::kOverlap}) {
    const int n = 8;
    const std::size_t p = 120;
    // Exponent 0.5: a cross link weighs 0.1, so 200 steps mix the islands well.
    const topologies::BandwidthRoulette topo(twoIslands(), 3, 0.5);
    auto fabric = inproc::makeFabric(n);
    std::vector<std::vector<float>> xs(n, std::vector<float>(p));
    for (int r = 0; r < n; ++r)  // island 0 starts at +1, island 1 at -1: all the disagreement is across
      for (std::size_t k = 0; k < p; ++k)
        xs[at(r)][k] = (r < 4 ? 1.0f : -1.0f) + 0.01f * static_cast<float>(k);
    const auto islandGap = [&] {
      double a = 0, b = 0;
      for (int r = 0; r < n; ++r) (r < 4 ? a : b) += xs[at(r)][0] / 4.0;
      return a - b;
    };
    testing::onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      optimizers::CrossoverOptions o;
      o.sgd = {0.0, 0.0, 0.0};
      o.segments = 4;
      o.mode = mode;
      optimizers::CrossoverSgd opt(*t, topo, {30, 30, 30, 30}, o);
      std::vector<float> g(p, 0.0f);
      for (int s = 0; s < 200; ++s) opt.step(xs[at(r)], g);
      opt.flush(xs[at(r)]);
    });
    INFO("mode " << int(mode) << ": gap between the islands' means " << islandGap());
    for (std::size_t k = 0; k < p; ++k) {
      double mean = 0;
      for (int r = 0; r < n; ++r) mean += xs[at(r)][k] / n;
      REQUIRE(mean == Approx(0.01 * static_cast<double>(k)).margin(1e-5));  // doubly stochastic
    }
    CHECK(std::abs(islandGap()) < 0.2);  // started at 2
  }
}
