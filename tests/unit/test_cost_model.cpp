// The allreduce cost model, auto's choice and the calibration (inproc
// threads, no sockets). No timing assertions: only the model's structure, the
// choice under a given model, and that every rank agrees.
#include <catch2/catch.hpp>

#include "threads.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/transports/inproc.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

const AllreduceAlgorithm kAlgorithms[] = {
    AllreduceAlgorithm::kRing,    AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kRabenseifner,
    AllreduceAlgorithm::kTorus2d, AllreduceAlgorithm::kHierarchical,      AllreduceAlgorithm::kTga2d,
    AllreduceAlgorithm::kHips};

std::vector<std::unique_ptr<Transport>> inprocGroup(int n) {
  auto fabric = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> g;
  for (int r = 0; r < n; ++r) g.push_back(inproc::makeTransport(fabric, r, kTimeout));
  return g;
}

CollectiveOptions costModelOptions() {
  CollectiveOptions o;
  o.useCostModel = true;
  return o;
}

}  // namespace

TEST_CASE("cost model: predictions are zero for nothing to do and grow with the vector", "[cost]") {
  for (double contention : {0.0, 0.5}) {
    CollectiveOptions o = costModelOptions();
    o.model.contention = contention;
    for (int n = 1; n <= 16; ++n)
      for (auto a : kAlgorithms) {
        INFO("algorithm " << toString(a) << ", " << n << " ranks, contention " << contention);
        CHECK(predictAllreduceSeconds(a, 0, n, o) == 0);
        double last = 0;
        for (std::size_t bytes = 4; bytes <= (std::size_t{256} << 20); bytes = bytes * 2 + 4) {
          const double t = predictAllreduceSeconds(a, bytes, n, o);
          if (n == 1)
            CHECK(t == 0);
          else
            CHECK(t > 0);
          CHECK(t >= last);
          last = t;
        }
      }
  }
  CHECK_THROWS_AS(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4, 0, CollectiveOptions{}),
                  InvalidArgument);
}

TEST_CASE("cost model: the formulas count the messages our implementations send", "[cost]") {
  CollectiveOptions o;
  auto& m = o.model;
  m.alphaSeconds = 1;
  m.betaSecondsPerByte = 0;
  m.gammaSecondsPerByte = 0;
  // Latency only: one alpha per message on the critical path.
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 4, o) == 6);  // 2 (N-1) steps
  o.chunkBytes = 256;                                                          // 1 KiB chunks, 4 pieces each
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 4, o) == 24);
  o.chunkBytes = std::size_t{1} << 20;
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRecursiveDoubling, 4096, 8, o) == 3);  // log2 N rounds
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRecursiveDoubling, 4096, 6, o) == 4);  // fold, 2, unfold
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kTorus2d, 4096, 8, o) == 3 + 2 + 3);    // 2 x 4 grid
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kHierarchical, 4096, 9, o) ==
        2 + 4 + 2);  // trees in groups of 3, ring of 3 leaders
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kHips, 4096, 12, o) ==
        2 * (1 + 1 + 2));  // levels 2, 2, 3
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kHips, 4096, 7, o) ==
        predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 7, o));  // a prime: one ring
  // Bandwidth and reduction: B bytes over N ranks.
  m = CostModel{};
  m.alphaSeconds = 0;
  m.betaSecondsPerByte = 1;
  m.gammaSecondsPerByte = 10;
  const double b = 4096;
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 4, o) == Approx(1.5 * b + 10 * 0.75 * b));
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRecursiveDoubling, 4096, 4, o) ==
        Approx(2 * b + 20 * b));
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kTorus2d, 4096, 4, o) == Approx(1.5 * b + 10 * 0.75 * b));
  // Contention: a ring on one element sends one message per step, on N
  // elements N at once.
  m = CostModel{};
  m.alphaSeconds = 1;
  m.betaSecondsPerByte = 0;
  m.gammaSecondsPerByte = 0;
  m.contention = 0.5;
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4, 8, o) == Approx(14));
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 32, 8, o) == Approx(14 * (1 + 0.5 * 7)));
}

