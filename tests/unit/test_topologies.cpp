// Tests of the concrete topologies (gossamer/topologies/topologies.hpp): the
// fair roulette of Crossover-SGD (the Crossover-SGD paper, Algorithm 2), the ring, and the
// tensor-aligned segmentation.
#include <Eigen/Core>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace {

using gossamer::InvalidArgument;
using gossamer::topologies::FairRoulette;
using gossamer::topologies::randomPairing;
using gossamer::topologies::Ring;
using gossamer::topologies::segmentsAlongTensors;
using Table = std::vector<std::vector<double>>;
using Perm = std::vector<int>;

bool isDerangement(const Perm& dest) {
  const int n = static_cast<int>(dest.size());
  std::vector<int> hits(dest.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int d = dest[static_cast<std::size_t>(i)];
    if (d < 0 || d >= n || d == i) return false;
    ++hits[static_cast<std::size_t>(d)];
  }
  return std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; });
}

/// Largest deviation of a row or column sum of `w` from 1, and whether every
/// entry is >= 0.
double stochasticError(const Eigen::MatrixXd& w, bool rowsOnly = false) {
  double err = (w.rowwise().sum().array() - 1.0).abs().maxCoeff();
  if (!rowsOnly) err = std::max(err, (w.colwise().sum().array() - 1.0).abs().maxCoeff());
  return err;
}

/// Exact output distribution of the fair roulette as documented: ranks draw in
/// order 0..n-1 from their row restricted to untaken destinations (uniform
/// over the free ones if that leaves no mass); at the dead end rank n-1 swaps
/// with an earlier rank j drawn from its own row. Also returns the probability
/// of hitting the dead end. Small n only (exhaustive).
struct ExactDistribution {
  std::map<Perm, double> perms;
  double deadEnd = 0;
};

ExactDistribution exactFairRoulette(int n, const Table& table) {
  ExactDistribution out;
  auto weight = [&](int i, int j) { return table.empty() ? 1.0 : table[std::size_t(i)][std::size_t(j)]; };
  struct Rec {
    int n;
    ExactDistribution& out;
    decltype(weight)& w;
    void operator()(int i, Perm dest, std::vector<char> taken, double p) {
      if (i == n) {
        out.perms[dest] += p;
        return;
      }
      std::vector<double> row(std::size_t(n), 0.0);
      for (int j = 0; j < n; ++j)
        if (j != i && !taken[std::size_t(j)]) row[std::size_t(j)] = w(i, j);
      double sum = std::accumulate(row.begin(), row.end(), 0.0);
      if (sum <= 0) {
        for (int j = 0; j < n; ++j) row[std::size_t(j)] = (j != i && !taken[std::size_t(j)]);
        sum = std::accumulate(row.begin(), row.end(), 0.0);
      }
      if (sum <= 0) {  // dead end: i == n-1
        out.deadEnd += p;
        double ws = 0;
        for (int j = 0; j < i; ++j) ws += w(i, j);
        for (int j = 0; j < i; ++j) {
          if (w(i, j) <= 0) continue;
          Perm d = dest;
          d.push_back(d[std::size_t(j)]);
          d[std::size_t(j)] = i;
          (*this)(i + 1, d, taken, p * w(i, j) / ws);
        }
        return;
      }
      for (int j = 0; j < n; ++j) {
        if (row[std::size_t(j)] <= 0) continue;
        Perm d = dest;
        d.push_back(j);
        std::vector<char> t = taken;
        t[std::size_t(j)] = 1;
        (*this)(i + 1, d, t, p * row[std::size_t(j)] / sum);
      }
    }
  };
  Rec{n, out, weight}(0, {}, std::vector<char>(std::size_t(n), 0), 1.0);
  return out;
}

/// Pair frequencies freq(i, j) = P(dest[i] == j) of a distribution over permutations.
Eigen::MatrixXd pairFrequencies(int n, const std::map<Perm, double>& perms) {
  Eigen::MatrixXd f = Eigen::MatrixXd::Zero(n, n);
  for (const auto& [perm, p] : perms)
    for (int i = 0; i < n; ++i) f(i, perm[std::size_t(i)]) += p;
  return f;
}

