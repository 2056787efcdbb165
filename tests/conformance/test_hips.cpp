// HiPS hierarchical allreduce (the HiPS paper, Algorithms 1 and 2): exact results
// against a float64 reference, bitwise agreement between ranks, argument
// checks; over inproc for world sizes 1..16 and over zmq tcp.
#include <catch2/catch.hpp>

#include "groups.hpp"
#include "threads.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/hips.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/zmq.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;
using Stage = HipsOptions::Stage;

namespace {

constexpr double kTimeout = 10.0;
using gossamer::testing::Group;

Group inprocGroup(int n) { return gossamer::testing::inprocGroup(n, kTimeout); }
Group zmqGroup(int n) { return gossamer::testing::zmqGroup(n, kTimeout); }

// Integer-valued inputs in [-1000, 1000]: every partial sum is exact in float32 and float64.
double inputValue(int rank, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(rank + 1) * 1000003u + i * 7919u) % 2001u) - 1000.0;
}

struct Case {
  std::vector<int> levels;
  Stage stage = Stage::kRing;
  std::size_t length = 0;
  ReduceOp op = ReduceOp::kSum;
  bool streams = false;
  std::size_t chunkBytes = std::size_t{1} << 20;
  std::uint64_t sequence = 5;
};

std::string describe(int n, const Case& c) {
  std::ostringstream os;
  os << "N=" << n << " levels={";
  for (int k : c.levels) os << k << ',';
  os << "} stage=" << (c.stage == Stage::kRing ? "ring" : "mesh") << " L=" << c.length
     << " op=" << static_cast<int>(c.op) << " streams=" << c.streams << " chunkBytes=" << c.chunkBytes;
  return os.str();
}

// Runs hipsAllreduce on `g` and checks every rank against the float64 reference.
template <typename T>
void check(Group& g, const Case& c) {
  const int n = static_cast<int>(g.size());
  INFO(describe(n, c));
  std::vector<std::vector<T>> data(static_cast<std::size_t>(n));
  std::vector<double> expected(c.length, c.op == ReduceOp::kMax ? -1e300 : 0.0);
  for (int r = 0; r < n; ++r) {
    auto& d = data[static_cast<std::size_t>(r)];
    d.resize(c.length);
    for (std::size_t i = 0; i < c.length; ++i) {
      d[i] = static_cast<T>(inputValue(r, i));
      expected[i] =
          c.op == ReduceOp::kMax ? std::max(expected[i], inputValue(r, i)) : expected[i] + inputValue(r, i);
    }
  }
  HipsOptions h;
  h.levels = c.levels;
  h.stage = c.stage;
  h.parallelStreams = c.streams;
  CollectiveOptions o;
  o.sequence = c.sequence;
  o.timeoutSeconds = kTimeout;
  o.chunkBytes = c.chunkBytes;
  onEveryRank(n, [&](int r) {
    hipsAllreduce<T>(*g[static_cast<std::size_t>(r)], std::span<T>(data[static_cast<std::size_t>(r)]), c.op,
                     o, h);
  });
  std::size_t wrong = 0, differing = 0;
  const T scale = T(1) / static_cast<T>(n);
  for (std::size_t i = 0; i < c.length; ++i) {
    // The sum is exact, so the average is that sum times 1/N, rounded once in T.
    const T want =
        c.op == ReduceOp::kAverage ? static_cast<T>(expected[i]) * scale : static_cast<T>(expected[i]);
    if (data[0][i] != want) ++wrong;
  }
  for (int r = 1; r < n; ++r)
    if (c.length > 0 &&
        std::memcmp(data[static_cast<std::size_t>(r)].data(), data[0].data(), c.length * sizeof(T)) != 0)
      ++differing;
  CHECK(wrong == 0);
  CHECK(differing == 0);
}

template <typename T>
void checkInproc(int n, const Case& c) {
  Group g = inprocGroup(n);
  check<T>(g, c);
}

}  // namespace

