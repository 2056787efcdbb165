// gossamer-train with `security:` on: keys from gossamer-keygen, one per rank
// ({rank} in security.secret_key); the job trains to the same models as
// without security, and a transport that cannot authenticate refuses it.
#include <catch2/catch.hpp>

#include "build_paths.hpp"
#include "dataset.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "process.hpp"

using gossamer::testing::readFile;
using gossamer::testing::spawn;
using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;
using gossamer::testing::writeFile;

namespace {

const std::string kKeygen =
    std::filesystem::path(gossamer::testing::trainExe()).parent_path() / "gossamer-keygen";

std::string config(const std::string& transport, int n) {
  return "world_size: " + std::to_string(n) + "\nseed: 7\ntransport:\n  kind: " + transport +
         "\n  timeout_seconds: 20\n  linger_seconds: 1\ntopology:\n  kind: fair_roulette\nalgorithm:\n  "
         "name: "
         "crossover_sgd\n  segments: 3\nmodel:\n  kind: mlp\n  hidden: [32]\ndata:\n  path: " +
         gossamer::testing::fashionMnistDir() +
         "\n  train_limit: 6000\n  test_limit: 1000\ntraining:\n  epochs: 2\n  batch_size: 32\n  "
         "learning_rate: 0.01\n  momentum: 0.9\n";
}

/// Runs gossamer-train on `yaml`; returns its exit status and summary.
std::pair<int, nlohmann::json> train(const TempDir& dir, const std::string& yaml, const std::string& name) {
  writeFile(dir / (name + ".yaml"), yaml);
  const pid_t pid = spawn({gossamer::testing::trainExe(), "--config", dir / (name + ".yaml"),
                           "--summary-json", dir / (name + ".json")},
                          dir / (name + ".out"), dir / (name + ".err"));
  const auto status = waitBounded(pid, 180);
  INFO(name << " stderr:\n" << readFile(dir / (name + ".err")));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  if (WEXITSTATUS(*status) != 0) return {WEXITSTATUS(*status), {}};
  return {0, nlohmann::json::parse(readFile(dir / (name + ".json")))};
}

}  // namespace

TEST_CASE("under security, gossamer-train trains the same models as without it, and socket refuses it",
          "[multiproc][train][security]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  const int n = 3;
  std::filesystem::create_directory(dir / "admitted");
  for (int r = 0; r < n; ++r) {
    const std::string key = dir / ("rank" + std::to_string(r));
    const pid_t pid = spawn({kKeygen, key}, dir / "keygen.out", dir / "keygen.err");
    const auto status = waitBounded(pid, 30);
    REQUIRE(status.has_value());
    REQUIRE(WEXITSTATUS(*status) == 0);
    std::filesystem::rename(key + ".pub", dir / ("admitted/rank" + std::to_string(r) + ".pub"));
  }
  const std::string security = "security:\n  enabled: true\n  secret_key: " + (dir / "rank{rank}") +
                               "\n  public_keys: " + (dir / "admitted") + "\n";
  const auto [plainStatus, plain] = train(dir, config("zmq", n), "plain");
  const auto [curveStatus, curve] = train(dir, config("zmq", n) + security, "curve");
  REQUIRE(plainStatus == 0);
  REQUIRE(curveStatus == 0);
  // Same seed, same data, same order: encryption must not change a bit.
  CHECK(curve["model_crc32c_by_rank"] == plain["model_crc32c_by_rank"]);
  CHECK(curve["test_accuracy"] == plain["test_accuracy"]);
  CHECK(plain["test_accuracy"].get<double>() > 0.6);

  const auto [socketStatus, socketSummary] = train(dir, config("socket", n) + security, "socket");
  CHECK(socketStatus != 0);
  CHECK(readFile(dir / "socket.err").find("use transport.kind: zmq") != std::string::npos);
}
