// Sparse synchronisation schedules (the sparse-synchronisation paper (Yokoyama, Araki)_0e82f64010384eaf.txt):
// range partition, key omission, Algorithm 2 and Algorithm 3 with the direct transmission, on small schedules
// worked out by hand.
#include <catch2/catch.hpp>

#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"

using namespace gossamer;
using namespace gossamer::optimizers::sparse_sync;

namespace {

using F = std::vector<std::uint32_t>;

// The worked example: N = 3 ranks, M = 4 rounds, d = 10. D_{n,m}:
//            m0        m1      m2      m3
//   rank 0   {0,1,2}   {1,5}   {}      {0,9}
//   rank 1   {1,3}     {5,6}   {3}     {1}
//   rank 2   {}        {1,7}   {3,4}   {4}
// By feature (round: ranks):
//   f0  m0:{0} m3:{0}          f4  m2:{2} m3:{2}       f7  m1:{2}
//   f1  m0:{0,1} m1:{0,2} m3:{1}  f5  m1:{0,1}         f8  never
//   f2  m0:{0}                  f6  m1:{1}              f9  m3:{0}
//   f3  m0:{1} m2:{1,2}
TouchedFeatures example() {
  return {{{0, 1, 2}, {1, 5}, {}, {0, 9}}, {{1, 3}, {5, 6}, {3}, {1}}, {{}, {1, 7}, {3, 4}, {4}}};
}

std::string messageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST_CASE("sparse sync: feature counts and ranges balanced by them", "[sparse_sync]") {
  // counts[f] = number of (rank, round) lists holding f, read off the table:
  // f0 2, f1 5, f2 1, f3 3, f4 2, f5 2, f6 1, f7 1, f8 0, f9 1; S = 18.
  const auto counts = featureCounts(example(), 10);
  CHECK(counts == std::vector<std::uint64_t>{2, 5, 1, 3, 2, 2, 1, 1, 0, 1});
  // N = 3: bound 1 is the first j whose prefix reaches 18/3 = 6: prefix(1) =
  // 2, prefix(2) = 7 -> 2. Bound 2 reaches 12: prefix(4) = 11, prefix(5) = 13
  // -> 5. Ranges [0,2) [2,5) [5,10) with sums 7, 6, 5.
  const auto bounds = partitionRanges(counts, 3);
  CHECK(bounds == std::vector<std::size_t>{0, 2, 5, 10});
  CHECK(ownerOf(bounds, 0) == 0);
  CHECK(ownerOf(bounds, 1) == 0);
  CHECK(ownerOf(bounds, 2) == 1);
  CHECK(ownerOf(bounds, 4) == 1);
  CHECK(ownerOf(bounds, 5) == 2);
  CHECK(ownerOf(bounds, 9) == 2);
  CHECK_THROWS_AS(ownerOf(bounds, 10), InvalidArgument);
  // One rank owns everything.
  CHECK(partitionRanges(counts, 1) == std::vector<std::size_t>{0, 10});
  // More ranks than features: the first range takes the only feature (its
  // prefix 5 reaches every target r * 5 / 3), the others are empty; the owner
  // of feature 0 is rank 0.
  const auto many = partitionRanges({5}, 3);
  CHECK(many == std::vector<std::size_t>{0, 1, 1, 1});
  CHECK(ownerOf(many, 0) == 0);
  // No feature touched at all: equal lengths, r d / N.
  CHECK(partitionRanges(std::vector<std::uint64_t>(10, 0), 3) == std::vector<std::size_t>{0, 3, 6, 10});
  // Zero counts at a boundary go to the later range: {4, 0, 0, 4}, N = 2:
  // prefix(1) = 4 reaches 8/2 -> bound 1.
  CHECK(partitionRanges({4, 0, 0, 4}, 2) == std::vector<std::size_t>{0, 1, 4});
}

TEST_CASE("sparse sync: every range's sum is below S/N + the largest count", "[sparse_sync]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t d = 1 + rng() % 300;
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<std::uint64_t> counts(d);
    std::geometric_distribution<int> heavy(0.05);
    for (auto& c : counts) c = static_cast<std::uint64_t>(rng() % 4 == 0 ? 0 : heavy(rng));
    const auto bounds = partitionRanges(counts, n);
    REQUIRE(bounds.size() == static_cast<std::size_t>(n) + 1);
    CHECK(bounds.front() == 0);
    CHECK(bounds.back() == d);
    CHECK(std::is_sorted(bounds.begin(), bounds.end()));
    const double total = static_cast<double>(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}));
    const auto largest = static_cast<double>(*std::max_element(counts.begin(), counts.end()));
    for (int r = 0; r < n; ++r) {
      const auto sum = static_cast<double>(std::accumulate(
          counts.begin() + static_cast<std::ptrdiff_t>(bounds[static_cast<std::size_t>(r)]),
          counts.begin() + static_cast<std::ptrdiff_t>(bounds[static_cast<std::size_t>(r) + 1]),
          std::uint64_t{0}));
      INFO("trial " << trial << " rank " << r);
      if (total > 0) CHECK(sum < total / n + largest + 1e-9);
    }
  }
}