/// Empirical distribution of destinations(step, segment) over `steps` steps.
std::map<Perm, double> sampleFairRoulette(const FairRoulette& t, int steps, int segment = 0) {
  std::map<Perm, double> perms;
  for (int s = 0; s < steps; ++s) perms[t.destinations(std::uint64_t(s), segment)] += 1.0 / steps;
  return perms;
}

/// Mixing matrix of an unfair round: every receiver averages itself with all
/// it receives, W(i,i) = W(i,j) = 1/(1+k_i) for each of its k_i senders j.
Eigen::MatrixXd receiverAverageMatrix(const Perm& dest) {
  const int n = static_cast<int>(dest.size());
  Eigen::MatrixXd w = Eigen::MatrixXd::Identity(n, n);
  for (int j = 0; j < n; ++j) w(dest[std::size_t(j)], j) = 1.0;
  for (int i = 0; i < n; ++i) w.row(i) /= w.row(i).sum();
  return w;
}

}  // namespace

// ---- fair roulette: invariants ---------------------------------------------------------------

TEST_CASE("fair roulette: destinations form a derangement for every world size 2..64", "[topology]") {
  for (int n = 2; n <= 64; ++n) {
    const FairRoulette t(n, 1000 + std::uint64_t(n));
    for (std::uint64_t step = 0; step < 40; ++step)
      for (int segment : {0, 1, 7}) {
        const Perm d = t.destinations(step, segment);
        INFO("n=" << n << " step=" << step << " segment=" << segment);
        REQUIRE(d.size() == std::size_t(n));
        REQUIRE(isDerangement(d));
      }
  }
}

namespace {
// The uniform roulette's sequential draws as a scan over every rank per draw
// (O(n^2) per call): the reference the O(n log n) draws must equal exactly.
std::vector<int> scannedDerangement(int n, std::uint64_t seed, std::uint64_t step, int segment) {
  using gossamer::topologies::splitmix64;
  std::mt19937_64 g(
      splitmix64(seed ^ splitmix64(step ^ splitmix64(static_cast<std::uint64_t>(segment) + 1))));
  const auto uniform01 = [&g] { return static_cast<double>(g() >> 11) * 0x1.0p-53; };
  // Index drawn with probability proportional to w (as the topologies draw).
  const auto draw = [&](const std::vector<double>& w, double sum) {
    double u = uniform01() * sum;
    int last = -1;
    for (std::size_t k = 0; k < w.size(); ++k) {
      if (w[k] <= 0) continue;
      last = static_cast<int>(k);
      if (u < w[k]) return last;
      u -= w[k];
    }
    return last;
  };
  const auto un = static_cast<std::size_t>(n);
  std::vector<int> dest(un, -1);
  std::vector<char> taken(un, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<double> row(un, 0.0);
    double sum = 0;
    for (int j = 0; j < n; ++j)
      if (j != i && !taken[static_cast<std::size_t>(j)]) sum += row[static_cast<std::size_t>(j)] = 1.0;
    if (sum <= 0) {
      std::vector<double> w(un, 0.0);
      for (int j = 0; j < i; ++j) w[static_cast<std::size_t>(j)] = 1.0;
      const int j = draw(w, static_cast<double>(i));
      dest[static_cast<std::size_t>(i)] = dest[static_cast<std::size_t>(j)];
      dest[static_cast<std::size_t>(j)] = i;
      taken[static_cast<std::size_t>(i)] = 1;
      continue;
    }
    const int d = draw(row, sum);
    dest[static_cast<std::size_t>(i)] = d;
    taken[static_cast<std::size_t>(d)] = 1;
  }
  return dest;
}
}  // namespace

