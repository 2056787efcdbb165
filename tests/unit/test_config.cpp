// Tests of the YAML config loader (gossamer/config.hpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "build_paths.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "registry.hpp"

namespace {

namespace fs = std::filesystem;
using gossamer::Config;
using gossamer::ConfigError;

constexpr const char* kName = "test.yaml";

const gossamer::Registry& reg() { return gossamer::test::trainRegistry(); }

/// A config with every key at its default.
Config defaults() { return gossamer::test::defaultConfig(); }

/// The ConfigError thrown by parseConfig(yaml, kName), or nullopt if none was.
std::optional<ConfigError> parseError(const std::string& yaml) {
  try {
    reg().parse(yaml, kName);
  } catch (const ConfigError& e) {
    return e;
  }
  return std::nullopt;
}

/// Requires that parsing `yaml` fails at `line` on `key`, and that what()
/// names the file and the line. Returns what() for further checks.
std::string requireError(const std::string& yaml, int line, const std::string& key) {
  INFO("YAML:\n" << yaml);
  std::optional<ConfigError> err = parseError(yaml);
  REQUIRE(err.has_value());
  INFO("what(): " << err->what());
  CHECK(err->file() == kName);
  CHECK(err->line() == line);
  CHECK(err->key() == key);
  std::string what = err->what();
  CHECK(what.find(std::string(kName) + ":" + std::to_string(line) + ":") != std::string::npos);
  if (!key.empty()) CHECK(what.find("'" + key + "'") != std::string::npos);
  return what;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A file in the temp directory, removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("gossamer_test_config_" + std::to_string(rd()) + std::to_string(rd()) + ".yaml");
    std::ofstream out(path_, std::ios::binary);
    out << contents;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

const std::string kFullConfig =
    "world_size: 8\n"
    "seed: 18446744073709551615\n"
    "transport:\n"
    "  kind: inproc\n"
    "  host: 10.0.0.7\n"
    "  protocol: ipc\n"
    "  timeout_seconds: 12.5\n"
    "  linger_seconds: 0\n"
    "topology:\n"
    "  kind: ring\n"
    "  probabilities:\n"
    "    - [0, 1, 1, 1, 1, 1, 1, 1]\n"
    "    - [1, 0, 1, 1, 1, 1, 1, 1]\n"
    "    - [1, 1, 0, 1, 1, 1, 1, 1]\n"
    "    - [1, 1, 1, 0, 1, 1, 1, 1]\n"
    "    - [1, 1, 1, 1, 0, 1, 1, 1]\n"
    "    - [1, 1, 1, 1, 1, 0, 1, 1]\n"
    "    - [1, 1, 1, 1, 1, 1, 0, 1]\n"
    "    - [0.5, 0.5, 0, 0, 0, 0, 2.5, 9]\n"
    "  peers_per_step: 2\n"
    "  edges: [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [6, 7], [7, 0]]\n"
    "algorithm:\n"
    "  name: hierarchical\n"
    "  segments: 16\n"
    "  interval: 3\n"
    "  mode: overlap\n"
    "  groups: [[0, 1, 2], [5, 4, 3], [7, 6]]\n"
    "  group_size: 3\n"
    "  inter_algorithm: sgp\n"
    "model:\n"
    "  kind: softmax\n"
    "  hidden: [256, 64, 1]\n"
    "data:\n"
    "  path: /tmp/some data\n"
    "  partition: non_iid\n"
    "  dirichlet_alpha: 0.1\n"
    "  standardize: false\n"
    "  train_limit: 5000\n"
    "  test_limit: 700\n"
    "training:\n"
    "  epochs: 7\n"
    "  batch_size: 64\n"
    "  learning_rate: 2.5e-3\n"
    "  momentum: 0.0\n"
    "  weight_decay: 1e-4\n"
    "  straggler_rank: 7\n"
    "  straggler_delay_seconds: 0.25\n";

void requireDefaultsExceptSource(const Config& c) {
  const Config d = defaults();
  CHECK(c.worldSize() == d.worldSize());
  CHECK(c.seed() == d.seed());
  CHECK(c.get<std::string>("transport.kind") == d.get<std::string>("transport.kind"));
  CHECK(c.get<std::string>("transport.host") == d.get<std::string>("transport.host"));
  CHECK(c.get<std::string>("transport.protocol") == d.get<std::string>("transport.protocol"));
  CHECK(c.get<double>("transport.timeout_seconds") == d.get<double>("transport.timeout_seconds"));
  CHECK(c.get<double>("transport.linger_seconds") == d.get<double>("transport.linger_seconds"));
  CHECK(c.get<std::string>("topology.kind") == d.get<std::string>("topology.kind"));
  CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities") ==
        d.get<std::vector<std::vector<double>>>("topology.probabilities"));
  CHECK(c.get<int>("topology.peers_per_step") == d.get<int>("topology.peers_per_step"));
  CHECK(c.get<std::vector<std::pair<int, int>>>("topology.edges") ==
        d.get<std::vector<std::pair<int, int>>>("topology.edges"));
  CHECK(c.get<std::string>("algorithm.name") == d.get<std::string>("algorithm.name"));
  CHECK(c.get<int>("algorithm.segments") == d.get<int>("algorithm.segments"));
  CHECK(c.get<int>("algorithm.interval") == d.get<int>("algorithm.interval"));
  CHECK(c.get<std::string>("algorithm.mode") == d.get<std::string>("algorithm.mode"));
  CHECK(c.get<std::vector<std::vector<int>>>("algorithm.groups") ==
        d.get<std::vector<std::vector<int>>>("algorithm.groups"));
  CHECK(c.get<int>("algorithm.group_size") == d.get<int>("algorithm.group_size"));
  CHECK(c.get<std::string>("algorithm.inter_algorithm") == d.get<std::string>("algorithm.inter_algorithm"));
  CHECK(c.get<std::string>("model.kind") == d.get<std::string>("model.kind"));
  CHECK(c.get<std::vector<int>>("model.hidden") == d.get<std::vector<int>>("model.hidden"));
  CHECK(c.get<std::string>("data.path") == d.get<std::string>("data.path"));
  CHECK(c.get<std::string>("data.partition") == d.get<std::string>("data.partition"));
  CHECK(c.get<double>("data.dirichlet_alpha") == d.get<double>("data.dirichlet_alpha"));
  CHECK(c.get<bool>("data.standardize") == d.get<bool>("data.standardize"));
  CHECK(c.get<int>("data.train_limit") == d.get<int>("data.train_limit"));
  CHECK(c.get<int>("data.test_limit") == d.get<int>("data.test_limit"));
  CHECK(c.get<int>("training.epochs") == d.get<int>("training.epochs"));
  CHECK(c.get<int>("training.batch_size") == d.get<int>("training.batch_size"));
  CHECK(c.get<double>("training.learning_rate") == d.get<double>("training.learning_rate"));
  CHECK(c.get<double>("training.momentum") == d.get<double>("training.momentum"));
  CHECK(c.get<double>("training.weight_decay") == d.get<double>("training.weight_decay"));
  CHECK(c.get<int>("training.straggler_rank") == d.get<int>("training.straggler_rank"));
  CHECK(c.get<double>("training.straggler_delay_seconds") ==
        d.get<double>("training.straggler_delay_seconds"));
}

using Edges = std::vector<std::pair<int, int>>;
using Table = std::vector<std::vector<double>>;
using Groups = std::vector<std::vector<int>>;

}  // namespace

TEST_CASE("config: a full config sets every field", "[config]") {
  const Config c = reg().parse(kFullConfig, "full.yaml");
  CHECK(c.sourceFile == "full.yaml");
  CHECK(c.worldSize() == 8);
  CHECK(c.seed() == std::numeric_limits<std::uint64_t>::max());
  CHECK(c.get<std::string>("transport.kind") == "inproc");
  CHECK(c.get<std::string>("transport.host") == "10.0.0.7");
  CHECK(c.get<std::string>("transport.protocol") == "ipc");
  CHECK(c.get<double>("transport.timeout_seconds") == 12.5);
  CHECK(c.get<double>("transport.linger_seconds") == 0.0);
  CHECK(c.get<std::string>("topology.kind") == "ring");
  REQUIRE(c.get<std::vector<std::vector<double>>>("topology.probabilities").size() == 8);
  CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities")[0] ==
        std::vector<double>{0, 1, 1, 1, 1, 1, 1, 1});
  CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities")[7] ==
        std::vector<double>{0.5, 0.5, 0, 0, 0, 0, 2.5, 9});
  CHECK(c.get<int>("topology.peers_per_step") == 2);
  CHECK(c.get<std::vector<std::pair<int, int>>>("topology.edges") ==
        Edges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 0}});
  CHECK(c.get<std::string>("algorithm.name") == "hierarchical");
  CHECK(c.get<int>("algorithm.segments") == 16);
  CHECK(c.get<int>("algorithm.interval") == 3);
  CHECK(c.get<std::string>("algorithm.mode") == "overlap");
  CHECK(c.get<std::vector<std::vector<int>>>("algorithm.groups") == Groups{{0, 1, 2}, {5, 4, 3}, {7, 6}});
  CHECK(c.get<int>("algorithm.group_size") == 3);
  CHECK(c.get<std::string>("algorithm.inter_algorithm") == "sgp");
  CHECK(c.get<std::string>("model.kind") == "softmax");
  CHECK(c.get<std::vector<int>>("model.hidden") == std::vector<int>{256, 64, 1});
  CHECK(c.get<std::string>("data.path") == "/tmp/some data");
  CHECK(c.get<std::string>("data.partition") == "non_iid");
  CHECK(c.get<double>("data.dirichlet_alpha") == 0.1);
  CHECK(c.get<bool>("data.standardize") == false);
  CHECK(c.get<int>("data.train_limit") == 5000);
  CHECK(c.get<int>("data.test_limit") == 700);
  CHECK(c.get<int>("training.epochs") == 7);
  CHECK(c.get<int>("training.batch_size") == 64);
  CHECK(c.get<double>("training.learning_rate") == 2.5e-3);
  CHECK(c.get<double>("training.momentum") == 0.0);
  CHECK(c.get<double>("training.weight_decay") == 1e-4);
  CHECK(c.get<int>("training.straggler_rank") == 7);
  CHECK(c.get<double>("training.straggler_delay_seconds") == 0.25);
  CHECK_NOTHROW(gossamer::validateConfig(c, reg().schema()));
}