TEST_CASE("cost model: corrections scale the formula, interpolated between sizes", "[cost]") {
  CollectiveOptions o;
  const double plain = predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 4, o);
  o.model.corrections[static_cast<std::size_t>(AllreduceAlgorithm::kRing)] = {{1024, 2.0}, {16384, 8.0}};
  CHECK(o.model.calibrated(AllreduceAlgorithm::kRing));
  CHECK_FALSE(o.model.calibrated(AllreduceAlgorithm::kHips));
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 4096, 4, o) == Approx(4.0 * plain));  // geometric
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 64, 4, o) ==
        Approx(2.0 * predictAllreduceSeconds(AllreduceAlgorithm::kRing, 64, 4, CollectiveOptions{})));
  CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kRing, 1 << 20, 4, o) ==
        Approx(8.0 * predictAllreduceSeconds(AllreduceAlgorithm::kRing, 1 << 20, 4, CollectiveOptions{})));
}

TEST_CASE("auto: recursive doubling for tiny vectors, a bandwidth-optimal algorithm for huge ones",
          "[cost]") {
  const CollectiveOptions o = costModelOptions();
  for (int n = 2; n <= 16; ++n) {
    INFO(n << " ranks");
    CHECK(chooseAllreduce(4, n, o) == AllreduceAlgorithm::kRecursiveDoubling);
    const auto huge = chooseAllreduce(std::size_t{256} << 20, n, o);
    CHECK((huge == AllreduceAlgorithm::kRing || huge == AllreduceAlgorithm::kTorus2d ||
           huge == AllreduceAlgorithm::kHips));
    for (std::size_t bytes :
         {std::size_t{4}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20}) {
      const auto pick = chooseAllreduce(bytes, n, o);
      const double t = predictAllreduceSeconds(pick, bytes, n, o);
      for (auto a : kAlgorithms) CHECK(t <= predictAllreduceSeconds(a, bytes, n, o) * (1 + 1e-9));
      CHECK(predictAllreduceSeconds(AllreduceAlgorithm::kAuto, bytes, n, o) == t);
    }
  }
  // Without the cost model: the size threshold.
  CollectiveOptions plain;
  CHECK(chooseAllreduce(plain.smallMessageBytes, 8, plain) == AllreduceAlgorithm::kRecursiveDoubling);
  CHECK(chooseAllreduce(plain.smallMessageBytes + 4, 8, plain) == AllreduceAlgorithm::kRabenseifner);
  CHECK(chooseAllreduce(plain.midMessageBytes, 8, plain) == AllreduceAlgorithm::kRabenseifner);
  CHECK(chooseAllreduce(plain.midMessageBytes + 4, 8, plain) == AllreduceAlgorithm::kRing);
  // A torus whose rows do not divide N is no candidate.
  CollectiveOptions rows = costModelOptions();
  rows.torusRows = 3;
  rows.model.corrections[static_cast<std::size_t>(AllreduceAlgorithm::kTorus2d)] = {{4, 1e-3}};
  CHECK(chooseAllreduce(std::size_t{1} << 20, 8, rows) != AllreduceAlgorithm::kTorus2d);
  CHECK(chooseAllreduce(std::size_t{1} << 20, 9, rows) == AllreduceAlgorithm::kTorus2d);
}