TEST_CASE("fair roulette: the uniform draws equal a scan over every rank, for world sizes 2..300",
          "[topology]") {
  for (const int n : {2, 3, 4, 5, 7, 8, 16, 33, 64, 100, 255, 256, 300}) {
    for (const std::uint64_t seed : {std::uint64_t{1}, std::uint64_t{42}, std::uint64_t{0xDEADBEEF}}) {
      const gossamer::topologies::FairRoulette t(n, seed);
      for (std::uint64_t step = 0; step < 12; ++step)
        for (int segment = 0; segment < 3; ++segment) {
          INFO("n " << n << " seed " << seed << " step " << step << " segment " << segment);
          REQUIRE(t.destinations(step, segment) == scannedDerangement(n, seed, step, segment));
        }
    }
  }
}

TEST_CASE("fair roulette: peers() and mixingMatrix() agree with destinations()", "[topology]") {
  for (int n : {2, 3, 5, 8, 17, 33, 64}) {
    const FairRoulette t(n, 42);
    for (std::uint64_t step : {0ull, 1ull, 999ull, (1ull << 40) - 1})
      for (int segment : {0, 3}) {
        INFO("n=" << n << " step=" << step << " segment=" << segment);
        const Perm d = t.destinations(step, segment);
        Perm src(std::size_t(n), -1);
        for (int i = 0; i < n; ++i) src[std::size_t(d[std::size_t(i)])] = i;
        for (int r = 0; r < n; ++r) {
          const gossamer::PeerSet p = t.peers(r, step, segment);
          REQUIRE(p.sendTo == std::vector<int>{d[std::size_t(r)]});
          REQUIRE(p.recvFrom == std::vector<int>{src[std::size_t(r)]});
          REQUIRE(p.selfWeight == 0.5);
          REQUIRE(p.recvWeights == std::vector<double>{0.5});
        }
        const Eigen::MatrixXd w = t.mixingMatrix(step, segment);
        REQUIRE(w.rows() == n);
        REQUIRE(w.cols() == n);
        CHECK(w.minCoeff() >= 0.0);
        CHECK(stochasticError(w) < 1e-12);
        // W = (I + P) / 2 with P the receive permutation.
        Eigen::MatrixXd expected = 0.5 * Eigen::MatrixXd::Identity(n, n);
        for (int i = 0; i < n; ++i) expected(i, src[std::size_t(i)]) += 0.5;
        CHECK((w - expected).cwiseAbs().maxCoeff() == 0.0);
        // The one-draw override builds the matrix that asking every rank's peers() builds.
        CHECK((w - t.gossamer::Topology::mixingMatrix(step, segment)).cwiseAbs().maxCoeff() == 0.0);
      }
  }
}

TEST_CASE("fair roulette: the same (seed, step, segment) gives the same destinations", "[topology]") {
  for (int n : {2, 5, 16, 64}) {
    const FairRoulette a(n, 7), b(n, 7);
    for (std::uint64_t step = 0; step < 50; ++step)
      for (int segment = 0; segment < 4; ++segment) {
        REQUIRE(a.destinations(step, segment) == b.destinations(step, segment));
        REQUIRE(a.destinationsWithoutFairness(step, segment) == b.destinationsWithoutFairness(step, segment));
      }
  }
}

TEST_CASE("fair roulette: steps, segments and seeds change the destinations", "[topology]") {
  const int n = 8;  // 14833 derangements: accidental equality is rare
  const FairRoulette t(n, 7), other(n, 8);
  int sameSegment = 0, sameStep = 0, sameSeed = 0;
  const int trials = 200;
  for (int s = 0; s < trials; ++s) {
    const auto step = std::uint64_t(s);
    const Perm d = t.destinations(step, 0);
    sameSegment += d == t.destinations(step, 1);
    sameStep += d == t.destinations(step + 1, 0);
    sameSeed += d == other.destinations(step, 0);
  }
  CHECK(sameSegment <= 5);
  CHECK(sameStep <= 5);
  CHECK(sameSeed <= 5);
}

TEST_CASE("fair roulette: with two ranks it is always the swap", "[topology]") {
  const FairRoulette t(2, 123);
  for (std::uint64_t step = 0; step < 500; ++step)
    for (int segment : {0, 1, 2}) REQUIRE(t.destinations(step, segment) == Perm{1, 0});
  const Eigen::MatrixXd w = t.mixingMatrix(5, 1);
  CHECK((w.array() == 0.5).all());
}

