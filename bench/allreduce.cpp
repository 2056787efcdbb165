// allreduce: time per call of our allreduce algorithms, float32 sum, with every
// rank a separate OS process on this machine, over the zmq transport (tcp on
// 127.0.0.1 and ipc) or libfabric (libfabric-tcp, libfabric-shm; bench/transports.hpp),
// for a range of message sizes (scripts/bench-allreduce.sh
// runs it interleaved with MPI_Allreduce, bench/mpi_allreduce.c).
//
//   allreduce [--world-size 4] [--protocols tcp,ipc] [--algorithm ring,recursive_doubling,auto]
//             [--sizes 4096,1048576 | --min-bytes 4 --max-bytes 268435456 --factor 4]
//             [--reps 200] [--min-reps 5] [--warmup 5] [--budget 1.0] [--json PATH]
//       launcher (default): forks/execs itself once per rank, waits (bounded),
//       prints the table and writes the JSON list;
//   allreduce --rank R --rendezvous DIR --result-file F ...
//       one rank (what the launcher starts).
//
// Each rank, per protocol, size and algorithm:
//   1. one call on known inputs (rank r, element i holds r + 1 + i % 13), whose
//      result is checked element by element on every rank (a wrong sum fails
//      the run); its time, max over ranks, sizes the rest;
//   2. warm-ups (at most --warmup, and about a quarter of --budget);
//   3. repetitions (between --min-reps and --reps, about --budget seconds):
//      refill the vector, barrier, time one call. The result is checked again.
// The per-rank times are gathered with one allreduce of a vector with a slot
// per (repetition, rank), so a repetition's time is the slowest rank's; the
// reported time is the median over repetitions. Bandwidths follow nccl-tests:
// algbw = bytes / time, busbw = algbw * 2 (n-1) / n, in GB/s (1e9 bytes/s).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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
  std::vector<std::string> protocols{"tcp", "ipc"};
  std::vector<std::string> algorithms{"ring"};
  std::vector<std::size_t> sizes;  // bytes; empty: min..max by factor
  std::size_t minBytes = 4;
  std::size_t maxBytes = std::size_t{256} << 20;
  int factor = 4;
  int reps = 200;       // at most
  int minReps = 5;      // at least
  int warmup = 5;       // untimed calls (the checked first call included), at most
  double budget = 1.0;  // seconds of timed calls per (protocol, size, algorithm), roughly
  std::string jsonPath = "results/bench-allreduce.json";
  bool quiet = false;
  double timeout = 60;     // bound on every wait inside a rank
  double deadline = 3600;  // launcher: bound on the whole run
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

  /// Times one (size, algorithm); returns the summary (meaningful on rank 0).
  json measure(const std::string& protocol, const std::string& algorithm, std::span<float> data) {
    const int n = a_.worldSize;
    const int r = a_.rank;

    // 1. The checked call.
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>(r + 1 + static_cast<int>(i % 13));
    const double first = timedCall(algorithm, data);
    for (std::size_t i = 0; i < data.size(); ++i) {
      const auto expected = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 13));
      if (data[i] != expected) fail(algorithm, protocol, data.size(), i, data[i], expected);
    }
    const double estimate = std::max(maxOverRanks(first), 1e-7);

    // 2. Warm-ups, 3. repetitions: the counts follow from the slowest rank's
    // first call, which every rank now knows, so all ranks agree on them.
    const int warmups = static_cast<int>(std::clamp(std::floor(0.25 * a_.budget / estimate), 0.0,
                                                    static_cast<double>(std::max(a_.warmup - 1, 0))));
    const int reps =
        static_cast<int>(std::clamp(std::floor(a_.budget / estimate), static_cast<double>(a_.minReps),
                                    static_cast<double>(std::max(a_.reps, a_.minReps))));
    for (int i = 0; i < warmups; ++i) {
      std::fill(data.begin(), data.end(), 1.0f);
      timedCall(algorithm, data);
    }
    const auto un = static_cast<std::size_t>(n);
    std::vector<double> times(static_cast<std::size_t>(reps) * un, 0.0);  // [rep * n + rank]
    for (int i = 0; i < reps; ++i) {
      std::fill(data.begin(), data.end(), 1.0f);
      times[static_cast<std::size_t>(i) * un + static_cast<std::size_t>(r)] = timedCall(algorithm, data);
    }
    for (std::size_t i = 0; i < data.size(); ++i)
      if (data[i] != static_cast<float>(n))
        fail(algorithm, protocol, data.size(), i, data[i], static_cast<float>(n));
    gossamer::ringAllreduce<double>(transport_, std::span<double>(times), gossamer::ReduceOp::kSum, next());

    std::vector<double> slowest(static_cast<std::size_t>(reps));
    for (std::size_t i = 0; i < slowest.size(); ++i)
      slowest[i] = *std::max_element(times.begin() + static_cast<std::ptrdiff_t>(i * un),
                                     times.begin() + static_cast<std::ptrdiff_t>((i + 1) * un));
    const double t = median(slowest);
    const double bytes = static_cast<double>(data.size_bytes());
    const double algbw = bytes / t / 1e9;
    return json{{"impl", "gossamer"},
                {"algorithm", algorithm},
                {"transport", protocol},
                {"world_size", n},
                {"bytes", data.size_bytes()},
                {"seconds", t},
                {"algbw", algbw},
                {"busbw", algbw * 2.0 * (n - 1) / n},
                {"reps", reps},
                {"seconds_p10", quantile(slowest, 0.1)},
                {"seconds_p90", quantile(slowest, 0.9)}};
  }

 private:
  // Every collective of the benchmark (the timed calls and the gathers) takes
  // its sequence from this one counter, so their tags never collide. The
  // barriers use the Communicator's own counter under their own op.
  gossamer::CollectiveOptions next() {
    gossamer::CollectiveOptions o;
    o.sequence = sequence_++ & gossamer::Tag::kMaxStep;
    o.timeoutSeconds = a_.timeout;
    return o;
  }

  double timedCall(const std::string& algorithm, std::span<float> data) {
    comm_.barrier();
    const auto t0 = Clock::now();
    runAllreduce(algorithm, transport_, data, next());
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
};