TEST_CASE("config: loadConfig reads a file and records its path", "[config]") {
  TempFile file(kFullConfig);
  const Config c = reg().load(file.path());
  CHECK(c.sourceFile == file.path());
  CHECK(c.worldSize() == 8);
  CHECK(c.get<double>("training.weight_decay") == 1e-4);
}

TEST_CASE("config: missing keys keep their defaults", "[config]") {
  SECTION("empty map") {
    const Config c = reg().parse("{}\n", "x.yaml");
    CHECK(c.sourceFile == "x.yaml");
    requireDefaultsExceptSource(c);
  }
  SECTION("empty and commented-out sections") {
    const Config c = reg().parse(
        "transport: {}\n"
        "training:\n"
        "  # epochs: 10\n"
        "model:\n");
    CHECK(c.sourceFile == "<string>");
    requireDefaultsExceptSource(c);
  }
  SECTION("partial sections") {
    const Config c = reg().parse(
        "world_size: 2\n"
        "training:\n"
        "  epochs: 10\n");
    CHECK(c.worldSize() == 2);
    CHECK(c.get<int>("training.epochs") == 10);
    CHECK(c.get<int>("training.batch_size") == defaults().get<int>("training.batch_size"));
    CHECK(c.get<std::vector<int>>("model.hidden") == defaults().get<std::vector<int>>("model.hidden"));
    CHECK(c.seed() == 42);
  }
  SECTION("an empty hidden list means no hidden layer") {
    const Config c = reg().parse("model:\n  hidden: []\n");
    CHECK(c.get<std::vector<int>>("model.hidden").empty());
  }
  SECTION("integers are accepted for real-valued keys") {
    const Config c = reg().parse("training:\n  learning_rate: 1\n");
    CHECK(c.get<double>("training.learning_rate") == 1.0);
  }
}

TEST_CASE("config: unknown keys are errors with a suggestion", "[config]") {
  SECTION("top-level typo") {
    std::string what = requireError(
        "seed: 1\n"
        "wrld_size: 4\n",
        2, "wrld_size");
    CHECK(contains(what, "did you mean 'world_size'?"));
  }
  SECTION("nested typo, exact message") {
    std::string what = requireError(
        "world_size: 4\n"
        "training:\n"
        "  epochs: 3\n"
        "  batch_sze: 32\n",
        4, "training.batch_sze");
    CHECK(what ==
          "test.yaml:4: key 'training.batch_sze': unknown key (did you mean "
          "'batch_size'?)");
  }
  SECTION("camelCase spelling") {
    std::string what = requireError("training:\n  learningRate: 0.1\n", 2, "training.learningRate");
    CHECK(contains(what, "'learning_rate'"));
  }
  SECTION("typo in a section name") {
    std::string what = requireError("world_size: 4\ntrainig:\n  epochs: 3\n", 2, "trainig");
    CHECK(contains(what, "did you mean 'training'?"));
  }
  SECTION("a key in the wrong section") {
    std::string what = requireError("world_size: 4\nbatch_size: 32\n", 2, "batch_size");
    CHECK(contains(what, "'training'"));
  }
  SECTION("nothing close: known keys are listed") {
    std::string what = requireError("model:\n  kind: mlp\n  zzzzzzzz: 1\n", 3, "model.zzzzzzzz");
    CHECK(contains(what, "hidden"));
  }
  SECTION("duplicate keys") {
    std::string what = requireError("world_size: 4\nseed: 1\nworld_size: 5\n", 3, "world_size");
    CHECK(contains(what, "duplicate"));
    CHECK(contains(what, "line 1"));
  }
}

TEST_CASE("config: wrong types are errors", "[config]") {
  SECTION("string for an int") {
    std::string what = requireError("seed: 1\nworld_size: four\n", 2, "world_size");
    CHECK(contains(what, "integer"));
  }
  SECTION("float for an int") { requireError("world_size: 2.5\n", 1, "world_size"); }
  SECTION("quoted number for an int") { requireError("world_size: \"4\"\n", 1, "world_size"); }
  SECTION("exponent for an int") { requireError("training:\n  epochs: 1e2\n", 2, "training.epochs"); }
  SECTION("explicitly tagged string for an int") { requireError("world_size: !!str 4\n", 1, "world_size"); }
  SECTION("map for a scalar") { requireError("seed: 1\nworld_size: {a: 1}\n", 2, "world_size"); }
  SECTION("list for a scalar") { requireError("transport:\n  host: [a, b]\n", 2, "transport.host"); }
  SECTION("missing value") { requireError("training:\n  epochs:\n  batch_size: 3\n", 2, "training.epochs"); }
  SECTION("scalar for a section") {
    std::string what = requireError("world_size: 4\ntransport: zmq\n", 2, "transport");
    CHECK(contains(what, "section"));
  }
  SECTION("list for a section") { requireError("training:\n  - 1\n", 2, "training"); }
  SECTION("non-list hidden") {
    std::string what = requireError("model:\n  kind: mlp\n  hidden: 128\n", 3, "model.hidden");
    CHECK(contains(what, "list"));
  }
  SECTION("non-integer hidden element") {
    requireError("model:\n  hidden:\n    - 64\n    - wide\n", 4, "model.hidden[1]");
  }
  SECTION("non-boolean standardize") {
    requireError("data:\n  standardize: yes\n", 2, "data.standardize");
    requireError("data:\n  standardize: 1\n", 2, "data.standardize");
  }
  SECTION("string for a real") {
    requireError("training:\n  learning_rate: fast\n", 2, "training.learning_rate");
  }
  SECTION("negative or non-integer seed") {
    requireError("seed: -1\n", 1, "seed");
    requireError("seed: 4.2\n", 1, "seed");
  }
}

TEST_CASE("config: out-of-range values are errors", "[config]") {
  SECTION("world_size: 0") {
    std::string what = requireError("world_size: 0\n", 1, "world_size");
    CHECK(contains(what, "between 1 and 4096"));
  }
  SECTION("world_size too large") { requireError("world_size: 5000\n", 1, "world_size"); }
  SECTION("integer beyond 64 bits") {
    std::string what = requireError("world_size: 99999999999999999999999\n", 1, "world_size");
    CHECK(contains(what, "between 1 and 4096"));
  }
  SECTION("seed beyond 64 bits") { requireError("seed: 18446744073709551616\n", 1, "seed"); }
  SECTION("transport") {
    requireError("transport:\n  timeout_seconds: 0\n", 2, "transport.timeout_seconds");
    requireError("transport:\n  timeout_seconds: 86401\n", 2, "transport.timeout_seconds");
    requireError("transport:\n  timeout_seconds: .inf\n", 2, "transport.timeout_seconds");
    requireError("transport:\n  linger_seconds: -0.5\n", 2, "transport.linger_seconds");
  }
  SECTION("algorithm") {
    requireError("algorithm:\n  segments: 0\n", 2, "algorithm.segments");
    requireError("algorithm:\n  segments: 4097\n", 2, "algorithm.segments");
    requireError("algorithm:\n  interval: 0\n", 2, "algorithm.interval");
  }
  SECTION("model") {
    requireError("model:\n  hidden: [128, 0]\n", 2, "model.hidden[1]");
    requireError("model:\n  hidden: [2000000]\n", 2, "model.hidden[0]");
  }
  SECTION("data") {
    std::string what = requireError("data:\n  dirichlet_alpha: 0\n", 2, "data.dirichlet_alpha");
    CHECK(contains(what, "> 0"));
    requireError("data:\n  train_limit: -1\n", 2, "data.train_limit");
    requireError("data:\n  test_limit: -5\n", 2, "data.test_limit");
  }
  SECTION("training") {
    requireError("training:\n  epochs: 0\n", 2, "training.epochs");
    requireError("training:\n  batch_size: 0\n", 2, "training.batch_size");
    requireError("training:\n  learning_rate: -0.1\n", 2, "training.learning_rate");
    requireError("training:\n  learning_rate: .nan\n", 2, "training.learning_rate");
    requireError("training:\n  learning_rate: 1e999\n", 2, "training.learning_rate");
    std::string what = requireError("training:\n  momentum: 1.0\n", 2, "training.momentum");
    CHECK(contains(what, ">= 0 and < 1"));
    requireError("training:\n  momentum: -0.1\n", 2, "training.momentum");
    requireError("training:\n  weight_decay: -1\n", 2, "training.weight_decay");
  }
}