TEST_CASE("fair roulette: every ordered pair i != j occurs", "[topology]") {
  // n <= 16 within 200 n steps; larger n within 40 n steps (about 40 expected
  // occurrences per pair).
  for (int n = 3; n <= 64; ++n) {
    const FairRoulette t(n, 2024);
    const int steps = n <= 16 ? 200 * n : 40 * n;
    const int segment = n % 3;
    Eigen::MatrixXi seen = Eigen::MatrixXi::Zero(n, n);
    for (int s = 0; s < steps; ++s) {
      const Perm d = t.destinations(std::uint64_t(s), segment);
      for (int i = 0; i < n; ++i) ++seen(i, d[std::size_t(i)]);
    }
    INFO("n=" << n << " steps=" << steps);
    CHECK(seen.diagonal().sum() == 0);
    int minOff = std::numeric_limits<int>::max();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) minOff = std::min(minOff, seen(i, j));
    INFO("rarest pair occurred " << minOff << " times");
    CHECK(minOff > 0);
  }
}

// ---- fair roulette: distribution and the dead end --------------------------------------------

TEST_CASE("fair roulette: n=3 hits the dead end and matches the exact distribution", "[topology]") {
  // Ranks 0 and 1 leave rank 2 with only itself with probability 1/4; the swap
  // then picks rank 0 or 1. Exact: (1,2,0) 3/8 and (2,0,1) 5/8. (Without the
  // swap, e.g. redrawing the step, it would be 1/3 and 2/3.)
  const ExactDistribution exact = exactFairRoulette(3, {});
  CHECK(exact.deadEnd == Approx(0.25));
  REQUIRE(exact.perms.size() == 2);
  CHECK(exact.perms.at(Perm{1, 2, 0}) == Approx(3.0 / 8));
  CHECK(exact.perms.at(Perm{2, 0, 1}) == Approx(5.0 / 8));

  const FairRoulette t(3, 99);
  const int steps = 20000;
  for (int segment : {0, 4}) {
    const auto sampled = sampleFairRoulette(t, steps, segment);
    REQUIRE(sampled.size() == 2);  // only the two derangements of 3
    for (const auto& [perm, p] : exact.perms) {
      INFO("segment " << segment << ": measured " << sampled.at(perm) << ", exact " << p);
      CHECK(std::abs(sampled.at(perm) - p) < 0.015);  // ~4.5 sigma
    }
  }
}

TEST_CASE("fair roulette: n=4 pair frequencies are those of the sequential roulette", "[topology]") {
  // Algorithm 2 is not uniform over derangements: ranks drawing early have more
  // choice than the last ones, so the off-diagonal pair frequencies are not all
  // 1/3 (exactly, from 0.259 for 1->2 to 0.435 for 3->2). What is guaranteed
  // is the documented draw, which the exact enumeration reproduces; the dead
  // end occurs with probability 5/36.
  const int n = 4, steps = 20000;
  const ExactDistribution exact = exactFairRoulette(n, {});
  CHECK(exact.deadEnd == Approx(5.0 / 36));
  REQUIRE(exact.perms.size() == 9);  // every derangement of 4 is reachable
  const Eigen::MatrixXd want = pairFrequencies(n, exact.perms);
  const FairRoulette t(n, 31337);
  const auto sampled = sampleFairRoulette(t, steps);
  const Eigen::MatrixXd got = pairFrequencies(n, sampled);
  INFO("measured pair frequencies:\n" << got << "\nexact:\n" << want);
  CHECK(stochasticError(want) < 1e-12);
  CHECK(got.diagonal().cwiseAbs().maxCoeff() == 0.0);
  CHECK((got - want).cwiseAbs().maxCoeff() < 0.015);  // sigma <= 0.0035
  for (const auto& [perm, p] : exact.perms) {
    const auto it = sampled.find(perm);
    REQUIRE(it != sampled.end());
    CHECK(std::abs(it->second - p) < 0.012);
  }
  // Sanity bound that holds for the exact values: no pair is starved or dominant.
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) {
        CHECK(got(i, j) > 0.22);
        CHECK(got(i, j) < 0.47);
      }
}