TEST_CASE("auto: HiPS is a candidate, and a calibrated model picks among what it measured", "[cost]") {
  CollectiveOptions o = costModelOptions();
  for (auto a : kAlgorithms)
    o.model.corrections[static_cast<std::size_t>(a)] = {{4, a == AllreduceAlgorithm::kHips ? 0.01 : 1.0}};
  CHECK(chooseAllreduce(4096, 6, o) == AllreduceAlgorithm::kHips);
  CHECK(chooseAllreduce(4004, 8, o) == AllreduceAlgorithm::kHips);
  // Where HiPS sends the same messages as an earlier candidate, that one
  // stands for it: at N = 8 (stages 2, 2, 2) and N = 4 Rabenseifner's
  // halving and doubling, at N = 2 the ring.
  CHECK(chooseAllreduce(4096, 8, o) == AllreduceAlgorithm::kRecursiveDoubling);
  CHECK(chooseAllreduce(std::size_t{1} << 20, 4, o) == AllreduceAlgorithm::kRabenseifner);
  CHECK(chooseAllreduce(std::size_t{256} << 20, 2, o) == AllreduceAlgorithm::kRing);
  // Only ring and recursive doubling measured: nothing else is picked.
  CollectiveOptions two = costModelOptions();
  two.model.corrections[static_cast<std::size_t>(AllreduceAlgorithm::kRing)] = {{4, 1.0}};
  two.model.corrections[static_cast<std::size_t>(AllreduceAlgorithm::kRecursiveDoubling)] = {{4, 1.0}};
  for (std::size_t bytes : {std::size_t{4}, std::size_t{1} << 20, std::size_t{256} << 20}) {
    const auto pick = chooseAllreduce(bytes, 16, two);
    CHECK((pick == AllreduceAlgorithm::kRing || pick == AllreduceAlgorithm::kRecursiveDoubling));
  }
  // auto runs HiPS when the model says so, with the exact sum; on a
  // SubTransport (no nested views) it falls back to the ring or doubling.
  const int n = 8;
  auto g = inprocGroup(n);
  std::vector<std::vector<double>> data(n, std::vector<double>(1001));
  onEveryRank(n, [&](int r) {
    auto& d = data[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<double>(r * 1000 + static_cast<int>(i));
    CollectiveOptions call = o;
    call.sequence = 1;
    call.timeoutSeconds = kTimeout;
    allreduce<double>(*g[static_cast<std::size_t>(r)], d, ReduceOp::kSum, call);
    std::vector<int> half;
    for (int i = r % 2; i < n; i += 2) half.push_back(i);
    SubTransport sub(*g[static_cast<std::size_t>(r)], half, 7);
    std::vector<double> x(100, 1.0);
    call.sequence = 2;
    allreduce<double>(sub, x, ReduceOp::kSum, call);
    RANK_CHECK(x == std::vector<double>(100, 4.0));
  });
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 1001; ++i)
      REQUIRE(data[static_cast<std::size_t>(r)][i] == 28000.0 + 8.0 * static_cast<double>(i));
}