TEST_CASE("config: unknown enum values are errors listing the allowed ones", "[config]") {
  SECTION("transport.kind") {
    std::string what = requireError("transport:\n  kind: tcp\n", 2, "transport.kind");
    CHECK(contains(what, "inproc, zmq, socket, composite"));
  }
  SECTION("transport.protocol with a suggestion") {
    std::string what = requireError("transport:\n  protocol: tpc\n", 2, "transport.protocol");
    CHECK(contains(what, "did you mean 'tcp'?"));
  }
  SECTION("topology.kind") { requireError("topology:\n  kind: star\n", 2, "topology.kind"); }
  SECTION("algorithm.name") { requireError("algorithm:\n  name: adam\n", 2, "algorithm.name"); }
  SECTION("model.kind") { requireError("model:\n  kind: cnn\n", 2, "model.kind"); }
  SECTION("data.partition") {
    std::string what = requireError("data:\n  partition: noniid\n", 2, "data.partition");
    CHECK(contains(what, "did you mean 'non_iid'?"));
  }
}

TEST_CASE("config: an algorithm key set under an algorithm that does not read it is an error", "[config]") {
  SECTION("interval under sgp") {
    const std::string what =
        requireError("algorithm:\n  name: sgp\n  interval: 4\n", 3, "algorithm.interval");
    CHECK(contains(what, "applies to algorithm.name 'crossover_sgd', 'hierarchical'"));
    CHECK(contains(what, "(name is 'sgp')"));
  }
  SECTION("segments and gossip keys under allreduce_sgd") {
    requireError("algorithm:\n  name: allreduce_sgd\n  segments: 8\n", 3, "algorithm.segments");
    requireError("algorithm:\n  name: allreduce_sgd\n  weight_floor: 0.5\n", 3, "algorithm.weight_floor");
  }
  SECTION("sgp's own key under crossover_sgd, hierarchical's under d2, diloco's under sgp") {
    requireError("algorithm:\n  loss_tolerant: true\n", 2, "algorithm.loss_tolerant");
    requireError("algorithm:\n  name: d2\n  group_size: 2\n", 3, "algorithm.group_size");
    requireError("algorithm:\n  name: sgp\n  inner_steps: 10\n", 3, "algorithm.inner_steps");
  }
  SECTION("a key at its default, or set under any algorithm that reads it, is accepted") {
    CHECK(reg().parse("algorithm:\n  name: sgp\n  interval: 1\n").get<int>("algorithm.interval") == 1);
    for (const char* name :
         {"crossover_sgd", "hierarchical", "d2", "gradient_tracking", "quasi_global_momentum"})
      CHECK(reg()
                .parse(std::string("algorithm:\n  name: ") + name + "\n  segments: 2\n")
                .get<int>("algorithm.segments") == 2);
    for (const char* name : {"sgp", "crossover_sgd", "hierarchical"})
      CHECK(reg()
                .parse(std::string("algorithm:\n  name: ") + name + "\n  weight_floor: 0.25\n")
                .get<double>("algorithm.weight_floor") == 0.25);
  }
}

TEST_CASE("config: topology, algorithm and straggler keys parse", "[config]") {
  SECTION("every topology kind, algorithm, mode and inter-algorithm") {
    for (const char* kind : {"fair_roulette", "ring", "directed_exponential"}) {
      CHECK(reg().parse(std::string("topology:\n  kind: ") + kind + "\n").get<std::string>("topology.kind") ==
            kind);
    }
    for (const char* name : {"crossover_sgd", "allreduce_sgd", "sgp", "hierarchical"}) {
      CHECK(
          reg().parse(std::string("algorithm:\n  name: ") + name + "\n").get<std::string>("algorithm.name") ==
          name);
    }
    for (const char* mode : {"sync", "overlap", "async"}) {
      CHECK(
          reg().parse(std::string("algorithm:\n  mode: ") + mode + "\n").get<std::string>("algorithm.mode") ==
          mode);
    }
    for (const char* inter : {"crossover_sgd", "sgp"}) {
      const Config c =
          reg().parse(std::string("algorithm:\n  name: hierarchical\n  inter_algorithm: ") + inter + "\n");
      CHECK(c.get<std::string>("algorithm.inter_algorithm") == inter);
    }
  }
  SECTION("a probabilities table, block rows") {
    const Config c = reg().parse(
        "world_size: 3\n"
        "topology:\n"
        "  kind: fair_roulette\n"
        "  probabilities:\n"
        "    - [0, 4, 1]\n"
        "    - [2.5, 7, 1e-3]\n"
        "    - [1, 0, 0]\n");
    CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities") ==
          Table{{0, 4, 1}, {2.5, 7, 1e-3}, {1, 0, 0}});
  }
  SECTION("a probabilities table, flow style, before world_size") {
    const Config c = reg().parse("topology: {probabilities: [[0, 1], [1, 0]]}\nworld_size: 2\n");
    CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities") == Table{{0, 1}, {1, 0}});
  }
  SECTION("an empty table means uniform") {
    CHECK(reg()
              .parse("topology:\n  probabilities: []\n")
              .get<std::vector<std::vector<double>>>("topology.probabilities")
              .empty());
  }
  SECTION("fair_roulette with a single rank (degenerate)") {
    CHECK(reg().parse("world_size: 1\ntopology:\n  kind: fair_roulette\n").worldSize() == 1);
    const Config c = reg().parse("world_size: 1\ntopology:\n  probabilities: [[0]]\n");
    CHECK(c.get<std::vector<std::vector<double>>>("topology.probabilities") == Table{{0}});
  }
  SECTION("peers_per_step") {
    CHECK(reg().parse("topology:\n  peers_per_step: 1\n").get<int>("topology.peers_per_step") == 1);
    CHECK(reg().parse("topology:\n  peers_per_step: 2\n").get<int>("topology.peers_per_step") == 2);
  }
  SECTION("explicit edges, block style") {
    const Config c = reg().parse(
        "world_size: 3\n"
        "topology:\n"
        "  kind: explicit\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 2]\n"
        "    - [2, 0]\n"
        "    - [0, 2]\n");
    CHECK(c.get<std::string>("topology.kind") == "explicit");
    CHECK(c.get<std::vector<std::pair<int, int>>>("topology.edges") == Edges{{0, 1}, {1, 2}, {2, 0}, {0, 2}});
  }
  SECTION("explicit edges, flow style, world_size last") {
    const Config c = reg().parse(
        "topology:\n"
        "  kind: explicit\n"
        "  edges: [[1, 0], [0, 1]]\n"
        "world_size: 2\n");
    CHECK(c.get<std::vector<std::pair<int, int>>>("topology.edges") == Edges{{1, 0}, {0, 1}});
  }
  SECTION("groups and group_size") {
    const Config c = reg().parse(
        "world_size: 6\n"
        "algorithm:\n"
        "  name: hierarchical\n"
        "  group_size: 2\n"
        "  groups:\n"
        "    - [0, 5]\n"
        "    - [4, 1, 2]\n"
        "    - [3]\n");
    CHECK(c.get<int>("algorithm.group_size") == 2);
    CHECK(c.get<std::vector<std::vector<int>>>("algorithm.groups") == Groups{{0, 5}, {4, 1, 2}, {3}});
    CHECK(reg()
              .parse("algorithm:\n  name: hierarchical\n  groups: []\n")
              .get<std::vector<std::vector<int>>>("algorithm.groups")
              .empty());
    CHECK(reg()
              .parse("algorithm:\n  name: hierarchical\n  group_size: 4096\n")
              .get<int>("algorithm.group_size") == 4096);
  }
  SECTION("straggler") {
    const Config c = reg().parse(
        "world_size: 4\n"
        "training:\n"
        "  straggler_rank: 3\n"
        "  straggler_delay_seconds: 1.5\n");
    CHECK(c.get<int>("training.straggler_rank") == 3);
    CHECK(c.get<double>("training.straggler_delay_seconds") == 1.5);
    const Config none = reg().parse("training:\n  straggler_rank: -1\n  straggler_delay_seconds: 0\n");
    CHECK(none.get<int>("training.straggler_rank") == -1);
    CHECK(none.get<double>("training.straggler_delay_seconds") == 0.0);
  }
}

