// The cost model of the allreduce algorithms, auto's choice, and the
// calibration that measures the model on a transport.
//
// Gossamer's own alpha-beta-gamma model, in the notation of Wang et al., "A
// Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023), Table 1 (alpha per message,
// beta per byte sent, gamma per byte reduced), but not the paper's formulas
// (its Table 2 models idealised schedules): each algorithm describes the rounds
// its own implementation runs (AllreduceEntry::rounds, in the algorithm's
// file), and a round in which every sender sends `hops` messages carrying
// `bytes` in all and every receiver reduces `reduced` bytes costs hops
// alpha + bytes beta + reduced gamma. Two terms measure what the formula leaves
// out (see CostModel): the contention factor 1 + contention (c - 1) of a round
// with c concurrent senders, and per-algorithm corrections measured at a few
// sizes.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "table.hpp"

namespace gossamer {

namespace {

using detail::Round;
using detail::Rounds;

std::size_t index(AllreduceAlgorithm a) { return static_cast<std::size_t>(a); }

// The rounds of `algorithm` (kAuto: the ring's) for a vector of `bytes` over n ranks.
Rounds roundsOf(AllreduceAlgorithm algorithm, std::size_t bytes, int n, const CollectiveOptions& o) {
  Rounds out;
  const auto& entry =
      detail::allreduceEntry(algorithm == AllreduceAlgorithm::kAuto ? AllreduceAlgorithm::kRing : algorithm);
  entry.rounds(out, bytes, n, o);
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
  for (const auto* e : detail::allreduceAlgorithms())
    if ((viewsAllowed || !e->needsViews) && e->fitsOn(n, o)) candidates.push_back(e->id);
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
  if (!o.useCostModel) {
    if (bytes <= o.smallMessageBytes) return AllreduceAlgorithm::kRecursiveDoubling;
    return bytes <= o.midMessageBytes ? AllreduceAlgorithm::kRabenseifner : AllreduceAlgorithm::kRing;
  }
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

// Throws InvalidArgument unless the sizes are at least two ascending positive
// multiples of 4 bytes and the counts and the time budget are in range.
void checkCalibration(const CalibrationOptions& calibration) {
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
}

// The algorithms to time on `transport` (n ranks): the ring first (the fit
// needs it), then the others asked for (all when none are), each once, less
// those that need views the transport cannot give or do not fit n ranks.
std::vector<AllreduceAlgorithm> algorithmsToCalibrate(Transport& transport, const CollectiveOptions& options,
                                                      const CalibrationOptions& calibration, int n) {
  const bool views = dynamic_cast<SubTransport*>(&transport) == nullptr;
  std::vector<AllreduceAlgorithm> algorithms = {AllreduceAlgorithm::kRing};
  std::vector<AllreduceAlgorithm> all;
  for (const auto* e : detail::allreduceAlgorithms()) all.push_back(e->id);
  for (auto a : calibration.algorithms.empty() ? all : calibration.algorithms) {
    if (a == AllreduceAlgorithm::kAuto ||
        std::find(algorithms.begin(), algorithms.end(), a) != algorithms.end())
      continue;
    const auto& entry = detail::allreduceEntry(a);
    if ((entry.needsViews && !views) || !entry.fitsOn(n, options)) continue;
    algorithms.push_back(a);
  }
  return algorithms;
}

// The timed allreduce calls of a calibration and the broadcast of its
// result. Collective: every rank makes the same calls in the same order
// (each takes the next options.sequence), and sees the slowest rank's times.
class Calibrator {
 public:
  Calibrator(Transport& transport, CollectiveOptions& options, const CalibrationOptions& calibration,
             std::vector<AllreduceAlgorithm> algorithms)
      : transport_(transport),
        options_(options),
        calibration_(calibration),
        algorithms_(std::move(algorithms)),
        buffer_(calibration.sizes.back() / sizeof(float)),
        o_(options),
        order_(algorithms_.size()),
        passes_(static_cast<std::size_t>(calibration.passes)),
        reps_(calibration.sizes.size(), static_cast<std::size_t>(calibration.reps)),
        times_(calibration.sizes.size(), std::vector<std::vector<double>>(algorithms_.size())) {
    o_.useCostModel = false;
  }

  // The algorithms timed, the ring first.
  const std::vector<AllreduceAlgorithm>& algorithms() const { return algorithms_; }

  // Times every algorithm at every size; returns the median seconds, by
  // algorithm (outer) and size (inner). Pass 0 warms every size up and
  // sizes its repetitions; the timed calls of a size are then spread over
  // the passes (each later one starting the size with one untimed round),
  // and the median is over all of them.
  std::vector<std::vector<double>> measure() {
    const auto& sizes = calibration_.sizes;
    const std::size_t k = algorithms_.size(), count = sizes.size();
    // The very first calls also set up connections and fault in scratch: one
    // untimed round at the first size, so that the warm-up round that sizes its
    // repetitions is not this one (it was 10-30 times slower at 8 ranks, and
    // the 4-byte size got 7 timed calls where the budget allows about 130).
    {
      std::span<float> data(buffer_.data(), sizes.front() / sizeof(float));
      for (auto a : algorithms_) {
        controlBarrier(transport_, options_.sequence++, options_.timeoutSeconds);
        run(a, data);
      }
    }
    for (std::size_t pass = 0; pass < passes_; ++pass) {
      for (std::size_t s = 0; s < count; ++s) {
        std::span<float> data(buffer_.data(), sizes[s] / sizeof(float));
        warmUp(pass, s, data);
        timeShare(pass, s, data);
      }
    }
    std::vector<std::vector<double>> seconds(k, std::vector<double>(count));
    for (std::size_t s = 0; s < count; ++s)
      for (std::size_t a = 0; a < k; ++a) seconds[a][s] = median(times_[s][a]);
    return seconds;
  }

  // Rank 0's `model`, on every rank.
  CostModel broadcast(const CostModel& model) {
    const std::size_t count = calibration_.sizes.size();
    auto packed = pack(model, count);
    o_.sequence = options_.sequence++;
    gossamer::broadcast<double>(transport_, std::span<double>(packed), 0, o_);
    return unpack(packed, count);
  }

 private:
  // One allreduce of ones by algorithm `a` over `data`.
  void run(AllreduceAlgorithm a, std::span<float> data) {
    std::fill(data.begin(), data.end(), 1.0f);
    o_.algorithm = a;
    o_.sequence = options_.sequence++;
    allreduce<float>(transport_, data, ReduceOp::kSum, o_);
  }

  // The slowest rank's value of every entry, on every rank.
  void slowest(std::span<double> values) {
    o_.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
    o_.sequence = options_.sequence++;
    allreduce<double>(transport_, values, ReduceOp::kMax, o_);
  }

  // A pseudo-random number below `bound` (xorshift64: the same sequence on
  // every rank).
  std::size_t random(std::size_t bound) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return static_cast<std::size_t>(state_ % bound);
  }

  // The untimed rounds of size s in `pass` (all warm-ups in pass 0, at most
  // one later); in pass 0 the first one's time, the slowest rank's, sizes
  // the repetitions of size s to fit secondsPerSize.
  void warmUp(std::size_t pass, std::size_t s, std::span<float> data) {
    const int warmups = pass == 0 ? calibration_.warmups : std::min(calibration_.warmups, 1);
    for (int w = 0; w < warmups; ++w) {
      const auto t0 = Clock::now();
      for (auto a : algorithms_) {
        // The barrier as in a timed round, so that the round's time sizes
        // the repetitions with it (on a loaded host it can cost more than
        // a small allreduce).
        controlBarrier(transport_, options_.sequence++, options_.timeoutSeconds);
        run(a, data);
      }
      if (pass == 0 && w == 0 &&
          calibration_.secondsPerSize > 0) {  // the first warm-up sizes the repetitions
        double round = secondsSince(t0);
        slowest(std::span<double>(&round, 1));
        const double fit = std::floor(calibration_.secondsPerSize / std::max(round, 1e-9));
        reps_[s] = static_cast<std::size_t>(
            std::clamp(fit, static_cast<double>(calibration_.reps),
                       static_cast<double>(std::max(calibration_.maxReps, calibration_.reps))));
      }
    }
  }

  // Times this pass's share of the repetitions of size s (at least one),
  // every algorithm once per repetition in a random order, and adds the
  // slowest rank's seconds to times_.
  void timeShare(std::size_t pass, std::size_t s, std::span<float> data) {
    const std::size_t k = algorithms_.size();
    const std::size_t share =
        std::max<std::size_t>(1, reps_[s] / passes_ + (pass < reps_[s] % passes_ ? 1 : 0));
    std::vector<double> t(k * share);  // [algorithm * share + rep]
    for (std::size_t rep = 0; rep < share; ++rep) {
      for (std::size_t i = 0; i < k; ++i) order_[i] = i;
      for (std::size_t i = k; i > 1; --i) std::swap(order_[i - 1], order_[random(i)]);
      for (std::size_t a : order_) {
        controlBarrier(transport_, options_.sequence++, options_.timeoutSeconds);
        const auto t0 = Clock::now();
        run(algorithms_[a], data);
        t[a * share + rep] = secondsSince(t0);
      }
    }
    slowest(std::span<double>(t));
    for (std::size_t a = 0; a < k; ++a)
      times_[s][a].insert(times_[s][a].end(), t.begin() + static_cast<std::ptrdiff_t>(a * share),
                          t.begin() + static_cast<std::ptrdiff_t>((a + 1) * share));
  }

  Transport& transport_;
  CollectiveOptions& options_;  // the caller's: its sequence numbers every call
  const CalibrationOptions& calibration_;
  const std::vector<AllreduceAlgorithm> algorithms_;
  std::vector<float> buffer_;       // the largest size's floats
  CollectiveOptions o_;             // the calls' options: no cost model, algorithm and sequence set per call
  std::vector<std::size_t> order_;  // the algorithms' order in one timed repetition
  std::uint64_t state_ = 0x9E3779B97F4A7C15ULL;  // random()'s state
  const std::size_t passes_;
  std::vector<std::size_t> reps_;                        // timed calls per size
  std::vector<std::vector<std::vector<double>>> times_;  // [size][algorithm]: the slowest rank's seconds
};

}  // namespace

CostModel calibrateCostModel(Transport& transport, CollectiveOptions& options,
                             const CalibrationOptions& calibration) {
  checkCalibration(calibration);
  const int n = transport.worldSize();
  if (n == 1) return options.model;
  auto algorithms = algorithmsToCalibrate(transport, options, calibration, n);
  const double gamma = measureGamma();
  Calibrator calibrator(transport, options, calibration, std::move(algorithms));
  const auto seconds = calibrator.measure();
  CostModel model;
  if (transport.rank() == 0)
    model = fit(calibration.sizes, calibrator.algorithms(), seconds, n, gamma, options);
  return calibrator.broadcast(model);
}

}  // namespace gossamer