TEST_CASE("auto: the remembered choice follows every change of the model and the options", "[cost]") {
  // chooseAllreduce remembers its last choices per thread. Each input is
  // varied on its own, innermost, so that a remembered choice that ignored it
  // would be returned for the next call; every answer must be the lowest
  // prediction, and each input must change some answer (or the check would
  // prove nothing).
  struct Config {
    std::size_t bytes;
    int n;
    std::size_t chunk;
    int rows, group, model;
  };
  std::vector<CollectiveOptions> models(4, costModelOptions());  // 0: the default (uncalibrated) model
  const AllreduceAlgorithm favoured[] = {AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips,
                                         AllreduceAlgorithm::kHierarchical};
  for (std::size_t m = 1; m < models.size(); ++m)
    for (auto a : kAlgorithms)
      models[m].model.corrections[static_cast<std::size_t>(a)] = {{4, a == favoured[m - 1] ? 0.01 : 1.0}};
  auto choose = [&](const Config& c) {
    CollectiveOptions o = models[static_cast<std::size_t>(c.model)];
    o.chunkBytes = c.chunk;
    o.torusRows = c.rows;
    o.groupSize = c.group;
    const auto pick = chooseAllreduce(c.bytes, c.n, o);
    // The candidates as chooseAllreduce documents them: the torus only if its
    // rows divide N, and of algorithms that send the same messages the first.
    double lowest = 1e300;
    std::vector<AllreduceAlgorithm> seen;
    for (auto a : kAlgorithms) {
      if (a == AllreduceAlgorithm::kTorus2d && c.rows > 0 && c.n % c.rows != 0) continue;
      if (std::any_of(seen.begin(), seen.end(),
                      [&](AllreduceAlgorithm e) { return sameAllreduceSchedule(e, a, c.bytes, c.n, o); }))
        continue;
      seen.push_back(a);
      lowest = std::min(lowest, predictAllreduceSeconds(a, c.bytes, c.n, o));
    }
    CHECK(predictAllreduceSeconds(pick, c.bytes, c.n, o) <= lowest * (1 + 1e-9));
    return pick;
  };
  const std::vector<std::size_t> bytes = {4, 4096, std::size_t{1} << 20, std::size_t{1} << 24};
  const std::vector<int> ns = {4, 8, 9}, rows = {0, 2, 3}, groups = {0, 1, 4};
  const std::vector<std::size_t> chunks = {64, std::size_t{1} << 20};
  const std::vector<int> modelIndex = {0, 1, 2, 3};
  // Field f varies innermost; the others run over their values.
  for (int f = 0; f < 6; ++f) {
    int changes = 0;
    for (std::size_t b : bytes)
      for (int n : ns)
        for (std::size_t chunk : chunks)
          for (int row : rows)
            for (int group : groups)
              for (int model : modelIndex) {
                Config c{b, n, chunk, row, group, model};
                // Only the base values of the varied field's own loop count.
                if ((f == 0 && b != bytes[0]) || (f == 1 && n != ns[0]) || (f == 2 && chunk != chunks[0]) ||
                    (f == 3 && row != rows[0]) || (f == 4 && group != groups[0]) || (f == 5 && model != 0))
                  continue;
                std::optional<AllreduceAlgorithm> previous;
                const std::size_t count = f == 0   ? bytes.size()
                                          : f == 1 ? ns.size()
                                          : f == 2 ? chunks.size()
                                          : f == 3 ? rows.size()
                                          : f == 4 ? groups.size()
                                                   : modelIndex.size();
                for (std::size_t k = 0; k < count; ++k) {
                  if (f == 0) c.bytes = bytes[k];
                  if (f == 1) c.n = ns[k];
                  if (f == 2) c.chunk = chunks[k];
                  if (f == 3) c.rows = rows[k];
                  if (f == 4) c.group = groups[k];
                  if (f == 5) c.model = modelIndex[k];
                  const auto pick = choose(c);
                  CHECK(choose(c) == pick);  // remembered now: the same answer
                  if (previous && *previous != pick) ++changes;
                  previous = pick;
                }
              }
    INFO("field " << f);
    CHECK(changes > 0);
  }
  // Views allowed or not: the same size and world size, first on a top-level
  // transport (2D-TGA favoured and picked), then on a view of all ranks, where
  // only the ring and recursive doubling can run.
  const int n = 4;
  auto g = inprocGroup(n);
  onEveryRank(n, [&](int r) {
    CollectiveOptions o = models[1];
    o.sequence = 1;
    o.timeoutSeconds = kTimeout;
    std::vector<float> v(1000, 1.0f);
    RANK_CHECK(chooseAllreduce(v.size() * sizeof(float), n, o) == AllreduceAlgorithm::kTga2d);
    allreduce<float>(*g[static_cast<std::size_t>(r)], v, ReduceOp::kSum, o);
    SubTransport all(*g[static_cast<std::size_t>(r)], {0, 1, 2, 3}, 9);
    o.sequence = 2;
    allreduce<float>(all, v, ReduceOp::kSum, o);  // a failure throws out of the thread
    RANK_CHECK(v[999] == 16.0f);
  });
}