TEST_CASE("config: bad probabilities tables are errors", "[config]") {
  SECTION("too few rows for world_size") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  probabilities:\n"
        "    - [0, 1, 1]\n"
        "    - [1, 0, 1]\n",
        3, "topology.probabilities");
    CHECK(contains(what, "world_size x world_size"));
    CHECK(contains(what, "got 2 rows"));
  }
  SECTION("world_size set after the table still points at the table") {
    requireError(
        "topology:\n"
        "  probabilities: [[0, 1], [1, 0]]\n"
        "world_size: 3\n",
        2, "topology.probabilities");
  }
  SECTION("a short row") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  probabilities:\n"
        "    - [0, 1, 1]\n"
        "    - [1, 0, 1]\n"
        "    - [1, 1]\n",
        6, "topology.probabilities[2]");
    CHECK(contains(what, "got 2"));
  }
  SECTION("a negative weight") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  probabilities:\n"
        "    - [0, 1, 1]\n"
        "    - [1, 0, -1]\n"
        "    - [1, 1, 0]\n",
        5, "topology.probabilities[1][2]");
    CHECK(contains(what, ">= 0"));
  }
  SECTION("non-finite and non-numeric weights") {
    requireError("topology:\n  probabilities:\n    - [.inf]\n", 3, "topology.probabilities[0][0]");
    requireError("topology:\n  probabilities:\n    - [.nan]\n", 3, "topology.probabilities[0][0]");
    requireError("topology:\n  probabilities:\n    - [0, heavy]\n", 3, "topology.probabilities[0][1]");
  }
  SECTION("a row with no weight off the diagonal") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  probabilities:\n"
        "    - [0, 1, 1]\n"
        "    - [1, 0, 1]\n"
        "    - [0, 0, 5]\n",
        6, "topology.probabilities[2]");
    CHECK(contains(what, "rank 2"));
    CHECK(contains(what, "positive"));
  }
  SECTION("not a table") {
    requireError("topology:\n  probabilities: 0.5\n", 2, "topology.probabilities");
    requireError("topology:\n  probabilities: [0.5, 0.5]\n", 2, "topology.probabilities[0]");
    requireError("topology:\n  probabilities:\n    - {a: 1}\n", 3, "topology.probabilities[0]");
  }
}

TEST_CASE("config: over a view, the keys that name ranks name the view's", "[config][view]") {
  const Config c = reg().parse(
      "world_size: 5\n"
      "network:\n  islands: [[0, 1, 2], [3, 4]]\n"
      "topology:\n  kind: fair_roulette\n"
      "  probabilities: [[0, 1, 2, 3, 4], [5, 0, 6, 7, 8], [9, 10, 0, 11, 12], [13, 14, 15, 0, 16],"
      " [17, 18, 19, 20, 0]]\n"
      "  edges: [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [1, 4]]\n",
      kName);
  std::vector<std::string> changed;
  const Config v = reg().schema().inView(c, {0, 1, 4}, &changed);  // ranks 2 and 3 lost
  CHECK(v.worldSize() == 3);
  CHECK(v.get<std::vector<std::vector<int>>>("network.islands") ==
        std::vector<std::vector<int>>{{0, 1}, {2}});
  CHECK(v.get<std::vector<std::vector<double>>>("topology.probabilities") ==
        std::vector<std::vector<double>>{{0, 1, 4}, {5, 0, 8}, {17, 18, 0}});
  CHECK(v.get<std::vector<std::pair<int, int>>>("topology.edges") ==
        std::vector<std::pair<int, int>>{{0, 1}, {2, 0}, {1, 2}});
  std::sort(changed.begin(), changed.end());
  CHECK(changed == std::vector<std::string>{"network.islands", "topology.edges", "topology.probabilities"});
  // Keys that name no ranks are kept; an empty value stays empty.
  CHECK(v.seed() == c.seed());
  CHECK(v.get<std::vector<std::vector<int>>>("algorithm.groups").empty());
  // A member beyond the table (a rank that joined past world_size) leaves
  // the table at its default, empty (uniform).
  changed.clear();
  const Config joined = reg().schema().inView(c, {0, 1, 2, 3, 4, 5}, &changed);
  CHECK(joined.worldSize() == 6);
  CHECK(joined.get<std::vector<std::vector<double>>>("topology.probabilities").empty());
  CHECK(std::find(changed.begin(), changed.end(), "topology.probabilities") != changed.end());
  // So does a partition that leaves it in no group.
  CHECK(joined.get<std::vector<std::vector<int>>>("network.islands").empty());
  CHECK(std::find(changed.begin(), changed.end(), "network.islands") != changed.end());
  // Every member: nothing changes.
  changed.clear();
  const Config all = reg().schema().inView(c, {0, 1, 2, 3, 4}, &changed);
  CHECK(changed.empty());
  CHECK(all.values == c.values);
  CHECK_THROWS_AS(reg().schema().inView(c, {}), gossamer::InvalidArgument);
  CHECK_THROWS_AS(reg().schema().inView(c, {2, 1}), gossamer::InvalidArgument);
  // A key is marked only with a kind that fits its type.
  CHECK_THROWS_AS(gossamer::KeySet().integer("n", 1, 0, 9, "n").namesRanks(gossamer::RankKey::kTable),
                  gossamer::InvalidArgument);
  CHECK_THROWS_AS(gossamer::KeySet().namesRanks(gossamer::RankKey::kEdges), gossamer::InvalidArgument);
}

TEST_CASE("config: bad explicit graphs are errors", "[config]") {
  SECTION("a negative rank") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, -2]\n",
        5, "topology.edges[1]");
    CHECK(contains(what, "-2"));
  }
  SECTION("a rank not below world_size") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  kind: explicit\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 2]\n"
        "    - [2, 3]\n"
        "    - [2, 0]\n",
        7, "topology.edges[2]");
    CHECK(contains(what, "rank 3"));
    CHECK(contains(what, "0..2"));
  }
  SECTION("a rank beyond any world size") {
    requireError("topology:\n  edges: [[0, 5000]]\n", 2, "topology.edges[0]");
  }
  SECTION("a self-loop") {
    std::string what = requireError(
        "world_size: 2\n"
        "topology:\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 1]\n"
        "    - [1, 0]\n",
        5, "topology.edges[1]");
    CHECK(contains(what, "self-loop"));
  }
  SECTION("a duplicate edge") {
    std::string what = requireError(
        "world_size: 2\n"
        "topology:\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 0]\n"
        "    - [0, 1]\n",
        6, "topology.edges[2]");
    CHECK(contains(what, "duplicate"));
    CHECK(contains(what, "topology.edges[0]"));
  }
  SECTION("a rank without an out-edge") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  kind: explicit\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 0]\n"
        "    - [1, 2]\n",
        4, "topology.edges");
    CHECK(contains(what, "rank 2 has no out-edge"));
  }
  SECTION("not strongly connected: a rank nobody reaches") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  kind: explicit\n"
        "  edges: [[0, 1], [1, 0], [2, 0]]\n",
        4, "topology.edges");
    CHECK(contains(what, "not strongly connected"));
    CHECK(contains(what, "rank 2 cannot be reached"));
  }
  SECTION("not strongly connected: two separate cycles") {
    std::string what = requireError(
        "world_size: 4\n"
        "topology:\n"
        "  kind: explicit\n"
        "  edges:\n"
        "    - [0, 1]\n"
        "    - [1, 0]\n"
        "    - [2, 3]\n"
        "    - [3, 2]\n",
        4, "topology.edges");
    CHECK(contains(what, "not strongly connected"));
  }
  SECTION("not strongly connected: a one-way path") {
    std::string what = requireError(
        "world_size: 3\n"
        "topology:\n"
        "  edges: [[0, 1], [1, 2], [2, 1]]\n",
        3, "topology.edges");
    CHECK(contains(what, "rank 0 cannot be reached from rank 1"));
  }
  SECTION("explicit without edges names topology.kind") {
    std::string what = requireError("world_size: 2\ntopology:\n  kind: explicit\n", 3, "topology.kind");
    CHECK(contains(what, "topology.edges"));
    requireError("topology:\n  edges: []\n  kind: explicit\n", 3, "topology.kind");
  }
  SECTION("malformed edges") {
    requireError("topology:\n  edges: [0, 1]\n", 2, "topology.edges[0]");
    std::string what = requireError("topology:\n  edges:\n    - [0, 1, 2]\n", 3, "topology.edges[0]");
    CHECK(contains(what, "3 items"));
    requireError("topology:\n  edges:\n    - [0, 1]\n    - [1, zero]\n", 4, "topology.edges[1]");
    requireError("topology:\n  edges:\n    - [0, 1.5]\n", 3, "topology.edges[0]");
    requireError("topology:\n  edges: 0-1\n", 2, "topology.edges");
    requireError("topology:\n  edges:\n", 2, "topology.edges");
  }
  SECTION("peers_per_step out of range") {
    std::string what = requireError("topology:\n  peers_per_step: 3\n", 2, "topology.peers_per_step");
    CHECK(contains(what, "between 1 and 2"));
    requireError("topology:\n  peers_per_step: 0\n", 2, "topology.peers_per_step");
    requireError("topology:\n  peers_per_step: 1.5\n", 2, "topology.peers_per_step");
  }
}

