// gossamer-topology: mixing analysis of the gossip topologies (Yeo et al.,
// "Crossover-SGD: A gossip-based communication in distributed deep learning for
// alleviating large mini-batch problem and enhancing scalability", Sec. 3.2,
// Fig. 6). For every step k it prints the second largest eigenvalue modulus and
// singular value of the product of the first k mixing matrices, and the
// imbalance factor against the AllReduce matrix (definitions:
// gossamer/topologies/mixing.hpp, docs/mixing.md).
//
//   gossamer-topology --world-size 16 --steps 20 --segments 4
//       fair roulette, roulette without fair selection, directed exponential
//       (1 peer) and ring side by side;
//   gossamer-topology --config examples/configs/quickstart-crossover.yaml
//       the configured topology (world size, seed, roulette table / edges,
//       segments and model from the YAML);
//   ... --csv out.csv  also writes long-format CSV;
//   ... --set KEY=VALUE  overrides a key of the config (repeatable), e.g.
//       --set 'network.islands=[[0,1,2,3],[4,5,6,7]]' --set network.between_gbps=0.1;
//   ... --expected R  also prints one round's expected mixing, estimated over
//       R rounds: slem of E[W], its spectral gap, the mean-square consensus
//       rate, and the share of segments that cross between the network's
//       islands (exact figures too for bandwidth_roulette);
//   ... --from-ramp  instead of the products' spectra, the consensus distance
//       after every step of gossamer-sim's run, whose rank r starts at r:
//       the elements it samples (64, evenly spaced over the model) each moved
//       by its segment's mixing matrix, and the per-step contraction of the
//       distance squared (geometric mean over the steps before it falls
//       below 1e-6 of its start, as scripts/sim_mixing.py measures the run);
//   --topology fair_roulette,bandwidth_roulette  names one or more topologies.
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
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "components.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
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
// Model::tensorSizes in apps/train.
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

// gossamer-train's components (transports included), so that its configs,
// and a config with nothing but defaults, load here too.
const gossamer::Registry& registry() {
  static const gossamer::Registry r = gossamer::train::makeTrainRegistry();
  return r;
}

