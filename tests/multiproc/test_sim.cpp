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
  CHECK(gossamer::testing::readFile(dir / "bad.err")
            .find("--islands 9 is more than the 8 ranks (--world-size)") != std::string::npos);
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

namespace {

// quickstart-allreduce.yaml with `extra` appended (a `sim:` section), in `dir`.
std::string jobWith(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir / (name + ".yaml");
  gossamer::testing::writeFile(path,
                               gossamer::testing::readFile(gossamer::testing::sourceDir() +
                                                           "/examples/configs/quickstart-allreduce.yaml") +
                                   "\n" + extra);
  return path;
}

// The step of an 8-rank AllReduce-SGD job (ring allreduce) in 2 islands, `steps` steps, with the extra
// arguments.
nlohmann::json allreduceStep(const TempDir& dir, const std::string& name, const std::string& config,
                             std::vector<std::string> extra, int steps = 4) {
  std::vector<std::string> args{config,
                                "--world-size",
                                "8",
                                "--islands",
                                "2",
                                "--steps",
                                std::to_string(steps),
                                "--set",
                                "collectives.allreduce=ring"};
  args.insert(args.end(), extra.begin(), extra.end());
  return simulate(dir, name, args);
}

}  // namespace

TEST_CASE("gossamer-sim reads the sim section's step_seconds and its flag overrides it", "[sim]") {
  TempDir dir;
  const std::string plain = gossamer::testing::sourceDir() + "/examples/configs/quickstart-allreduce.yaml";
  const auto flag = allreduceStep(dir, "flag", plain, {"--step-seconds", "0.05"});
  const auto yaml = allreduceStep(dir, "yaml", jobWith(dir, "job", "sim:\n  step_seconds: 0.05\n"), {});
  const auto both = allreduceStep(dir, "both", jobWith(dir, "job2", "sim:\n  step_seconds: 0.05\n"),
                                  {"--step-seconds", "0.2"});
  CHECK(yaml["step_compute_seconds"] == 0.05);
  CHECK(yaml["simulated_seconds_per_step"] == flag["simulated_seconds_per_step"]);
  CHECK(both["step_compute_seconds"] == 0.2);
  // The allreduce is the same; the compute per step is 0.15 s longer.
  CHECK(both["simulated_seconds_per_step"].get<double>() ==
        Approx(flag["simulated_seconds_per_step"].get<double>() + 0.15).margin(1e-9));
}

TEST_CASE("gossamer-sim slows the sim section's slow ranks and a synchronous step waits for them", "[sim]") {
  TempDir dir;
  const auto base = allreduceStep(dir, "base", jobWith(dir, "base", "sim:\n  step_seconds: 0.05\n"), {});
  const auto slow = allreduceStep(
      dir, "slow", jobWith(dir, "slow", "sim:\n  step_seconds: 0.05\n  slow_ranks: [3]\n  slow_factor: 4\n"),
      {});
  CHECK(slow["slow_ranks"] == nlohmann::json::array({3}));
  // Rank 3 computes 0.2 s a step instead of 0.05: the allreduce cannot end
  // before it joins, and the fast ranks' first sends have gone meanwhile.
  const double extra =
      slow["simulated_seconds_per_step"].get<double>() - base["simulated_seconds_per_step"].get<double>();
  CHECK(extra > 0.12);
  CHECK(extra <= 0.15 + 1e-9);
}

TEST_CASE("gossamer-sim draws the sim section's jitter from the seed so a run repeats", "[sim]") {
  TempDir dir;
  const std::string jittered =
      jobWith(dir, "jit", "sim:\n  step_seconds: 0.05\n  jitter: lognormal\n  jitter_scale: 0.3\n");
  const auto base = allreduceStep(dir, "base", jobWith(dir, "base", "sim:\n  step_seconds: 0.05\n"), {}, 6);
  const auto a = allreduceStep(dir, "a", jittered, {}, 6);
  const auto b = allreduceStep(dir, "b", jittered, {}, 6);
  const auto other = allreduceStep(dir, "other", jittered, {"--set", "seed=7"}, 6);
  CHECK(a["jitter"] == "lognormal");
  CHECK(a["step_end_seconds"] == b["step_end_seconds"]);
  CHECK(a["step_end_seconds"] != other["step_end_seconds"]);
  // A synchronous step waits for the slowest of 8 draws of mean 1.
  CHECK(a["simulated_seconds_per_step"].get<double>() > base["simulated_seconds_per_step"].get<double>());
}

TEST_CASE(
    "gossamer-sim refuses a sim section that names a missing rank, a scale without a jitter or a platform "
    "file SimGrid cannot load",
    "[sim]") {
  TempDir dir;
  const std::string exe = gossamer::testing::simExe();
  REQUIRE(!exe.empty());
  // Platform files SimGrid cannot load: one its parser refuses, one it would
  // abort the process on (an unknown routing): an error naming the line.
  const std::string head =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n";
  const std::string truncated = dir / "truncated.xml", routing = dir / "routing.xml";
  gossamer::testing::writeFile(truncated,
                               head + "  <zone id=\"z\" routing=\"Full\">\n    <host id=\"rank-0\"");
  gossamer::testing::writeFile(routing,
                               head + "  <zone id=\"z\" routing=\"Bogus\">\n  </zone>\n</platform>\n");
  const struct {
    std::string yaml, expected;
  } cases[] = {
      {"sim:\n  slow_ranks: [2, 8]\n", "sim.slow_ranks[1]"},
      {"sim:\n  slow_ranks: [2, 2]\n", "listed twice"},
      {"sim:\n  jitter_scale: 0.2\n", "sim.jitter_scale"},
      {"sim:\n  jitter: gaussian\n", "sim.jitter"},
      {"sim:\n  platform: /nonexistent/platform.xml\n",
       "key 'sim.platform': no file /nonexistent/platform.xml"},
      {"sim:\n  platform: /tmp\n", "key 'sim.platform': no file /tmp"},
      {"sim:\n  platform: " + truncated + "\n", "simgrid platform file " + truncated + ":5: Invalid XML"},
      {"sim:\n  platform: " + routing + "\n",
       "simgrid platform file " + routing +
           ":4: SimGrid cannot load it (it would have aborted the process): Not a "
           "valid model"},
      {"sim:\n  jitter: lognormal\n  jitter_scale: 4\n", "a lognormal sigma of at most 3"},
  };
  int k = 0;
  for (const auto& c : cases) {
    const std::string name = "bad" + std::to_string(k++);
    const pid_t pid =
        gossamer::testing::spawn({exe, jobWith(dir, name, c.yaml), "--world-size", "8", "--steps", "1"},
                                 dir / (name + ".out"), dir / (name + ".err"));
    const auto status = gossamer::testing::waitBounded(pid, 60);
    REQUIRE(status.has_value());
    const std::string err = gossamer::testing::readFile(dir / (name + ".err"));
    INFO(c.yaml << err);
    CHECK(WEXITSTATUS(*status) == 1);
    CHECK(err.find(c.expected) != std::string::npos);
  }
}