TEST_CASE("config: bad groups, modes and stragglers are errors", "[config]") {
  SECTION("a rank in two groups") {
    std::string what = requireError(
        "world_size: 4\n"
        "algorithm:\n"
        "  name: hierarchical\n"
        "  groups:\n"
        "    - [0, 1]\n"
        "    - [2, 1, 3]\n",
        6, "algorithm.groups[1][1]");
    CHECK(contains(what, "already in algorithm.groups[0]"));
  }
  SECTION("a rank in no group") {
    std::string what = requireError(
        "world_size: 4\n"
        "algorithm:\n"
        "  groups: [[0, 1], [3]]\n",
        3, "algorithm.groups");
    CHECK(contains(what, "rank 2 is in no group"));
  }
  SECTION("a rank not below world_size (set later)") {
    std::string what = requireError(
        "algorithm:\n"
        "  groups:\n"
        "    - [0, 1]\n"
        "    - [2, 3]\n"
        "world_size: 3\n",
        4, "algorithm.groups[1][1]");
    CHECK(contains(what, "rank 3"));
  }
  SECTION("a negative rank") {
    requireError("algorithm:\n  groups: [[0, -1]]\n", 2, "algorithm.groups[0][1]");
  }
  SECTION("an empty group") {
    std::string what = requireError(
        "world_size: 2\n"
        "algorithm:\n"
        "  groups:\n"
        "    - [0, 1]\n"
        "    - []\n",
        5, "algorithm.groups[1]");
    CHECK(contains(what, "empty"));
  }
  SECTION("malformed groups") {
    requireError("algorithm:\n  groups: [0, 1]\n", 2, "algorithm.groups[0]");
    requireError("algorithm:\n  groups: 4\n", 2, "algorithm.groups");
    requireError("algorithm:\n  groups:\n    - [0, x]\n", 3, "algorithm.groups[0][1]");
  }
  SECTION("group_size") {
    requireError("algorithm:\n  group_size: 0\n", 2, "algorithm.group_size");
    requireError("algorithm:\n  group_size: 4097\n", 2, "algorithm.group_size");
  }
  SECTION("a bad mode") {
    std::string what = requireError("algorithm:\n  name: sgp\n  mode: asynch\n", 3, "algorithm.mode");
    CHECK(contains(what, "did you mean 'async'?"));
    CHECK(contains(what, "sync, overlap, async"));
    requireError("algorithm:\n  mode: [sync]\n", 2, "algorithm.mode");
  }
  SECTION("a bad inter_algorithm") {
    std::string what =
        requireError("algorithm:\n  inter_algorithm: allreduce_sgd\n", 2, "algorithm.inter_algorithm");
    CHECK(contains(what, "crossover_sgd, sgp"));
  }
  SECTION("new enum values are still checked") {
    requireError("topology:\n  kind: directed_exp\n", 2, "topology.kind");
    requireError("algorithm:\n  name: push_sum\n", 2, "algorithm.name");
  }
  SECTION("straggler_rank") {
    std::string what =
        requireError("world_size: 4\ntraining:\n  straggler_rank: 4\n", 3, "training.straggler_rank");
    CHECK(contains(what, "0..3"));
    requireError("training:\n  straggler_rank: 9\nworld_size: 8\n", 2, "training.straggler_rank");
    requireError("training:\n  straggler_rank: -2\n", 2, "training.straggler_rank");
    requireError("training:\n  straggler_rank: one\n", 2, "training.straggler_rank");
  }
  SECTION("straggler_delay_seconds") {
    requireError("training:\n  straggler_delay_seconds: -0.1\n", 2, "training.straggler_delay_seconds");
    requireError("training:\n  straggler_delay_seconds: .inf\n", 2, "training.straggler_delay_seconds");
    requireError("training:\n  straggler_delay_seconds: .nan\n", 2, "training.straggler_delay_seconds");
    requireError("training:\n  straggler_delay_seconds: slow\n", 2, "training.straggler_delay_seconds");
  }
}

TEST_CASE("config: security and transport settings no rank could run with are errors at load", "[config]") {
  // Each of these passed the loader once and failed on every rank after the
  // job started, with an internal check's text.
  SECTION("security without its keys") {
    std::string what =
        requireError("security:\n  enabled: true\n  public_keys: admitted\n", 1, "security.secret_key");
    CHECK(contains(what, "required when security.enabled is true"));
    CHECK_FALSE(contains(what, "check failed"));
    requireError("security:\n  enabled: true\n  secret_key: k\n", 1, "security.public_keys");
    CHECK_NOTHROW(reg().parse("security:\n  secret_key: \"\"\n", kName));
    // Over inproc, whose ranks share one process, security runs as without: no keys needed.
    CHECK_NOTHROW(reg().parse("transport:\n  kind: inproc\nsecurity:\n  enabled: true\n", kName));
  }
  const std::string secured = "security:\n  enabled: true\n  secret_key: k\n  public_keys: p\n";
  SECTION("security over a transport that cannot authenticate") {
    std::string what = requireError("transport:\n  kind: socket\n" + secured, 2, "transport.kind");
    CHECK(contains(what, "socket cannot authenticate or encrypt"));
    CHECK(contains(what, "use transport.kind: zmq"));
    requireError("transport:\n  kind: composite\n  local: socket\n" + secured, 3, "transport.local");
    CHECK_NOTHROW(reg().parse("transport:\n  kind: zmq\n" + secured, kName));
    CHECK_NOTHROW(reg().parse("transport:\n  kind: composite\n" + secured, kName));
    // inproc's ranks are threads of one process: nothing to secure.
    CHECK_NOTHROW(reg().parse("transport:\n  kind: inproc\n" + secured, kName));
  }
  SECTION("the composite transport's inner transports") {
    std::string what =
        requireError("world_size: 2\ntransport:\n  kind: composite\n  local: foo\n", 4, "transport.local");
    CHECK(contains(what, "'foo' is not a registered transport"));
    CHECK(contains(what, "zmq"));
    CHECK(contains(what, "socket"));
    CHECK_FALSE(contains(what, "inproc"));
    what = requireError("transport:\n  kind: composite\n  local: inproc\n", 3, "transport.local");
    CHECK(contains(what, "cannot link processes"));
    requireError("transport:\n  kind: composite\n  remote: composite\n", 3, "transport.remote");
    CHECK_NOTHROW(reg().parse("transport:\n  kind: composite\n  local: socket\n", kName));
    // Island scope without islands would make every rank one island.
    what = requireError("world_size: 2\ntransport:\n  kind: composite\n  local_scope: island\n", 4,
                        "transport.local_scope");
    CHECK(contains(what, "needs network.islands"));
    CHECK_NOTHROW(
        reg().parse("world_size: 2\ntransport:\n  kind: composite\n  local_scope: island\nnetwork:\n  "
                    "islands: [[0], [1]]\n",
                    kName));
#ifdef GOSSAMER_HAVE_LIBFABRIC
    // libfabric as an inner transport needs its provider as it does alone.
    what =
        requireError("world_size: 2\ntransport:\n  kind: composite\n  local: libfabric\n  provider: \"\"\n",
                     5, "transport.provider");
    CHECK(contains(what, "(transport.local) needs a provider"));
#endif
  }
}

TEST_CASE("config: malformed documents are errors", "[config]") {
  SECTION("unclosed flow sequence") {
    std::optional<ConfigError> err = parseError(
        "world_size: 4\n"
        "model:\n"
        "  hidden: [128,\n"
        "training:\n"
        "  epochs: 1\n");
    REQUIRE(err.has_value());
    INFO(err->what());
    CHECK(err->line() >= 3);
    CHECK(err->line() <= 5);
    CHECK(contains(err->what(), "test.yaml:" + std::to_string(err->line()) + ":"));
    CHECK(contains(err->what(), "invalid YAML"));
  }
  SECTION("bad indentation") {
    requireError(
        "training:\n"
        "  epochs: 1\n"
        "   batch_size: 2\n",
        3, "");
  }
  SECTION("tab indentation") { requireError("training:\n\tepochs: 1\n", 2, ""); }
  SECTION("top level is a list") {
    std::string what = requireError("- world_size\n- 4\n", 1, "");
    CHECK(contains(what, "top level"));
  }
  SECTION("top level is a scalar") { requireError("hello\n", 1, ""); }
  SECTION("several documents") { requireError("world_size: 4\n---\nseed: 1\n", 3, ""); }
  SECTION("a flow map followed by more text") {
    // yaml-cpp 0.7 reads this as endless documents: the loader stops at the second.
    std::string what = requireError("{world_size: 4, transport: {kind: inproc}}, compress\n", 1, "");
    CHECK(contains(what, "more than one YAML document"));
  }
  SECTION("empty text") {
    for (const char* text : {"", "\n\n", "# just a comment\n"}) {
      std::optional<ConfigError> err = parseError(text);
      REQUIRE(err.has_value());
      CHECK(err->line() == 0);
      CHECK(err->key().empty());
      CHECK(contains(err->what(), "empty"));
    }
  }
}