TEST_CASE("fair roulette: a forced dead end swaps with a rank drawn from the last row", "[topology]") {
  SECTION("n=3: ranks 0 and 1 pair up, rank 2 must swap") {
    // Rank 2's row prefers rank 0 nine to one.
    const Table table = {{0, 1, 0}, {1, 0, 0}, {9, 1, 0}};
    const FairRoulette t(3, 5, table);
    const auto sampled = sampleFairRoulette(t, 10000, 2);
    REQUIRE(sampled.size() == 2);
    CHECK(sampled.at(Perm{2, 0, 1}) == Approx(0.9).margin(0.015));  // swapped with 0
    CHECK(sampled.at(Perm{1, 2, 0}) == Approx(0.1).margin(0.015));  // swapped with 1
  }
  SECTION("n=5: two forced pairs, rank 4 swaps with any earlier rank") {
    const Table table = {{0, 1, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 0, 0, 1, 0}, {0, 0, 1, 0, 0}, {1, 1, 1, 1, 0}};
    const FairRoulette t(5, 6, table);
    const auto sampled = sampleFairRoulette(t, 8000);
    const std::vector<Perm> swaps = {{4, 0, 3, 2, 1}, {1, 4, 3, 2, 0}, {1, 0, 4, 2, 3}, {1, 0, 3, 4, 2}};
    REQUIRE(sampled.size() == swaps.size());
    for (const Perm& p : swaps) {
      REQUIRE(isDerangement(p));
      CHECK(sampled.at(p) == Approx(0.25).margin(0.025));
    }
  }
  SECTION("a row whose free entries are all zero falls back to the free ranks") {
    // 0 -> 1 and 1 -> 2 are forced; rank 2 only likes rank 1, which is taken:
    // it must take the remaining free rank 0.
    const Table table = {{0, 1, 0}, {0, 0, 1}, {0, 1, 0}};
    const FairRoulette t(3, 7, table);
    for (std::uint64_t step = 0; step < 200; ++step) REQUIRE(t.destinations(step, 0) == Perm{1, 2, 0});
  }
}

TEST_CASE("fair roulette: a non-uniform table biases the draw toward the preferred rank", "[topology]") {
  // Rank 0 prefers rank 1 twenty to one over ranks 2 and 3.
  const Table table = {{5, 20, 1, 1}, {1, 0, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, 0}};
  const FairRoulette t(4, 11, table);
  const int steps = 20000;
  const Eigen::MatrixXd got = pairFrequencies(4, sampleFairRoulette(t, steps));
  const Eigen::MatrixXd want = pairFrequencies(4, exactFairRoulette(4, table).perms);
  INFO("measured:\n" << got << "\nexact:\n" << want);
  // Rank 0 draws first, so 20/22 of its draws go to rank 1; the dead-end swap
  // (rank 3 with rank 0) moves some of them to rank 3.
  CHECK(got(0, 1) > 0.8);
  CHECK(got(0, 1) > 10 * got(0, 2));
  CHECK(got(0, 1) > 5 * got(0, 3));
  CHECK(got(0, 0) == 0.0);  // the diagonal of the table is ignored
  CHECK((got - want).cwiseAbs().maxCoeff() < 0.015);
  for (std::uint64_t step = 0; step < 100; ++step) REQUIRE(isDerangement(t.destinations(step, 1)));
}

