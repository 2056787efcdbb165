// Run configuration loaded from YAML. The schema is documented in README.md
// ("YAML schema") and examples live in examples/configs/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gossamer {

/// `transport:` section.
struct TransportConfig {
  std::string kind = "zmq";  ///< "zmq", "socket" (native sockets), "inproc" or "libfabric".
  std::string host =
      "127.0.0.1";  ///< Address zmq, socket (and libfabric's IP providers) bind to; ports are ephemeral.
  std::string protocol = "tcp";  ///< zmq and socket endpoint protocol: "tcp" or "ipc".
  /// libfabric provider: "tcp" (tcp;ofi_rxm), "shm", "verbs" (verbs;ofi_rxm),
  /// "sockets" or any name `fi_info -l` lists. Checked when the transport starts.
  std::string provider = "tcp";
  double timeoutSeconds = 30.0;  ///< Bound on every network wait, seconds (> 0).
  double lingerSeconds = 5.0;    ///< On close: how long queued sends may still be delivered, seconds (>= 0).
};

/// `topology:` section.
struct TopologyConfig {
  /// "fair_roulette" (paper 004, Alg. 2), "ring", "directed_exponential" (SGP's
  /// time-varying graph) or "explicit" (the directed graph in `edges`).
  std::string kind = "fair_roulette";
  /// fair_roulette: optional world_size x world_size table of non-negative
  /// weights (row = sender; the diagonal is ignored). Empty = uniform.
  std::vector<std::vector<double>> probabilities;
  /// directed_exponential: out-peers per step, 1 or 2.
  int peersPerStep = 1;
  /// explicit: directed edges [from, to] (ranks in [0, world_size), no
  /// self-loops, no duplicates; every rank needs at least one out-edge).
  std::vector<std::pair<int, int>> edges;
};

/// `algorithm:` section.
struct AlgorithmConfig {
  /// "crossover_sgd" (paper 004, Alg. 1), "allreduce_sgd", "sgp" (stochastic
  /// gradient push) or "hierarchical" (leader groups, paper 004 Sec. 3.3).
  std::string name = "crossover_sgd";
  int segments = 4;  ///< Crossover-SGD segments S (>= 1).
  int interval = 1;  ///< Local steps between exchanges (>= 1).
  /// Gossip communication mode: "sync" (wait for this step's messages),
  /// "overlap" (one step of bounded staleness: consume at step k+1 what was
  /// sent at step k, overlapping the exchange with the next computation), or
  /// "async" (never wait: mix whatever has arrived).
  std::string mode = "sync";
  /// hierarchical: explicit groups (each a list of ranks; together a partition
  /// of [0, world_size)). Empty = consecutive groups of `groupSize`.
  std::vector<std::vector<int>> groups;
  int groupSize = 4;  ///< hierarchical: ranks per group when `groups` is empty (>= 1).
  std::string interAlgorithm = "crossover_sgd";  ///< hierarchical: leaders run "crossover_sgd" or "sgp".
};

/// `model:` section.
struct ModelConfig {
  std::string kind = "mlp";      ///< "mlp" (ReLU MLP) or "softmax" (softmax regression).
  std::vector<int> hidden{128};  ///< Hidden layer widths of the MLP (each >= 1).
};

/// `data:` section.
struct DataConfig {
  std::string path = "/usr/share/datasets/fashion-mnist";  ///< Folder with the four IDX .gz files.
  std::string partition = "iid";  ///< "iid" or "non_iid" (Dirichlet label skew per peer).
  double dirichletAlpha = 0.5;    ///< non_iid concentration (> 0); smaller is more skewed.
  bool standardize = true;        ///< Standardise inputs with the training-set mean and std.
  int trainLimit = 0;             ///< Use only the first N training images (0 = all).
  int testLimit = 0;              ///< Use only the first N test images (0 = all).
};

/// `training:` section.
struct TrainingConfig {
  int epochs = 3;              ///< Passes over the (sharded) training set (>= 1).
  int batchSize = 32;          ///< Per-peer mini-batch, samples (>= 1).
  double learningRate = 0.01;  ///< SGD step size (>= 0).
  double momentum = 0.9;       ///< Heavy-ball momentum in [0, 1).
  double weightDecay = 0.0;    ///< L2 coefficient (>= 0).
  /// Straggler emulation (benchmarks): this rank sleeps `stragglerDelaySeconds`
  /// after each local step. -1 = none.
  int stragglerRank = -1;
  double stragglerDelaySeconds = 0.0;  ///< >= 0.
};

