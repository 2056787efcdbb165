// Cost model of the allreduce algorithms, the automatic choice, and the
// calibration that measures the model on a transport.
//
// The model follows paper 000_a4345579c41fcb1d.txt, Table 2: each algorithm
// is a sequence of synchronous rounds, and a round in which every sender
// sends `hops` messages carrying `bytes` in all, and every receiver reduces
// `reduced` bytes, costs hops alpha + bytes beta + reduced gamma. The rounds
// below are those of our implementations (collectives.cpp,
// collectives_grid.cpp, hips.cpp), not the paper's idealised ones: ring
// pieces of at most chunkBytes are separate messages; recursive doubling
// folds the ranks above the largest power of two; the hierarchical
// allreduce uses binomial trees inside the groups; 2D-TGA's leaders run the
// 2D torus; HiPS runs ring stages over the prime factors of N.
//
// Two terms measure what the formula leaves out (see CostModel): the
// contention factor 1 + contention (c - 1) of a round with c concurrent
// senders, and per-algorithm corrections measured at a few sizes.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "collectives_detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/hips.hpp"
#include "gossamer/sub_transport.hpp"

namespace gossamer {

namespace {

constexpr double kElementBytes = 4;  // float32: where the algorithms cut the vector into chunks

// One synchronous round: each of `concurrency` senders sends `hops` messages
// (one after another) carrying `bytes` in all; each receiver reduces `reduced`.
struct Round {
  double hops = 0, concurrency = 1, bytes = 0, reduced = 0;
  friend auto operator<=>(const Round&, const Round&) = default;
};
using Rounds = std::vector<Round>;

std::size_t index(AllreduceAlgorithm a) { return static_cast<std::size_t>(a); }

// The ring's two phases (either or both) over n ranks on a vector of `elems`
// elements, with `groups` such rings running at once (Ring in
// collectives.cpp): n chunks whose lengths differ by at most one, each step
// sending one chunk as pieces of at most chunkBytes. Only the ranks whose
// chunk is non-empty send, so a vector of fewer than n elements has fewer
// concurrent senders.
void addRing(Rounds& out, double elems, int n, double groups, bool reduceScatter, bool allgather,
             const CollectiveOptions& o) {
  if (n <= 1 || elems <= 0 || groups <= 0) return;
  const double chunkElems = std::ceil(elems / n);
  const double pieceElems = std::max(1.0, std::floor(static_cast<double>(o.chunkBytes) / kElementBytes));
  const double maxPieces = std::floor((Tag::kMaxSegment + 1.0) / (2.0 * (n - 1)));
  const double pieces = std::clamp(std::ceil(chunkElems / pieceElems), 1.0, std::max(1.0, maxPieces));
  const double chunk = chunkElems * kElementBytes;
  const double senders = groups * std::min<double>(n, elems);
  if (reduceScatter) out.push_back({(n - 1) * pieces, senders, (n - 1) * chunk, (n - 1) * chunk});
  if (allgather) out.push_back({(n - 1) * pieces, senders, (n - 1) * chunk, 0});
}

// Binomial reduce (or broadcast) of `bytes` inside `groups` groups of g ranks
// (reduce / broadcast in collectives.cpp): in the round of mask m the ranks
// whose lowest set bit is m send their whole vector, one message.
void addTree(Rounds& out, double bytes, int g, double groups, bool reduces) {
  for (int mask = 1; mask < g; mask <<= 1) {
    int senders = 0;
    for (int v = 1; v < g; ++v)
      if ((v & -v) == mask) ++senders;
    out.push_back({1, groups * senders, bytes, reduces ? bytes : 0});
  }
}

// 2D torus over n ranks in `rows` x (n / rows) (torusOn in collectives_grid.cpp):
// ring reduce-scatter along the rows, ring allreduce of the owned chunk down
// the columns, ring allgather along the rows.
void addTorus(Rounds& out, double elems, int n, int rows, const CollectiveOptions& o) {
  const int cols = n / rows;
  addRing(out, elems, cols, rows, true, false, o);
  addRing(out, std::ceil(elems / cols), rows, std::min<double>(cols, elems), true, true, o);
  addRing(out, elems, cols, rows, false, true, o);
}

int groupSizeOf(int n, const CollectiveOptions& o) {
  return o.groupSize > 0 ? std::min(o.groupSize, n) : detail::squarestDivisor(n);
}

Rounds roundsOf(AllreduceAlgorithm algorithm, std::size_t bytes, int n, const CollectiveOptions& o) {
  Rounds out;
  const double b = static_cast<double>(bytes);
  const double elems = std::ceil(b / kElementBytes);
  switch (algorithm) {
    case AllreduceAlgorithm::kAuto:
    case AllreduceAlgorithm::kRing:
      addRing(out, elems, n, 1, true, true, o);
      break;
    case AllreduceAlgorithm::kRecursiveDoubling: {
      int p = 1;
      while (p * 2 <= n) p *= 2;
      const int rem = n - p;
      if (rem > 0) out.push_back({1, static_cast<double>(rem), b, b});  // fold
      for (int m = 1; m < p; m <<= 1) out.push_back({1, static_cast<double>(p), b, b});
      if (rem > 0) out.push_back({1, static_cast<double>(rem), b, 0});  // unfold
      break;
    }
    case AllreduceAlgorithm::kTorus2d:
      addTorus(out, elems, n, o.torusRows > 0 ? o.torusRows : detail::squarestDivisor(n), o);
      break;
    case AllreduceAlgorithm::kHierarchical: {
      const int g = groupSizeOf(n, o), groups = (n + g - 1) / g;
      addTree(out, b, g, groups, true);
      addRing(out, elems, groups, 1, true, true, o);
      addTree(out, b, g, groups, false);
      break;
    }
    case AllreduceAlgorithm::kTga2d: {
      const int g = groupSizeOf(n, o), groups = (n + g - 1) / g;
      addRing(out, elems, g, groups, true, true, o);
      if (groups > 1) addTorus(out, elems, groups, detail::squarestDivisor(groups), o);
      addTree(out, b, g, groups, false);
      break;
    }
    case AllreduceAlgorithm::kHips: {
      // Stage i: N / k_i rings of k_i ranks on the portion left by stage i-1;
      // only the groups whose portion is non-empty send.
      const auto levels = hipsAutoLevels(n);
      Rounds gathers;
      double portion = elems, nonEmpty = 1;  // product over earlier stages of min(k_j, portion_j)
      double later = n;                      // product of k_j over this and later stages
      for (int k : levels) {
        later /= k;
        const double groups = nonEmpty * later;
        addRing(out, portion, k, groups, true, false, o);
        Rounds g;
        addRing(g, portion, k, groups, false, true, o);
        gathers.insert(gathers.begin(), g.begin(), g.end());
        nonEmpty *= std::min<double>(k, portion);
        portion = std::ceil(portion / k);
      }
      out.insert(out.end(), gathers.begin(), gathers.end());
      break;
    }
  }
  return out;
}

// The formula's seconds (no corrections).
double formulaSeconds(const Rounds& rounds, const CostModel& m) {
  double t = 0;
  for (const auto& r : rounds)
    t += (r.hops * m.alphaSeconds + r.bytes * m.betaSecondsPerByte + r.reduced * m.gammaSecondsPerByte) *
         (1 + m.contention * (r.concurrency - 1));
  return t;
}

double correction(const std::vector<CostCorrection>& points, std::size_t bytes) {
  if (points.empty()) return 1;
  if (bytes <= points.front().bytes) return points.front().factor;
  if (bytes >= points.back().bytes) return points.back().factor;
  for (std::size_t i = 0; i + 1 < points.size(); ++i) {
    const auto& lo = points[i];
    const auto& hi = points[i + 1];
    if (bytes > hi.bytes) continue;
    const double x = std::log(static_cast<double>(bytes) / static_cast<double>(lo.bytes)) /
                     std::log(static_cast<double>(hi.bytes) / static_cast<double>(lo.bytes));
    return lo.factor * std::pow(hi.factor / lo.factor, x);
  }
  return points.back().factor;
}

bool needsViews(AllreduceAlgorithm a) {
  return a == AllreduceAlgorithm::kTorus2d || a == AllreduceAlgorithm::kHierarchical ||
         a == AllreduceAlgorithm::kTga2d || a == AllreduceAlgorithm::kHips;
}

bool torusFits(int n, const CollectiveOptions& o) { return o.torusRows <= 0 || n % o.torusRows == 0; }

}  // namespace

bool sameAllreduceSchedule(AllreduceAlgorithm a, AllreduceAlgorithm b, std::size_t bytes, int n,
                           const CollectiveOptions& o) {
  GOSSAMER_ENFORCE(n >= 1, "world size " << n << " must be >= 1");
  if (n == 1 || bytes == 0) return true;
  if (a == AllreduceAlgorithm::kAuto) a = chooseAllreduce(bytes, n, o);
  if (b == AllreduceAlgorithm::kAuto) b = chooseAllreduce(bytes, n, o);
  return a == b || roundsOf(a, bytes, n, o) == roundsOf(b, bytes, n, o);
}

double predictAllreduceSeconds(AllreduceAlgorithm algorithm, std::size_t bytes, int n,
                               const CollectiveOptions& o) {
  GOSSAMER_ENFORCE(n >= 1, "world size " << n << " must be >= 1");
  if (n == 1 || bytes == 0) return 0;
  if (algorithm == AllreduceAlgorithm::kAuto) algorithm = chooseAllreduce(bytes, n, o);
  return formulaSeconds(roundsOf(algorithm, bytes, n, o), o.model) *
         correction(o.model.corrections[index(algorithm)], bytes);
}

namespace {

AllreduceAlgorithm predictLowest(std::size_t bytes, int n, const CollectiveOptions& o, bool viewsAllowed) {
  std::vector<AllreduceAlgorithm> candidates;
  for (auto a :
       {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kTorus2d,
        AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips}) {
    if (needsViews(a) && !viewsAllowed) continue;
    if (a == AllreduceAlgorithm::kTorus2d && !torusFits(n, o)) continue;
    candidates.push_back(a);
  }
  // A calibrated model only trusts what it measured.
  std::vector<AllreduceAlgorithm> measured;
  std::copy_if(candidates.begin(), candidates.end(), std::back_inserter(measured),
               [&](AllreduceAlgorithm a) { return o.model.calibrated(a); });
  if (!measured.empty()) candidates = measured;
  // An algorithm whose rounds are those of an earlier candidate sends the same
  // messages (sameAllreduceSchedule: at a prime N every ring-based one is the
  // ring; at N = 4 HiPS is the 2 x 2 torus): the earlier, simpler one stands
  // for it, so calibration noise between identical schedules does not decide.
  std::vector<Rounds> seen;
  AllreduceAlgorithm best = candidates.front();
  double bestT = predictAllreduceSeconds(best, bytes, n, o);
  seen.push_back(roundsOf(best, bytes, n, o));
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    auto rounds = roundsOf(candidates[i], bytes, n, o);
    if (std::find(seen.begin(), seen.end(), rounds) != seen.end()) continue;
    seen.push_back(std::move(rounds));
    const double t = predictAllreduceSeconds(candidates[i], bytes, n, o);
    if (t < bestT * (1 - 1e-9)) {  // ties keep the earlier (simpler) algorithm
      best = candidates[i];
      bestT = t;
    }
  }
  return best;
}

// What the choice depends on, the model aside.
struct ChoiceKey {
  std::size_t bytes = 0, chunkBytes = 0;
  int n = 0, torusRows = 0, groupSize = 0;
  bool viewsAllowed = false;
  friend bool operator==(const ChoiceKey&, const ChoiceKey&) = default;
};

// The last choices of this thread under one model. Predicting costs 1-2 us
// of allocations and arithmetic per call at 8 ranks (more with cold caches),
// spent by every rank before its first send; with 8 ranks sharing 2 cores,
// auto measured 5-10% slower than the algorithm it picked at 4 B-4 KiB
// (median of 6 launches), and within noise of it with the choice remembered.
struct ChoiceCache {
  static constexpr std::size_t kEntries = 16;
  bool valid = false;
  CostModel model;
  std::array<std::pair<ChoiceKey, AllreduceAlgorithm>, kEntries> entries{};
  std::size_t used = 0, next = 0;  // filled entries; the one replaced next (round robin)
};

}  // namespace