TEST_CASE("hipsAutoLevels factors the world size into ascending primes", "[hips]") {
  CHECK(hipsAutoLevels(1).empty());
  CHECK(hipsAutoLevels(7) == std::vector<int>{7});
  CHECK(hipsAutoLevels(8) == std::vector<int>{2, 2, 2});
  CHECK(hipsAutoLevels(12) == std::vector<int>{2, 2, 3});
  CHECK(hipsAutoLevels(9) == std::vector<int>{3, 3});
  CHECK(hipsAutoLevels(1001) == std::vector<int>{7, 11, 13});
  CHECK_THROWS_AS(hipsAutoLevels(0), InvalidArgument);
}

TEST_CASE("hipsPeers is Algorithm 1's GetPeers over the mixed-radix address", "[hips]") {
  const std::vector<int> levels{3, 4};  // rank = d1 + 3 d2
  CHECK(hipsPeers(7, levels, 0) == std::vector<int>{6, 7, 8});
  CHECK(hipsPeers(7, levels, 1) == std::vector<int>{1, 4, 7, 10});
  CHECK(hipsPeers(0, std::vector<int>{2, 2, 2}, 2) == std::vector<int>{0, 4});
  CHECK_THROWS_AS(hipsPeers(12, levels, 0), InvalidArgument);
  CHECK_THROWS_AS(hipsPeers(0, levels, 2), InvalidArgument);
  CHECK_THROWS_AS(hipsPeers(0, std::vector<int>{0, 4}, 0), InvalidArgument);
}

TEST_CASE("hips sums exactly for world sizes 1..16 with automatic levels", "[hips]") {
  for (int n = 1; n <= 16; ++n)
    for (Stage stage : {Stage::kRing, Stage::kMesh})
      for (std::size_t len : {0, 1, 2, 7, 1000}) {
        Case c;
        c.stage = stage;
        c.length = len;
        checkInproc<double>(n, c);
      }
}

TEST_CASE("hips sums exactly for explicit factorisations and long vectors", "[hips]") {
  const std::vector<std::vector<int>> factorisations = {
      {2, 2, 2}, {2, 4}, {4, 2}, {8},    {3, 4},    {2, 2, 3}, {4, 3},       {2, 6}, {12},
      {3, 3},    {7},    {2, 5}, {5, 3}, {1, 6, 1}, {4, 4},    {2, 2, 2, 2}, {16}};
  for (const auto& levels : factorisations) {
    int n = 1;
    for (int k : levels) n *= k;
    Group g = inprocGroup(n);
    for (Stage stage : {Stage::kRing, Stage::kMesh})
      for (std::size_t len : {0, 1, 2, 7, 1000, 100003}) {
        Case c;
        c.levels = levels;
        c.stage = stage;
        c.length = len;
        c.sequence = len;  // the same group, a fresh sequence per call
        check<double>(g, c);
      }
  }
}

TEST_CASE("hips max and average, float32 and float64", "[hips]") {
  for (auto [n, levels] : {std::pair<int, std::vector<int>>{8, {2, 2, 2}}, {12, {3, 4}}, {6, {}}, {5, {5}}})
    for (Stage stage : {Stage::kRing, Stage::kMesh})
      for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kAverage, ReduceOp::kSum})
        for (std::size_t len : {1, 7, 1000, 4099}) {
          Case c;
          c.levels = levels;
          c.stage = stage;
          c.op = op;
          c.length = len;
          checkInproc<double>(n, c);
          checkInproc<float>(n, c);
        }
}

TEST_CASE("hips pipelines chunks as small pieces", "[hips]") {
  for (Stage stage : {Stage::kRing, Stage::kMesh})
    for (std::size_t chunkBytes : {8, 24, 1000}) {
      Case c;
      c.levels = {2, 3};
      c.stage = stage;
      c.length = 5003;
      c.chunkBytes = chunkBytes;
      checkInproc<double>(6, c);
      checkInproc<float>(6, c);
    }
}

TEST_CASE("hips parallel streams run the rotated stage orders concurrently", "[hips]") {
  for (auto levels : {std::vector<int>{2, 2, 2}, std::vector<int>{3, 4}, std::vector<int>{2, 3, 2}})
    for (Stage stage : {Stage::kRing, Stage::kMesh})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage})
        for (std::size_t len : {0, 1, 2, 7, 10007}) {
          int n = 1;
          for (int k : levels) n *= k;
          Case c;
          c.levels = levels;
          c.stage = stage;
          c.op = op;
          c.length = len;
          c.streams = true;
          checkInproc<double>(n, c);
        }
}

