// gossamer-topology: mixing analysis of the gossip topologies (paper
// 004_659e3573d5645e2e.txt, Sec. 3.2, Fig. 6). For every step k it prints the
// second largest eigenvalue modulus and singular value of the product of the
// first k mixing matrices, and the imbalance factor against the AllReduce
// matrix (definitions: gossamer/topologies/mixing.hpp, docs/mixing.md).
//
//   gossamer-topology --world-size 16 --steps 20 --segments 4
//       fair roulette, roulette without fair selection, directed exponential
//       (1 peer) and ring side by side;
//   gossamer-topology --config examples/configs/quickstart-crossover.yaml
//       the configured topology (world size, seed, roulette table / edges,
//       segments and model from the YAML);
//   ... --csv out.csv  also writes long-format CSV.
//
// Segments: the flat parameter vector of the configured MLP (784 inputs,
// hidden widths, 10 classes; without --config the default 784-128-10 MLP,
// tensors {100352, 128, 1280, 10}) is split with segmentsAlongTensors, as
// Crossover-SGD does, and the per-step matrix is the size-weighted mean of
// the segments' matrices (stepMixingMatrix).
//
// Exit status: 0 success, 1 runtime error (bad config file, unwritable CSV),
// 2 bad command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/topologies/mixing.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "train_config.hpp"

namespace {

namespace topo = gossamer::topologies;

constexpr int kInputs = 784;  // Fashion-MNIST, as gossamer-train
constexpr int kClasses = 10;

const std::vector<std::string> kAll = {"fair_roulette", "roulette_unfair", "directed_exponential", "ring"};

struct Analysed {
  std::string label;
  std::vector<topo::MixingStats> stats;
};

// Element counts of the model's tensors (weights, bias per layer), as
// Model::tensorSizes in examples/train.
std::vector<std::size_t> mlpTensorSizes(const gossamer::train::ModelConfig& m) {
  std::vector<int> widths{kInputs};
  if (m.kind != "softmax") widths.insert(widths.end(), m.hidden.begin(), m.hidden.end());
  widths.push_back(kClasses);
  std::vector<std::size_t> sizes;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    sizes.push_back(static_cast<std::size_t>(widths[l]) * static_cast<std::size_t>(widths[l + 1]));
    sizes.push_back(static_cast<std::size_t>(widths[l + 1]));
  }
  return sizes;
}

std::vector<std::size_t> segmentSizes(const gossamer::train::ModelConfig& m, int segments) {
  std::vector<std::size_t> sizes;
  for (const auto& [b, e] : topo::segmentsAlongTensors(mlpTensorSizes(m), segments)) sizes.push_back(e - b);
  return sizes;
}

// The components gossamer-train knows, so that its configs load here too.
const gossamer::Registry& registry() {
  static const gossamer::Registry r = [] {
    gossamer::Registry out;
    topo::registerBuiltins(out);
    gossamer::optimizers::registerBuiltins(out);
    gossamer::train::registerTrainSections(out);
    return out;
  }();
  return r;
}