namespace detail {

AllreduceAlgorithm chooseAllreduce(std::size_t bytes, int n, const CollectiveOptions& o, bool viewsAllowed) {
  if (!o.useCostModel)
    return bytes <= o.smallMessageBytes ? AllreduceAlgorithm::kRecursiveDoubling : AllreduceAlgorithm::kRing;
  thread_local ChoiceCache cache;
  const ChoiceKey key{bytes, o.chunkBytes, n, o.torusRows, o.groupSize, viewsAllowed};
  const bool sameModel = cache.valid && cache.model == o.model;
  if (sameModel)
    for (std::size_t i = 0; i < cache.used; ++i)
      if (cache.entries[i].first == key) return cache.entries[i].second;
  // Predict before touching the cache, so that a nested choice (under
  // another model) cannot leave this one filed under the wrong model.
  const auto best = predictLowest(bytes, n, o, viewsAllowed);
  if (!sameModel) {
    cache.model = o.model;
    cache.valid = true;
    cache.used = cache.next = 0;
  }
  cache.entries[cache.next] = {key, best};
  cache.next = (cache.next + 1) % ChoiceCache::kEntries;
  cache.used = std::max(cache.used, cache.next == 0 ? ChoiceCache::kEntries : cache.next);
  return best;
}

}  // namespace detail

