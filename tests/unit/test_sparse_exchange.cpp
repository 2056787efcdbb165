// SparseExchange (optimizers/src/sparse_sync/exchange.cpp) over the inproc
// transport, ranks as threads: sparse synchronous SGD with the existing
// schedule and with direct transmission against dense synchronous SGD
// (the sparse-synchronisation paper (Yokoyama, Araki)_0e82f64010384eaf.txt, Algorithm 1) computed here in one
// process, bit for bit; the elements sent against the schedules' counts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"
#include "gossamer/transports/inproc.hpp"
#include "threads.hpp"

using namespace gossamer;
using namespace gossamer::optimizers::sparse_sync;

namespace {

constexpr double kRate = 0.125;

// Random D: N ranks, M rounds, d features, each (rank, round) touching each
// feature with probability p (skewed: low features more often, so features
// shared by several ranks, single-rank features and both hop kinds occur).
TouchedFeatures randomTouched(std::size_t n, std::size_t m, std::uint32_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  TouchedFeatures t(n, std::vector<std::vector<std::uint32_t>>(m));
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t k = 0; k < m; ++k)
      for (std::uint32_t f = 0; f < d; ++f)
        if (u(rng) < 0.6 / (1.0 + 0.25 * f)) t[r][k].push_back(f);
  return t;
}

// The gradient rank r computes in round m for the rows `keys` of `table`
// (d x width): depends on the current values, so a stale row changes it.
std::vector<double> gradient(const std::vector<std::uint32_t>& keys, const double* table, std::size_t width,
                             std::size_t r, std::size_t m) {
  std::vector<double> g(keys.size() * width);
  for (std::size_t i = 0; i < keys.size(); ++i)
    for (std::size_t c = 0; c < width; ++c) {
      const double w = table[std::size_t{keys[i]} * width + c];
      g[i * width + c] = 0.3 * w * w - 0.7 * w + 0.01 * static_cast<double>(r + 1) +
                         0.001 * static_cast<double>((m * 7 + keys[i] * 3 + c) % 11);
    }
  return g;
}

std::vector<double> initialTable(std::size_t d, std::size_t width) {
  std::vector<double> t(d * width);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.1 * static_cast<double>(i % 13) - 0.5;
  return t;
}

// Dense synchronous SGD: the N full gradient vectors summed in rank order
// from +0.0, every row stepped, every round.
// `rounds`: the first that many rounds (all: SIZE_MAX).
std::vector<double> denseReference(const TouchedFeatures& t, std::size_t d, std::size_t width,
                                   std::size_t rounds = SIZE_MAX) {
  std::vector<double> w = initialTable(d, width);
  rounds = std::min(rounds, t[0].size());
  for (std::size_t m = 0; m < rounds; ++m) {
    std::vector<double> sum(d * width, 0.0);
    for (std::size_t r = 0; r < t.size(); ++r) {
      std::vector<double> full(d * width, 0.0);
      const auto g = gradient(t[r][m], w.data(), width, r, m);
      for (std::size_t i = 0; i < t[r][m].size(); ++i)
        for (std::size_t c = 0; c < width; ++c) full[std::size_t{t[r][m][i]} * width + c] = g[i * width + c];
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += full[i];
    }
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] - kRate * sum[i];
  }
  return w;
}

struct Run {
  std::vector<std::vector<double>> gathered;  // per rank
  std::vector<std::vector<double>> middle;    // per rank: gathered after the first half of the rounds
  ExchangeStats total;
};