TEST_CASE("successive hips calls with distinct sequences interleave with other collectives", "[hips]") {
  const int n = 6;
  Group g = inprocGroup(n);
  std::vector<std::vector<double>> a(n, std::vector<double>(777)), b(n, std::vector<double>(333));
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < a[0].size(); ++i) a[static_cast<std::size_t>(r)][i] = inputValue(r, i);
    for (std::size_t i = 0; i < b[0].size(); ++i) b[static_cast<std::size_t>(r)][i] = inputValue(r + 7, i);
  }
  onEveryRank(n, [&](int r) {
    auto& t = *g[static_cast<std::size_t>(r)];
    CollectiveOptions o;
    o.timeoutSeconds = kTimeout;
    HipsOptions h;
    h.stage = Stage::kMesh;
    for (std::uint64_t s = 0; s < 4; ++s) {
      o.sequence = 100 + 2 * s;
      hipsAllreduce<double>(t, std::span<double>(a[static_cast<std::size_t>(r)]), ReduceOp::kAverage, o, h);
      o.sequence = 101 + 2 * s;
      ringAllreduce<double>(t, std::span<double>(b[static_cast<std::size_t>(r)]), ReduceOp::kAverage, o);
    }
  });
  for (int r = 1; r < n; ++r) {
    CHECK(a[static_cast<std::size_t>(r)] == a[0]);
    CHECK(b[static_cast<std::size_t>(r)] == b[0]);
  }
  // The average of averages is the average: integer mean times 1/6 rounding aside, close.
  double mean0 = 0;
  for (int r = 0; r < n; ++r) mean0 += inputValue(r, 0);
  CHECK(a[0][0] == Approx(mean0 / n).epsilon(1e-12));
}

TEST_CASE("hips rejects bad levels, nested transports and large sequences", "[hips]") {
  Group g = inprocGroup(8);
  std::vector<double> v(10, 1.0);
  CollectiveOptions o;
  auto call = [&](std::vector<int> levels, Transport& t) {
    HipsOptions h;
    h.levels = std::move(levels);
    hipsAllreduce<double>(t, std::span<double>(v), ReduceOp::kSum, o, h);
  };
  CHECK_THROWS_AS(call({2, 2}, *g[0]), InvalidArgument);
  CHECK_THROWS_AS(call({2, 2, 3}, *g[0]), InvalidArgument);
  CHECK_THROWS_AS(call({16}, *g[0]), InvalidArgument);
  CHECK_THROWS_AS(call({0, 8}, *g[0]), InvalidArgument);
  CHECK_THROWS_AS(call({-2, -4}, *g[0]), InvalidArgument);
  CHECK_THROWS_AS(call({65536, 65536, 2}, *g[0]), InvalidArgument);
  {
    SubTransport sub(*g[0], {0}, 7);
    CHECK_THROWS_AS(call({1}, sub), InvalidArgument);
  }
  o.sequence = std::uint64_t{1} << 32;
  CHECK_THROWS_AS(call({2, 2, 2}, *g[0]), InvalidArgument);
  // A single rank: any valid factorisation returns at once; a bad one still throws.
  Group one = inprocGroup(1);
  o.sequence = 0;
  CHECK_NOTHROW(call({}, *one[0]));
  CHECK_NOTHROW(call({1, 1}, *one[0]));
  CHECK_THROWS_AS(call({2}, *one[0]), InvalidArgument);
  CHECK(v == std::vector<double>(10, 1.0));
}

TEST_CASE("hips over zmq tcp", "[hips]") {
  for (auto levels : {std::vector<int>{2, 2}, std::vector<int>{2, 2, 2}}) {
    int n = 1;
    for (int k : levels) n *= k;
    Group g = zmqGroup(n);
    std::uint64_t sequence = 0;
    for (Stage stage : {Stage::kRing, Stage::kMesh})
      for (std::size_t len : {0, 1, 7, 100003}) {
        Case c;
        c.levels = levels;
        c.stage = stage;
        c.length = len;
        c.sequence = sequence++;
        check<double>(g, c);
        c.op = ReduceOp::kAverage;
        c.streams = true;
        c.sequence = sequence++;
        check<float>(g, c);
      }
  }
}