TEST_CASE("sparse sync: key omission splits each rank's keys by the owners' ranges", "[sparse_sync]") {
  // Ranges [0,2) [2,5) [5,10) (the case above). Round 0: rank 0's {0,1,2}
  // -> {0,1} to rank 0, {2} to rank 1; rank 1's {1,3} -> {1} to 0, {3} to 1;
  // rank 2 has nothing. Round 1: {1,5} -> {1} to 0, {5} to 2; {5,6} -> both
  // to 2; {1,7} -> {1} to 0, {7} to 2. Round 2: {3} -> 1; {3,4} -> 1.
  // Round 3: {0,9} -> {0} to 0, {9} to 2; {1} -> 0; {4} -> 1.
  const auto plan = planKeyOmission(example(), {0, 2, 5, 10});
  REQUIRE(plan.keys.size() == 4);
  CHECK(plan.keys[0][0] == std::vector<F>{{0, 1}, {2}, {}});
  CHECK(plan.keys[0][1] == std::vector<F>{{1}, {3}, {}});
  CHECK(plan.keys[0][2] == std::vector<F>{{}, {}, {}});
  CHECK(plan.keys[1][0] == std::vector<F>{{1}, {}, {5}});
  CHECK(plan.keys[1][1] == std::vector<F>{{}, {}, {5, 6}});
  CHECK(plan.keys[1][2] == std::vector<F>{{1}, {}, {7}});
  CHECK(plan.keys[2][1] == std::vector<F>{{}, {3}, {}});
  CHECK(plan.keys[2][2] == std::vector<F>{{}, {3, 4}, {}});
  CHECK(plan.keys[3][0] == std::vector<F>{{0}, {}, {9}});
  using C = std::vector<std::vector<std::size_t>>;
  CHECK(plan.counts[0] == C{{2, 1, 0}, {1, 1, 0}, {0, 0, 0}});
  CHECK(plan.counts[1] == C{{1, 0, 1}, {0, 0, 2}, {1, 0, 1}});
  CHECK(plan.counts[2] == C{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}});
  CHECK(plan.counts[3] == C{{1, 0, 1}, {1, 0, 0}, {0, 1, 0}});
  // Off the diagonal: 1+1 (round 0) + 1+2+1 (round 1) + 2 (round 2) + 1+1+1
  // (round 3) = 11 keys sent up front; the other 7 of the 18 stay local.
  CHECK(plan.keyElements == 11);
  // World size 1: everything is the rank's own.
  const auto one = planKeyOmission({{{0, 3}, {}}}, {0, 4});
  CHECK(one.counts[0] == C{{2}});
  CHECK(one.counts[1] == C{{0}});
  CHECK(one.keyElements == 0);
  // Bad input.
  CHECK(messageOf([] {
          planKeyOmission(example(), {0, 5, 10});
        }).find("need ranks + 1") != std::string::npos);
  CHECK(messageOf([] {
          planKeyOmission(example(), {0, 5, 2, 10});
        }).find("below the one before") != std::string::npos);
  CHECK(messageOf([] {
          planKeyOmission(example(), {0, 2, 5, 9});
        }).find("feature 9 outside [0, 9)") != std::string::npos);
}

TEST_CASE("sparse sync: Algorithm 2 finds the features one rank alone updates", "[sparse_sync]") {
  // Per round, the features in exactly one D_{n,m} (see the table): m0: f0 and
  // f2 (rank 0), f3 (rank 1) - f1 is on ranks 0 and 1. m1: f6 (1), f7 (2) -
  // f1 on 0 and 2, f5 on 0 and 1. m2: f4 (2) - f3 on 1 and 2. m3: f0 (0), f1
  // (1), f4 (2), f9 (0).
  const auto s = singleRankFeatures(example());
  using S = std::vector<SingleRankFeature>;
  REQUIRE(s.size() == 4);
  CHECK(s[0] == S{{0, 0}, {2, 0}, {3, 1}});
  CHECK(s[1] == S{{6, 1}, {7, 2}});
  CHECK(s[2] == S{{4, 2}});
  CHECK(s[3] == S{{0, 0}, {1, 1}, {4, 2}, {9, 0}});
  // A feature on every rank is never single; at world size 1 every feature is.
  const auto all = singleRankFeatures({{{1, 2}}, {{1}}, {{1, 2}}});
  CHECK(all[0].empty());
  const auto alone = singleRankFeatures({{{4, 8}, {}}});
  CHECK(alone[0] == S{{4, 0}, {8, 0}});
  CHECK(alone[1].empty());
}