TEST_CASE("fair roulette: bad world sizes and probability tables are rejected", "[topology]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(FairRoulette(1, 0), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(0, 0), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(-2, 0), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(1, 0, Table{{1}}), InvalidArgument);
  const Table good = {{0, 1, 1}, {1, 0, 1}, {1, 1, 0}};
  CHECK_NOTHROW(FairRoulette(3, 0, good));
  CHECK_NOTHROW(FairRoulette(3, 0, Table{{7, 0, 1}, {0, 0, 2}, {3, 0, 0}}));

  auto with = [&](int i, int j, double v) {
    Table t = good;
    t[std::size_t(i)][std::size_t(j)] = v;
    return t;
  };
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {1, 0, 1}}), InvalidArgument);  // 2 rows
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}}),
                  InvalidArgument);  // 4 rows
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {1, 0}, {1, 1, 0}}), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {1, 0, 1}, {1, 1, 0, 1}}), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(3, 0, with(0, 1, -0.5)), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(3, 0, with(2, 0, nan)), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(3, 0, with(1, 2, inf)), InvalidArgument);
  // A row with mass only on the diagonal, or none at all.
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {0, 5, 0}, {1, 1, 0}}), InvalidArgument);
  CHECK_THROWS_AS(FairRoulette(3, 0, Table{{0, 1, 1}, {1, 0, 1}, {0, 0, 0}}), InvalidArgument);

  const FairRoulette t(4, 0);
  CHECK_THROWS_AS(t.peers(-1, 0), InvalidArgument);
  CHECK_THROWS_AS(t.peers(4, 0), InvalidArgument);
}

// ---- the conventional (unfair) random topology -----------------------------------------------

TEST_CASE("fair roulette: without fairness there are duplicates and mixing is only row-stochastic",
          "[topology]") {
  const int n = 8, steps = 60;
  const FairRoulette t(n, 77);
  Eigen::MatrixXd unfair = Eigen::MatrixXd::Identity(n, n);
  Eigen::MatrixXd fair = Eigen::MatrixXd::Identity(n, n);
  int withDuplicates = 0;
  for (int s = 0; s < steps; ++s) {
    const Perm d = t.destinationsWithoutFairness(std::uint64_t(s), 0);
    REQUIRE(d.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) {
      REQUIRE(d[std::size_t(i)] >= 0);
      REQUIRE(d[std::size_t(i)] < n);
      REQUIRE(d[std::size_t(i)] != i);
    }
    withDuplicates += std::set<int>(d.begin(), d.end()).size() < std::size_t(n);
    const Eigen::MatrixXd w = receiverAverageMatrix(d);
    CHECK(stochasticError(w, /*rowsOnly=*/true) < 1e-12);
    unfair = w * unfair;
    fair = t.mixingMatrix(std::uint64_t(s), 0) * fair;
  }
  // With 8 independent uniform draws, a step without duplicates has
  // probability 14833 / 7^8 < 0.3%.
  CHECK(withDuplicates >= steps - 2);

  // Both products approach a rank-one matrix; only the fair one approaches
  // the uniform average (the Crossover-SGD paper, Theorems 3.1 and 3.3).
  CHECK(stochasticError(unfair, /*rowsOnly=*/true) < 1e-9);
  const double columnError = (unfair.colwise().sum().array() - 1.0).abs().maxCoeff();
  INFO("largest column-sum deviation of the unfair product: " << columnError);
  CHECK(columnError > 0.05);
  CHECK(stochasticError(fair) < 1e-9);
  CHECK((fair.array() - 1.0 / n).abs().maxCoeff() < 1e-3);
}

// ---- ring ----------------------------------------------------------------------------------

TEST_CASE("ring: mixing matrices are symmetric, doubly stochastic, with the documented weights",
          "[topology]") {
  SECTION("n=1 is the identity") {
    const Ring r(1);
    const gossamer::PeerSet p = r.peers(0, 0);
    CHECK(p.sendTo.empty());
    CHECK(p.recvFrom.empty());
    CHECK(p.selfWeight == 1.0);
    CHECK(r.mixingMatrix(3).isApprox(Eigen::MatrixXd::Identity(1, 1)));
  }
  SECTION("n=2 averages the pair with weight 1/2") {
    const Ring r(2);
    const Eigen::MatrixXd w = r.mixingMatrix(0);
    CHECK((w.array() == 0.5).all());
    CHECK(r.peers(0, 0).sendTo == std::vector<int>{1});
    CHECK(r.peers(1, 0).recvFrom == std::vector<int>{0});
  }
  for (int n : {3, 8}) {
    DYNAMIC_SECTION("n=" << n << " gives weight 1/3 to self and both neighbours") {
      const Ring r(n);
      const Eigen::MatrixXd w = r.mixingMatrix(0, 0);
      CHECK((w - w.transpose()).cwiseAbs().maxCoeff() == 0.0);
      CHECK(stochasticError(w) < 1e-12);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          const int dist = std::min((i - j + n) % n, (j - i + n) % n);
          CHECK(w(i, j) == Approx(dist <= 1 ? 1.0 / 3 : 0.0).margin(1e-15));
        }
      CHECK(r.mixingMatrix(12345, 2) == w);  // static in step and segment
      const gossamer::PeerSet p = r.peers(0, 0);
      CHECK(std::set<int>(p.sendTo.begin(), p.sendTo.end()) == std::set<int>{1, n - 1});
    }
  }
  CHECK_THROWS_AS(Ring(0), InvalidArgument);
  CHECK_THROWS_AS(Ring(4).peers(4, 0), InvalidArgument);
  CHECK_THROWS_AS(Ring(4).peers(-1, 0), InvalidArgument);
}