Run runSparse(const TouchedFeatures& t, std::size_t d, std::size_t width, const DirectSchedule& s) {
  const int n = static_cast<int>(t.size());
  const auto bounds = partitionRanges(featureCounts(t, d), n);
  auto fabric = inproc::makeFabric(n);
  Run run;
  run.gathered.resize(t.size());
  run.middle.resize(t.size());
  std::vector<ExchangeStats> stats(t.size());
  testing::onEveryRank(n, [&](int r) {
    auto transport = inproc::makeTransport(fabric, r, 20.0);
    const auto init = initialTable(d, width);
    SparseExchange ex(*transport, t, bounds, s, width, init, 20.0);
    std::vector<double> params(d * width, -99.0);  // nothing but the exchange fills the rows used
    const auto rank = static_cast<std::size_t>(r);
    for (std::size_t m = 0; m < t[0].size(); ++m) {
      if (m == t[0].size() / 2) run.middle[rank] = ex.gather();  // between rounds: a commit
      ex.broadcast(m, params);
      const auto g = gradient(t[rank][m], params.data(), width, rank, m);
      ex.reduce(m, g, kRate, params);
    }
    run.gathered[rank] = ex.gather();
    stats[rank] = ex.stats();
  });
  for (const auto& st : stats) {
    run.total.reduceElements += st.reduceElements;
    run.total.directElements += st.directElements;
    run.total.broadcastElements += st.broadcastElements;
  }
  return run;
}

bool sameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Elements of `lists` [M][N] whose owner is not the sending rank, times width.
std::uint64_t offRankElements(const std::vector<std::vector<std::vector<std::uint32_t>>>& lists,
                              const std::vector<std::size_t>& bounds, std::size_t width) {
  std::uint64_t e = 0;
  for (const auto& round : lists)
    for (std::size_t r = 0; r < round.size(); ++r)
      for (std::uint32_t f : round[r])
        if (ownerOf(bounds, f) != static_cast<int>(r)) e += width;
  return e;
}

}  // namespace

TEST_CASE("sparse exchange: existing and direct equal dense synchronous SGD bit for bit", "[sparse_sync]") {
  for (std::size_t n : {1, 2, 3, 4}) {
    for (std::uint64_t seed : {1, 2, 3}) {
      const std::uint32_t d = 48;
      const std::size_t width = 3, rounds = 7;
      const auto t = randomTouched(n, rounds, d, seed * 100 + n);
      const auto reference = denseReference(t, d, width);
      const auto half = denseReference(t, d, width, rounds / 2);
      const auto existing = runSparse(t, d, width, existingSchedule(t));
      const auto direct = runSparse(t, d, width, planDirectTransmission(t));
      INFO("N " << n << " seed " << seed);
      for (std::size_t r = 0; r < n; ++r) {
        CHECK(sameBits(existing.gathered[r], reference));
        CHECK(sameBits(direct.gathered[r], reference));
        // With the existing schedule the owners hold every row after each
        // round: a gather between rounds is the table so far, and changes
        // nothing after it. (Direct transmission's owners hold every row at
        // the end only; what it gathered between rounds changed nothing either.)
        CHECK(sameBits(existing.middle[r], half));
      }
      // Elements sent: the schedules' lists minus what a rank owns itself.
      const auto bounds = partitionRanges(featureCounts(t, d), static_cast<int>(n));
      const auto e = existingSchedule(t), s = planDirectTransmission(t);
      CHECK(existing.total.reduceElements == offRankElements(e.reduce, bounds, width));
      CHECK(existing.total.broadcastElements == offRankElements(e.broadcast, bounds, width));
      CHECK(existing.total.directElements == 0);
      CHECK(direct.total.reduceElements == offRankElements(s.reduce, bounds, width));
      CHECK(direct.total.broadcastElements == offRankElements(s.broadcast, bounds, width));
      CHECK(direct.total.directElements == s.counts.directElements * width);
      if (n > 1)
        CHECK(direct.total.reduceElements + direct.total.directElements + direct.total.broadcastElements <
              existing.total.reduceElements + existing.total.broadcastElements);
    }
  }
}