TEST_CASE("sparse sync: Algorithm 3 replaces reduce + broadcast by direct sends", "[sparse_sync]") {
  // Per feature, the hop between consecutive touching rounds (sparse_sync.hpp):
  //  f0  m0{0} -> m3{0}: one rank, direct 0 -> 0 (kept): f0 leaves R[m0][0], B[m3][0].
  //  f1  m0{0,1} -> m1{0,2} -> m3{1}: through the owner both times (rank 1 did
  //      not touch f1 in m1, so it could not apply gradients sent to it).
  //  f3  m0{1} -> m2{1,2}: direct 1 -> 2 (1 -> 1 kept), B[m2][1], B[m2][2] go;
  //      R[m0][1] stays: m2 reduces gradients, the owner needs m0's value.
  //  f4  m2{2} -> m3{2}: kept; R[m2][2], B[m3][2] go.
  //  f2, f5, f6, f7, f9: one round each, reduce and broadcast stay.
  // Baseline 18. Reduce 18 - 2 = 16, broadcast 18 - 4 = 14, direct 1 (f3),
  // kept 3. Rate (16 + 14 + 1) / 36.
  const auto s = planDirectTransmission(example());
  CHECK(s.counts.baselineElements == 18);
  CHECK(s.counts.reduceElements == 16);
  CHECK(s.counts.broadcastElements == 14);
  CHECK(s.counts.directElements == 1);
  CHECK(s.counts.keptElements == 3);
  CHECK(s.counts.decreasingRate == Approx(31.0 / 36.0));
  CHECK(s.reduce[0] == std::vector<F>{{1, 2}, {1, 3}, {}});
  CHECK(s.reduce[1] == std::vector<F>{{1, 5}, {5, 6}, {1, 7}});
  CHECK(s.reduce[2] == std::vector<F>{{}, {3}, {3}});
  CHECK(s.reduce[3] == std::vector<F>{{0, 9}, {1}, {4}});
  CHECK(s.broadcast[0] == std::vector<F>{{0, 1, 2}, {1, 3}, {}});
  CHECK(s.broadcast[1] == std::vector<F>{{1, 5}, {5, 6}, {1, 7}});
  CHECK(s.broadcast[2] == std::vector<F>{{}, {}, {4}});
  CHECK(s.broadcast[3] == std::vector<F>{{9}, {1}, {}});
  CHECK(s.direct[0][1] == std::vector<F>{{}, {}, {3}});
  std::size_t direct = 0;
  for (const auto& m : s.direct)
    for (std::size_t src = 0; src < m.size(); ++src)
      for (std::size_t dst = 0; dst < m.size(); ++dst) {
        direct += m[src][dst].size();
        if (src == dst) CHECK(m[src][dst].empty());
      }
  CHECK(direct == 1);
  const auto e = existingSchedule(example());
  CHECK(e.reduce == e.broadcast);
  CHECK(e.counts.reduceElements == 18);
  CHECK(e.counts.directElements == 0);
  CHECK(e.counts.decreasingRate == 1.0);
}

TEST_CASE("sparse sync: gradients go straight to the one rank of the next round", "[sparse_sync]") {
  // f2 on ranks {0, 1} at m0, on rank 1 alone at m1: rank 0 sends rank 1 its
  // gradient, rank 1 (which holds m0's value) applies both; no reduce at m0,
  // no broadcast at m1; m1's reduce (the last) stays.
  const auto s = planDirectTransmission({{{2}, {}}, {{2}, {2}}});
  CHECK(s.direct[0][0][1] == F{2});
  CHECK(s.reduce[0] == std::vector<F>{{}, {}});
  CHECK(s.reduce[1] == std::vector<F>{{}, {2}});
  CHECK(s.broadcast[0] == std::vector<F>{{2}, {2}});
  CHECK(s.broadcast[1] == std::vector<F>{{}, {}});
  CHECK(s.counts.directElements == 1);
  CHECK(s.counts.keptElements == 1);
  // Rank 2 alone at m1, not among m0's ranks: through the owner.
  const auto t = planDirectTransmission({{{2}, {}}, {{2}, {}}, {{}, {2}}});
  CHECK(t.counts.directElements == 0);
  CHECK(t.counts.reduceElements == 3);
}

