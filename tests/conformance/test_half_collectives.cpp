// 16-bit allreduce, broadcast and reduce (float16, bfloat16) for every
// algorithm: against a float64 reference of the same 16-bit inputs within the
// bound of collectives.hpp (one rounding per hop), the same bits on every
// rank, and half of float32's bytes on the wire (the transport's counters).
// One ctest case per algorithm, world sizes 1-9, odd lengths, over inproc;
// one case over zmq and the socket transport.
#include <catch2/catch.hpp>

#include "groups.hpp"
#include "threads.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/half.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;
using gossamer::testing::Group;

Group inprocGroup(int n) { return gossamer::testing::inprocGroup(n, kTimeout); }

template <typename H>
H narrow(float f) {
  if constexpr (std::is_same_v<H, float16>)
    return toFloat16(f);
  else
    return toBfloat16(f);
}

std::uint64_t bytesSent(const Group& g) {
  std::uint64_t b = 0;
  for (const auto& t : g) b += t->stats().bytesSent;
  return b;
}

// Runs the allreduce of one 16-bit vector per rank and checks it; returns the
// payload bytes the group sent.
template <typename H>
std::uint64_t checkHalf(Group& g, CollectiveOptions o, std::size_t len, ReduceOp op) {
  const int n = static_cast<int>(g.size());
  const auto un = static_cast<std::size_t>(n);
  std::vector<std::vector<H>> data(un, std::vector<H>(len));
  std::vector<double> exact(len, 0.0), absSum(len, 0.0), max(len, -HUGE_VAL);
  for (std::size_t r = 0; r < un; ++r) {
    std::mt19937 rng(static_cast<unsigned>(r * 7919 + len));
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    for (std::size_t i = 0; i < len; ++i) {
      const H h = narrow<H>(value(rng));
      data[r][i] = h;
      const double v = toFloat(h);
      exact[i] += v;
      absSum[i] += std::fabs(v);
      max[i] = std::max(max[i], v);
    }
  }
  const std::uint64_t before = bytesSent(g);
  onEveryRank(n, [&](int r) { allreduce<H>(*g[static_cast<std::size_t>(r)], std::span<H>(data[r]), op, o); });
  const std::uint64_t sent = bytesSent(g) - before;
  const double u = kUnitRoundoff<H>;
  const double gamma = (n - 1) * u / (1 - (n - 1) * u);  // n - 1 roundings of partial sums
  const double tiny = std::is_same_v<H, float16> ? n * std::ldexp(1.0, -24) : 0.0;  // subnormal spacing
  for (std::size_t r = 0; r < un; ++r) {
    INFO("algorithm " << toString(o.algorithm) << ", op " << int(op) << ", world size " << n << ", length "
                      << len << ", rank " << r);
    REQUIRE(std::equal(data[r].begin(), data[r].end(), data[0].begin()));  // the same bits everywhere
  }
  std::size_t wrong = 0, first = len;
  for (std::size_t i = 0; i < len; ++i) {
    const double got = toFloat(data[0][i]);
    bool ok;
    if (op == ReduceOp::kMax) {
      ok = got == max[i];
    } else if (op == ReduceOp::kSum) {
      ok = std::fabs(got - exact[i]) <= gamma * absSum[i] + tiny;
    } else {
      // Each value scaled by 1/n first (one rounding each), then summed.
      const double want = exact[i] / n;
      ok = std::fabs(got - want) <= (gamma * (1 + u) + u * (1 + 1e-6)) * absSum[i] / n + tiny;
    }
    if (!ok && wrong++ == 0) first = i;
  }
  INFO("algorithm " << toString(o.algorithm) << ", op " << int(op) << ", world size " << n << ", length "
                    << len << ": first element out of bound " << first);
  REQUIRE(wrong == 0);
  return sent;
}

