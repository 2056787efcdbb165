// Integer collectives (int32, int64) and the reductions MIN and PRODUCT, which
// the torch.distributed backend needs: every allreduce algorithm against an
// exact reference (integer sums and products wrap around, as torch's do; AVG
// truncates toward zero), the same bits on every rank, world sizes 1-9 and
// odd lengths over inproc; MIN and PRODUCT of doubles and 16-bit values; and
// broadcast, reduce, reduce-scatter, allgather and alltoallv of int64.
#include <catch2/catch.hpp>

#include "groups.hpp"
#include "threads.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/half.hpp"

using namespace gossamer;
using gossamer::testing::Group;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

// The exact reduction of one element over the ranks' values.
template <typename T>
T reference(ReduceOp op, const std::vector<T>& v) {
  using U = std::make_unsigned_t<T>;
  U acc = op == ReduceOp::kProduct ? U{1} : U{0};
  T best = v[0];
  for (T x : v) {
    if (op == ReduceOp::kProduct) acc = static_cast<U>(acc * static_cast<U>(x));
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc = static_cast<U>(acc + static_cast<U>(x));
    if (op == ReduceOp::kMin) best = std::min(best, x);
    if (op == ReduceOp::kMax) best = std::max(best, x);
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return best;
  if (op == ReduceOp::kAverage) return static_cast<T>(static_cast<T>(acc) / static_cast<T>(v.size()));
  return static_cast<T>(acc);
}

template <typename T>
void checkIntegers(Group& g, AllreduceAlgorithm algorithm, std::size_t len, ReduceOp op, std::uint64_t seq) {
  const auto n = g.size();
  std::vector<std::vector<T>> data(n, std::vector<T>(len));
  for (std::size_t r = 0; r < n; ++r) {
    std::mt19937_64 rng(r * 131 + len);
    for (auto& x : data[r]) {
      // Products of small values (with zeros and negatives); sums of large ones, which overflow int32.
      x = op == ReduceOp::kProduct ? static_cast<T>(static_cast<int>(rng() % 7) - 3)
                                   : static_cast<T>(rng() % (std::uint64_t{1} << 62));
    }
  }
  std::vector<T> want(len);
  for (std::size_t i = 0; i < len; ++i) {
    std::vector<T> column;
    for (std::size_t r = 0; r < n; ++r) column.push_back(data[r][i]);
    want[i] = reference(op, column);
  }
  CollectiveOptions o{seq, kTimeout, algorithm};
  o.groupSize = 2;
  onEveryRank(static_cast<int>(n), [&](int r) { allreduce<T>(*g[r], std::span<T>(data[r]), op, o); });
  for (std::size_t r = 0; r < n; ++r) {
    INFO("algorithm " << toString(algorithm) << ", op " << int(op) << ", world size " << n << ", length "
                      << len << ", rank " << r << ", " << sizeof(T) * 8 << "-bit");
    REQUIRE(data[r] == want);
  }
}

}  // namespace

TEST_CASE("int32 and int64 allreduce of every algorithm and op equals the exact reduction, world sizes 1..9",
          "[collectives][integer]") {
  std::uint64_t seq = 1;
  for (int n = 1; n <= 9; ++n) {
    Group g = gossamer::testing::inprocGroup(n, kTimeout);
    for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                   AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kTorus2d,
                   AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips})
      for (std::size_t len : {1, 7, 1001})
        for (auto op :
             {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
          checkIntegers<std::int32_t>(g, a, len, op, ++seq);
          checkIntegers<std::int64_t>(g, a, len, op, ++seq);
        }
  }
}