TEST_CASE("calibration: every rank gets the same model, and the communicator stays in step", "[cost]") {
  CalibrationOptions c;
  c.sizes = {4, 256, 4096};
  c.reps = 2;
  c.warmups = 0;
  for (int n : {1, 3, 4}) {
    auto g = inprocGroup(n);
    std::vector<CostModel> models(static_cast<std::size_t>(n));
    std::vector<CostModel> subModels(static_cast<std::size_t>(n));
    onEveryRank(n, [&](int r) {
      Communicator comm(*g[static_cast<std::size_t>(r)], kTimeout);
      models[static_cast<std::size_t>(r)] = comm.calibrate(c);
      RANK_CHECK(comm.options().model == models[static_cast<std::size_t>(r)]);
      double x = r;
      comm.allreduce(std::span<double>(&x, 1));  // still in step after calibrating
      RANK_CHECK(x == n * (n - 1) / 2.0);
      // On a view only the ring and recursive doubling can run.
      std::vector<int> all;
      for (int i = 0; i < n; ++i) all.push_back(i);
      SubTransport sub(*g[static_cast<std::size_t>(r)], all, 9);
      CollectiveOptions o;
      o.sequence = 100;
      o.timeoutSeconds = kTimeout;
      subModels[static_cast<std::size_t>(r)] = calibrateCostModel(sub, o, c);
      RANK_CHECK(o.sequence > (n > 1 ? 100u : 99u));
    });
    for (int r = 0; r < n; ++r) {
      CHECK(models[static_cast<std::size_t>(r)] == models[0]);
      CHECK(subModels[static_cast<std::size_t>(r)] == subModels[0]);
    }
    if (n == 1) {
      CHECK(models[0] == CostModel{});
      continue;
    }
    const auto& m = models[0];
    CHECK(m.alphaSeconds > 0);
    CHECK(m.betaSecondsPerByte > 0);
    CHECK(m.gammaSecondsPerByte > 0);
    CHECK(m.contention >= 0);
    for (auto a : kAlgorithms) {
      INFO(toString(a));
      const auto& points = m.corrections[static_cast<std::size_t>(a)];
      REQUIRE(points.size() == 3);
      for (std::size_t i = 0; i < 3; ++i) {
        CHECK(points[i].bytes == c.sizes[i]);
        CHECK(points[i].factor > 0);
      }
    }
    CHECK(subModels[0].calibrated(AllreduceAlgorithm::kRing));
    CHECK(subModels[0].calibrated(AllreduceAlgorithm::kRecursiveDoubling));
    CHECK_FALSE(subModels[0].calibrated(AllreduceAlgorithm::kTorus2d));
    CHECK_FALSE(subModels[0].calibrated(AllreduceAlgorithm::kHips));
  }
}

TEST_CASE("calibration: bad settings are refused", "[cost]") {
  auto g = inprocGroup(1);
  CollectiveOptions o;
  for (const auto& sizes : std::vector<std::vector<std::size_t>>{{4}, {8, 4}, {4, 6}, {0, 4}}) {
    CalibrationOptions c;
    c.sizes = sizes;
    CHECK_THROWS_AS(calibrateCostModel(*g[0], o, c), InvalidArgument);
  }
  CalibrationOptions c;
  c.reps = 0;
  CHECK_THROWS_AS(calibrateCostModel(*g[0], o, c), InvalidArgument);
}