// ---- segmentsAlongTensors ------------------------------------------------------------------

namespace {

using Segments = std::vector<std::pair<std::size_t, std::size_t>>;

/// Requires that `segs` are non-empty ranges covering [0, total) in order.
void requireContiguousCover(const Segments& segs, std::size_t total) {
  std::size_t at = 0;
  for (const auto& [b, e] : segs) {
    REQUIRE(b == at);
    REQUIRE(e > b);
    at = e;
  }
  REQUIRE(at == total);
}

}  // namespace

TEST_CASE("segmentsAlongTensors: covers everything with min(S, total) non-empty segments", "[topology]") {
  std::uint64_t state = 12345;
  auto next = [&](std::uint64_t bound) {
    state = gossamer::topologies::splitmix64(state);
    return state % bound;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::size_t> sizes(1 + next(8));
    for (auto& s : sizes) s = next(4) == 0 ? 0 : (next(3) == 0 ? 1 + next(5) : 1 + next(400));
    const int segments = 1 + int(next(12));
    const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    const Segments segs = segmentsAlongTensors(sizes, segments);
    INFO("trial " << trial << ": total " << total << ", S=" << segments);
    REQUIRE(segs.size() == std::min<std::size_t>(std::size_t(segments), total));
    requireContiguousCover(segs, total);
  }
}

TEST_CASE("segmentsAlongTensors: boundaries fall on tensor ends when all tensors are small", "[topology]") {
  std::uint64_t state = 999;
  auto next = [&](std::uint64_t bound) {
    state = gossamer::topologies::splitmix64(state);
    return state % bound;
  };
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::size_t> sizes(2 + next(20));
    for (auto& s : sizes) s = 1 + next(100);
    const int segments = 1 + int(next(sizes.size() - 1));
    const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
    if (largest * std::size_t(segments) >= total) continue;  // some tensor >= total/S
    ++checked;
    std::set<std::size_t> ends;
    std::size_t at = 0;
    for (std::size_t s : sizes) ends.insert(at += s);
    const Segments segs = segmentsAlongTensors(sizes, segments);
    REQUIRE(segs.size() == std::size_t(segments));
    requireContiguousCover(segs, total);
    for (const auto& seg : segs) {
      INFO("trial " << trial << ": segment end " << seg.second);
      REQUIRE(ends.count(seg.second) == 1);
    }
  }
  CHECK(checked > 500);
  // A hand-checked case: five tensors of 10, two segments -> split after 20 or 30.
  const Segments two = segmentsAlongTensors({10, 10, 10, 10, 10}, 2);
  REQUIRE(two.size() == 2);
  CHECK((two[0].second == 20 || two[0].second == 30));
}