TEST_CASE("config: optimizer, fault and membership settings no rank could run with are errors at load",
          "[config]") {
  SECTION("async mode's wait above the transport's timeout") {
    std::string what = requireError(
        "transport:\n  timeout_seconds: 10\nalgorithm:\n  name: crossover_sgd\n  mode: async\n"
        "  async_wait_seconds: 3600\n",
        6, "algorithm.async_wait_seconds");
    CHECK(contains(what, "transport.timeout_seconds (10 s)"));
    requireError(
        "transport:\n  timeout_seconds: 1\nalgorithm:\n  name: sgp\n  mode: async\n"
        "  async_wait_seconds: 2\n",
        6, "algorithm.async_wait_seconds");
    // The wait is unused in sync and overlap modes.
    CHECK_NOTHROW(reg().parse(
        "transport:\n  timeout_seconds: 10\nalgorithm:\n  mode: sync\n  async_wait_seconds: 3600\n", kName));
  }
  SECTION("async mode with checkpoints") {
    std::string what = requireError("algorithm:\n  mode: async\ncheckpoint:\n  every_steps: 1\n  dir: ck\n",
                                    2, "algorithm.mode");
    CHECK(contains(what, "cannot be checkpointed"));
    CHECK(contains(what, "checkpoint.every_steps is 1"));
    what = requireError("algorithm:\n  name: sgp\n  mode: async\ncheckpoint:\n  resume: true\n  dir: ck\n", 3,
                        "algorithm.mode");
    CHECK(contains(what, "checkpoint.resume"));
    CHECK_NOTHROW(
        reg().parse("algorithm:\n  mode: overlap\ncheckpoint:\n  every_steps: 1\n  dir: ck\n", kName));
  }
  SECTION("compressed training and loss-tolerant SGP with checkpoints") {
    const std::string every = "checkpoint:\n  every_steps: 5\n  dir: ck\n";
    const std::string sgd = "algorithm:\n  name: allreduce_sgd\n";
    for (const char* kind : {"topk", "gaussk", "qsgd", "a2sgd", "bf16", "fp16"}) {
      std::string what =
          requireError(sgd + "compression:\n  kind: " + kind + "\n" + every, 4, "compression.kind");
      CHECK(contains(what, "cannot be checkpointed"));
      CHECK(contains(what, "checkpoint.every_steps is 5"));
    }
    // A gossip optimizer sends its own 16-bit models, and saves them.
    CHECK_NOTHROW(
        reg().parse("algorithm:\n  name: crossover_sgd\ncompression:\n  kind: bf16\n" + every, kName));
    CHECK_NOTHROW(reg().parse(sgd + "compression:\n  kind: topk\n", kName));
    std::string what = requireError(
        "algorithm:\n  name: sgp\n  loss_tolerant: true\ncheckpoint:\n  resume: true\n  dir: ck\n", 3,
        "algorithm.loss_tolerant");
    CHECK(contains(what, "checkpoint.resume is true"));
    CHECK_NOTHROW(reg().parse("algorithm:\n  name: sgp\n  loss_tolerant: true\n", kName));
    CHECK_NOTHROW(reg().parse("algorithm:\n  name: sgp\n" + every, kName));
  }
  SECTION("a partition of ranks the job does not have") {
    const std::string faults = "world_size: 2\nfaults:\n  enabled: true\n  partition: ";
    for (const char* bad : {"\"0|5\"", "\"0|0\"", "\"0,1\"", "\"0|x\"", "\"0||1\""}) {
      std::string what = requireError(faults + bad + "\n", 4, "faults.partition");
      CHECK_FALSE(contains(what, "check failed"));
    }
    CHECK(contains(requireError(faults + "\"0|5\"\n", 4, "faults.partition"), "rank 5 is not in the job"));
    // Groups without a length (partition_seconds' default, 0) would never cut anything.
    const auto never = parseError(faults + "\"0|1\"\n");
    REQUIRE(never.has_value());
    CHECK(never->key() == "faults.partition_seconds");
    CHECK(contains(never->what(), "would never be in force"));
    CHECK_NOTHROW(reg().parse(faults + "\"0|1\"\n  partition_seconds: 2\n", kName));
  }
  SECTION("a plain YAML bool or null where text belongs") {
    CHECK(contains(requireError("run:\n  dir: false\n", 2, "run.dir"), "quote it: \"false\""));
    CHECK(contains(requireError("checkpoint:\n  dir: True\n", 2, "checkpoint.dir"), "the plain YAML True"));
    CHECK(reg().parse("run:\n  dir: \"false\"\n", kName).get<std::string>("run.dir") == "false");
  }
  SECTION("a largest world size below the job's") {
    const auto err = parseError("world_size: 8\nmembership:\n  max_world_size: 4\n");
    REQUIRE(err.has_value());
    CHECK(err->key() == "membership.max_world_size");
    CHECK(contains(err->what(), "is below world_size 8"));
  }
  SECTION("auto's size bands out of order") {
    const auto err = parseError("collectives:\n  small_message_bytes: 1000000\n  mid_message_bytes: 10\n");
    REQUIRE(err.has_value());
    CHECK(err->key() == "collectives.small_message_bytes");
    CHECK(contains(err->what(), "exceeds collectives.mid_message_bytes 10"));
    CHECK_NOTHROW(reg().parse("collectives:\n  small_message_bytes: 10\n  mid_message_bytes: 10\n", kName));
  }
  SECTION("membership settings that contradict each other") {
    std::string what = requireError("membership:\n  heartbeat_seconds: 5\n  suspect_seconds: 1\n", 3,
                                    "membership.suspect_seconds");
    CHECK(contains(what, "must exceed membership.heartbeat_seconds"));
    requireError("membership:\n  rejoin: false\n  partition: majority\n", 3, "membership.partition");
    requireError("membership:\n  rejoin: false\n  restarted: true\n", 3, "membership.restarted");
    CHECK_NOTHROW(
        reg().parse("membership:\n  enabled: false\n  heartbeat_seconds: 5\n  suspect_seconds: 1\n", kName));
  }
  SECTION("a straggler's delay beyond a day") {
    requireError("training:\n  straggler_delay_seconds: 1.0e300\n", 2, "training.straggler_delay_seconds");
  }
}

TEST_CASE("config: file errors", "[config]") {
  SECTION("missing file") {
    const std::string path = "/nonexistent/gossamer/missing-config.yaml";
    try {
      reg().load(path);
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.file() == path);
      CHECK(e.line() == 0);
      CHECK(e.key().empty());
      CHECK(contains(e.what(), path));
    }
  }
  SECTION("directory") { CHECK_THROWS_AS(reg().load(fs::temp_directory_path().string()), ConfigError); }
  SECTION("empty file") {
    TempFile file("");
    try {
      reg().load(file.path());
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.file() == file.path());
      CHECK(e.line() == 0);
      CHECK(contains(e.what(), file.path()));
      CHECK(contains(e.what(), "empty"));
    }
  }
  SECTION("errors in a file name the file and line") {
    TempFile file("world_size: 4\n\ntraining:\n  epochs: 0\n");
    try {
      reg().load(file.path());
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.file() == file.path());
      CHECK(e.line() == 4);
      CHECK(e.key() == "training.epochs");
      CHECK(contains(e.what(), file.path() + ":4:"));
    }
  }
}

TEST_CASE("config: only regular files of at most 16 MiB are read", "[config]") {
  SECTION("a FIFO is refused at once, never waited on") {
    const fs::path fifo =
        fs::temp_directory_path() / ("gossamer_test_config_fifo_" + std::to_string(::getpid()));
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::optional<std::string> what;
    try {
      reg().load(fifo.string());
    } catch (const ConfigError& e) {
      what = e.what();
    }
    fs::remove(fifo);
    REQUIRE(what.has_value());
    CHECK(contains(*what, "not a regular file"));
  }
  SECTION("a path with a NUL character is refused, not cut short at it") {
    TempFile file("world_size: 1\n");
    CHECK_THROWS_WITH(reg().load(file.path() + std::string(1, '\0') + ".bak"),
                      Catch::Contains("NUL character"));
  }
  SECTION("a device is refused, not read without end") {
    CHECK_THROWS_WITH(reg().load("/dev/zero"), Catch::Contains("not a regular file"));
  }
  SECTION("a file past the limit is refused without reading it all") {
    TempFile file("world_size: 1\n# " + std::string(gossamer::kMaxConfigBytes, 'x') + "\n");
    CHECK_THROWS_WITH(reg().load(file.path()), Catch::Contains("larger than 16 MiB"));
  }
}

TEST_CASE("config: a long unknown value is cut in the message and costs no table of its size", "[config]") {
  // 8 MB: an edit-distance table against each allowed value would take
  // gigabytes; the message shows 80 characters and the length.
  const std::string blob(std::size_t{8} << 20, 'z');
  const auto e = parseError("topology:\n  kind: " + blob + "\n");
  REQUIRE(e.has_value());
  CHECK(e->key() == "topology.kind");
  CHECK(contains(e->what(), "... (8388608 bytes)"));
  CHECK(std::string(e->what()).size() < 2000);
  // A near miss still gets its suggestion.
  const auto typo = parseError("topology:\n  kind: rign\n");
  REQUIRE(typo.has_value());
  CHECK(contains(typo->what(), "did you mean 'ring'"));
}

TEST_CASE("config: aliases repeating a list read no more elements than the text has bytes, or 2^17",
          "[config]") {
  // 1,300 aliases of a 1,300-element row: 1.7 million elements from 6.5 KB,
  // which took seconds to read; the reading stops at 2^17 elements (one per
  // byte of a text that long).
  std::string row = "0", rows;
  for (int i = 1; i < 1300; ++i) row += ",0";
  for (int i = 0; i < 1300; ++i) rows += ",*a";
  const std::string table = "[&a [" + row + "]" + rows + "]";
  for (const auto& [section, key] :
       {std::pair<std::string, std::string>{"topology:\n  kind: fair_roulette\n", "probabilities"},
        std::pair<std::string, std::string>{"algorithm:\n  name: hierarchical\n", "groups"}}) {
    const std::string text = section + "  " + key + ": " + table + "\n";
    const auto e = parseError(text);
    REQUIRE(e.has_value());
    INFO(e->what());
    CHECK(e->line() == 3);
    CHECK(contains(e->what(), "more than 131072 list elements"));
    CHECK(contains(e->what(), "YAML aliases"));
  }
  // An override's aliases count against the same budget, and the error names the override.
  const std::string section = "topology:\n  kind: fair_roulette\n";
  const std::string option = "topology.probabilities=" + table;
  try {
    reg().parse(section, kName, {option});
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "override 'topology.probabilities="));
    CHECK(contains(e.what(), "more than 131072 list elements"));
  }
  // Aliases within the budget still read: a 3 x 3 table, and a 256 x 256
  // one (65,792 elements and rows from 1.35 KB).
  const std::string small =
      "world_size: 3\ntopology:\n  kind: fair_roulette\n  probabilities: [&a [1,1,1], *a, *a]\n";
  CHECK_NOTHROW(reg().parse(small, kName));
  std::string wide = "1", aliases;
  for (int i = 1; i < 256; ++i) wide += ",1";
  for (int i = 1; i < 256; ++i) aliases += ",*a";
  const std::string big = "world_size: 256\ntopology:\n  kind: fair_roulette\n  probabilities: [&a [" + wide +
                          "]" + aliases + "]\n";
  CHECK_NOTHROW(reg().parse(big, kName));
}

