// The time of one allreduce in a SimGrid simulation (transports/simgrid): N
// ranks, each with its own host, run the SDK's allreduce of --elements
// float32 values with one algorithm, on a flat cluster (every host's link at
// --gbps with one-way latency --latency-us through one switch; the alpha-beta
// model of paper 000's Table 2) or on a SimGrid platform file (--platform:
// a torus or any other network, hosts rank-0 .. rank-N-1). Prints the
// simulated seconds from the start to the last rank's return, and with
// --json writes them with the settings. One simulation per process (SimGrid's
// engine runs once): scripts/sim-papers.sh runs one process per point.
//
// Algorithms: ring, recursive_doubling, rabenseifner, torus2d, hierarchical,
// tga2d (--groups: the number of groups; torus2d's rows about sqrt(N)), and
// HiPS (hips-ring, hips-mesh: --levels "n,n,...", parallel streams, one
// stage kind; mesh with one level is the mesh (PS-sharded) synchronisation).
// The result is checked: every rank must hold the exact sum.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/hips.hpp"
#include "gossamer/transports/simgrid.hpp"

namespace {

using json = nlohmann::json;
using namespace gossamer;

struct Options {
  int worldSize = 16;
  std::string algorithm = "ring";
  std::size_t elements = 1 << 20;
  double gbps = 56;
  double latencyUs = 0.7;
  int groups = 0;
  std::string levels;
  std::string platformFile;
  std::string jsonPath;
};

std::vector<int> parseLevels(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const int k = std::stoi(item);
    GOSSAMER_ENFORCE(k >= 1, "--levels: " << k);
    out.push_back(k);
  }
  return out;
}

json run(const Options& o) {
  const int n = o.worldSize;
  simgrid::Platform p;
  p.hosts = n;
  p.insideBytesPerSecond = o.gbps * 1e9 / 8;
  p.insideLatencySeconds = o.latencyUs * 1e-6;
  p.file = o.platformFile;
  CollectiveOptions c;
  c.sequence = 1;
  c.timeoutSeconds = 3600;
  HipsOptions h;
  const bool hips = o.algorithm.rfind("hips-", 0) == 0;
  if (hips) {
    h.levels = parseLevels(o.levels);
    h.parallelStreams = true;
    h.stage = o.algorithm == "hips-mesh" ? HipsOptions::Stage::kMesh : HipsOptions::Stage::kRing;
  } else {
    c.algorithm = parseAllreduceAlgorithm(o.algorithm);
    if (o.groups > 0) {
      GOSSAMER_ENFORCE(n % o.groups == 0, "--groups " << o.groups << " does not divide " << n);
      c.groupSize = n / o.groups;
    }
  }
  std::vector<double> finished(static_cast<std::size_t>(n), 0);
  std::vector<std::string> wrong(static_cast<std::size_t>(n));
  const auto wall0 = std::chrono::steady_clock::now();
  const auto out = simgrid::simulate(
      p,
      [&](int r) {
        simgrid::Options t;
        t.rank = r;
        t.worldSize = n;
        t.timeoutSeconds = 3600;
        auto transport = simgrid::makeTransport(t);
        std::vector<float> v(o.elements);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + static_cast<int>(i)) % 3);
        if (hips)
          hipsAllreduce<float>(*transport, v, ReduceOp::kSum, c, h);
        else
          allreduce<float>(*transport, v, ReduceOp::kSum, c);
        finished[static_cast<std::size_t>(r)] = simgrid::now();
        // The exact sum over ranks q of (q + i) mod 3.
        for (std::size_t i = 0; i < v.size(); i += 1 + v.size() / 1000) {
          int sum = 0;
          for (int q = 0; q < n; ++q) sum += (q + static_cast<int>(i)) % 3;
          if (v[i] != static_cast<float>(sum)) {
            wrong[static_cast<std::size_t>(r)] = "element " + std::to_string(i) + " is " +
                                                 std::to_string(v[i]) + ", expected " + std::to_string(sum);
            break;
          }
        }
        transport->close();
      },
      {"network/latency-factor:1", "network/bandwidth-factor:1", "network/crosstraffic:0"});
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  std::string errors;
  for (const auto& e : out.errors) errors += "\n  " + e;
  for (int r = 0; r < n; ++r)
    if (!wrong[static_cast<std::size_t>(r)].empty())
      errors += "\n  rank " + std::to_string(r) + ": " + wrong[static_cast<std::size_t>(r)];
  if (!errors.empty()) throw Error("sim-allreduce:" + errors);
  return json{{"algorithm", o.algorithm},
              {"world_size", n},
              {"elements", o.elements},
              {"bytes", o.elements * sizeof(float)},
              {"gbps", o.gbps},
              {"latency_us", o.latencyUs},
              {"groups", o.groups},
              {"levels", o.levels},
              {"platform_file", o.platformFile},
              {"simulated_seconds", *std::max_element(finished.begin(), finished.end())},
              {"bytes_sent", out.bytesSent},
              {"wall_seconds", wall}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sim-allreduce: one allreduce of the SDK in a SimGrid simulation"};
  Options o;
  app.add_option("--world-size", o.worldSize, "ranks (hosts)")->check(CLI::Range(1, 1 << 16));
  app.add_option(
      "--algorithm", o.algorithm,
      "ring, recursive_doubling, rabenseifner, torus2d, hierarchical, tga2d, hips-ring, hips-mesh");
  app.add_option("--elements", o.elements, "float32 elements per rank")->check(CLI::Range(1, 1 << 30));
  app.add_option("--gbps", o.gbps, "each host's link, Gbit/s (flat cluster)")->check(CLI::PositiveNumber);
  app.add_option("--latency-us", o.latencyUs, "one-way latency per message, microseconds (flat cluster)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--groups", o.groups, "hierarchical and tga2d: number of groups (0: about sqrt(N))")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--levels", o.levels, "hips-*: radices, comma-separated, product N");
  app.add_option("--platform", o.platformFile, "a SimGrid platform file with hosts rank-0 .. rank-N-1")
      ->check(CLI::ExistingFile);
  app.add_option("--json", o.jsonPath, "write the result here");
  CLI11_PARSE(app, argc, argv);
  try {
    const json r = run(o);
    std::printf("%-20s %6d %12zu %14.6f %10.2f\n", o.algorithm.c_str(), o.worldSize, o.elements,
                r["simulated_seconds"].get<double>(), r["wall_seconds"].get<double>());
    if (!o.jsonPath.empty()) {
      std::ofstream f(o.jsonPath);
      f << r.dump(1) << "\n";
      if (!f) throw Error("cannot write " + o.jsonPath);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "sim-allreduce: " << e.what() << "\n";
    return 1;
  }
}
