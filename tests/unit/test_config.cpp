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
#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"

namespace {

namespace fs = std::filesystem;
using gossamer::Config;
using gossamer::ConfigError;

constexpr const char* kName = "test.yaml";

/// The ConfigError thrown by parseConfig(yaml, kName), or nullopt if none was.
std::optional<ConfigError> parseError(const std::string& yaml) {
  try {
    gossamer::parseConfig(yaml, kName);
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
    "algorithm:\n"
    "  name: allreduce_sgd\n"
    "  segments: 16\n"
    "  interval: 3\n"
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
    "  weight_decay: 1e-4\n";

void requireDefaultsExceptSource(const Config& c) {
  const Config d;
  CHECK(c.worldSize == d.worldSize);
  CHECK(c.seed == d.seed);
  CHECK(c.transport.kind == d.transport.kind);
  CHECK(c.transport.host == d.transport.host);
  CHECK(c.transport.protocol == d.transport.protocol);
  CHECK(c.transport.timeoutSeconds == d.transport.timeoutSeconds);
  CHECK(c.transport.lingerSeconds == d.transport.lingerSeconds);
  CHECK(c.topology.kind == d.topology.kind);
  CHECK(c.algorithm.name == d.algorithm.name);
  CHECK(c.algorithm.segments == d.algorithm.segments);
  CHECK(c.algorithm.interval == d.algorithm.interval);
  CHECK(c.model.kind == d.model.kind);
  CHECK(c.model.hidden == d.model.hidden);
  CHECK(c.data.path == d.data.path);
  CHECK(c.data.partition == d.data.partition);
  CHECK(c.data.dirichletAlpha == d.data.dirichletAlpha);
  CHECK(c.data.standardize == d.data.standardize);
  CHECK(c.data.trainLimit == d.data.trainLimit);
  CHECK(c.data.testLimit == d.data.testLimit);
  CHECK(c.training.epochs == d.training.epochs);
  CHECK(c.training.batchSize == d.training.batchSize);
  CHECK(c.training.learningRate == d.training.learningRate);
  CHECK(c.training.momentum == d.training.momentum);
  CHECK(c.training.weightDecay == d.training.weightDecay);
}

}  // namespace

TEST_CASE("config: a full config sets every field", "[config]") {
  const Config c = gossamer::parseConfig(kFullConfig, "full.yaml");
  CHECK(c.sourceFile == "full.yaml");
  CHECK(c.worldSize == 8);
  CHECK(c.seed == std::numeric_limits<std::uint64_t>::max());
  CHECK(c.transport.kind == "inproc");
  CHECK(c.transport.host == "10.0.0.7");
  CHECK(c.transport.protocol == "ipc");
  CHECK(c.transport.timeoutSeconds == 12.5);
  CHECK(c.transport.lingerSeconds == 0.0);
  CHECK(c.topology.kind == "ring");
  CHECK(c.algorithm.name == "allreduce_sgd");
  CHECK(c.algorithm.segments == 16);
  CHECK(c.algorithm.interval == 3);
  CHECK(c.model.kind == "softmax");
  CHECK(c.model.hidden == std::vector<int>{256, 64, 1});
  CHECK(c.data.path == "/tmp/some data");
  CHECK(c.data.partition == "non_iid");
  CHECK(c.data.dirichletAlpha == 0.1);
  CHECK(c.data.standardize == false);
  CHECK(c.data.trainLimit == 5000);
  CHECK(c.data.testLimit == 700);
  CHECK(c.training.epochs == 7);
  CHECK(c.training.batchSize == 64);
  CHECK(c.training.learningRate == 2.5e-3);
  CHECK(c.training.momentum == 0.0);
  CHECK(c.training.weightDecay == 1e-4);
  CHECK_NOTHROW(gossamer::validateConfig(c));
}

TEST_CASE("config: loadConfig reads a file and records its path", "[config]") {
  TempFile file(kFullConfig);
  const Config c = gossamer::loadConfig(file.path());
  CHECK(c.sourceFile == file.path());
  CHECK(c.worldSize == 8);
  CHECK(c.training.weightDecay == 1e-4);
}

TEST_CASE("config: missing keys keep their defaults", "[config]") {
  SECTION("empty map") {
    const Config c = gossamer::parseConfig("{}\n", "x.yaml");
    CHECK(c.sourceFile == "x.yaml");
    requireDefaultsExceptSource(c);
  }
  SECTION("empty and commented-out sections") {
    const Config c = gossamer::parseConfig(
        "transport: {}\n"
        "training:\n"
        "  # epochs: 10\n"
        "model:\n");
    CHECK(c.sourceFile == "<string>");
    requireDefaultsExceptSource(c);
  }
  SECTION("partial sections") {
    const Config c = gossamer::parseConfig(
        "world_size: 2\n"
        "training:\n"
        "  epochs: 10\n");
    CHECK(c.worldSize == 2);
    CHECK(c.training.epochs == 10);
    CHECK(c.training.batchSize == Config{}.training.batchSize);
    CHECK(c.model.hidden == Config{}.model.hidden);
    CHECK(c.seed == 42);
  }
  SECTION("an empty hidden list means no hidden layer") {
    const Config c = gossamer::parseConfig("model:\n  hidden: []\n");
    CHECK(c.model.hidden.empty());
  }
  SECTION("integers are accepted for real-valued keys") {
    const Config c = gossamer::parseConfig("training:\n  learning_rate: 1\n");
    CHECK(c.training.learningRate == 1.0);
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
    CHECK(contains(what, "zmq, inproc"));
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

TEST_CASE("config: file errors", "[config]") {
  SECTION("missing file") {
    const std::string path = "/nonexistent/gossamer/missing-config.yaml";
    try {
      gossamer::loadConfig(path);
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.file() == path);
      CHECK(e.line() == 0);
      CHECK(e.key().empty());
      CHECK(contains(e.what(), path));
    }
  }
  SECTION("directory") {
    CHECK_THROWS_AS(gossamer::loadConfig(fs::temp_directory_path().string()), ConfigError);
  }
  SECTION("empty file") {
    TempFile file("");
    try {
      gossamer::loadConfig(file.path());
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
      gossamer::loadConfig(file.path());
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      CHECK(e.file() == file.path());
      CHECK(e.line() == 4);
      CHECK(e.key() == "training.epochs");
      CHECK(contains(e.what(), file.path() + ":4:"));
    }
  }
}

TEST_CASE("config: validateConfig checks in-code configs", "[config]") {
  Config c;
  c.sourceFile = "in-code";
  CHECK_NOTHROW(gossamer::validateConfig(c));

  auto requireInvalid = [](const Config& bad, const std::string& key) {
    try {
      gossamer::validateConfig(bad);
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
    bad.worldSize = 0;
    requireInvalid(bad, "world_size");
  }
  {
    Config bad = c;
    bad.transport.kind = "udp";
    requireInvalid(bad, "transport.kind");
  }
  {
    Config bad = c;
    bad.transport.timeoutSeconds = 0.0;
    requireInvalid(bad, "transport.timeout_seconds");
  }
  {
    Config bad = c;
    bad.topology.kind = "star";
    requireInvalid(bad, "topology.kind");
  }
  {
    Config bad = c;
    bad.algorithm.segments = 0;
    requireInvalid(bad, "algorithm.segments");
  }
  {
    Config bad = c;
    bad.model.hidden = {64, -3};
    requireInvalid(bad, "model.hidden[1]");
  }
  {
    Config bad = c;
    bad.data.dirichletAlpha = -1.0;
    requireInvalid(bad, "data.dirichlet_alpha");
  }
  {
    Config bad = c;
    bad.training.learningRate = std::numeric_limits<double>::infinity();
    requireInvalid(bad, "training.learning_rate");
  }
  {
    Config bad = c;
    bad.training.momentum = 1.0;
    requireInvalid(bad, "training.momentum");
  }
  {
    Config bad = c;
    bad.training.weightDecay = std::nan("");
    requireInvalid(bad, "training.weight_decay");
  }
}

TEST_CASE("config: every example config is valid", "[config][examples]") {
  const fs::path dir = fs::path(GOSSAMER_SOURCE_DIR) / "examples" / "configs";
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 4);
  for (const fs::path& file : files) {
    INFO(file.string());
    Config c;
    REQUIRE_NOTHROW(c = gossamer::loadConfig(file.string()));
    CHECK(c.sourceFile == file.string());
    CHECK_NOTHROW(gossamer::validateConfig(c));
  }
}

TEST_CASE("config: example configs hold what they promise", "[config][examples]") {
  const fs::path dir = fs::path(GOSSAMER_SOURCE_DIR) / "examples" / "configs";
  const Config crossover = gossamer::loadConfig((dir / "quickstart-crossover.yaml").string());
  CHECK(crossover.worldSize == 4);
  CHECK(crossover.seed == 42);
  CHECK(crossover.transport.kind == "zmq");
  CHECK(crossover.transport.protocol == "tcp");
  CHECK(crossover.transport.host == "127.0.0.1");
  CHECK(crossover.transport.timeoutSeconds == 30.0);
  CHECK(crossover.topology.kind == "fair_roulette");
  CHECK(crossover.algorithm.name == "crossover_sgd");
  CHECK(crossover.algorithm.segments == 4);
  CHECK(crossover.algorithm.interval == 1);
  CHECK(crossover.model.kind == "mlp");
  CHECK(crossover.model.hidden == std::vector<int>{128});
  CHECK(crossover.data.partition == "iid");
  CHECK(crossover.data.standardize);
  CHECK(crossover.training.epochs == 3);
  CHECK(crossover.training.batchSize == 32);
  CHECK(crossover.training.learningRate == 0.01);
  CHECK(crossover.training.momentum == 0.9);

  const Config allreduce = gossamer::loadConfig((dir / "quickstart-allreduce.yaml").string());
  CHECK(allreduce.algorithm.name == "allreduce_sgd");
  CHECK(allreduce.topology.kind == "ring");
  CHECK(allreduce.worldSize == 4);

  const Config noniid = gossamer::loadConfig((dir / "noniid-crossover.yaml").string());
  CHECK(noniid.data.partition == "non_iid");
  CHECK(noniid.data.dirichletAlpha == 0.5);
  CHECK(noniid.algorithm.name == "crossover_sgd");

  const Config smoke = gossamer::loadConfig((dir / "smoke.yaml").string());
  CHECK(smoke.worldSize == 3);
  CHECK(smoke.data.trainLimit == 3000);
  CHECK(smoke.data.testLimit == 1000);
  CHECK(smoke.training.epochs == 1);
  CHECK(smoke.transport.timeoutSeconds == 10.0);
}
