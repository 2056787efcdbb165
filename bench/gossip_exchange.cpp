// gossip_exchange: why users pick gossip. Times ONE Crossover-SGD exchange
// (segment-wise gossip over the fair roulette) of the MLP's parameter vector
// against ONE ring allreduce (average) of the same vector, with every rank a
// separate OS process on this machine, over the zmq transport (tcp on
// 127.0.0.1, then ipc).
//
//   gossip_exchange [--world-size 8] [--reps 50] [--protocols tcp,ipc] [--json PATH]
//       launcher (default): forks/execs itself once per rank, waits (bounded),
//       prints the table and writes the JSON list;
//   gossip_exchange --rank R --rendezvous DIR ...
//       one rank (what the launcher starts).
//
// Each rank, per protocol: warm-ups, then R repetitions, interleaved:
// barrier, time one allreduce; barrier, time one exchange. The per-rank times
// are gathered at the end (one allreduce of a vector with a slot per
// (repetition, kind, rank)), so a repetition's time is the slowest rank's.
// Reported: medians over repetitions of that max. Bandwidths follow
// nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n-1) / n.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/launcher.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/zmq.hpp"

namespace {

using gossamer::bench::Clock;
using gossamer::bench::median;
using gossamer::bench::quantile;
using gossamer::bench::seconds;
using nlohmann::json;

constexpr std::size_t kMlpParams = 101770;  // 784-128-10 MLP

struct Args {
  int worldSize = 8;
  int reps = 50;
  int warmup = 5;
  std::vector<std::string> protocols{"tcp", "ipc"};
  std::size_t params = kMlpParams;
  int segments = 4;
  std::string jsonPath = "results/bench-gossip.json";
  double timeout = 30;           // bound on every wait inside a rank
  double deadline = 900;         // launcher: bound on the whole run
  std::string binding = "core";  // launcher: --bind (CpuBinding)
  std::uint64_t seed = 42;       // fair roulette
  // Rank mode.
  int rank = -1;
  std::string rendezvous;
  std::string resultFile;
};

// The MLP's tensors in flat order (W1, b1, W2, b2); any other P is one tensor.
std::vector<std::size_t> tensorSizes(std::size_t p) {
  if (p == kMlpParams) return {784 * 128, 128, 128 * 10, 10};
  return {p};
}

// CPU time of this process, every thread included.
double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One protocol on one rank. Returns rank 0's summary object (empty elsewhere).
json runProtocol(const Args& a, const std::string& protocol, gossamer::Store& store) {
  gossamer::zmq::Options o;
  o.rank = a.rank;
  o.worldSize = a.worldSize;
  o.protocol = protocol;
  o.host = "127.0.0.1";
  o.timeoutSeconds = a.timeout;
  o.storePrefix = "bench-" + protocol;
  auto transport = gossamer::zmq::makeTransport(o, store);
  try {
    gossamer::Communicator comm(*transport, a.timeout);
    // The ring, as the figure says: auto would pick by size (Rabenseifner
    // for this vector).
    gossamer::CollectiveOptions ring = comm.options();
    ring.algorithm = gossamer::AllreduceAlgorithm::kRing;
    comm.setOptions(ring);
    gossamer::topologies::FairRoulette topology(a.worldSize, a.seed);
    gossamer::optimizers::CrossoverOptions co;
    co.sgd.learningRate = 0;
    co.sgd.momentum = 0;
    co.segments = a.segments;
    co.timeoutSeconds = a.timeout;
    gossamer::optimizers::CrossoverSgd crossover(*transport, topology, tensorSizes(a.params), co);

    std::vector<float> reduced(a.params), gossiped(a.params);
    for (std::size_t i = 0; i < a.params; ++i)
      reduced[i] = gossiped[i] = static_cast<float>((a.rank + 1) * ((i % 97) + 1)) * 1e-3f;

    const auto n = static_cast<std::size_t>(a.worldSize);
    const auto reps = static_cast<std::size_t>(a.reps);
    // times[(rep * kKinds + kind) * n + rank]: wall seconds of the allreduce
    // and the exchange, then CPU seconds of this process (all its threads:
    // caller, progress thread, ZeroMQ I/O thread) during each, then when each
    // started (steady clock, the same on every process of this machine).
    enum Kind : std::size_t {
      kAllreduce,
      kExchange,
      kAllreduceCpu,
      kExchangeCpu,
      kAllreduceStart,
      kExchangeStart,
      kKinds
    };
    std::vector<double> times(reps * kKinds * n, 0.0);
    for (int i = 0; i < a.warmup + a.reps; ++i) {
      comm.barrier();
      const double c0 = cpuSeconds();
      const auto t0 = Clock::now();
      comm.allreduce(std::span<float>(reduced), gossamer::ReduceOp::kAverage);
      const auto t1 = Clock::now();
      const double c1 = cpuSeconds();
      comm.barrier();
      const double c2 = cpuSeconds();
      const auto t2 = Clock::now();
      crossover.exchange(gossiped, static_cast<std::uint64_t>(i));
      const auto t3 = Clock::now();
      const double c3 = cpuSeconds();
      if (i < a.warmup) continue;
      const auto at = [&](Kind k) -> double& {
        return times[(static_cast<std::size_t>(i - a.warmup) * kKinds + k) * n +
                     static_cast<std::size_t>(a.rank)];
      };
      at(kAllreduce) = seconds(t0, t1);
      at(kExchange) = seconds(t2, t3);
      at(kAllreduceCpu) = c1 - c0;
      at(kExchangeCpu) = c3 - c2;
      at(kAllreduceStart) = std::chrono::duration<double>(t0.time_since_epoch()).count();
      at(kExchangeStart) = std::chrono::duration<double>(t2.time_since_epoch()).count();
    }
    comm.allreduce(std::span<double>(times), gossamer::ReduceOp::kSum);  // gather: one slot per rank
    transport->close();

    if (a.rank != 0) return {};
    std::vector<double> allreduceMax(reps), exchangeMax(reps), allreduceCpu(reps), exchangeCpu(reps),
        allreduceSkew(reps), exchangeSkew(reps);
    for (std::size_t r = 0; r < reps; ++r) {
      const auto slots = [&](Kind k) {
        return times.begin() + static_cast<std::ptrdiff_t>((r * kKinds + k) * n);
      };
      const auto ranks = static_cast<std::ptrdiff_t>(n);
      allreduceMax[r] = *std::max_element(slots(kAllreduce), slots(kAllreduce) + ranks);
      exchangeMax[r] = *std::max_element(slots(kExchange), slots(kExchange) + ranks);
      allreduceCpu[r] = std::accumulate(slots(kAllreduceCpu), slots(kAllreduceCpu) + ranks, 0.0);
      exchangeCpu[r] = std::accumulate(slots(kExchangeCpu), slots(kExchangeCpu) + ranks, 0.0);
      const auto skew = [&](Kind k) {
        const auto [lo, hi] = std::minmax_element(slots(k), slots(k) + ranks);
        return *hi - *lo;
      };
      allreduceSkew[r] = skew(kAllreduceStart);
      exchangeSkew[r] = skew(kExchangeStart);
    }
    const double ar = median(allreduceMax), ex = median(exchangeMax);
    return json{{"transport", protocol},
                {"world_size", a.worldSize},
                {"bytes", a.params * sizeof(float)},
                {"allreduce_seconds", ar},
                {"exchange_seconds", ex},
                {"ratio", ex / ar},
                // Spread, CPU seconds and start skew (the second table).
                {"allreduce_p10", quantile(allreduceMax, 0.1)},
                {"allreduce_p90", quantile(allreduceMax, 0.9)},
                {"exchange_p10", quantile(exchangeMax, 0.1)},
                {"exchange_p90", quantile(exchangeMax, 0.9)},
                {"allreduce_cpu_seconds", median(allreduceCpu)},
                {"exchange_cpu_seconds", median(exchangeCpu)},
                {"allreduce_start_skew", median(allreduceSkew)},
                {"exchange_start_skew", median(exchangeSkew)}};
  } catch (...) {
    transport->abort();
    throw;
  }
}

int runRank(const Args& a) {
  gossamer::FileStore store(a.rendezvous);
  json results = json::array();
  for (const auto& p : a.protocols) {
    auto r = runProtocol(a, p, store);
    if (a.rank == 0) results.push_back(std::move(r));
  }
  if (a.rank == 0) gossamer::bench::writeResultFile(results, a.resultFile);
  return 0;
}

// Starts every rank as a child process, waits for all of them (bounded), and
// returns rank 0's results.
json launch(const Args& a) {
  auto results = gossamer::bench::launchAndCollect(
      "gossip_exchange", a.worldSize, a.timeout, a.deadline,
      {"--world-size", std::to_string(a.worldSize), "--reps", std::to_string(a.reps), "--warmup",
       std::to_string(a.warmup), "--protocols", gossamer::bench::joined(a.protocols), "--params",
       std::to_string(a.params), "--segments", std::to_string(a.segments), "--timeout",
       std::to_string(a.timeout), "--seed", std::to_string(a.seed)},
      a.binding);
  for (auto& row : results) row["binding"] = a.binding;
  return results;
}

void printTable(const json& results) {
  std::printf("%-9s %5s %9s %13s %13s %7s %11s %11s\n", "transport", "ranks", "bytes", "allreduce_s",
              "exchange_s", "ratio", "algbw_GB/s", "busbw_GB/s");
  for (const auto& r : results) {
    const double n = r["world_size"].get<double>();
    const double bytes = r["bytes"].get<double>();
    const double ar = r["allreduce_seconds"].get<double>();
    const double algbw = bytes / ar / 1e9;
    std::printf("%-9s %5d %9.0f %13.6f %13.6f %7.3f %11.3f %11.3f\n",
                r["transport"].get<std::string>().c_str(), static_cast<int>(n), bytes, ar,
                r["exchange_seconds"].get<double>(), r["ratio"].get<double>(), algbw,
                algbw * 2 * (n - 1) / n);
  }
  // Spread over repetitions (of the max over ranks); CPU time of all ranks'
  // processes (median per operation: with more runnable threads than cores
  // the wall time follows it); how far apart the ranks started (median).
  std::printf("%-9s %21s %21s %13s %13s %13s %13s\n", "", "allreduce p10-p90 ms", "exchange p10-p90 ms",
              "allreduce_cpu", "exchange_cpu", "ar_skew", "ex_skew");
  for (const auto& r : results) {
    const auto ms = [&](const char* key) { return 1e3 * r[key].get<double>(); };
    std::printf("%-9s %10.2f-%-10.2f %10.2f-%-10.2f %10.2f ms %10.2f ms %10.2f ms %10.2f ms\n",
                r["transport"].get<std::string>().c_str(), ms("allreduce_p10"), ms("allreduce_p90"),
                ms("exchange_p10"), ms("exchange_p90"), ms("allreduce_cpu_seconds"),
                ms("exchange_cpu_seconds"), ms("allreduce_start_skew"), ms("exchange_start_skew"));
  }
  std::fflush(stdout);
}

void writeJson(const json& results, const std::string& path) {
  json out = json::array();
  for (const auto& r : results) {
    json row = r;  // the table's diagnostics too (spread, CPU seconds, start skew)
    row["impl"] = "gossamer";
    row["algorithm"] = "ring";
    out.push_back(std::move(row));
  }
  gossamer::bench::writeJsonFile(out, path);
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossip_exchange: one Crossover-SGD exchange vs one ring allreduce, N processes over zmq"};
  Args a;
  app.add_option("--world-size", a.worldSize, "number of ranks (processes)")->check(CLI::Range(2, 64));
  app.add_option("--reps", a.reps, "timed repetitions per protocol")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "untimed repetitions first")->check(CLI::NonNegativeNumber);
  app.add_option("--protocols", a.protocols, "zmq protocols, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"tcp", "ipc"}));
  app.add_option("--params", a.params, "float32 parameters (101770 = the MLP's tensors)")
      ->check(CLI::PositiveNumber);
  app.add_option("--segments", a.segments, "Crossover-SGD segments S")->check(CLI::Range(1, 65536));
  app.add_option("--json", a.jsonPath, "write the results here (empty: do not write)");
  app.add_option("--timeout", a.timeout, "bound on every wait, seconds")->check(CLI::PositiveNumber);
  app.add_option("--deadline", a.deadline, "bound on the whole run, seconds")->check(CLI::PositiveNumber);
  gossamer::bench::addBindOption(app, a.binding);
  app.add_option("--seed", a.seed, "fair roulette seed");
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
    const auto results = launch(a);
    printTable(results);
    if (!a.jsonPath.empty()) writeJson(results, a.jsonPath);
    return 0;
  } catch (const std::exception& e) {
    if (a.rank >= 0)
      std::fprintf(stderr, "gossip_exchange rank %d: error: %s\n", a.rank, e.what());
    else
      std::fprintf(stderr, "gossip_exchange: error: %s\n", e.what());
    return 1;
  }
}