// The topology called `name`, built from the run config (world size, seed,
// roulette table, edges). Names the tool does not know are looked up in the
// registry of built-in topologies.
std::unique_ptr<gossamer::Topology> makeTopology(const std::string& name, const gossamer::Config& c) {
  const auto& probabilities = c.get<std::vector<std::vector<double>>>("topology.probabilities");
  const auto& edges = c.get<std::vector<std::pair<int, int>>>("topology.edges");
  if (name == "fair_roulette")
    return std::make_unique<topo::FairRoulette>(c.worldSize(), c.seed(), probabilities);
  if (name == "roulette_unfair")
    return std::make_unique<topo::UnfairRoulette>(c.worldSize(), c.seed(), probabilities);
  if (name == "directed_exponential") return std::make_unique<topo::DirectedExponential>(c.worldSize(), 1);
  if (name == "directed_exponential2") return std::make_unique<topo::DirectedExponential>(c.worldSize(), 2);
  if (name == "ring") return std::make_unique<topo::Ring>(c.worldSize());
  if (name == "explicit") {
    if (edges.empty())
      throw gossamer::InvalidArgument("topology 'explicit' needs topology.edges (use --config)");
    return std::make_unique<topo::ExplicitGraph>(c.worldSize(), edges);
  }
  return registry().topology(name)(c);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> splitNames(const std::string& list) {
  std::vector<std::string> out;
  std::string::size_type from = 0;
  for (;;) {
    const auto comma = list.find(',', from);
    out.push_back(list.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

// One round's expected mixing of every selected topology, estimated over
// `rounds` rounds (and exactly where the topology can say).
void printExpected(const std::vector<std::string>& names, const gossamer::Config& c, std::uint64_t rounds,
                   int segments) {
  const auto network = gossamer::NetworkLayout::from(c);
  std::string sizes;
  for (const auto& island : network.islands())
    sizes += (sizes.empty() ? "" : " + ") + std::to_string(island.size());
  std::printf(
      "\n# one round on average: E[W] estimated over %llu rounds x %d segments; network: %zu island(s) "
      "(%s ranks), %g Gbit/s inside, %g between\n",
      static_cast<unsigned long long>(rounds), segments, network.islands().size(), sizes.c_str(),
      network.insideGbps(), network.betweenGbps());
  std::printf(
      "# slem = 2nd largest eigenvalue modulus of E[W], gap = 1 - slem, ms-rate = mean-square consensus "
      "rate per round (worst direction), ms-avg = the same averaged over directions, cross = share of "
      "segments sent between islands (+- its standard error), "
      "msg/rank = segments a rank sends per round, exact = computed, not sampled\n");
  std::printf("%-22s %9s %10s %9s %9s %10s %10s %9s %11s %11s\n", "topology", "slem", "gap", "ms-rate",
              "ms-avg", "cross", "+-", "msg/rank", "exact gap", "exact cross");
  for (const auto& name : names) {
    const auto t = makeTopology(name, c);
    const auto e = topo::estimateExpectedMixing(*t, network, rounds, segments);
    std::string exactGap = "-", exactCross = "-";
    if (const auto* b = dynamic_cast<const topo::BandwidthRoulette*>(t.get())) {
      try {
        const Eigen::MatrixXd w = b->expectedMixingMatrix();
        Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(w, Eigen::EigenvaluesOnly);  // E[W] is symmetric
        exactGap = fmt("%.4g", 1 - eig.eigenvalues()(w.rows() - 2));
        exactCross = fmt("%.4g", b->expectedCrossIslandShare());
      } catch (const gossamer::InvalidArgument&) {
        // Too many islands and ranks for the exact pairing probabilities:
        // the sampled estimate above stands alone.
        exactGap = exactCross = "-";
      }
    }
    std::printf("%-22s %9.4f %10.4g %9.4f %9.4f %10.4g %10.2g %9.3f %11s %11s\n", name.c_str(), e.slem,
                1 - e.slem, e.meanSquareRate, e.meanSquareRateAverage, e.crossShare, e.crossShareStdError,
                e.messagesPerRank, exactGap.c_str(), exactCross.c_str());
  }
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

// The command line's values.
struct CommandLine {
  int worldSize = 16, segments = 4;
  std::uint64_t steps = 20, seed = 42;
  std::string topologyName = "all", configPath, csvPath;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::uint64_t expectedRounds = 0;    // --expected (0: none)
  bool topologyGiven = false;          // --topology was given
  bool fromRamp = false;               // --from-ramp
};

// The names --topology accepts: the tool's own, "all", then the registry's.
std::vector<std::string> topologyChoices() {
  std::vector<std::string> names = kAll;
  names.insert(names.end(), {"directed_exponential2", "explicit", "all"});
  for (const auto& n : registry().topologyNames())
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  return names;
}

// Parses the command line into `cl`. Returns the exit status when the tool
// is to stop here (0 after --help, 2 for a bad command line), else nothing.
std::optional<int> parseCommandLine(int argc, char** argv, CommandLine& cl) {
  CLI::App app{
      "gossamer-topology: consensus rate and imbalance of products of gossip mixing matrices "
      "(Yeo et al., Crossover-SGD, Fig. 6)"};
  auto* wsOpt = app.add_option("--world-size", cl.worldSize, "number of ranks N (default 16)")
                    ->check(CLI::Range(2, 4096));
  app.add_option("--steps", cl.steps, "number of gossip rounds k to multiply (default 20)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1000000}));
  auto* segOpt = app.add_option("--segments", cl.segments,
                                "Crossover-SGD segments S of the 784-128-10 MLP (default 4; 1 = whole model)")
                     ->check(CLI::Range(1, 1024));
  auto* seedOpt = app.add_option("--seed", cl.seed, "shared seed of the random topologies (default 42)");
  const std::vector<std::string> names = topologyChoices();
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  auto* topoOpt =
      app.add_option("--topology", cl.topologyName,
                     "one or more, comma-separated: fair_roulette | roulette_unfair | directed_exponential "
                     "(1 peer/step) | directed_exponential2 (2 peers/step) | ring | bandwidth_roulette "
                     "(islands from network:, use --set or --config) | explicit (needs --config) | all (the "
                     "first four side by side; default, or the config's kind with --config or --set "
                     "topology.kind=...)")
          ->check(CLI::Validator(
              [names, known](std::string& value) -> std::string {
                for (const auto& n : splitNames(value))
                  if (std::find(names.begin(), names.end(), n) == names.end())
                    return "unknown topology '" + n + "' (" + known + ")";
                return "";
              },
              "NAME[,NAME...]"));
  app.add_option("--config", cl.configPath,
                 "YAML run config: takes world_size, seed, topology (kind, probabilities, peers_per_step, "
                 "edges, bandwidth_exponent), network (islands, bandwidths), algorithm.segments and model "
                 "from it")
      ->check(CLI::ExistingFile)
      ->excludes(wsOpt)
      ->excludes(segOpt)
      ->excludes(seedOpt);
  app.add_option("--csv", cl.csvPath, "also write long-format CSV here");
  app.add_option("--set", cl.overrides,
                 "KEY=VALUE: overrides a key of the config (repeatable; checked like a file), e.g. --set "
                 "'network.islands=[[0,1],[2,3]]' --set topology.kind=bandwidth_roulette");
  app.add_option("--expected", cl.expectedRounds,
                 "also print one round's expected mixing (slem and gap of E[W], mean-square rate, share of "
                 "segments between the network's islands), estimated over this many rounds (0 = no)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{10000000}));
  app.add_flag(
      "--from-ramp", cl.fromRamp,
      "instead of the products' spectra: the consensus distance after each step of a run whose rank "
      "r starts at r (gossamer-sim's), over the 64 elements it samples, and its per-step contraction");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a usage hint
    return code == 0 ? 0 : 2;
  }
  cl.topologyGiven = topoOpt->count() != 0;
  return std::nullopt;
}

// The run config from --config or the command line's values, with --set
// applied. Where --topology was not given, `selected` gets the configured
// topology kind from --config, or without it from a --set topology.kind=...
gossamer::Config loadConfig(const CommandLine& cl, std::vector<std::string>& selected) {
  gossamer::Config c;
  const bool kindSet = std::any_of(cl.overrides.begin(), cl.overrides.end(),
                                   [](const std::string& o) { return o.rfind("topology.kind=", 0) == 0; });
  if (cl.configPath.empty()) {
    std::vector<std::string> all = {"world_size=" + std::to_string(cl.worldSize),
                                    "seed=" + std::to_string(cl.seed),
                                    "algorithm.segments=" + std::to_string(cl.segments)};
    all.insert(all.end(), cl.overrides.begin(), cl.overrides.end());
    c = registry().parse("{}", "<command line>", all);
    if (!cl.topologyGiven && kindSet) selected = {c.get<std::string>("topology.kind")};
  } else {
    c = registry().load(cl.configPath, cl.overrides);
    // Only Crossover-SGD (also as the inter-leader algorithm) exchanges segments.
    const bool segmented = c.get<std::string>("algorithm.name") == "crossover_sgd" ||
                           (c.get<std::string>("algorithm.name") == "hierarchical" &&
                            c.get<std::string>("algorithm.inter_algorithm") == "crossover_sgd");
    if (!segmented) c.set("algorithm.segments", 1);
    if (!cl.topologyGiven)
      selected = {c.get<std::string>("topology.kind") == "directed_exponential" &&
                          c.get<int>("topology.peers_per_step") == 2
                      ? "directed_exponential2"
                      : c.get<std::string>("topology.kind")};
  }
  return c;
}

// The consensus distance after each of `steps` steps of gossamer-sim's run
// (rank r starts at r + 0.001 (i mod 10) at element i; the second term is
// the same on every rank, so the disagreement of every element is the ramp
// r): its sampled elements k * total / 64, k < 64, each moved by the mixing
// matrix of its segment at each step, root-mean-square over ranks and
// elements; then the per-step contraction of the distance squared.
void printFromRamp(const std::vector<std::string>& selected, const gossamer::Config& c, std::uint64_t steps,
                   const std::vector<std::size_t>& sizes) {
  constexpr std::size_t kSampled = 64;  // as apps/sim
  const int n = c.worldSize();
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  std::vector<std::size_t> perSegment(sizes.size(), 0);  // sampled elements in each segment
  for (std::size_t k = 0; k < kSampled; ++k) {
    std::size_t at = k * total / kSampled, s = 0;
    while (at >= sizes[s]) at -= sizes[s++];
    ++perSegment[s];
  }
  std::printf(
      "# from the ramp: rank r starts at r; distance = rms over ranks and the %zu sampled elements of "
      "(x - mean); contraction = geometric mean of d_(k+1)^2 / d_k^2 while d > 1e-6 d_0\n",
      kSampled);
  std::printf("%-22s %6s %14s\n", "topology", "step", "distance");
  for (const auto& name : selected) {
    const auto t = makeTopology(name, c);
    std::vector<Eigen::VectorXd> x(sizes.size(), Eigen::VectorXd::LinSpaced(n, 0, n - 1));
    std::vector<double> d;
    const auto distance = [&] {
      double sum = 0;
      for (std::size_t s = 0; s < sizes.size(); ++s)
        sum += static_cast<double>(perSegment[s]) * (x[s].array() - x[s].mean()).square().sum();
      return std::sqrt(sum / (static_cast<double>(n) * kSampled));
    };
    const double d0 = distance();
    for (std::uint64_t k = 1; k <= steps; ++k) {
      for (std::size_t s = 0; s < sizes.size(); ++s)
        if (perSegment[s] > 0) x[s] = t->mixingMatrix(k - 1, static_cast<int>(s)) * x[s];
      d.push_back(distance());
      std::printf("%-22s %6llu %14.6g\n", name.c_str(), static_cast<unsigned long long>(k), d.back());
    }
    double logs = 0;
    int used = 0;
    double before = d0;
    for (const double now : d) {
      if (before > 1e-6 * d0 && now > 1e-6 * d0) {
        logs += 2 * std::log(now / before);
        ++used;
      }
      before = now;
    }
    if (used > 0)
      std::printf("%-22s %6s %14.6g  (over %d steps)\n", name.c_str(), "rate", std::exp(logs / used), used);
    else
      std::printf("%-22s %6s %14s\n", name.c_str(), "rate", "-");
  }
}

// Analyses the `selected` topologies under config `c` and prints the table
// (then the expected mixing with --expected, and the CSV with --csv).
void analyse(const CommandLine& cl, const gossamer::Config& c, const std::vector<std::string>& selected) {
  std::ofstream csv;  // opened first: fail before any work
  if (!cl.csvPath.empty()) {
    csv.open(cl.csvPath);
    if (!csv) throw gossamer::Error("cannot open '" + cl.csvPath + "' for writing");
  }
  const auto sizes =
      segmentSizes(gossamer::train::trainConfigFrom(c).model, c.get<int>("algorithm.segments"));
  if (cl.fromRamp) {
    printFromRamp(selected, c, cl.steps, sizes);
    return;
  }
  std::vector<Analysed> runs;
  for (const auto& name : selected) {
    const auto t = makeTopology(name, c);
    runs.push_back({name, topo::analyzeMixing(*t, cl.steps, sizes)});
  }

  std::string sizeList;
  for (auto s : sizes) sizeList += (sizeList.empty() ? "" : " ") + std::to_string(s);
  std::printf("# world_size %d  segments %zu (sizes %s)  seed %llu  steps %llu%s%s\n", c.worldSize(),
              sizes.size(), sizeList.c_str(), static_cast<unsigned long long>(c.seed()),
              static_cast<unsigned long long>(cl.steps), cl.configPath.empty() ? "" : "  config ",
              cl.configPath.c_str());
  std::printf(
      "# P_k = M_(k-1) ... M_0; slem, sigma2 = 2nd largest eigenvalue modulus / singular value of P_k; "
      "imbalance = mean_ij (P_k(i,j) - 1/N)^2\n");
  printTable(runs, cl.steps);
  if (cl.expectedRounds > 0) printExpected(selected, c, cl.expectedRounds, static_cast<int>(sizes.size()));
  if (!cl.csvPath.empty()) writeCsv(csv, cl.csvPath, runs, c.worldSize(), sizes.size());
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cl;
  if (const auto stop = parseCommandLine(argc, argv, cl)) return *stop;
  const std::vector<std::string> topologyNames = splitNames(cl.topologyName);
  if (cl.expectedRounds == 1) {
    std::fprintf(stderr, "gossamer-topology: error: --expected needs at least 2 rounds (0 = none)\n");
    return 2;
  }
  if (std::find(topologyNames.begin(), topologyNames.end(), "explicit") != topologyNames.end() &&
      cl.configPath.empty()) {
    std::fprintf(stderr, "gossamer-topology: error: --topology explicit needs --config (topology.edges)\n");
    return 2;
  }

  try {
    std::vector<std::string> selected;
    const gossamer::Config c = loadConfig(cl, selected);
    if (c.worldSize() < 2)
      throw gossamer::InvalidArgument("world_size " + std::to_string(c.worldSize()) + " in " +
                                      (cl.configPath.empty() ? std::string("--set") : cl.configPath) +
                                      ": nothing to mix with fewer than 2 ranks");
    if (selected.empty()) {
      for (const auto& n : topologyNames) {
        if (n == "all")
          selected.insert(selected.end(), kAll.begin(), kAll.end());
        else
          selected.push_back(n);
      }
    }
    analyse(cl, c, selected);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossamer-topology: error: %s\n", e.what());
    return 1;
  }
}