namespace {

/// The ConfigError loading `path` with `overrides` throws (REQUIREs one).
ConfigError loadError(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    reg().load(path, overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected ConfigError loading " << path);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("config: a cross-key rule broken by an override names the override", "[config]") {
  // The file's torus_rows divides world_size 4; the override's 3 does not.
  TempFile file("world_size: 4\ncollectives:\n  torus_rows: 2\n");
  ConfigError e = loadError(file.path(), {"collectives.torus_rows=3"});
  CHECK(e.file() == "override 'collectives.torus_rows=3'");
  CHECK(e.line() == 0);
  CHECK(e.key() == "collectives.torus_rows");
  // Broken by the file itself: the file and its line.
  TempFile bad("world_size: 4\ncollectives:\n  torus_rows: 3\n");
  e = loadError(bad.path(), {"training.epochs=1"});
  CHECK(e.file() == bad.path());
  CHECK(e.line() == 3);
  // A section given as one override names only the keys it sets: the file's
  // own broken torus_rows is still the file's, on its line.
  e = loadError(bad.path(), {"collectives={allreduce: ring}"});
  CHECK(e.file() == bad.path());
  CHECK(e.line() == 3);
  // Of two overrides of one key, the one being read is named.
  e = loadError(file.path(), {"training.epochs=2", "training.epochs=0"});
  CHECK(e.file() == "override 'training.epochs=0'");
  CHECK(e.key() == "training.epochs");
  // A bad value in an override has no line: the override is its own text.
  e = loadError(file.path(), {"world_size=2=3"});
  CHECK(e.file() == "override 'world_size=2=3'");
  CHECK(e.line() == 0);
  CHECK(e.key() == "world_size");
  // Two valid overrides of one key: the later one is the value.
  CHECK(reg().load(file.path(), {"training.epochs=2", "training.epochs=5"}).get<int>("training.epochs") == 5);
  // An override value holding a second YAML document is refused, as a file's is.
  CHECK_THROWS_WITH(reg().load(file.path(), {"world_size=2\n---\n3"}),
                    Catch::Contains("more than one YAML document"));
}

TEST_CASE("config: an empty first document and an empty key name are told as such", "[config]") {
  try {
    reg().parse("---\n...\n---\nworld_size: 2\n", "two.yaml");
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("more than one YAML document") != std::string::npos);
  }
  try {
    reg().parse("world_size: 2\n\"\": 1\n", "empty-key.yaml");
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.line() == 2);
    CHECK(std::string(e.what()).find("an empty key name") != std::string::npos);
  }
}

TEST_CASE("config: validateConfig checks in-code configs", "[config]") {
  Config c = defaults();
  c.sourceFile = "in-code";
  CHECK_NOTHROW(gossamer::validateConfig(c, reg().schema()));

  auto requireInvalid = [](const Config& bad, const std::string& key) {
    try {
      gossamer::validateConfig(bad, reg().schema());
      FAIL("expected ConfigError for " << key);
    } catch (const ConfigError& e) {
      CHECK(e.line() == 0);
      CHECK(e.key() == key);
      CHECK(e.file() == "in-code");
      CHECK(contains(e.what(), "in-code: key '" + key + "'"));
    }
  };
  {
    Config bad = c;
    bad.set("world_size", 0);
    requireInvalid(bad, "world_size");
  }
  {
    Config bad = c;
    bad.set<std::string>("transport.kind", "udp");
    requireInvalid(bad, "transport.kind");
  }
  {
    Config bad = c;
    bad.set<double>("transport.timeout_seconds", 0.0);
    requireInvalid(bad, "transport.timeout_seconds");
  }
  {
    Config bad = c;
    bad.set<std::string>("topology.kind", "star");
    requireInvalid(bad, "topology.kind");
  }
  {
    Config bad = c;
    bad.set("algorithm.segments", int(0));
    requireInvalid(bad, "algorithm.segments");
  }
  {
    Config bad = c;
    bad.set("model.hidden", std::vector<int>({64, -3}));
    requireInvalid(bad, "model.hidden[1]");
  }
  {
    Config bad = c;
    bad.set("data.dirichlet_alpha", double(-1.0));
    requireInvalid(bad, "data.dirichlet_alpha");
  }
  {
    Config bad = c;
    bad.set("training.learning_rate", double(std::numeric_limits<double>::infinity()));
    requireInvalid(bad, "training.learning_rate");
  }
  {
    Config bad = c;
    bad.set("training.momentum", double(1.0));
    requireInvalid(bad, "training.momentum");
  }
  {
    Config bad = c;
    bad.set("training.weight_decay", double(std::nan("")));
    requireInvalid(bad, "training.weight_decay");
  }
}

TEST_CASE("config: validateConfig checks the cross-field rules of in-code configs", "[config]") {
  Config c = defaults();
  c.sourceFile = "in-code";
  c.set("world_size", 4);

  auto requireInvalid = [](const Config& bad, const std::string& key, const std::string& text) {
    try {
      gossamer::validateConfig(bad, reg().schema());
      FAIL("expected ConfigError for " << key);
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(e.line() == 0);
      CHECK(e.key() == key);
      CHECK(e.file() == "in-code");
      CHECK(contains(e.what(), text));
    }
  };
  SECTION("valid configs pass") {
    Config ok = c;
    ok.set<std::string>("topology.kind", "explicit");
    ok.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {1, 2}, {2, 3}, {3, 0}, {0, 2}}));
    ok.set("topology.probabilities",
           std::vector<std::vector<double>>(Table{{0, 4, 1, 1}, {4, 0, 1, 1}, {1, 1, 0, 4}, {1, 1, 4, 0}}));
    ok.set<std::string>("algorithm.name", "hierarchical");
    ok.set("algorithm.groups", std::vector<std::vector<int>>({{3, 0}, {2}, {1}}));
    ok.set("training.straggler_rank", int(3));
    ok.set("training.straggler_delay_seconds", double(2.0));
    CHECK_NOTHROW(gossamer::validateConfig(ok, reg().schema()));
    Config single = c;
    single.set("world_size", 1);
    single.set<std::string>("topology.kind", "fair_roulette");
    CHECK_NOTHROW(gossamer::validateConfig(single, reg().schema()));
  }
  SECTION("probabilities") {
    Config bad = c;
    bad.set("topology.probabilities", std::vector<std::vector<double>>(Table{{0, 1}, {1, 0}}));
    requireInvalid(bad, "topology.probabilities", "world_size x world_size");
    bad.set("topology.probabilities",
            std::vector<std::vector<double>>(Table{{0, 1, 1, 1}, {1, 0, 1, 1}, {1, 1, 0}, {1, 1, 1, 0}}));
    requireInvalid(bad, "topology.probabilities[2]", "entries");
    bad.set("topology.probabilities",
            std::vector<std::vector<double>>(Table{{0, 1, 1, 1}, {1, 0, 1, 1}, {1, 1, 0, 1}, {1, 1, -1, 0}}));
    requireInvalid(bad, "topology.probabilities[3][2]", ">= 0");
    bad.set("topology.probabilities",
            std::vector<std::vector<double>>(Table{{0, 1, 1, 1}, {9, 0, 1, 1}, {1, 1, 0, 1}, {0, 0, 0, 3}}));
    requireInvalid(bad, "topology.probabilities[3]", "rank 3");
  }
  SECTION("edges") {
    Config bad = c;
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {1, 4}}));
    requireInvalid(bad, "topology.edges[1]", "rank 4");
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {-1, 0}}));
    requireInvalid(bad, "topology.edges[1]", "-1");
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {2, 2}}));
    requireInvalid(bad, "topology.edges[1]", "self-loop");
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {1, 2}, {0, 1}}));
    requireInvalid(bad, "topology.edges[2]", "duplicate");
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {1, 2}, {2, 0}}));
    requireInvalid(bad, "topology.edges", "rank 3 has no out-edge");
    bad.set("topology.edges", std::vector<std::pair<int, int>>({{0, 1}, {1, 0}, {2, 3}, {3, 2}}));
    requireInvalid(bad, "topology.edges", "not strongly connected");
  }
  SECTION("explicit needs edges") {
    Config bad = c;
    bad.set<std::string>("topology.kind", "explicit");
    requireInvalid(bad, "topology.kind", "topology.edges");
  }
  SECTION("groups") {
    Config bad = c;
    bad.set("algorithm.groups", std::vector<std::vector<int>>({{0, 1}, {2, 3, 1}}));
    requireInvalid(bad, "algorithm.groups[1][2]", "already in algorithm.groups[0]");
    bad.set("algorithm.groups", std::vector<std::vector<int>>({{0, 1}, {2}}));
    requireInvalid(bad, "algorithm.groups", "rank 3 is in no group");
    bad.set("algorithm.groups", std::vector<std::vector<int>>({{0, 1}, {2, 3, 4}}));
    requireInvalid(bad, "algorithm.groups[1][2]", "rank 4");
    bad.set("algorithm.groups", std::vector<std::vector<int>>({{0, 1, 2, 3}, {}}));
    requireInvalid(bad, "algorithm.groups[1]", "empty");
  }
  SECTION("islands") {
    Config bad = c;
    bad.set("network.islands", std::vector<std::vector<int>>({{0, 1}, {2, 1}}));
    requireInvalid(bad, "network.islands[1][1]", "already in network.islands[0] (islands must not overlap)");
    bad.set("network.islands", std::vector<std::vector<int>>({{0, 1}, {3}}));
    requireInvalid(bad, "network.islands", "rank 2 is in no island");
    bad = c;
    bad.set("network.between_gbps", 0.0);
    requireInvalid(bad, "network.between_gbps", "");
  }
  SECTION("scalars") {
    Config bad = c;
    bad.set("algorithm.mode", std::string("lazy"));
    requireInvalid(bad, "algorithm.mode", "sync, overlap, async");
    bad = c;
    bad.set("algorithm.inter_algorithm", std::string("hierarchical"));
    requireInvalid(bad, "algorithm.inter_algorithm", "crossover_sgd, sgp");
    bad = c;
    bad.set("algorithm.group_size", int(0));
    requireInvalid(bad, "algorithm.group_size", "between 1 and 4096");
    bad = c;
    bad.set("topology.peers_per_step", int(3));
    requireInvalid(bad, "topology.peers_per_step", "between 1 and 2");
  }
  SECTION("straggler") {
    Config bad = c;
    bad.set("training.straggler_rank", int(4));
    requireInvalid(bad, "training.straggler_rank", "0..3");
    bad.set("training.straggler_rank", int(-2));
    requireInvalid(bad, "training.straggler_rank", "-1");
    bad = c;
    bad.set("training.straggler_delay_seconds", double(-1.0));
    requireInvalid(bad, "training.straggler_delay_seconds", ">= 0");
    bad.set("training.straggler_delay_seconds", double(std::numeric_limits<double>::infinity()));
    requireInvalid(bad, "training.straggler_delay_seconds", "finite");
  }
}

