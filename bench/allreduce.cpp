// allreduce: time per call of our allreduce algorithms, float32 sum, with every
// rank a separate OS process on this machine, over our transports (the native
// socket transport and zmq, each over tcp on 127.0.0.1 and ipc, and libfabric's
// tcp and shm providers when built; bench/transports.hpp), for a range of message sizes
// (scripts/bench-allreduce.sh runs it interleaved with MPI_Allreduce, bench/mpi_allreduce.c).
//
//   allreduce [--world-size 4] [--transports socket-tcp,zmq-ipc] [--algorithm ring,recursive_doubling,auto]
//             [--sizes 4096,1048576 | --min-bytes 4 --max-bytes 268435456 --factor 4]
//             [--reps 200] [--min-reps 5] [--warmup 5] [--budget 1.0] [--json PATH]
//       launcher (default): forks/execs itself once per rank, waits (bounded),
//       prints the table and writes the JSON list;
//   allreduce --rank R --rendezvous DIR --result-file F ...
//       one rank (what the launcher starts).
//
// Each rank, per protocol:
//   0. with several algorithms (or auto): calibrate the cost model once
//      (gossamer::calibrateCostModel; every rank gets rank 0's), so that auto
//      picks by it and every row carries its prediction (`predicted_seconds`,
//      printed as pred_us);
// then per size, with every algorithm interleaved:
//   1. per algorithm one call on known inputs (rank r, element i holds
//      r + 1 + i % 13), whose result is checked element by element on every
//      rank (a wrong sum fails the run); these times, max over ranks, size the
//      rest;
//   2. warm-ups (at most --warmup rounds, and about a quarter of the budget);
//   3. repetitions (between --min-reps and --reps, about --budget seconds per
//      algorithm): each runs every algorithm once, in a shuffled order (the
//      same on every rank): refill the vector, barrier, time one call, check.
// The per-rank times are gathered with one allreduce of a vector with a slot
// per (algorithm, repetition, rank), so a repetition's time is the slowest
// rank's; the reported time is the median over repetitions. Bandwidths follow
// nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n-1) / n, in GB/s.
// With `auto` among several algorithms the launcher also prints the auto
// check: per size, auto's pick (chooseAllreduce) against the
// fastest algorithm measured, algorithms that send the same messages
// (gossamer::sameAllreduceSchedule) counted as one candidate whose time is
// the median of their pooled repetitions; PASS if within 10%. With a
// calibrated model every row carries its repetitions (`samples_seconds`),
// and the auto rows get `auto_pick`, `same_schedule`, `cost_model` and
// `auto_check`.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/launcher.hpp"
#include "gossamer/store.hpp"
#include "transports.hpp"

