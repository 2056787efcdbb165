// gossamer-sim: a gossamer-train job definition run in a SimGrid simulation
// (transports/simgrid) at any world size, with the job's own optimizer and
// topology, unchanged, over the network its `network:` section describes.
//
// No forward or backward pass is computed: each step a rank spends
// sim.step_seconds (--step-seconds) of simulated time (its compute), or with
// sim.compute_from (--compute-from) the time that the same rank spent on its
// own work at the same step of a real run (its run directory's step records,
// replayed in a cycle: compute_s, the forward and backward pass, plus
// communication_s, the SDK's own work in the step when not waiting for a
// peer, which the simulation does not charge), times the `sim:` section's
// straggler factor and jitter draw for that rank and step
// (apps/train/sim_config.hpp), then calls the optimizer's
// step with a zero gradient on parameters of the model's real size
// (`model:`, Fashion-MNIST's 784 inputs and 10 classes, or --params). Ranks
// start from different parameters (r + 0.001 (i mod 10) at rank r, element
// i) unless the optimizer keeps one replicated model, so what the run shows is
// what communication costs and how fast the ranks agree: simulated seconds
// per step, bytes sent and across islands, and the consensus distance
// (root-mean-square distance of the ranks' parameters from their mean, over
// 64 evenly spaced elements) after every step.
//
// The membership service and the stall watcher are off (they run on threads
// of their own with condition variables, which the simulation cannot run
// yet). HiPS's
// streams and DiLoCo's overlapped outer step run as actors (kit/executor.hpp).
//
// Output: a table on stdout and, with --json, one JSON object.
#include <sys/sysinfo.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_checks.hpp"
#include "components.hpp"
#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/simgrid.hpp"
#include "model.hpp"
#include "sim_config.hpp"
#include "train_config.hpp"

namespace {

using json = nlohmann::json;
using namespace gossamer;

constexpr std::size_t kSampled = 64;  // elements the consensus distance is measured on
// --params at most: 2^31 float32 elements, 8 GiB per copy (every simulated
// rank holds its own copies in this one process).
constexpr std::size_t kMaxParams = std::size_t{1} << 31;

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  int worldSize = 0;  // 0: the config's
  int islands = 0;    // 0: the config's network.islands
  int steps = 20;
  std::string stepSeconds;  // "" unless given: sim.step_seconds
  std::size_t params = 0;   // 0: the model's
  double insideLatencyUs = 50;
  bool receiveUnshaped = false;
  bool tbf = false;
  bool wholeRun = false;                   // the optimizer is told that the run ends after `steps`
  std::string platformFile;                // "" unless given: sim.platform
  std::string computeFrom;                 // "" unless given: sim.compute_from
  std::vector<std::string> simgridConfig;  // SimGrid --cfg items
  std::string jsonPath;
};

// Each rank's processor seconds per step from a run directory's step records
// (rank-R.jsonl: compute_s + communication_s; a record of k steps counts as
// k steps of a k-th of that): sim.compute_from.
// Throws when a rank's file is missing or holds no step record.
std::vector<std::vector<double>> computeOf(const std::string& dir, int worldSize) {
  std::vector<std::vector<double>> out(static_cast<std::size_t>(worldSize));
  for (int r = 0; r < worldSize; ++r) {
    const std::string path = dir + "/rank-" + std::to_string(r) + ".jsonl";
    std::ifstream in(path);
    if (!in)
      throw InvalidArgument("sim.compute_from (--compute-from): cannot read " + path +
                            " (a real run's directory holds rank-R.jsonl for each of its ranks)");
    auto& mine = out[static_cast<std::size_t>(r)];
    std::string line;
    for (int at = 1; std::getline(in, line); ++at) {
      const json j = json::parse(line, nullptr, false);
      const auto bad = [&](const std::string& why) {
        throw InvalidArgument("sim.compute_from (--compute-from): " + path + ":" + std::to_string(at) + ": " +
                              why);
      };
      if (j.is_discarded() || !j.is_object()) bad("not a JSON object");
      if (j.value("kind", "") != "step") continue;
      // A record may stand for several steps (metrics every k-th step): at
      // most 10^6 each, and 10^7 per rank in all (80 MB of step times).
      constexpr std::uint64_t kMostSteps = 10'000'000;
      std::uint64_t steps = 1;
      double c = -1;
      try {
        if (j.contains("steps")) {
          if (!j["steps"].is_number_unsigned()) bad("steps is not a positive integer");
          steps = j["steps"].get<std::uint64_t>();
        }
        c = j.value("compute_s", -1.0) + j.value("communication_s", 0.0);
      } catch (const json::exception&) {
        bad("compute_s or communication_s is not a number");
      }
      // At most 10^6 s a step, as sim.step_seconds: times sim.slow_factor
      // (at most 10^6) it stays a finite simulated time.
      if (steps < 1 || steps > 1'000'000 || !(c >= 0) || !(c / static_cast<double>(steps) <= 1e6))
        bad("a step record without 1 <= steps <= 1000000 and 0 <= compute_s + communication_s <= 10^6 s a "
            "step");
      if (mine.size() + steps > kMostSteps) bad("more than 10^7 steps in this rank's records");
      for (std::uint64_t k = 0; k < steps; ++k) mine.push_back(c / static_cast<double>(steps));
    }
    if (mine.empty())
      throw InvalidArgument("sim.compute_from (--compute-from): " + path + " has no step record");
  }
  return out;
}