TEST_CASE("sparse exchange: hand-made schedules, bit for bit and element for element", "[sparse_sync]") {
  // The worked example of test_sparse_sync.cpp (a direct value, owner hops,
  // a kept reduce), a direct gradient (f2: ranks {0,1} then rank 1), and a
  // feature passed from rank to rank by direct values (f5).
  const std::vector<std::pair<TouchedFeatures, std::uint32_t>> cases{
      {{{{0, 1, 2}, {1, 5}, {}, {0, 9}}, {{1, 3}, {5, 6}, {3}, {1}}, {{}, {1, 7}, {3, 4}, {4}}}, 10},
      {{{{2}, {}}, {{2}, {2}}}, 4},
      {{{{5}, {}, {}, {}}, {{}, {}, {5}, {}}, {{}, {}, {}, {5}}}, 6}};
  for (std::size_t width : {1, 2}) {
    for (const auto& [t, d] : cases) {
      const auto reference = denseReference(t, d, width);
      const auto s = planDirectTransmission(t);
      const auto direct = runSparse(t, d, width, s);
      const auto existing = runSparse(t, d, width, existingSchedule(t));
      for (std::size_t r = 0; r < t.size(); ++r) {
        CHECK(sameBits(direct.gathered[r], reference));
        CHECK(sameBits(existing.gathered[r], reference));
      }
      CHECK(direct.total.directElements == s.counts.directElements * width);
      CHECK(direct.total.directElements > 0);
    }
  }
}

TEST_CASE("sparse exchange: the schedule has single-rank and direct-gradient hops to test", "[sparse_sync]") {
  // Guards the test above: its random D exercises every kind of hop.
  const auto t = randomTouched(3, 7, 48, 303);
  const auto s = planDirectTransmission(t);
  CHECK(s.counts.directElements > 0);
  CHECK(s.counts.keptElements > 0);
  CHECK(s.counts.reduceElements < s.counts.baselineElements);
  CHECK(s.counts.broadcastElements < s.counts.baselineElements);
  // Direct sends of both kinds: values (feature touched by the sender alone)
  // and gradients (touched by several ranks in that round).
  std::size_t values = 0, gradients = 0;
  for (std::size_t m = 0; m < s.direct.size(); ++m)
    for (std::size_t src = 0; src < t.size(); ++src)
      for (std::size_t dst = 0; dst < t.size(); ++dst)
        for (std::uint32_t f : s.direct[m][src][dst]) {
          std::size_t ranks = 0;
          for (const auto& rank : t) ranks += std::binary_search(rank[m].begin(), rank[m].end(), f);
          (ranks == 1 ? values : gradients) += 1;
        }
  CHECK(values > 0);
  CHECK(gradients > 0);
}

TEST_CASE("sparse exchange: bad input is InvalidArgument", "[sparse_sync]") {
  const TouchedFeatures t{{{0, 1}, {1}}, {{1}, {2}}};
  const std::vector<std::size_t> bounds{0, 2, 4};
  const auto s = existingSchedule(t);
  auto fabric = inproc::makeFabric(2);
  auto transport = inproc::makeTransport(fabric, 0, 1.0);
  const std::vector<double> init(8, 0.0);
  CHECK_THROWS_AS(SparseExchange(*transport, t, bounds, s, 0, init, 1.0), InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, t, bounds, s, 2, std::vector<double>(7), 1.0), InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, t, {0, 4}, s, 2, init, 1.0), InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, t, {0, 2, 2}, s, 2, std::vector<double>(4), 1.0),
                  InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, t, bounds, existingSchedule({{{0}}, {{1}}}), 2, init, 1.0),
                  InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, {{{0}}, {{1}}, {{2}}}, {0, 1, 2, 4},
                                 existingSchedule({{{0}}, {{1}}, {{2}}}), 2, init, 1.0),
                  InvalidArgument);
  CHECK_THROWS_AS(SparseExchange(*transport, t, bounds, s, 2, init, 0.0), InvalidArgument);
  SparseExchange ex(*transport, t, bounds, s, 2, init, 1.0);
  std::vector<double> params(8, 0.0);
  CHECK_THROWS_AS(ex.reduce(0, std::vector<double>(4), kRate, params), InvalidArgument);  // before broadcast
  CHECK_THROWS_AS(ex.broadcast(1, params), InvalidArgument);                              // out of order
  std::vector<double> small(6, 0.0);
  CHECK_THROWS_AS(ex.broadcast(0, small), InvalidArgument);  // wrong table
}