// The topology called `name`, built from the run config (world size, seed,
// roulette table, edges). Names the tool does not know are looked up in the
// registry of built-in topologies.
std::unique_ptr<gossamer::Topology> makeTopology(const std::string& name, const gossamer::Config& c) {
  const auto& probabilities = c.get<std::vector<std::vector<double>>>("topology.probabilities");
  const auto& edges = c.get<std::vector<std::pair<int, int>>>("topology.edges");
  if (name == "fair_roulette")
    return std::make_unique<topo::FairRoulette>(c.worldSize, c.seed, probabilities);
  if (name == "roulette_unfair")
    return std::make_unique<topo::UnfairRoulette>(c.worldSize, c.seed, probabilities);
  if (name == "directed_exponential") return std::make_unique<topo::DirectedExponential>(c.worldSize, 1);
  if (name == "directed_exponential2") return std::make_unique<topo::DirectedExponential>(c.worldSize, 2);
  if (name == "ring") return std::make_unique<topo::Ring>(c.worldSize);
  if (name == "explicit") {
    if (edges.empty())
      throw gossamer::InvalidArgument("topology 'explicit' needs topology.edges (use --config)");
    return std::make_unique<topo::ExplicitGraph>(c.worldSize, edges);
  }
  return registry().topology(name)(c);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void printTable(const std::vector<Analysed>& runs, std::uint64_t steps) {
  constexpr int kCol = 11;  // width of one number column
  std::string line1 = "    ", line2 = "step";
  for (const auto& r : runs) {
    std::string head = "  " + r.label;
    head.resize(3 * kCol, ' ');
    line1 += " | " + head;
    line2 += " | " + std::string(kCol - 4, ' ') + "slem" + std::string(kCol - 6, ' ') + "sigma2" +
             std::string(kCol - 9, ' ') + "imbalance";
  }
  line1.erase(line1.find_last_not_of(' ') + 1);
  std::printf("%s\n%s\n", line1.c_str(), line2.c_str());
  for (std::uint64_t k = 0; k < steps; ++k) {
    std::string row = fmt("%4.0f", static_cast<double>(k + 1));
    for (const auto& r : runs) {
      const auto& s = r.stats[static_cast<std::size_t>(k)];
      row += " | " + fmt("%11.4g", s.slem) + fmt("%11.4g", s.sigma2) + fmt("%11.3e", s.imbalance);
    }
    std::printf("%s\n", row.c_str());
  }
}

void writeCsv(std::ofstream& out, const std::string& path, const std::vector<Analysed>& runs, int worldSize,
              std::size_t segments) {
  out << "topology,world_size,segments,step,slem,sigma2,imbalance\n";
  for (const auto& r : runs)
    for (const auto& s : r.stats)
      out << r.label << ',' << worldSize << ',' << segments << ',' << s.step << ',' << fmt("%.17g", s.slem)
          << ',' << fmt("%.17g", s.sigma2) << ',' << fmt("%.17g", s.imbalance) << '\n';
  out.flush();
  if (!out) throw gossamer::Error("cannot write '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gossamer-topology: consensus rate and imbalance of products of gossip mixing matrices "
      "(paper 004, Fig. 6)"};
  int worldSize = 16, segments = 4;
  std::uint64_t steps = 20, seed = 42;
  std::string topologyName = "all", configPath, csvPath;
  auto* wsOpt =
      app.add_option("--world-size", worldSize, "number of ranks N (default 16)")->check(CLI::Range(2, 4096));
  app.add_option("--steps", steps, "number of gossip rounds k to multiply (default 20)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1000000}));
  auto* segOpt = app.add_option("--segments", segments,
                                "Crossover-SGD segments S of the 784-128-10 MLP (default 4; 1 = whole model)")
                     ->check(CLI::Range(1, 1024));
  auto* seedOpt = app.add_option("--seed", seed, "shared seed of the random topologies (default 42)");
  std::vector<std::string> names = kAll;
  names.insert(names.end(), {"directed_exponential2", "explicit", "all"});
  auto* topoOpt =
      app.add_option("--topology", topologyName,
                     "fair_roulette | roulette_unfair | directed_exponential (1 peer/step) | "
                     "directed_exponential2 (2 peers/step) | ring | explicit (needs --config) | "
                     "all (the first four side by side; default, or the config's kind with --config)")
          ->check(CLI::IsMember(names));
  app.add_option("--config", configPath,
                 "YAML run config: takes world_size, seed, topology (kind, probabilities, peers_per_step, "
                 "edges), algorithm.segments and model from it")
      ->check(CLI::ExistingFile)
      ->excludes(wsOpt)
      ->excludes(segOpt)
      ->excludes(seedOpt);
  app.add_option("--csv", csvPath, "also write long-format CSV here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a usage hint
    return code == 0 ? 0 : 2;
  }
  if (topologyName == "explicit" && configPath.empty()) {
    std::fprintf(stderr, "gossamer-topology: error: --topology explicit needs --config (topology.edges)\n");
    return 2;
  }

  try {
    gossamer::Config c = registry().complete(gossamer::Config{});
    c.worldSize = worldSize;
    c.seed = seed;
    c.set("algorithm.segments", segments);
    std::vector<std::string> selected;
    if (!configPath.empty()) {
      c = registry().load(configPath);
      if (c.worldSize < 2)
        throw gossamer::InvalidArgument("world_size " + std::to_string(c.worldSize) + " in " + configPath +
                                        ": nothing to mix with fewer than 2 ranks");
      // Only Crossover-SGD (also as the inter-leader algorithm) exchanges segments.
      const bool segmented = c.algorithm.name == "crossover_sgd" ||
                             (c.algorithm.name == "hierarchical" &&
                              c.get<std::string>("algorithm.inter_algorithm") == "crossover_sgd");
      if (!segmented) c.set("algorithm.segments", 1);
      if (topoOpt->count() == 0)
        selected = {c.topology.kind == "directed_exponential" && c.get<int>("topology.peers_per_step") == 2
                        ? "directed_exponential2"
                        : c.topology.kind};
    }
    if (selected.empty()) selected = topologyName == "all" ? kAll : std::vector<std::string>{topologyName};

    std::ofstream csv;  // opened first: fail before any work
    if (!csvPath.empty()) {
      csv.open(csvPath);
      if (!csv) throw gossamer::Error("cannot open '" + csvPath + "' for writing");
    }
    const auto sizes =
        segmentSizes(gossamer::train::trainConfigFrom(c).model, c.get<int>("algorithm.segments"));
    std::vector<Analysed> runs;
    for (const auto& name : selected) {
      const auto t = makeTopology(name, c);
      runs.push_back({name, topo::analyzeMixing(*t, steps, sizes)});
    }

    std::string sizeList;
    for (auto s : sizes) sizeList += (sizeList.empty() ? "" : " ") + std::to_string(s);
    std::printf("# world_size %d  segments %zu (sizes %s)  seed %llu  steps %llu%s%s\n", c.worldSize,
                sizes.size(), sizeList.c_str(), static_cast<unsigned long long>(c.seed),
                static_cast<unsigned long long>(steps), configPath.empty() ? "" : "  config ",
                configPath.c_str());
    std::printf(
        "# P_k = M_(k-1) ... M_0; slem, sigma2 = 2nd largest eigenvalue modulus / singular value of P_k; "
        "imbalance = mean_ij (P_k(i,j) - 1/N)^2\n");
    printTable(runs, steps);
    if (!csvPath.empty()) writeCsv(csv, csvPath, runs, c.worldSize, sizes.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossamer-topology: error: %s\n", e.what());
    return 1;
  }
}