// float32 with the same options and length: its bytes, for the comparison.
std::uint64_t floatBytes(Group& g, const CollectiveOptions& o, std::size_t len) {
  const int n = static_cast<int>(g.size());
  std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(len, 1.0f));
  const std::uint64_t before = bytesSent(g);
  onEveryRank(n, [&](int r) {
    allreduce<float>(*g[static_cast<std::size_t>(r)], std::span<float>(data[static_cast<std::size_t>(r)]),
                     ReduceOp::kSum, o);
  });
  return bytesSent(g) - before;
}

void checkAlgorithm(AllreduceAlgorithm algorithm) {
  std::uint64_t seq = 1;
  for (int n = 1; n <= 9; ++n) {
    Group g = inprocGroup(n);
    for (std::size_t len :
         {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{1001}, std::size_t{65537}}) {
      for (int groupSize : {0, 2}) {
        if (groupSize != 0 && algorithm != AllreduceAlgorithm::kHierarchical &&
            algorithm != AllreduceAlgorithm::kTga2d)
          continue;
        CollectiveOptions o{0, kTimeout, algorithm, 4096};
        o.groupSize = groupSize;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
          o.sequence = ++seq;
          const auto b16 = checkHalf<float16>(g, o, len, op);
          o.sequence = ++seq;
          const auto bb16 = checkHalf<bfloat16>(g, o, len, op);
          o.sequence = ++seq;
          const auto b32 = floatBytes(g, o, len);
          INFO("world size " << n << ", length " << len << ": float32 sent " << b32 << " B, float16 " << b16
                             << " B, bfloat16 " << bb16 << " B");
          CHECK(2 * b16 == b32);
          CHECK(2 * bb16 == b32);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: ring", "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kRing);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: recursive doubling",
          "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kRecursiveDoubling);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: 2D torus", "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kTorus2d);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: hierarchical",
          "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kHierarchical);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: 2D-TGA", "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kTga2d);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: HiPS", "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kHips);
}
TEST_CASE("16-bit allreduce within one rounding per hop, half the bytes: auto", "[collectives][half]") {
  checkAlgorithm(AllreduceAlgorithm::kAuto);
}

TEST_CASE("16-bit broadcast, reduce and alltoallv move 2 bytes per element, exactly", "[collectives][half]") {
  const int n = 5;
  Group g = inprocGroup(n);
  std::vector<std::vector<bfloat16>> v(n, std::vector<bfloat16>(999));
  for (std::size_t i = 0; i < 999; ++i) v[2][i] = toBfloat16(static_cast<float>(i) * 0.37f);
  const auto before = bytesSent(g);
  onEveryRank(n, [&](int r) { broadcast<bfloat16>(*g[r], std::span<bfloat16>(v[r]), 2, {1, kTimeout}); });
  for (int r = 0; r < n; ++r) CHECK(v[r] == v[2]);
  CHECK(bytesSent(g) - before == std::uint64_t{999} * 2 * (n - 1));  // binomial tree: each rank receives once
  std::vector<std::vector<float16>> w(n, std::vector<float16>(31));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 31; ++i) w[r][i] = toFloat16(static_cast<float>(r + 1) * 0.5f);
  onEveryRank(n, [&](int r) {
    reduce<float16>(*g[r], std::span<float16>(w[r]), 0, ReduceOp::kSum, {2, kTimeout});
  });
  for (std::size_t i = 0; i < 31; ++i) CHECK(toFloat(w[0][i]) == 7.5f);  // 0.5 (1 + ... + 5), exact
}

TEST_CASE("a 16-bit average overflows only where the average itself would", "[collectives][half]") {
  // 4 ranks of float16 20000: summed first, 80000 overflowed 65504 to inf.
  const int n = 4;
  Group g = inprocGroup(n);
  std::uint64_t seq = 100;
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
                               AllreduceAlgorithm::kRabenseifner, AllreduceAlgorithm::kAuto}) {
    INFO("algorithm " << toString(a));
    std::vector<std::vector<float16>> v(n, std::vector<float16>(9, toFloat16(20000.0f)));
    CollectiveOptions o{++seq, kTimeout, a, 4096};
    onEveryRank(n,
                [&](int r) { allreduce<float16>(*g[r], std::span<float16>(v[r]), ReduceOp::kAverage, o); });
    for (int r = 0; r < n; ++r)
      for (float16 x : v[r]) CHECK(toFloat(x) == 20000.0f);
  }
  // The same average through reduce, the ring reduce-scatter and the
  // algorithms called by name (not through allreduce()).
  using Call = std::function<void(Transport&, std::span<float16>, const CollectiveOptions&)>;
  const std::vector<std::pair<const char*, Call>> calls{
      {"reduce", [](Transport& t, std::span<float16> d,
                    const CollectiveOptions& o) { reduce<float16>(t, d, 1, ReduceOp::kAverage, o); }},
      {"ringReduceScatter",
       [](Transport& t, std::span<float16> d, const CollectiveOptions& o) {
         ringReduceScatter<float16>(t, d, ReduceOp::kAverage, o);
       }},
      {"ringAllreduce",
       [](Transport& t, std::span<float16> d, const CollectiveOptions& o) {
         ringAllreduce<float16>(t, d, ReduceOp::kAverage, o);
       }},
      {"recursiveDoublingAllreduce",
       [](Transport& t, std::span<float16> d, const CollectiveOptions& o) {
         recursiveDoublingAllreduce<float16>(t, d, ReduceOp::kAverage, o);
       }},
      {"hierarchicalAllreduce", [](Transport& t, std::span<float16> d, const CollectiveOptions& o) {
         hierarchicalAllreduce<float16>(t, d, ReduceOp::kAverage, o);
       }}};
  for (const auto& entry : calls) {
    const std::string name = entry.first;
    const Call& call = entry.second;  // (not a structured binding: clang 14 cannot capture one)
    INFO(name);
    std::vector<std::vector<float16>> v(n, std::vector<float16>(9, toFloat16(20000.0f)));
    CollectiveOptions o{++seq, kTimeout, AllreduceAlgorithm::kAuto, 4096};
    o.groupSize = 2;
    onEveryRank(n, [&](int r) { call(*g[r], std::span<float16>(v[r]), o); });
    for (int r = 0; r < n; ++r) {
      const bool holds = name != "reduce" || r == 1;  // reduce: the root's result only
      const auto [b, e] = name == "ringReduceScatter" ? chunkRange(9, n, r) : std::pair{0ul, 9ul};
      for (std::size_t i = b; holds && i < e; ++i) CHECK(toFloat(v[r][i]) == 20000.0f);
    }
  }
}