TEST_CASE("auto: which algorithms send the same messages", "[cost]") {
  using A = AllreduceAlgorithm;
  const CollectiveOptions o;
  // The classes of sameAllreduceSchedule among kAlgorithms, as sorted lists.
  auto classes = [&](std::size_t bytes, int n) {
    std::vector<std::vector<A>> out;
    for (auto a : kAlgorithms) {
      auto same = std::find_if(out.begin(), out.end(), [&](const std::vector<A>& c) {
        return sameAllreduceSchedule(c.front(), a, bytes, n, o);
      });
      if (same == out.end())
        out.push_back({a});
      else
        same->push_back(a);
    }
    // An equivalence: every member of a class matches every other, nothing outside it.
    for (const auto& c : out)
      for (auto a : kAlgorithms) {
        const bool in = std::find(c.begin(), c.end(), a) != c.end();
        for (auto b : c) CHECK(sameAllreduceSchedule(a, b, bytes, n, o) == in);
      }
    return out;
  };
  // Rabenseifner (halving and doubling over the largest power of two) is
  // the ring at N = 2, the 2 x 2 torus at N = 4 and HiPS at N = 8 (its stages
  // of two), where each chunk holds something; at N = 3 it folds first.
  const std::vector<std::vector<A>> prime = {
      {A::kRing, A::kRabenseifner, A::kTorus2d, A::kHierarchical, A::kTga2d, A::kHips},
      {A::kRecursiveDoubling}};
  const std::vector<std::vector<A>> three = {{A::kRing, A::kTorus2d, A::kHierarchical, A::kTga2d, A::kHips},
                                             {A::kRecursiveDoubling},
                                             {A::kRabenseifner}};
  const std::vector<std::vector<A>> four = {{A::kRing},
                                            {A::kRecursiveDoubling},
                                            {A::kRabenseifner, A::kTorus2d, A::kHips},
                                            {A::kHierarchical},
                                            {A::kTga2d}};
  const std::vector<std::vector<A>> eight = {
      {A::kRing},    {A::kRecursiveDoubling}, {A::kRabenseifner, A::kHips},
      {A::kTorus2d}, {A::kHierarchical},      {A::kTga2d}};
  // Where a chunk is empty (one element) or the lengths are odd, the model's
  // chunks of Rabenseifner and of the grids differ: it stands alone.
  const auto alone = [](std::vector<std::vector<A>> c) {
    for (auto& k : c) std::erase(k, A::kRabenseifner);
    c.push_back({A::kRabenseifner});
    std::erase_if(c, [](const auto& k) { return k.empty(); });
    // Classes in the order of their first member among kAlgorithms.
    const auto at = [](A a) { return std::find(std::begin(kAlgorithms), std::end(kAlgorithms), a); };
    std::sort(c.begin(), c.end(),
              [&](const auto& x, const auto& y) { return at(x.front()) < at(y.front()); });
    return c;
  };
  // At N = 4 on one element the tree reduce of two ranks is the 2-ring's
  // reduce-scatter (one message to the leader), so hierarchical joins them:
  // 1->0 and 3->2, 0->2, 2->0, 0->1 and 2->3 for all three.
  const std::vector<std::vector<A>> fourTiny = {
      {A::kRing}, {A::kRecursiveDoubling}, {A::kTorus2d, A::kHierarchical, A::kHips}, {A::kTga2d}};
  // The sizes of scripts/bench-allreduce.sh --auto-check, and an odd length.
  for (std::size_t bytes : {std::size_t{4}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20,
                            std::size_t{16} << 20, std::size_t{4} * 1001}) {
    INFO(bytes << " bytes");
    const bool tiny = bytes == 4, odd = bytes == 4 * 1001;
    CHECK(classes(bytes, 2) == (tiny ? alone(prime) : prime));
    CHECK(classes(bytes, 3) == three);
    CHECK(classes(bytes, 4) == (tiny ? alone(fourTiny) : odd ? alone(four) : four));
    CHECK(classes(bytes, 8) == (tiny || odd ? alone(eight) : eight));
  }
  // Other grid and group sizes change the schedules: a 4 x 1 torus is a
  // ring of the columns, groups of one rank make hierarchical the ring of
  // their leaders; 2D-TGA in one group of 4 is a ring of four plus a
  // broadcast (the implementation broadcasts even then), so no ring.
  CollectiveOptions tall;
  tall.torusRows = 4;
  CHECK(sameAllreduceSchedule(A::kTorus2d, A::kRing, 4096, 4, tall));
  CHECK_FALSE(sameAllreduceSchedule(A::kTorus2d, A::kHips, 4096, 4, tall));
  CollectiveOptions single;
  single.groupSize = 1;
  CHECK(sameAllreduceSchedule(A::kHierarchical, A::kRing, 4096, 8, single));
  CollectiveOptions whole;
  whole.groupSize = 4;
  CHECK_FALSE(sameAllreduceSchedule(A::kTga2d, A::kRing, 4096, 4, whole));
  // auto is its pick; nothing to send makes everything the same.
  CollectiveOptions model = costModelOptions();
  CHECK(sameAllreduceSchedule(A::kAuto, chooseAllreduce(4096, 8, model), 4096, 8, model));
  CHECK(sameAllreduceSchedule(A::kRing, A::kRecursiveDoubling, 0, 8, o));
  CHECK(sameAllreduceSchedule(A::kRing, A::kRecursiveDoubling, 4096, 1, o));
  CHECK_THROWS_AS(sameAllreduceSchedule(A::kRing, A::kRing, 4, 0, o), InvalidArgument);
}