AllreduceAlgorithm chooseAllreduce(std::size_t bytes, int n, const CollectiveOptions& o) {
  return detail::chooseAllreduce(bytes, n, o, true);
}

namespace {

// Control tags, apart from Communicator::barrier's.
void controlBarrier(Transport& t, std::uint64_t sequence, double timeout) {
  detail::disseminationBarrier(t, Op::kControl, sequence, timeout);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Seconds per byte of a local float32 sum (the best of three 4 MiB runs).
double measureGamma() {
  const std::size_t n = std::size_t{1} << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    detail::combine(ReduceOp::kSum, a.data(), b.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  volatile float sink = a[n / 2];  // keep the loop
  (void)sink;
  return best / static_cast<double>(n * sizeof(float));
}

// The model as doubles, for the broadcast: 4 scalars, then per algorithm the
// number of points and (bytes, factor) pairs, padded to `points` entries.
std::vector<double> pack(const CostModel& m, std::size_t points) {
  std::vector<double> v = {m.alphaSeconds, m.betaSecondsPerByte, m.gammaSecondsPerByte, m.contention};
  for (const auto& list : m.corrections) {
    v.push_back(static_cast<double>(list.size()));
    for (std::size_t i = 0; i < points; ++i) {
      v.push_back(i < list.size() ? static_cast<double>(list[i].bytes) : 0.0);
      v.push_back(i < list.size() ? list[i].factor : 0.0);
    }
  }
  return v;
}

CostModel unpack(const std::vector<double>& v, std::size_t points) {
  CostModel m;
  m.alphaSeconds = v[0];
  m.betaSecondsPerByte = v[1];
  m.gammaSecondsPerByte = v[2];
  m.contention = v[3];
  std::size_t at = 4;
  for (auto& list : m.corrections) {
    const auto count = static_cast<std::size_t>(v[at++]);
    for (std::size_t i = 0; i < points; ++i, at += 2)
      if (i < count) list.push_back({static_cast<std::size_t>(v[at]), v[at + 1]});
  }
  return m;
}

// Alpha, contention and beta from the ring's median times at the sizes
// (ascending); then every algorithm's corrections.
CostModel fit(const std::vector<std::size_t>& sizes, const std::vector<AllreduceAlgorithm>& algorithms,
              const std::vector<std::vector<double>>& seconds, int n, double gamma,
              const CollectiveOptions& o) {
  CostModel m;
  m.gammaSecondsPerByte = gamma;
  const auto& ring = seconds[0];  // algorithms[0] is the ring
  const auto sums = [&](std::size_t bytes) {
    double hops = 0, hopsBusy = 0, busyLoad = 0, reduced = 0, sent = 0;
    for (const auto& r : roundsOf(AllreduceAlgorithm::kRing, bytes, n, o)) {
      hops += r.hops;
      hopsBusy += r.hops * (r.concurrency - 1);
      const double load = 1 + m.contention * (r.concurrency - 1);
      busyLoad += r.hops * load;
      reduced += r.reduced * load;
      sent += r.bytes * load;
    }
    return std::array<double, 5>{hops, hopsBusy, busyLoad, reduced, sent};
  };
  // Alpha: at the first size the ring's time is (almost) all latency.
  m.alphaSeconds = ring.front() / std::max(sums(sizes.front())[0], 1.0);
  // Contention: at the second size every rank sends at once.
  if (sizes.size() >= 3) {
    const auto s = sums(sizes[1]);
    if (s[1] > 0) m.contention = std::clamp((ring[1] / m.alphaSeconds - s[0]) / s[1], 0.0, 10.0);
  }
  // Beta: what the last size's time leaves after latency and reduction.
  const auto s = sums(sizes.back());
  const double rest = ring.back() - s[2] * m.alphaSeconds - s[3] * m.gammaSecondsPerByte;
  m.betaSecondsPerByte = std::max(rest / std::max(s[4], 1.0), 1e-13);
  for (std::size_t a = 0; a < algorithms.size(); ++a) {
    auto& list = m.corrections[index(algorithms[a])];
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const double predicted = formulaSeconds(roundsOf(algorithms[a], sizes[i], n, o), m);
      const double factor = predicted > 0 ? seconds[a][i] / predicted : 1.0;
      list.push_back({sizes[i], std::clamp(factor, 1e-3, 1e3)});
    }
  }
  return m;
}

}  // namespace

CostModel calibrateCostModel(Transport& transport, CollectiveOptions& options,
                             const CalibrationOptions& calibration) {
  const auto& sizes = calibration.sizes;
  GOSSAMER_ENFORCE(sizes.size() >= 2, "calibration needs at least two sizes, got " << sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    GOSSAMER_ENFORCE(sizes[i] > 0 && sizes[i] % sizeof(float) == 0,
                     "calibration size " << sizes[i] << " is not a positive multiple of 4 bytes");
    GOSSAMER_ENFORCE(i == 0 || sizes[i] > sizes[i - 1], "calibration sizes must be ascending");
  }
  GOSSAMER_ENFORCE(calibration.reps >= 1 && calibration.warmups >= 0 && calibration.passes >= 1 &&
                       calibration.secondsPerSize >= 0,
                   "calibration reps " << calibration.reps << ", warm-ups " << calibration.warmups
                                       << ", passes " << calibration.passes << ", seconds per size "
                                       << calibration.secondsPerSize);
  const int n = transport.worldSize();
  if (n == 1) return options.model;
  const bool views = dynamic_cast<SubTransport*>(&transport) == nullptr;

  // The ring first (the fit needs it), then the others, each once.
  std::vector<AllreduceAlgorithm> algorithms = {AllreduceAlgorithm::kRing};
  const std::vector<AllreduceAlgorithm> all = {
      AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kTorus2d, AllreduceAlgorithm::kHierarchical,
      AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips};
  for (auto a : calibration.algorithms.empty() ? all : calibration.algorithms) {
    if (a == AllreduceAlgorithm::kAuto ||
        std::find(algorithms.begin(), algorithms.end(), a) != algorithms.end())
      continue;
    if (needsViews(a) && !views) continue;
    if (a == AllreduceAlgorithm::kTorus2d && !torusFits(n, options)) continue;
    algorithms.push_back(a);
  }

  const double gamma = measureGamma();
  const std::size_t k = algorithms.size(), count = sizes.size();
  std::vector<float> buffer(sizes.back() / sizeof(float));
  CollectiveOptions o = options;
  o.useCostModel = false;
  auto run = [&](AllreduceAlgorithm a, std::span<float> data) {
    std::fill(data.begin(), data.end(), 1.0f);
    o.algorithm = a;
    o.sequence = options.sequence++;
    allreduce<float>(transport, data, ReduceOp::kSum, o);
  };
  // The slowest rank's value of every entry, on every rank.
  auto slowest = [&](std::span<double> values) {
    o.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
    o.sequence = options.sequence++;
    allreduce<double>(transport, values, ReduceOp::kMax, o);
  };
  std::vector<std::size_t> order(k);
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;  // xorshift64: the same shuffles on every rank
  auto random = [&](std::size_t bound) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::size_t>(state % bound);
  };
  // Pass 0 warms every size up and sizes its repetitions; the timed calls
  // of a size are then spread over the passes (each later one starting the
  // size with one untimed round), and the median is over all of them.
  const auto passes = static_cast<std::size_t>(calibration.passes);
  std::vector<std::size_t> reps(count, static_cast<std::size_t>(calibration.reps));
  std::vector<std::vector<std::vector<double>>> times(count, std::vector<std::vector<double>>(k));
  // The very first calls also set up connections and fault in scratch: one
  // untimed round at the first size, so that the warm-up round that sizes its
  // repetitions is not this one (it was 10-30 times slower at 8 ranks, and
  // the 4-byte size got 7 timed calls where the budget allows about 130).
  {
    std::span<float> data(buffer.data(), sizes.front() / sizeof(float));
    for (auto a : algorithms) {
      controlBarrier(transport, options.sequence++, options.timeoutSeconds);
      run(a, data);
    }
  }
  for (std::size_t pass = 0; pass < passes; ++pass) {
    for (std::size_t s = 0; s < count; ++s) {
      std::span<float> data(buffer.data(), sizes[s] / sizeof(float));
      const int warmups = pass == 0 ? calibration.warmups : std::min(calibration.warmups, 1);
      for (int w = 0; w < warmups; ++w) {
        const auto t0 = std::chrono::steady_clock::now();
        for (auto a : algorithms) {
          // The barrier as in a timed round, so that the round's time sizes
          // the repetitions with it (on a loaded host it can cost more than
          // a small allreduce).
          controlBarrier(transport, options.sequence++, options.timeoutSeconds);
          run(a, data);
        }
        if (pass == 0 && w == 0 &&
            calibration.secondsPerSize > 0) {  // the first warm-up sizes the repetitions
          double round = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          slowest(std::span<double>(&round, 1));
          const double fit = std::floor(calibration.secondsPerSize / std::max(round, 1e-9));
          reps[s] = static_cast<std::size_t>(
              std::clamp(fit, static_cast<double>(calibration.reps),
                         static_cast<double>(std::max(calibration.maxReps, calibration.reps))));
        }
      }
      // This pass's share of the repetitions (at least one).
      const std::size_t share =
          std::max<std::size_t>(1, reps[s] / passes + (pass < reps[s] % passes ? 1 : 0));
      std::vector<double> t(k * share);  // [algorithm * share + rep]
      for (std::size_t rep = 0; rep < share; ++rep) {
        for (std::size_t i = 0; i < k; ++i) order[i] = i;
        for (std::size_t i = k; i > 1; --i) std::swap(order[i - 1], order[random(i)]);
        for (std::size_t a : order) {
          controlBarrier(transport, options.sequence++, options.timeoutSeconds);
          const auto t0 = std::chrono::steady_clock::now();
          run(algorithms[a], data);
          t[a * share + rep] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      }
      slowest(std::span<double>(t));
      for (std::size_t a = 0; a < k; ++a)
        times[s][a].insert(times[s][a].end(), t.begin() + static_cast<std::ptrdiff_t>(a * share),
                           t.begin() + static_cast<std::ptrdiff_t>((a + 1) * share));
    }
  }
  std::vector<std::vector<double>> seconds(k, std::vector<double>(count));
  for (std::size_t s = 0; s < count; ++s)
    for (std::size_t a = 0; a < k; ++a) seconds[a][s] = median(times[s][a]);

  CostModel model;
  if (transport.rank() == 0) model = fit(sizes, algorithms, seconds, n, gamma, options);
  auto packed = pack(model, count);
  o.sequence = options.sequence++;
  broadcast<double>(transport, std::span<double>(packed), 0, o);
  return unpack(packed, count);
}

}  // namespace gossamer