TEST_CASE("16-bit ring allreduce over zmq and the socket transport equals the inproc result",
          "[collectives][half]") {
  const int n = 4;
  const std::size_t len = 100001;
  std::vector<std::vector<bfloat16>> in(n, std::vector<bfloat16>(len));
  for (int r = 0; r < n; ++r) {
    std::mt19937 rng(static_cast<unsigned>(r));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (auto& x : in[r]) x = toBfloat16(value(rng));
  }
  auto run = [&](Group& g) {
    auto d = in;
    onEveryRank(n, [&](int r) {
      allreduce<bfloat16>(*g[r], std::span<bfloat16>(d[r]), ReduceOp::kAverage,
                          {7, kTimeout, AllreduceAlgorithm::kRing});
    });
    return d[0];
  };
  Group local = inprocGroup(n);
  const auto want = run(local);
  for (const char* kind : {"zmq", "socket"}) {
    Group g;
    if (std::string(kind) == "zmq") {
      g = gossamer::testing::zmqGroup(n, kTimeout);
    } else {
      MemoryStore store;
      g.resize(n);
      onEveryRank(n, [&](int r) {
        sock::Options o;
        o.rank = r;
        o.worldSize = n;
        o.timeoutSeconds = kTimeout;
        g[r] = sock::makeTransport(o, store);
      });
    }
    INFO(kind);
    CHECK(run(g) == want);
    for (auto& t : g) t->close();
  }
}