namespace {

using gossamer::bench::Clock;
using gossamer::bench::median;
using gossamer::bench::quantile;
using gossamer::bench::seconds;
using nlohmann::json;

// ---- the algorithms under test ---------------------------------------------
// "ring" calls gossamer::ringAllreduce itself; every other name goes through
// gossamer::allreduce with options.algorithm = parseAllreduceAlgorithm(name)
// ("auto", "recursive_doubling", "torus2d", "hierarchical", "tga2d", "hips").
// To time something else (another entry point, other options), add a branch
// here and its name in checkAlgorithm.

/// One in-place float32 sum allreduce of `data` with the algorithm `name`.
/// `options.sequence` is fresh for every call (and the same on every rank).
void runAllreduce(const std::string& name, gossamer::Transport& transport, std::span<float> data,
                  gossamer::CollectiveOptions options) {
  if (name == "ring") {
    gossamer::ringAllreduce<float>(transport, data, gossamer::ReduceOp::kSum, options);
    return;
  }
  options.algorithm = gossamer::parseAllreduceAlgorithm(name);
  gossamer::allreduce<float>(transport, data, gossamer::ReduceOp::kSum, options);
}

/// The algorithm `name` runs, for the cost model's prediction.
gossamer::AllreduceAlgorithm algorithmOf(const std::string& name) {
  return name == "ring" ? gossamer::AllreduceAlgorithm::kRing : gossamer::parseAllreduceAlgorithm(name);
}

/// Empty if runAllreduce knows `name`, else why not (for the command line).
std::string checkAlgorithm(const std::string& name) {
  if (name == "ring") return {};
  try {
    gossamer::parseAllreduceAlgorithm(name);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

// ---- arguments ---------------------------------------------------------------

struct Args {
  int worldSize = 4;
  std::vector<std::string> protocols{"socket-tcp", "socket-ipc", "zmq-tcp", "zmq-ipc"};
  std::vector<std::string> algorithms{"ring"};
  std::vector<std::size_t> sizes;  // bytes; empty: min..max by factor
  std::size_t minBytes = 4;
  std::size_t maxBytes = std::size_t{256} << 20;
  int factor = 4;
  std::size_t chunkBytes = std::size_t{1} << 20;  // CollectiveOptions::chunkBytes (ring pieces)
  int reps = 200;                                 // at most
  int minReps = 5;                                // at least
  int warmup = 5;                                 // untimed calls (the checked first call included), at most
  double calibrationSeconds = -1;                 // CalibrationOptions::secondsPerSize (< 0: its default)
  int calibrationPasses = 0;                      // CalibrationOptions::passes (0: its default)
  bool noCalibration = false;                     // auto by its size thresholds, as configured by default
  double budget = 1.0;  // seconds of timed calls per (protocol, size, algorithm), roughly
  std::string jsonPath = "results/bench-allreduce.json";
  bool quiet = false;
  double timeout = 60;           // bound on every wait inside a rank
  double deadline = 3600;        // launcher: bound on the whole run
  std::string binding = "core";  // launcher: --bind (CpuBinding)
  // Rank mode.
  int rank = -1;
  std::string rendezvous;
  std::string resultFile;
};

std::vector<std::size_t> sizesOf(const Args& a) {
  std::vector<std::size_t> out = a.sizes;
  if (out.empty())
    for (std::size_t b = a.minBytes; b <= a.maxBytes; b *= static_cast<std::size_t>(a.factor))
      out.push_back(b);
  for (const auto b : out)
    if (b == 0 || b % sizeof(float) != 0)
      throw gossamer::InvalidArgument("size " + std::to_string(b) + " is not a positive multiple of 4 bytes");
  return out;
}

// ---- statistics ----------------------------------------------------------------

// ---- one rank --------------------------------------------------------------------

class RankBench {
 public:
  RankBench(const Args& a, gossamer::Transport& transport)
      : a_(a), transport_(transport), comm_(transport, a.timeout) {}

  /// Times every algorithm of `algorithms` at one size, interleaved: each
  /// repetition runs every algorithm once, in a fresh random order (the same
  /// on every rank), so that a change in machine load, or what the previous
  /// call left behind, hits all of them alike. Returns one summary per
  /// algorithm (meaningful on rank 0).
  json measure(const std::string& protocol, const std::vector<std::string>& algorithms,
               std::span<float> data) {
    const int n = a_.worldSize;
    const int r = a_.rank;
    const auto k = algorithms.size();

    // 1. The checked calls, one per algorithm.
    double cycle = 0;  // the slowest rank's first calls, summed over the algorithms
    for (const auto& algorithm : algorithms) {
      for (std::size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<float>(r + 1 + static_cast<int>(i % 13));
      const double first = timedCall(algorithm, data);
      for (std::size_t i = 0; i < data.size(); ++i) {
        const auto expected = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 13));
        if (data[i] != expected) fail(algorithm, protocol, data.size(), i, data[i], expected);
      }
      cycle += std::max(maxOverRanks(first), 1e-7);
    }

    // 2. Warm-ups, 3. repetitions: the counts follow from the slowest rank's
    // first calls, which every rank now knows, so all ranks agree on them.
    const double budget = a_.budget * static_cast<double>(k);
    const int warmups = static_cast<int>(
        std::clamp(std::floor(0.25 * budget / cycle), 0.0, static_cast<double>(std::max(a_.warmup - 1, 0))));
    const int reps = static_cast<int>(std::clamp(std::floor(budget / cycle), static_cast<double>(a_.minReps),
                                                 static_cast<double>(std::max(a_.reps, a_.minReps))));
    for (int i = 0; i < warmups; ++i)
      for (const auto& algorithm : algorithms) {
        std::fill(data.begin(), data.end(), 1.0f);
        timedCall(algorithm, data);
      }
    const auto un = static_cast<std::size_t>(n), ureps = static_cast<std::size_t>(reps);
    std::vector<double> times(k * ureps * un, 0.0);  // [(algorithm * reps + rep) * n + rank]
    std::vector<std::size_t> order(k);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::mt19937 shuffler(static_cast<std::uint32_t>(data.size()));  // the same order on every rank
    for (std::size_t i = 0; i < ureps; ++i) {
      std::shuffle(order.begin(), order.end(), shuffler);
      for (const std::size_t alg : order) {
        std::fill(data.begin(), data.end(), 1.0f);
        times[(alg * ureps + i) * un + static_cast<std::size_t>(r)] = timedCall(algorithms[alg], data);
        // Untimed: no rank starts checking (16 M compares at 64 MiB) on a core
        // another rank still needs for its call (MPI's benchmark checks once,
        // at the end; this one checks every call).
        comm_.barrier();
        for (std::size_t e = 0; e < data.size(); ++e)
          if (data[e] != static_cast<float>(n))
            fail(algorithms[alg], protocol, data.size(), e, data[e], static_cast<float>(n));
      }
    }
    gossamer::ringAllreduce<double>(transport_, std::span<double>(times), gossamer::ReduceOp::kSum, next());

    json rows = json::array();
    for (std::size_t alg = 0; alg < k; ++alg) {
      std::vector<double> slowest(ureps);
      for (std::size_t i = 0; i < ureps; ++i) {
        const auto first = times.begin() + static_cast<std::ptrdiff_t>((alg * ureps + i) * un);
        slowest[i] = *std::max_element(first, first + static_cast<std::ptrdiff_t>(un));
      }
      const double t = median(slowest);
      const double bytes = static_cast<double>(data.size_bytes());
      const double algbw = bytes / t / 1e9;
      rows.push_back(json{{"impl", "gossamer"},
                          {"algorithm", algorithms[alg]},
                          {"transport", protocol},
                          {"world_size", n},
                          {"bytes", data.size_bytes()},
                          {"seconds", t},
                          {"algbw", algbw},
                          {"busbw", algbw * 2.0 * (n - 1) / n},
                          {"reps", reps},
                          {"seconds_p10", quantile(slowest, 0.1)},
                          {"seconds_p90", quantile(slowest, 0.9)}});
      if (calibrated_) {
        rows.back()["samples_seconds"] = slowest;  // for the auto check's pooled medians
        annotate(rows.back(), algorithms[alg], data.size_bytes());
      }
    }
    if (calibrated_) markSameSchedules(rows, data.size_bytes());
    return rows;
  }

  /// Measures the cost model on this transport (gossamer::calibrateCostModel,
  /// every rank gets rank 0's); from now on `auto` uses it, and every row
  /// carries the prediction.
  void calibrate() {
    gossamer::CollectiveOptions o = next();
    const auto t0 = Clock::now();
    if (a_.calibrationSeconds >= 0) calibration_.secondsPerSize = a_.calibrationSeconds;
    if (a_.calibrationPasses > 0) calibration_.passes = a_.calibrationPasses;
    model_ = gossamer::calibrateCostModel(transport_, o, calibration_);
    calibrationSeconds_ = seconds(t0, Clock::now());
    sequence_ = o.sequence;
    calibrated_ = true;
  }

 private:
  // The cost model's prediction in every row; what auto picks, and the
  // model, in auto's rows.
  void annotate(json& row, const std::string& algorithm, std::size_t bytes) {
    const auto o = settings();
    row["predicted_seconds"] =
        gossamer::predictAllreduceSeconds(algorithmOf(algorithm), bytes, a_.worldSize, o);
    if (algorithm != "auto") return;
    row["auto_pick"] = gossamer::toString(gossamer::chooseAllreduce(bytes, a_.worldSize, o));
    row["cost_model"] = json{{"alpha_seconds", model_.alphaSeconds},
                             {"beta_seconds_per_byte", model_.betaSecondsPerByte},
                             {"gamma_seconds_per_byte", model_.gammaSecondsPerByte},
                             {"contention", model_.contention},
                             {"calibration_seconds", calibrationSeconds_},
                             {"calibration_seconds_per_size", calibration_.secondsPerSize},
                             {"calibration_passes", calibration_.passes}};
  }

  // In the auto rows, `same_schedule`: the algorithms measured (auto aside)
  // grouped by gossamer::sameAllreduceSchedule, each group one candidate
  // schedule for the auto check.
  void markSameSchedules(json& rows, std::size_t bytes) const {
    const auto o = settings();
    std::vector<std::vector<std::string>> groups;
    for (const auto& row : rows) {
      const auto name = row["algorithm"].get<std::string>();
      if (name == "auto") continue;
      auto same = std::find_if(groups.begin(), groups.end(), [&](const std::vector<std::string>& g) {
        return gossamer::sameAllreduceSchedule(algorithmOf(g.front()), algorithmOf(name), bytes, a_.worldSize,
                                               o);
      });
      if (same == groups.end())
        groups.push_back({name});
      else
        same->push_back(name);
    }
    for (auto& row : rows)
      if (row["algorithm"] == "auto") row["same_schedule"] = groups;
  }

  // Every collective of the benchmark (the timed calls and the gathers) takes
  // its sequence from this one counter, so their tags never collide. The
  // barriers use the Communicator's own counter under their own op.
  gossamer::CollectiveOptions next() {
    gossamer::CollectiveOptions o = settings();
    o.sequence = sequence_++ & gossamer::Tag::kMaxStep;
    return o;
  }

  // The options of every call, the sequence aside.
  gossamer::CollectiveOptions settings() const {
    gossamer::CollectiveOptions o;
    o.timeoutSeconds = a_.timeout;
    o.chunkBytes = a_.chunkBytes;
    o.useCostModel = calibrated_;  // auto: the calibrated model, else the size threshold
    o.model = model_;
    return o;
  }

  double timedCall(const std::string& algorithm, std::span<float> data) {
    auto options = next();
    comm_.barrier();
    const auto t0 = Clock::now();
    runAllreduce(algorithm, transport_, data, std::move(options));
    return seconds(t0, Clock::now());
  }

  // The maximum of `value` over ranks (one-hot vector, summed).
  double maxOverRanks(double value) {
    std::vector<double> all(static_cast<std::size_t>(a_.worldSize), 0.0);
    all[static_cast<std::size_t>(a_.rank)] = value;
    gossamer::ringAllreduce<double>(transport_, std::span<double>(all), gossamer::ReduceOp::kSum, next());
    return *std::max_element(all.begin(), all.end());
  }

  [[noreturn]] void fail(const std::string& algorithm, const std::string& protocol, std::size_t length,
                         std::size_t index, float got, float expected) const {
    throw gossamer::Error("WRONG RESULT: " + algorithm + " over " + protocol + ", " + std::to_string(length) +
                          " floats, element " + std::to_string(index) + " is " + std::to_string(got) +
                          ", expected " + std::to_string(expected));
  }

  const Args& a_;
  gossamer::Transport& transport_;
  gossamer::Communicator comm_;
  std::uint64_t sequence_ = 0;
  bool calibrated_ = false;
  gossamer::CostModel model_;
  double calibrationSeconds_ = 0;             // how long calibration took
  gossamer::CalibrationOptions calibration_;  // its settings
};

json runProtocol(const Args& a, const std::string& protocol, gossamer::Store& store) {
  auto transport = gossamer::bench::makeBenchTransport(protocol, a.rank, a.worldSize, a.timeout, store,
                                                       "bench-allreduce-" + protocol);
  try {
    RankBench bench(a, *transport);
    // Several algorithms (or auto): calibrate the cost model once, at the start.
    if (!a.noCalibration && (a.algorithms.size() > 1 || std::find(a.algorithms.begin(), a.algorithms.end(),
                                                                  "auto") != a.algorithms.end()))
      bench.calibrate();
    const auto sizes = sizesOf(a);
    std::vector<float> buffer(*std::max_element(sizes.begin(), sizes.end()) / sizeof(float));
    json results = json::array();
    for (const auto bytes : sizes)
      for (auto& row :
           bench.measure(protocol, a.algorithms, std::span<float>(buffer.data(), bytes / sizeof(float))))
        results.push_back(std::move(row));
    transport->close();
    return results;
  } catch (...) {
    transport->abort();
    throw;
  }
}

int runRank(const Args& a) {
  gossamer::FileStore store(a.rendezvous);
  json results = json::array();
  for (const auto& p : a.protocols)
    for (auto& r : runProtocol(a, p, store)) results.push_back(std::move(r));
  if (a.rank == 0) gossamer::bench::writeResultFile(results, a.resultFile);
  return 0;
}

// ---- launcher ----------------------------------------------------------------------

// Starts every rank as a child process, waits for all of them (bounded), and
// returns rank 0's results.
json launch(const Args& a) {
  std::string sizes;
  for (const auto b : sizesOf(a)) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  std::vector<std::string> options{"--world-size",  std::to_string(a.worldSize),
                                   "--transports",  gossamer::bench::joined(a.protocols),
                                   "--algorithm",   gossamer::bench::joined(a.algorithms),
                                   "--sizes",       sizes,
                                   "--reps",        std::to_string(a.reps),
                                   "--chunk-bytes", std::to_string(a.chunkBytes),
                                   "--min-reps",    std::to_string(a.minReps),
                                   "--warmup",      std::to_string(a.warmup),
                                   "--budget",      gossamer::bench::exactArgument(a.budget),
                                   "--timeout",     gossamer::bench::exactArgument(a.timeout)};
  if (a.calibrationSeconds >= 0)
    options.insert(options.end(),
                   {"--calibration-seconds", gossamer::bench::exactArgument(a.calibrationSeconds)});
  if (a.calibrationPasses > 0)
    options.insert(options.end(), {"--calibration-passes", std::to_string(a.calibrationPasses)});
  if (a.noCalibration) options.push_back("--no-calibration");
  auto results =
      gossamer::bench::launchAndCollect("allreduce", a.worldSize, a.timeout, a.deadline, options, a.binding);
  for (auto& row : results) row["binding"] = a.binding;
  return results;
}

std::string humanBytes(double b) {
  char s[32];
  if (b >= 1 << 30)
    std::snprintf(s, sizeof s, "%g GiB", b / (1 << 30));
  else if (b >= 1 << 20)
    std::snprintf(s, sizeof s, "%g MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    std::snprintf(s, sizeof s, "%g KiB", b / (1 << 10));
  else
    std::snprintf(s, sizeof s, "%g B", b);
  return s;
}

void printTable(const json& results) {
  std::printf("%-6s %-18s %5s %10s %5s %12s %12s %12s %12s %10s %10s\n", "proto", "algorithm", "ranks",
              "size", "reps", "median_us", "pred_us", "p10_us", "p90_us", "algbw_GB/s", "busbw_GB/s");
  for (const auto& r : results) {
    char predicted[32] = "-";
    if (r.contains("predicted_seconds"))
      std::snprintf(predicted, sizeof predicted, "%.1f", 1e6 * r["predicted_seconds"].get<double>());
    std::printf("%-6s %-18s %5d %10s %5d %12.1f %12s %12.1f %12.1f %10.3f %10.3f\n",
                r["transport"].get<std::string>().c_str(), r["algorithm"].get<std::string>().c_str(),
                r["world_size"].get<int>(), humanBytes(r["bytes"].get<double>()).c_str(),
                r["reps"].get<int>(), 1e6 * r["seconds"].get<double>(), predicted,
                1e6 * r["seconds_p10"].get<double>(), 1e6 * r["seconds_p90"].get<double>(),
                r["algbw"].get<double>(), r["busbw"].get<double>());
  }
  std::fflush(stdout);
}

/// The auto check: `auto` must pick an algorithm within 10% of the fastest
/// one measured. For every (transport, size) with an `auto` row (which carries
/// chooseAllreduce's pick and `same_schedule`): algorithms that send the same
/// messages (gossamer::sameAllreduceSchedule, e.g. the five ring-based ones
/// at N = 2) are one candidate, timed by the median of all their
/// repetitions pooled, so that the minimum over several noisy measurements of
/// one schedule does not stand for "the fastest". The pick's candidate (auto's
/// own repetitions if the pick was not run by name) against the fastest
/// candidate; PASS if the ratio is at most 1.10. Adds `auto_check` to the auto
/// rows; prints a summary. Returns the number of sizes that fail.
int autoCheck(json& results, bool print) {
  constexpr double kTolerance = 1.10;
  int failures = 0, checked = 0;
  for (auto& row : results) {
    if (row["algorithm"] != "auto" || !row.contains("auto_pick") || !row.contains("same_schedule")) continue;
    // Each candidate: its algorithms and their repetitions pooled.
    struct Candidate {
      std::vector<std::string> names;
      std::vector<double> samples;
      double seconds = 0;
    };
    std::vector<Candidate> candidates;
    for (const auto& group : row["same_schedule"]) {
      Candidate c;
      for (const auto& name : group) {
        c.names.push_back(name.get<std::string>());
        for (const auto& other : results)
          if (other["transport"] == row["transport"] && other["bytes"] == row["bytes"] &&
              other["algorithm"] == name)
            for (const auto& t : other["samples_seconds"]) c.samples.push_back(t.get<double>());
      }
      if (c.samples.empty()) continue;
      c.seconds = median(c.samples);
      candidates.push_back(std::move(c));
    }
    if (candidates.empty()) continue;
    const auto fastest = std::min_element(candidates.begin(), candidates.end(),
                                          [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
    const auto pickName = row["auto_pick"].get<std::string>();
    double pickSeconds = row["seconds"].get<double>();
    std::string pickLabel = pickName + " (as auto)";
    for (const auto& c : candidates)
      if (std::find(c.names.begin(), c.names.end(), pickName) != c.names.end()) {
        pickSeconds = c.seconds;
        pickLabel = pickName + (c.names.size() > 1 ? "+" + std::to_string(c.names.size() - 1) : "");
      }
    const auto fastestLabel =
        fastest->names.front() +
        (fastest->names.size() > 1 ? "+" + std::to_string(fastest->names.size() - 1) : "");
    const double ratio = pickSeconds / fastest->seconds;
    const bool pass = ratio <= kTolerance;
    if (print && checked == 0) {
      std::printf(
          "\nauto check: auto's pick (chooseAllreduce, cost model calibrated on this transport) against the\n"
          "fastest candidate measured; algorithms that send the same messages (sameAllreduceSchedule; +k: k\n"
          "more) are one candidate, timed by the median of their pooled repetitions; ratio = the pick's\n"
          "candidate's time / the fastest's; PASS if <= %.2f\n",
          kTolerance);
      std::printf("%-10s %5s %10s %-22s %12s %-22s %12s %12s %12s %7s\n", "proto", "ranks", "size", "fastest",
                  "fastest_us", "auto_pick", "pick_us", "pick_pred_us", "auto_us", "ratio");
    }
    ++checked;
    failures += pass ? 0 : 1;
    row["auto_check"] = json{{"fastest", fastest->names},   {"fastest_seconds", fastest->seconds},
                             {"pick_seconds", pickSeconds}, {"ratio", ratio},
                             {"tolerance", kTolerance},     {"pass", pass}};
    if (print)
      std::printf("%-10s %5d %10s %-22s %12.1f %-22s %12.1f %12.1f %12.1f %7.2f  %s\n",
                  row["transport"].get<std::string>().c_str(), row["world_size"].get<int>(),
                  humanBytes(row["bytes"].get<double>()).c_str(), fastestLabel.c_str(),
                  1e6 * fastest->seconds, pickLabel.c_str(), 1e6 * pickSeconds,
                  1e6 * row["predicted_seconds"].get<double>(), 1e6 * row["seconds"].get<double>(), ratio,
                  pass ? "PASS" : "FAIL");
  }
  if (print && checked > 0) {
    std::vector<std::string> shown;  // one line per transport
    for (const auto& row : results) {
      const auto transport = row["transport"].get<std::string>();
      if (!row.contains("cost_model") || std::find(shown.begin(), shown.end(), transport) != shown.end())
        continue;
      shown.push_back(transport);
      const auto& m = row["cost_model"];
      std::printf(
          "model %-4s alpha %.1f us, beta %.3f ns/B, gamma %.3f ns/B, contention %.3f (calibrated in %.1f "
          "s)\n",
          transport.c_str(), 1e6 * m["alpha_seconds"].get<double>(),
          1e9 * m["beta_seconds_per_byte"].get<double>(), 1e9 * m["gamma_seconds_per_byte"].get<double>(),
          m["contention"].get<double>(), m["calibration_seconds"].get<double>());
    }
    std::printf("auto check: %d of %d sizes within %.0f%% of the fastest\n", checked - failures, checked,
                100 * (kTolerance - 1));
  }
  std::fflush(stdout);
  return failures;
}

void writeJson(const json& results, const std::string& path) {
  gossamer::bench::writeJsonFile(results, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"allreduce: time per call of our allreduce algorithms, N processes over our transports"};
  Args a;
  app.add_option("--world-size", a.worldSize, "number of ranks (processes)")->check(CLI::Range(2, 64));
  app.add_option("--transports,--protocols", a.protocols,
                 "transports (bench/transports.hpp), comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(gossamer::bench::benchTransportNames()));
  app.add_option("--algorithm,--algorithms", a.algorithms, "allreduce algorithms, comma-separated")
      ->delimiter(',')
      ->check(CLI::Validator(checkAlgorithm, "ALGORITHM"));
  auto* sizes = app.add_option("--sizes", a.sizes, "message sizes in bytes, comma-separated")->delimiter(',');
  app.add_option("--min-bytes", a.minBytes, "smallest size (without --sizes)")
      ->excludes(sizes)
      ->check(CLI::PositiveNumber);
  app.add_option("--max-bytes", a.maxBytes, "largest size (without --sizes)")
      ->excludes(sizes)
      ->check(CLI::PositiveNumber);
  app.add_option("--factor", a.factor, "size step (without --sizes)")
      ->excludes(sizes)
      ->check(CLI::IsMember({2, 4}));
  app.add_option("--chunk-bytes", a.chunkBytes, "ring pipelining: largest piece, bytes")
      ->check(CLI::Range(std::size_t{64}, std::size_t{1} << 30));
  app.add_option("--reps", a.reps, "timed calls per size, at most")->check(CLI::Range(1, 100000));
  app.add_option("--min-reps", a.minReps, "timed calls per size, at least")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "untimed calls per size (the checked one included), at most")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--budget", a.budget, "seconds of timed calls per size, roughly")
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--calibration-seconds", a.calibrationSeconds,
         "cost model calibration: seconds of timed calls per size (CalibrationOptions::secondsPerSize)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--calibration-passes", a.calibrationPasses,
                 "cost model calibration: passes over the sizes (CalibrationOptions::passes)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-calibration", a.noCalibration,
               "no cost model: auto picks by its size thresholds (collectives.small_message_bytes, "
               "mid_message_bytes), as a job configured by default does");
  app.add_option("--json", a.jsonPath, "write the results here (empty: do not write)");
  app.add_flag("--quiet", a.quiet, "do not print the table");
  gossamer::bench::addBindOption(app, a.binding);
  app.add_option("--timeout", a.timeout, "bound on every wait, seconds")->check(CLI::PositiveNumber);
  app.add_option("--deadline", a.deadline, "bound on the whole run, seconds")->check(CLI::PositiveNumber);
  app.add_option("--rank", a.rank, "internal: run only this rank")->check(CLI::NonNegativeNumber);
  app.add_option("--rendezvous", a.rendezvous, "internal: rendezvous directory (FileStore)");
  app.add_option("--result-file", a.resultFile, "internal: where rank 0 writes its results");
  CLI11_PARSE(app, argc, argv);
  try {
    if (a.rank >= 0) {
      if (a.rendezvous.empty() || a.resultFile.empty())
        throw gossamer::InvalidArgument("--rank needs --rendezvous and --result-file");
      if (a.rank >= a.worldSize) throw gossamer::InvalidArgument("--rank outside --world-size");
      return runRank(a);
    }
    if (a.minBytes > a.maxBytes) throw gossamer::InvalidArgument("--min-bytes is above --max-bytes");
    sizesOf(a);  // validate before starting anything
    auto results = launch(a);
    if (!a.quiet) printTable(results);
    autoCheck(results, !a.quiet);
    if (!a.jsonPath.empty()) {
      writeJson(results, a.jsonPath);
      if (!a.quiet) std::printf("wrote %s\n", a.jsonPath.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    if (a.rank >= 0)
      std::fprintf(stderr, "allreduce rank %d: error: %s\n", a.rank, e.what());
    else
      std::fprintf(stderr, "allreduce: error: %s\n", e.what());
    return 1;
  }
}