/// `collectives:` section: how the synchronous collectives run (the
/// Communicator's options; see gossamer/collectives.hpp).
struct CollectivesConfig {
  /// "auto", "ring", "recursive_doubling", "torus2d", "hierarchical", "tga2d", "hips".
  std::string allreduce = "auto";
  int chunkBytes = 1 << 20;  ///< Ring pipelining piece, bytes (>= 1).
  int smallMessageBytes =
      64 << 10;                 ///< auto without cost model: recursive doubling up to this, bytes (>= 0).
  int groupSize = 0;            ///< hierarchical / tga2d ranks per group (0 = about sqrt(N)).
  int torusRows = 0;            ///< torus2d grid rows (0 = about sqrt(N); must divide N).
  bool costModel = false;       ///< auto picks by the alpha-beta-gamma model (CostModel).
  double alphaSeconds = 50e-6;  ///< Model: per-message latency, seconds (>= 0).
  double betaSecondsPerByte = 1e-9;      ///< Model: inverse bandwidth, seconds per byte (>= 0).
  double gammaSecondsPerByte = 0.25e-9;  ///< Model: reduction cost, seconds per byte (>= 0).
  double contention = 0.0;               ///< Model: cost growth per extra concurrent sender (>= 0).
  /// Measure the model when the Agent starts (Communicator::calibrate, about
  /// a second; replaces the four numbers above) and let auto use it, even
  /// without cost_model.
  bool calibrate = false;
};

/// `compression:` section: compressed gradient exchanges (paper 002, A2SGD,
/// and its Top-K / QSGD baselines; see optimizers/compress.hpp).
struct CompressionConfig {
  /// "none", "a2sgd", "topk" or "qsgd". topk and qsgd compress AllReduce-SGD's
  /// gradients (algorithm.name allreduce_sgd); a2sgd also runs under
  /// crossover_sgd and sgp, whose exchange then becomes the model sync.
  std::string kind = "none";
  double topkRatio = 0.01;   ///< topk: fraction of the entries sent per step, (0, 1].
  int qsgdLevels = 4;        ///< qsgd: quantisation levels s (1..65535).
  int qsgdBucketSize = 512;  ///< qsgd: elements per bucket (each with its own norm, >= 1).
  /// a2sgd: where the two means travel: "allreduce" (all ranks, the paper),
  /// "gossip" (push-sum among the topology's peers) or "auto" (allreduce
  /// under allreduce_sgd, gossip under crossover_sgd / sgp).
  std::string means = "auto";
  int gossipRounds = 1;  ///< a2sgd, gossiped means: push-sum rounds per step (1..64).
  /// a2sgd: how drifting models are synchronised: "allreduce", "gossip" (one
  /// exchange of algorithm.name, crossover_sgd or sgp) or "auto" (allreduce
  /// under allreduce_sgd, gossip otherwise).
  std::string sync = "auto";
  int syncPeriod = 0;      ///< a2sgd: steps between model syncs (0 = only the final one).
  bool finalSync = true;   ///< a2sgd: synchronise after the last step (Algorithm 1, lines 9-10).
  bool keepError = false;  ///< a2sgd: also store the error vector g - enc(g) each step.
};

/// A whole run: what every peer of one job agrees on.
struct Config {
  std::string sourceFile;   ///< File the config was read from ("" when built in code).
  int worldSize = 4;        ///< Number of peers (>= 1).
  std::uint64_t seed = 42;  ///< Shared seed: initial model, shards, topology.
  TransportConfig transport;
  TopologyConfig topology;
  AlgorithmConfig algorithm;
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  CollectivesConfig collectives;
  CompressionConfig compression;
};

/// Reads and validates a YAML config file.
///
/// Every key is checked: unknown keys, wrong types and out-of-range values throw
/// ConfigError naming the file, the 1-based line and the dotted key. Missing
/// keys keep the defaults above.
/// @throws ConfigError on any problem, including an unreadable file or bad YAML.
Config loadConfig(const std::string& path);

/// Same as loadConfig, from YAML text; `name` is used as the file in errors.
/// @throws ConfigError
Config parseConfig(const std::string& yamlText, const std::string& name = "<string>");

/// Checks cross-field constraints of an in-code Config (ranges, known names).
/// @throws ConfigError (line 0) naming the key.
void validateConfig(const Config& config);

}  // namespace gossamer