TEST_CASE("config: every example config is valid", "[config][examples]") {
  const fs::path dir = fs::path(gossamer::testing::sourceDir()) / "examples" / "configs";
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 8);
  for (const fs::path& file : files) {
    INFO(file.string());
    Config c = defaults();
    REQUIRE_NOTHROW(c = reg().load(file.string()));
    CHECK(c.sourceFile == file.string());
    CHECK_NOTHROW(gossamer::validateConfig(c, reg().schema()));
  }
}

TEST_CASE("config: example configs hold what they promise", "[config][examples]") {
  const fs::path dir = fs::path(gossamer::testing::sourceDir()) / "examples" / "configs";
  const Config crossover = reg().load((dir / "quickstart-crossover.yaml").string());
  CHECK(crossover.worldSize() == 4);
  CHECK(crossover.seed() == 42);
  CHECK(crossover.get<std::string>("transport.kind") == "zmq");
  CHECK(crossover.get<std::string>("transport.protocol") == "tcp");
  CHECK(crossover.get<std::string>("transport.host") == "127.0.0.1");
  CHECK(crossover.get<double>("transport.timeout_seconds") == 30.0);
  CHECK(crossover.get<std::string>("topology.kind") == "fair_roulette");
  CHECK(crossover.get<std::string>("algorithm.name") == "crossover_sgd");
  CHECK(crossover.get<int>("algorithm.segments") == 4);
  CHECK(crossover.get<int>("algorithm.interval") == 1);
  CHECK(crossover.get<std::string>("model.kind") == "mlp");
  CHECK(crossover.get<std::vector<int>>("model.hidden") == std::vector<int>{128});
  CHECK(crossover.get<std::string>("data.partition") == "iid");
  CHECK(crossover.get<bool>("data.standardize"));
  CHECK(crossover.get<int>("training.epochs") == 3);
  CHECK(crossover.get<int>("training.batch_size") == 32);
  CHECK(crossover.get<double>("training.learning_rate") == 0.01);
  CHECK(crossover.get<double>("training.momentum") == 0.9);

  const Config allreduce = reg().load((dir / "quickstart-allreduce.yaml").string());
  CHECK(allreduce.get<std::string>("algorithm.name") == "allreduce_sgd");
  CHECK(allreduce.get<std::string>("topology.kind") == "ring");
  CHECK(allreduce.worldSize() == 4);

  const Config diloco = reg().load((dir / "quickstart-diloco.yaml").string());
  CHECK(diloco.get<std::string>("algorithm.name") == "diloco");
  CHECK(diloco.worldSize() == 4);
  CHECK(diloco.get<int>("algorithm.inner_steps") == 50);
  CHECK(diloco.get<double>("algorithm.outer_learning_rate") == 0.7);
  CHECK(diloco.get<double>("algorithm.outer_momentum") == 0.9);
  CHECK(diloco.get<std::string>("algorithm.outer") == "allreduce");
  CHECK_FALSE(diloco.get<bool>("algorithm.overlap"));
  // The same job as the allreduce quickstart but for the algorithm.
  CHECK(diloco.get<std::vector<int>>("model.hidden") == allreduce.get<std::vector<int>>("model.hidden"));
  CHECK(diloco.get<int>("training.epochs") == allreduce.get<int>("training.epochs"));
  CHECK(diloco.get<int>("training.batch_size") == allreduce.get<int>("training.batch_size"));
  CHECK(diloco.get<double>("training.learning_rate") == allreduce.get<double>("training.learning_rate"));
  CHECK(diloco.get<double>("training.momentum") == allreduce.get<double>("training.momentum"));

  const Config noniid = reg().load((dir / "noniid-crossover.yaml").string());
  CHECK(noniid.get<std::string>("data.partition") == "non_iid");
  CHECK(noniid.get<double>("data.dirichlet_alpha") == 0.5);
  CHECK(noniid.get<std::string>("algorithm.name") == "crossover_sgd");

  const Config smoke = reg().load((dir / "smoke.yaml").string());
  CHECK(smoke.worldSize() == 3);
  CHECK(smoke.get<int>("data.train_limit") == 3000);
  CHECK(smoke.get<int>("data.test_limit") == 1000);
  CHECK(smoke.get<int>("training.epochs") == 1);
  CHECK(smoke.get<double>("transport.timeout_seconds") == 10.0);

  const Config sgp = reg().load((dir / "sgp.yaml").string());
  CHECK(sgp.worldSize() == 8);
  CHECK(sgp.get<std::string>("algorithm.name") == "sgp");
  CHECK(sgp.get<std::string>("topology.kind") == "directed_exponential");
  CHECK(sgp.get<int>("topology.peers_per_step") == 1);
  CHECK(sgp.get<std::string>("algorithm.mode") == "sync");
  CHECK(sgp.get<std::string>("model.kind") == "mlp");
  CHECK(sgp.get<std::vector<int>>("model.hidden") == std::vector<int>{128});
  CHECK(sgp.get<int>("training.epochs") == 3);
  CHECK(sgp.get<int>("training.batch_size") == 32);
  CHECK(sgp.get<double>("training.learning_rate") == 0.01);
  CHECK(sgp.get<double>("training.momentum") == 0.9);

  const Config hierarchical = reg().load((dir / "hierarchical.yaml").string());
  CHECK(hierarchical.worldSize() == 8);
  CHECK(hierarchical.get<std::string>("algorithm.name") == "hierarchical");
  CHECK(hierarchical.get<int>("algorithm.group_size") == 4);
  CHECK(hierarchical.get<std::vector<std::vector<int>>>("algorithm.groups").empty());
  CHECK(hierarchical.get<std::string>("algorithm.inter_algorithm") == "crossover_sgd");
  CHECK(hierarchical.get<std::string>("topology.kind") == "fair_roulette");

  const Config roulette = reg().load((dir / "roulette-table.yaml").string());
  CHECK(roulette.worldSize() == 4);
  CHECK(roulette.get<std::string>("algorithm.name") == "crossover_sgd");
  CHECK(roulette.get<std::string>("topology.kind") == "fair_roulette");
  CHECK(roulette.get<std::vector<std::vector<double>>>("topology.probabilities") ==
        Table{{0, 4, 1, 1}, {4, 0, 1, 1}, {1, 1, 0, 4}, {1, 1, 4, 0}});

  const Config graph = reg().load((dir / "explicit-graph.yaml").string());
  CHECK(graph.worldSize() == 4);
  CHECK(graph.get<std::string>("algorithm.name") == "sgp");
  CHECK(graph.get<std::string>("topology.kind") == "explicit");
  CHECK(graph.get<std::vector<std::pair<int, int>>>("topology.edges") ==
        Edges{{0, 1}, {1, 2}, {2, 3}, {3, 0}, {0, 2}});
}