// "[[0,...,k-1],[k,...],...]": `count` islands of equal size (the last one
// takes what remains).
std::string equalIslands(int worldSize, int count) {
  std::string s = "[";
  const int per = worldSize / count;
  for (int k = 0; k < count; ++k) {
    s += k == 0 ? "[" : ",[";
    const int end = k + 1 == count ? worldSize : (k + 1) * per;
    for (int r = k * per; r < end; ++r) {
      if (r != k * per) s += ',';
      s += std::to_string(r);
    }
    s += "]";
  }
  return s + "]";
}

std::vector<std::size_t> tensorSizes(const Config& c, std::size_t params) {
  if (params > 0) return {params};
  const auto m = train::trainConfigFrom(c).model;
  const auto model =
      m.kind == "softmax" ? train::Model::softmax(784, 10) : train::Model::mlp(784, m.hidden, 10);
  return model.tensorSizes();
}

// When each of `steps` steps was over on every rank, from each rank's step
// end times ([rank][step], simulated seconds).
json latestPerStep(const std::vector<std::vector<double>>& ends, int steps) {
  json latest = json::array();
  for (int s = 0; s < steps; ++s) {
    double t = 0;
    for (const auto& e : ends) t = std::max(t, e[static_cast<std::size_t>(s)]);
    latest.push_back(t);
  }
  return latest;
}

// Consensus distance after each of `steps` steps: the root-mean-square
// distance of the ranks' sampled elements ([rank][step * kSampled + k]) from
// their mean.
json consensusDistance(const std::vector<std::vector<float>>& samples, int steps) {
  const auto n = static_cast<double>(samples.size());
  json distance = json::array();
  for (int s = 0; s < steps; ++s) {
    double sum = 0;
    for (std::size_t k = 0; k < kSampled; ++k) {
      const std::size_t at = static_cast<std::size_t>(s) * kSampled + k;
      double mean = 0;
      for (const auto& v : samples) mean += v[at];
      mean /= n;
      for (const auto& v : samples) sum += (v[at] - mean) * (v[at] - mean);
    }
    distance.push_back(std::sqrt(sum / (n * kSampled)));
  }
  return distance;
}

// The overrides a simulation loads the job with: the simgrid transport, no
// membership service or stall watcher, the flags' world size and islands,
// the user's --set, then the flags that stand for sim: keys.
std::vector<std::string> simOverrides(const Options& o, const Registry& registry) {
  // The membership service's heartbeats and the stall watcher run on
  // threads of their own, which a simulation cannot run yet: they are left
  // out (the watcher would measure the machine's time and report every wait
  // that the simulation takes long to compute as a stall).
  std::vector<std::string> overrides{"transport.kind=simgrid", "membership.enabled=false",
                                     "run.stall_seconds=0"};
  if (o.worldSize > 0) overrides.push_back("world_size=" + std::to_string(o.worldSize));
  if (o.islands > 0) {
    // The config's world size, loaded as the run will be (with the fixed
    // overrides above: rules about what they turn off do not apply).
    std::vector<std::string> load = overrides;
    load.insert(load.end(), o.overrides.begin(), o.overrides.end());
    const int n = o.worldSize > 0 ? o.worldSize : registry.load(o.config, load).worldSize();
    if (o.islands > n)
      throw InvalidArgument("--islands " + std::to_string(o.islands) + " is more than the " +
                            std::to_string(n) + " ranks (" +
                            (o.worldSize > 0 ? "--world-size" : "the config's world_size") +
                            "): an island holds one rank at least");
    overrides.push_back("network.islands=" + equalIslands(n, o.islands));
  }
  overrides.insert(overrides.end(), o.overrides.begin(), o.overrides.end());
  // The flags that stand for sim: keys win over the YAML and --set; a path
  // goes as a double-quoted YAML string (JSON's), so that it is read as it is.
  if (!o.stepSeconds.empty()) overrides.push_back("sim.step_seconds=" + o.stepSeconds);
  if (!o.platformFile.empty()) overrides.push_back("sim.platform=" + json(o.platformFile).dump());
  if (!o.computeFrom.empty()) overrides.push_back("sim.compute_from=" + json(o.computeFrom).dump());
  return overrides;
}