TEST_CASE("segmentsAlongTensors: the MLP layer sizes split into four balanced segments", "[topology]") {
  // 784x128 weights, 128 biases, 128x10 weights, 10 biases = 101770 elements.
  const std::vector<std::size_t> sizes = {100352, 128, 1280, 10};
  const Segments segs = segmentsAlongTensors(sizes, 4);
  REQUIRE(segs.size() == 4);
  requireContiguousCover(segs, 101770);
  // The big weight is cut into four pieces of 25088; the small tensors stay
  // together in the last segment: 25088, 25088, 25088, 26506.
  std::vector<std::size_t> lengths;
  for (const auto& [b, e] : segs) lengths.push_back(e - b);
  INFO("segment sizes " << lengths[0] << " " << lengths[1] << " " << lengths[2] << " " << lengths[3]);
  const auto [mn, mx] = std::minmax_element(lengths.begin(), lengths.end());
  CHECK(double(*mx) / double(*mn) < 1.1);
  CHECK(segs.back().first <= 100352);  // the small tensors are not split
}

TEST_CASE("segmentsAlongTensors: edge cases", "[topology]") {
  const Segments one = segmentsAlongTensors({3, 4, 5}, 1);
  REQUIRE(one.size() == 1);
  CHECK(one[0] == std::make_pair(std::size_t{0}, std::size_t{12}));
  CHECK(segmentsAlongTensors({}, 3).empty());
  CHECK(segmentsAlongTensors({0, 0}, 3).empty());
  // More segments than elements: one element each.
  const Segments tiny = segmentsAlongTensors({2, 1}, 10);
  REQUIRE(tiny.size() == 3);
  requireContiguousCover(tiny, 3);
  // One huge tensor is cut into equal pieces.
  const Segments huge = segmentsAlongTensors({1000}, 4);
  REQUIRE(huge.size() == 4);
  for (const auto& [b, e] : huge) CHECK(e - b == 250);
  CHECK_THROWS_AS(segmentsAlongTensors({10}, 0), InvalidArgument);
  CHECK_THROWS_AS(segmentsAlongTensors({10}, -1), InvalidArgument);
}

TEST_CASE("randomPairing (diloco gossip) is a perfect matching every round, the same on every rank",
          "[topology][diloco]") {
  for (int n = 1; n <= 9; ++n) {
    std::set<std::vector<int>> seen;
    for (std::uint64_t round = 0; round < 50; ++round) {
      const auto partner = randomPairing(n, 42, round);
      REQUIRE(partner.size() == static_cast<std::size_t>(n));
      CHECK(partner == randomPairing(n, 42, round));
      int alone = 0;
      for (int r = 0; r < n; ++r) {
        const int q = partner[static_cast<std::size_t>(r)];
        REQUIRE(q >= 0);
        REQUIRE(q < n);
        CHECK(partner[static_cast<std::size_t>(q)] == r);
        alone += q == r;
      }
      CHECK(alone == n % 2);
      seen.insert(partner);
    }
    // The matching changes from round to round (4 ranks have 3 matchings).
    if (n >= 4) CHECK(seen.size() >= 3);
  }
  // Uniform over the matchings: 4 ranks have 3, each drawn about a third of the time.
  std::map<std::vector<int>, int> count;
  for (std::uint64_t round = 0; round < 3000; ++round) ++count[randomPairing(4, 7, round)];
  CHECK(count.size() == 3);
  for (const auto& [matching, times] : count) {
    CHECK(times > 900);
    CHECK(times < 1100);
  }
  CHECK(randomPairing(6, 1, 0) != randomPairing(6, 2, 0));
  CHECK_THROWS_AS(randomPairing(0, 1, 0), InvalidArgument);
}

namespace {
// A topology that gives rank 0 a source outside the job at step 1.
class OutsideSource final : public gossamer::Topology {
 public:
  int worldSize() const override { return 2; }
  std::string name() const override { return "outside_source"; }
  gossamer::PeerSet peers(int rank, std::uint64_t step, int) const override {
    gossamer::PeerSet p;
    p.selfWeight = 0.5;
    p.recvFrom = {rank == 0 && step == 1 ? 2 : 1 - rank};
    p.recvWeights = {0.5};
    return p;
  }
};
}  // namespace

TEST_CASE("mixingMatrix refuses a source outside the world instead of writing past the matrix",
          "[topology]") {
  const OutsideSource t;
  CHECK(t.mixingMatrix(0).sum() == Approx(2.0));
  CHECK_THROWS_WITH(t.mixingMatrix(1), Catch::Contains("source 2 at step 1, outside [0, 2)"));
}