TEST_CASE("MIN and PRODUCT of doubles and 16-bit values, and NaN wins in MIN and MAX",
          "[collectives][integer]") {
  const int n = 5;
  Group g = gossamer::testing::inprocGroup(n, kTimeout);
  std::uint64_t seq = 1;
  for (auto a :
       {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kHips}) {
    // Rank r holds r + 1 - 2 (i % 3): products of small integers are exact in every type here.
    std::vector<std::vector<double>> d(n, std::vector<double>(33));
    std::vector<std::vector<bfloat16>> b(n, std::vector<bfloat16>(33));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < 33; ++i) {
        d[r][i] = r + 1.0 - 2.0 * static_cast<double>(i % 3);
        b[r][i] = toBfloat16(static_cast<float>(d[r][i]));
      }
    auto dm = d;
    auto bm = b;
    seq += 1;
    onEveryRank(n, [&](int r) {
      allreduce<double>(*g[r], std::span<double>(d[r]), ReduceOp::kProduct, {seq, kTimeout, a});
    });
    seq += 1;
    onEveryRank(n, [&](int r) {
      allreduce<bfloat16>(*g[r], std::span<bfloat16>(b[r]), ReduceOp::kProduct, {seq, kTimeout, a});
    });
    seq += 1;
    onEveryRank(n, [&](int r) {
      allreduce<double>(*g[r], std::span<double>(dm[r]), ReduceOp::kMin, {seq, kTimeout, a});
    });
    seq += 1;
    onEveryRank(n, [&](int r) {
      allreduce<bfloat16>(*g[r], std::span<bfloat16>(bm[r]), ReduceOp::kMin, {seq, kTimeout, a});
    });
    for (std::size_t i = 0; i < 33; ++i) {
      double prod = 1.0, min = 1e300;
      for (int r = 0; r < n; ++r) {
        prod *= r + 1.0 - 2.0 * static_cast<double>(i % 3);
        min = std::min(min, r + 1.0 - 2.0 * static_cast<double>(i % 3));
      }
      INFO("algorithm " << toString(a) << ", element " << i);
      for (int r = 0; r < n; ++r) {
        CHECK(d[r][i] == prod);
        CHECK(toFloat(b[r][i]) == static_cast<float>(prod));
        CHECK(dm[r][i] == min);
        CHECK(toFloat(bm[r][i]) == static_cast<float>(min));
      }
    }
  }
  std::vector<std::vector<double>> nan(n, std::vector<double>(3, 1.0));
  nan[3][1] = std::nan("");
  auto nanMax = nan;
  ++seq;
  onEveryRank(n, [&](int r) {
    allreduce<double>(*g[r], std::span<double>(nan[r]), ReduceOp::kMin, {seq, kTimeout});
  });
  ++seq;
  onEveryRank(n, [&](int r) {
    allreduce<double>(*g[r], std::span<double>(nanMax[r]), ReduceOp::kMax, {seq, kTimeout});
  });
  for (int r = 0; r < n; ++r) {
    CHECK(std::isnan(nan[r][1]));
    CHECK(std::isnan(nanMax[r][1]));
    CHECK(nan[r][0] == 1.0);
  }
}

TEST_CASE("int64 broadcast, reduce, reduce-scatter, allgather and alltoallv", "[collectives][integer]") {
  const int n = 4;
  Group g = gossamer::testing::inprocGroup(n, kTimeout);
  const std::int64_t big = std::int64_t{1} << 60;
  std::vector<std::vector<std::int64_t>> v(n, std::vector<std::int64_t>(8));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 8; ++i) v[r][i] = big + r * 8 + static_cast<std::int64_t>(i);
  auto b = v, red = v, rs = v, ag = v;
  onEveryRank(n, [&](int r) {
    broadcast<std::int64_t>(*g[r], std::span<std::int64_t>(b[r]), 1, {1, kTimeout});
  });
  onEveryRank(n, [&](int r) {
    reduce<std::int64_t>(*g[r], std::span<std::int64_t>(red[r]), 2, ReduceOp::kMax, {2, kTimeout});
  });
  std::vector<std::span<std::int64_t>> mine(n);
  onEveryRank(n, [&](int r) {
    mine[r] =
        ringReduceScatter<std::int64_t>(*g[r], std::span<std::int64_t>(rs[r]), ReduceOp::kMin, {3, kTimeout});
  });
  for (int r = 0; r < n; ++r)  // rank r's 2 elements of ag are valid; the allgather fills the rest
    for (std::size_t i = 0; i < 8; ++i)
      if (i / 2 != static_cast<std::size_t>(r)) ag[r][i] = -1;
  onEveryRank(n, [&](int r) {
    ringAllgather<std::int64_t>(*g[r], std::span<std::int64_t>(ag[r]), {4, kTimeout});
  });
  std::vector<std::vector<std::int64_t>> got(n, std::vector<std::int64_t>(8));
  const std::vector<std::size_t> counts(n, 2);
  onEveryRank(n, [&](int r) {
    alltoallv<std::int64_t>(*g[r], std::span<const std::int64_t>(v[r]), counts,
                            std::span<std::int64_t>(got[r]), counts, {5, kTimeout});
  });
  std::vector<std::int64_t> gathered;  // chunk s from rank s
  for (int s = 0; s < n; ++s) gathered.insert(gathered.end(), v[s].begin() + 2 * s, v[s].begin() + 2 * s + 2);
  for (int r = 0; r < n; ++r) {
    CHECK(b[r] == v[1]);
    CHECK(ag[r] == gathered);
    for (std::size_t i = 0; i < 2; ++i) CHECK(mine[r][i] == v[0][2 * r + i]);  // rank 0's are the smallest
    for (int s = 0; s < n; ++s)
      for (std::size_t i = 0; i < 2; ++i) CHECK(got[r][2 * s + i] == v[s][2 * r + i]);
  }
  CHECK(red[2] == v[3]);  // rank 3's are the largest
}
