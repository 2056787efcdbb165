// gossamer-sim: a gossamer-train config simulated at a world size this
// machine could not run, with the job's own optimizer, over islands.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>

#include "build_paths.hpp"
#include "process.hpp"

using gossamer::testing::TempDir;

namespace {

// Runs gossamer-sim with `args` (after the program) and returns its JSON.
nlohmann::json simulate(const TempDir& dir, const std::string& name, std::vector<std::string> args) {
  const std::string exe = gossamer::testing::simExe();
  INFO("gossamer-sim is built with the simgrid transport (Debian: libsimgrid-dev, scripts/deps.sh)");
  REQUIRE(!exe.empty());
  args.insert(args.begin(), exe);
  args.push_back("--json");
  args.push_back(dir / (name + ".json"));
  const pid_t pid = gossamer::testing::spawn(args, dir / (name + ".out"), dir / (name + ".err"));
  REQUIRE(pid > 0);
  const auto status = gossamer::testing::waitBounded(pid, 120);
  INFO(gossamer::testing::readFile(dir / (name + ".err")));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  REQUIRE(WEXITSTATUS(*status) == 0);
  return nlohmann::json::parse(gossamer::testing::readFile(dir / (name + ".json")));
}

}  // namespace

TEST_CASE("gossamer-sim runs Crossover-SGD on 128 ranks in 4 islands and its ranks agree", "[sim]") {
  TempDir dir;
  const auto r = simulate(dir, "crossover",
                          {gossamer::testing::sourceDir() + "/examples/configs/quickstart-crossover.yaml",
                           "--world-size", "128", "--islands", "4", "--steps", "12", "--step-seconds", "0.05",
                           "--set", "network.between_gbps=1", "--set", "network.between_delay_ms=20"});
  CHECK(r["algorithm"] == "crossover_sgd");
  CHECK(r["world_size"] == 128);
  CHECK(r["islands"] == 4);
  // Every step holds its 50 ms of compute and at least one 20 ms crossing.
  CHECK(r["simulated_seconds_per_step"].get<double>() > 0.07);
  const auto& d = r["consensus_distance"];
  REQUIRE(d.size() == 12);
  // Ranks start 0..127 apart (distance about 37); gossip brings them together.
  CHECK(d.front().get<double>() < 37);
  CHECK(d.back().get<double>() < 0.5 * d.front().get<double>());
  CHECK(r["bytes_between_islands"].get<double>() > 0);
  CHECK(r["bytes_between_islands"].get<double>() < r["bytes_sent"].get<double>());
}

TEST_CASE("gossamer-sim runs AllReduce-SGD with one replicated model", "[sim]") {
  TempDir dir;
  const auto r = simulate(dir, "allreduce",
                          {gossamer::testing::sourceDir() + "/examples/configs/quickstart-allreduce.yaml",
                           "--world-size", "32", "--islands", "2", "--steps", "3"});
  CHECK(r["algorithm"] == "allreduce_sgd");
  CHECK(r["replicated_model"] == true);
  for (const auto& x : r["consensus_distance"]) CHECK(x.get<double>() == 0);
  // A ring over 32 ranks of the model's ~100k float32: each rank sends
  // 2 (N-1)/N of it per step, so at least that many bytes in all.
  CHECK(r["bytes_sent"].get<double>() > 3 * 32 * 2.0 * 31 / 32 * 4 * r["parameters"].get<double>() * 0.99);
}

TEST_CASE("gossamer-sim refuses a bad request with a clear error", "[sim]") {
  TempDir dir;
  const std::string exe = gossamer::testing::simExe();
  REQUIRE(!exe.empty());
  const pid_t pid = gossamer::testing::spawn(
      {exe, gossamer::testing::sourceDir() + "/examples/configs/quickstart-crossover.yaml", "--world-size",
       "8", "--islands", "9"},
      dir / "bad.out", dir / "bad.err");
  const auto status = gossamer::testing::waitBounded(pid, 60);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 1);
  CHECK(gossamer::testing::readFile(dir / "bad.err").find("--islands 9 exceeds the world size 8") !=
        std::string::npos);
}

TEST_CASE("gossamer-sim --whole-run tells the optimizer its last step as a training run does", "[sim]") {
  // A2SGD mixes the models every sync_period (50) steps and after the run's
  // last step: 10 steps hold no mixing unless the run ends there.
  TempDir dir;
  const std::vector<std::string> base{gossamer::testing::sourceDir() + "/examples/configs/a2sgd-gossip.yaml",
                                      "--world-size",
                                      "8",
                                      "--islands",
                                      "2",
                                      "--steps",
                                      "10",
                                      "--step-seconds",
                                      "0.01"};
  const auto open = simulate(dir, "open", base);
  auto args = base;
  args.push_back("--whole-run");
  const auto whole = simulate(dir, "whole", args);
  CHECK(open["whole_run"] == false);
  CHECK(whole["whole_run"] == true);
  const auto& d0 = open["consensus_distance"];
  const auto& d1 = whole["consensus_distance"];
  REQUIRE(d0.size() == 10);
  REQUIRE(d1.size() == 10);
  // The same steps up to the last one (ranks 0..7 apart: distance 2.29);
  // only the whole run mixes the models at its end.
  CHECK(d1[8].get<double>() == d0[8].get<double>());
  CHECK(d0.back().get<double>() == d0[8].get<double>());
  CHECK(d1.back().get<double>() < 0.9 * d0.back().get<double>());
  // The mixing sends whole models, across the islands too.
  CHECK(whole["bytes_between_islands"].get<double>() > 10 * open["bytes_between_islands"].get<double>());
  CHECK(whole["simulated_seconds_per_step"].get<double>() > open["simulated_seconds_per_step"].get<double>());
}