TEST_CASE("sparse sync: edge cases of Algorithm 3", "[sparse_sync]") {
  SECTION("empty rounds: nothing to send, rate 1") {
    const auto s = planDirectTransmission({{{}, {}}, {{}, {}}});
    CHECK(s.counts.baselineElements == 0);
    CHECK(s.counts.reduceElements == 0);
    CHECK(s.counts.directElements == 0);
    CHECK(s.counts.decreasingRate == 1.0);
    CHECK(partitionRanges(featureCounts({{{}, {}}, {{}, {}}}, 4), 2) == std::vector<std::size_t>{0, 2, 4});
  }
  SECTION("a feature touched by all ranks in every round: no direct sends") {
    // f7 on ranks 0-2 in rounds 0-1: never single, the collectives stay.
    const TouchedFeatures t{{{7}, {7}}, {{7}, {7}}, {{7}, {7}}};
    const auto s = planDirectTransmission(t);
    CHECK(s.counts.baselineElements == 6);
    CHECK(s.counts.reduceElements == 6);
    CHECK(s.counts.broadcastElements == 6);
    CHECK(s.counts.directElements == 0);
    CHECK(s.counts.decreasingRate == 1.0);
  }
  SECTION("world size 1: only kept values, the first broadcast and the last reduce stay") {
    // D = {0,1}, {1}, {0,2}. Every feature is single. f0: m0 -> m2, f1: m0 ->
    // m1: R[m0] loses f0 and f1, B[m2] loses f0, B[m1] loses f1. R[m1] {1}
    // and R[m2] {0,2} stay (no later round), B[m0] {0,1} stays (no earlier
    // round), f2 has no neighbour. Reduce 0 + 1 + 2 = 3, broadcast 2 + 0 + 1
    // = 3, kept {0,1} at m0 = 2, direct 0; rate 6 / 10.
    const auto s = planDirectTransmission({{{0, 1}, {1}, {0, 2}}});
    CHECK(s.reduce[0] == std::vector<F>{{}});
    CHECK(s.reduce[1] == std::vector<F>{{1}});
    CHECK(s.reduce[2] == std::vector<F>{{0, 2}});
    CHECK(s.broadcast[0] == std::vector<F>{{0, 1}});
    CHECK(s.broadcast[1] == std::vector<F>{{}});
    CHECK(s.broadcast[2] == std::vector<F>{{2}});
    CHECK(s.counts.keptElements == 2);
    CHECK(s.counts.directElements == 0);
    CHECK(s.counts.decreasingRate == Approx(0.6));
  }
  SECTION("a rare feature passed from rank to rank") {
    // f5 alone on rank 0 at m0, alone on rank 1 at m2, alone on rank 2 at m3:
    // 0 -> 1 after m0, 1 -> 2 after m2; only m0's broadcast (no earlier
    // round) and m3's reduce (no later round) stay: 2 collective elements of
    // 6, 2 direct; rate (1 + 1 + 2) / 6.
    const TouchedFeatures t{{{5}, {}, {}, {}}, {{}, {}, {5}, {}}, {{}, {}, {}, {5}}};
    const auto s = planDirectTransmission(t);
    CHECK(s.direct[0][0][1] == F{5});
    CHECK(s.direct[2][1][2] == F{5});
    CHECK(s.counts.reduceElements == 1);
    CHECK(s.counts.broadcastElements == 1);
    CHECK(s.counts.directElements == 2);
    CHECK(s.counts.decreasingRate == Approx(4.0 / 6.0));
  }
}

TEST_CASE("sparse sync: bad input is InvalidArgument with a clear message", "[sparse_sync]") {
  CHECK(messageOf([] { singleRankFeatures({}); }).find("no ranks") != std::string::npos);
  CHECK(messageOf([] {
          planDirectTransmission({{{1}, {2}}, {{1}}});
        }).find("rank 1 has 1 rounds, rank 0 has 2") != std::string::npos);
  CHECK(messageOf([] { singleRankFeatures({{{3, 2}}}); }).find("strictly ascending") != std::string::npos);
  CHECK(messageOf([] {
          planDirectTransmission({{{2, 2}}});
        }).find("rank 0 round 0: feature 2 at position 1") != std::string::npos);
  CHECK(messageOf([] {
          featureCounts({{{0, 12}}}, 10);
        }).find("feature 12 outside [0, 10)") != std::string::npos);
  CHECK(messageOf([] { featureCounts({{{0}}}, 0); }).find("dimension 0") != std::string::npos);
  CHECK(messageOf([] { partitionRanges({1, 2}, 0); }).find("0 ranks") != std::string::npos);
  CHECK(messageOf([] { partitionRanges({}, 2); }).find("0 feature counts") != std::string::npos);
  CHECK(messageOf([] { ownerOf({1, 4}, 2); }).find("starting at 0") != std::string::npos);
}