json runProtocol(const Args& a, const std::string& protocol, gossamer::Store& store) {
  auto transport = gossamer::bench::makeBenchTransport(protocol, a.rank, a.worldSize, a.timeout, store,
                                                       "bench-allreduce-" + protocol);
  try {
    RankBench bench(a, *transport);
    const auto sizes = sizesOf(a);
    std::vector<float> buffer(*std::max_element(sizes.begin(), sizes.end()) / sizeof(float));
    json results = json::array();
    for (const auto bytes : sizes)
      for (const auto& algorithm : a.algorithms)
        results.push_back(
            bench.measure(protocol, algorithm, std::span<float>(buffer.data(), bytes / sizeof(float))));
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
  return gossamer::bench::launchAndCollect(
      "allreduce", a.worldSize, a.timeout, a.deadline,
      [&](int r, const std::string& rendezvous, const std::string& resultFile) {
        return std::vector<std::string>{"allreduce",
                                        "--rank",
                                        std::to_string(r),
                                        "--rendezvous",
                                        rendezvous,
                                        "--result-file",
                                        resultFile,
                                        "--world-size",
                                        std::to_string(a.worldSize),
                                        "--protocols",
                                        gossamer::bench::joined(a.protocols),
                                        "--algorithm",
                                        gossamer::bench::joined(a.algorithms),
                                        "--sizes",
                                        sizes,
                                        "--reps",
                                        std::to_string(a.reps),
                                        "--min-reps",
                                        std::to_string(a.minReps),
                                        "--warmup",
                                        std::to_string(a.warmup),
                                        "--budget",
                                        std::to_string(a.budget),
                                        "--timeout",
                                        std::to_string(a.timeout)};
      });
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
  std::printf("%-6s %-18s %5s %10s %5s %12s %12s %12s %10s %10s\n", "proto", "algorithm", "ranks", "size",
              "reps", "median_us", "p10_us", "p90_us", "algbw_GB/s", "busbw_GB/s");
  for (const auto& r : results)
    std::printf("%-6s %-18s %5d %10s %5d %12.1f %12.1f %12.1f %10.3f %10.3f\n",
                r["transport"].get<std::string>().c_str(), r["algorithm"].get<std::string>().c_str(),
                r["world_size"].get<int>(), humanBytes(r["bytes"].get<double>()).c_str(),
                r["reps"].get<int>(), 1e6 * r["seconds"].get<double>(), 1e6 * r["seconds_p10"].get<double>(),
                1e6 * r["seconds_p90"].get<double>(), r["algbw"].get<double>(), r["busbw"].get<double>());
  std::fflush(stdout);
}

void writeJson(const json& results, const std::string& path) {
  gossamer::bench::writeJsonFile(results, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"allreduce: time per call of our allreduce algorithms, N processes over zmq"};
  Args a;
  app.add_option("--world-size", a.worldSize, "number of ranks (processes)")->check(CLI::Range(2, 64));
  app.add_option("--protocols", a.protocols, "zmq protocols (tcp, ipc) or libfabric-tcp, libfabric-shm")
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
  app.add_option("--reps", a.reps, "timed calls per size, at most")->check(CLI::Range(1, 100000));
  app.add_option("--min-reps", a.minReps, "timed calls per size, at least")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "untimed calls per size (the checked one included), at most")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--budget", a.budget, "seconds of timed calls per size, roughly")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", a.jsonPath, "write the results here (empty: do not write)");
  app.add_flag("--quiet", a.quiet, "do not print the table");
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
    const auto results = launch(a);
    if (!a.quiet) printTable(results);
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