json run(const Options& o) {
  const Registry registry = [] {
    Registry r = train::makeTrainRegistry();
    simgrid::registerWith(r);
    return r;
  }();
  const Config config = registry.load(o.config, simOverrides(o, registry));
  const train::SimConfig sim = train::simConfigFrom(config);
  if (!sim.platform.empty() && !std::filesystem::is_regular_file(sim.platform))
    throw ConfigError(config.sourceFile, 0, "sim.platform",
                      "no file " + sim.platform + " (a relative path is from the working directory)");
  const int n = config.worldSize();
  const auto sizes = tensorSizes(config, o.params);
  std::size_t total = 0;
  for (const auto s : sizes) total += s;

  simgrid::Platform platform =
      simgrid::Platform::fromNetwork(NetworkLayout::from(config), o.insideLatencyUs * 1e-6);
  platform.receiveUnshaped = o.receiveUnshaped;
  if (o.tbf) platform.shapeLikeNamespaceHosts();
  platform.file = sim.platform;

  const auto replay =
      sim.computeFrom.empty() ? std::vector<std::vector<double>>{} : computeOf(sim.computeFrom, n);
  MemoryStore store;
  // [rank][step][k]: the sampled elements after each step.
  std::vector<std::vector<float>> samples(static_cast<std::size_t>(n));
  std::vector<double> finished(static_cast<std::size_t>(n), 0);
  // [rank][step]: simulated seconds when the rank's step returned.
  std::vector<std::vector<double>> stepEnds(static_cast<std::size_t>(n));
  std::string algorithm;
  bool replicated = false;
  // Every rank's parameters and gradients live in this one process.
  const double need = static_cast<double>(n) * static_cast<double>(total) * 8;
  // Memory and swap: a run that fits only with swap is slow, not refused.
  struct sysinfo info {};
  const double have =
      ::sysinfo(&info) == 0
          ? (static_cast<double>(info.totalram) + static_cast<double>(info.totalswap)) * info.mem_unit
          : 0.0;
  if (have > 0 && need > have) {
    std::ostringstream os;
    os << n << " ranks of " << total << " parameters need " << need / (1 << 30)
       << " GiB for their parameters and gradients alone, and this machine has " << have / (1 << 30)
       << " GiB of memory and swap: lower " << (o.params > 0 ? "--params" : "model.hidden") << " or "
       << (o.worldSize > 0 ? "--world-size" : "world_size");
    throw InvalidArgument(os.str());
  }
  const auto wall0 = std::chrono::steady_clock::now();
  const auto outcome = simgrid::simulate(
      platform,
      [&](int r) {
        Agent agent(config, r, store, registry);
        auto& opt = agent.makeOptimizer(sizes);
        if (o.wholeRun) opt.setTotalSteps(static_cast<std::uint64_t>(o.steps));
        if (r == 0) {
          algorithm = opt.name();
          replicated = opt.replicatedModel();
        }
        std::vector<float> x(total), g(total, 0.0f);
        const float shift = opt.replicatedModel() ? 0.0f : static_cast<float>(r);
        for (std::size_t i = 0; i < total; ++i) x[i] = shift + 0.001f * static_cast<float>(i % 10);
        auto& mine = samples[static_cast<std::size_t>(r)];
        mine.reserve(static_cast<std::size_t>(o.steps) * kSampled);
        auto& ends = stepEnds[static_cast<std::size_t>(r)];
        ends.reserve(static_cast<std::size_t>(o.steps));
        const auto factor = train::computeFactors(sim, config.seed(), r, o.steps);
        for (int s = 0; s < o.steps; ++s) {
          const auto at = static_cast<std::size_t>(s);
          double compute = sim.stepSeconds;
          if (!replay.empty()) {
            const auto& mineCompute = replay[static_cast<std::size_t>(r)];
            compute = mineCompute[at % mineCompute.size()];
          }
          if (compute * factor[at] > 0) simgrid::sleepFor(compute * factor[at]);
          opt.step(x, g);
          ends.push_back(simgrid::now());
          for (std::size_t k = 0; k < kSampled; ++k) mine.push_back(x[k * total / kSampled]);
        }
        opt.flush(x);
        finished[static_cast<std::size_t>(r)] = simgrid::now();
        agent.close();
      },
      o.simgridConfig);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (!outcome.errors.empty()) {
    std::string all;
    for (const auto& e : outcome.errors) all += "\n  " + e;
    throw Error("gossamer-sim: " + std::to_string(outcome.errors.size()) + " rank(s) failed:" + all);
  }
  const json distance = consensusDistance(samples, o.steps);
  const double last = *std::max_element(finished.begin(), finished.end());
  const json stepEnd = latestPerStep(stepEnds, o.steps);
  return json{{"algorithm", algorithm},
              {"topology", config.get<std::string>("topology.kind")},
              {"world_size", n},
              {"islands", std::max<std::size_t>(1, platform.islands.size())},
              {"inside_gbps", platform.insideBytesPerSecond * 8 / 1e9},
              {"between_gbps", platform.betweenBytesPerSecond * 8 / 1e9},
              {"between_delay_ms", platform.betweenLatencySeconds * 1e3},
              {"inside_latency_us", o.insideLatencyUs},
              {"platform_file", sim.platform},
              {"parameters", total},
              {"steps", o.steps},
              {"whole_run", o.wholeRun},
              {"step_compute_seconds", sim.stepSeconds},
              {"compute_from", sim.computeFrom},
              {"slow_ranks", sim.slowRanks},
              {"slow_factor", sim.slowFactor},
              {"jitter", sim.jitter},
              {"jitter_scale", sim.jitterScale},
              {"replicated_model", replicated},
              {"simulated_seconds_per_step", last / o.steps},
              {"bytes_sent", outcome.bytesSent},
              {"bytes_between_islands", outcome.bytesBetweenIslands},
              {"consensus_distance", distance},
              {"step_end_seconds", stepEnd},
              {"wall_seconds", wall}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamer-sim: a gossamer-train config in a SimGrid simulation, at any world size"};
  Options o;
  app.add_option("config", o.config, "the job's YAML (gossamer-train's format)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--set", o.overrides, "KEY=VALUE: overrides a key of the config, as gossamer-train --set");
  app.add_option("--world-size", o.worldSize, "ranks (default: the config's world_size)")
      ->check(CLI::Range(1, kMaxWorldSize));
  app.add_option("--islands", o.islands,
                 "network.islands: this many equal islands, at most the world size (default: the config's)")
      ->check(CLI::Range(1, kMaxWorldSize));
  app.add_option("--steps", o.steps, "optimizer steps per rank")->check(CLI::Range(1, 1000000));
  app.add_option("--step-seconds", o.stepSeconds, "simulated compute per step, seconds (sim.step_seconds)")
      ->check(gossamer::apps::finiteIn(0));
  app.add_option("--params", o.params, "parameters (float32 elements) instead of the model's")
      ->check(CLI::Range(std::size_t{1}, kMaxParams));
  app.add_option("--inside-latency-us", o.insideLatencyUs, "one-way latency inside an island, microseconds")
      ->check(gossamer::apps::finiteIn(0));
  app.add_flag("--receive-unshaped", o.receiveUnshaped,
               "hosts receive at any rate (tc shapes only what a host sends, as on the namespace hosts)");
  app.add_flag("--tbf", o.tbf,
               "links are token buckets with the bursts that tc tbf has on the namespace hosts "
               "(1 ms at the link's rate, at least 64 KiB)");
  app.add_flag("--whole-run", o.wholeRun,
               "the steps are the whole training run: the optimizer is told so, as gossamer-train's session "
               "tells it (DiLoCo and A2SGD end with a synchronising round at the last step)");
  app.add_option("--platform", o.platformFile,
                 "a SimGrid platform file with hosts rank-0 .. rank-N-1 (sim.platform)")
      ->check(CLI::ExistingFile);
  app.add_option(
         "--compute-from", o.computeFrom,
         "a real run's directory: each rank replays its recorded compute_s + communication_s step by step "
         "(sim.compute_from)")
      ->check(CLI::ExistingDirectory);
  app.add_option(
      "--cfg", o.simgridConfig,
      "KEY:VALUE: a SimGrid configuration item (as SimGrid's --cfg), e.g. network/latency-factor:1");
  app.add_option("--json", o.jsonPath, "write the result here");
  CLI11_PARSE(app, argc, argv);
  try {
    const json r = run(o);
    const auto& d = r["consensus_distance"];
    std::printf("%-16s %6s %8s %12s %14s %14s %12s %10s\n", "algorithm", "ranks", "islands", "s/step",
                "bytes sent", "bytes between", "consensus", "wall s");
    std::printf("%-16s %6d %8zu %12.6f %14.0f %14.0f %12.3g %10.2f\n",
                r["algorithm"].get<std::string>().c_str(), r["world_size"].get<int>(),
                r["islands"].get<std::size_t>(), r["simulated_seconds_per_step"].get<double>(),
                r["bytes_sent"].get<double>(), r["bytes_between_islands"].get<double>(),
                d.back().get<double>(), r["wall_seconds"].get<double>());
    if (!o.jsonPath.empty()) {
      std::ofstream out(o.jsonPath);
      out << r.dump(2) << "\n";
      if (!out) throw Error("cannot write " + o.jsonPath);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gossamer-sim: " << e.what() << "\n";
    return 1;
  }
}
