// gossamer-train resuming from checkpoints that do not hold what their names
// and the job's data say: a file named for another step, a model with a NaN,
// a sampler order that is not the rank's own shard (an index far past the
// data), and a checkpoint.dir that is a file. Each is refused with a message
// naming what is wrong; none trains on it or crashes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "build_paths.hpp"
#include "dataset.hpp"
#include "gossamer/checkpoint.hpp"
#include "job_config.hpp"
#include "process.hpp"

using gossamer::testing::readFile;
using gossamer::testing::smallConfig;
using gossamer::testing::spawn;
using gossamer::testing::TempDir;
using gossamer::testing::writeFile;

namespace {

// Runs gossamer-train on `yaml` (inproc: one process); returns its exit status
// (-1: killed after 120 s) and its stderr.
std::pair<int, std::string> train(const TempDir& dir, const std::string& name, const std::string& yaml) {
  writeFile(dir / (name + ".yaml"), yaml);
  const pid_t pid =
      spawn({gossamer::testing::trainExe(), "--config", dir / (name + ".yaml"), "--progress", "off"},
            dir / (name + ".out"), dir / (name + ".err"));
  const int code = gossamer::testing::exitCodeWithin(pid, 120).value_or(-1);
  return {code, readFile(dir / (name + ".err"))};
}

std::string withCheckpoints(const std::string& base, const std::string& ckptDir, bool resume, int epochs) {
  std::string yaml = base;
  const auto at = yaml.find("epochs: 1");
  yaml.replace(at, 9, "epochs: " + std::to_string(epochs));
  return yaml + "run:\n  dir: \"\"\ncheckpoint:\n  every_steps: 40\n  dir: " + ckptDir +
         "\n  resume: " + (resume ? "true" : "false") + "\n";
}

}  // namespace

TEST_CASE("a resumed job refuses checkpoints that do not hold what their names and its data say",
          "[multiproc][checkpoint]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  // 2 ranks of 3000 images, batches of 32: 94 steps an epoch, checkpoints
  // at steps 40 and 80.
  const std::string base = smallConfig("inproc", "allreduce_sgd", 2, 1, 10.0);
  {
    const auto [code, err] = train(dir, "first", withCheckpoints(base, dir / "ck", false, 1));
    INFO(err);
    REQUIRE(code == 0);
  }
  const auto ckpt = [&](const std::string& d, int rank, int step) {
    return d + "/rank-" + std::to_string(rank) + "-step-" + std::to_string(step) + ".ckpt";
  };
  REQUIRE(std::filesystem::exists(ckpt(dir / "ck", 0, 80)));
  REQUIRE(std::filesystem::exists(ckpt(dir / "ck", 1, 80)));
  // Each case: a copy of the checkpoints, changed, then resumed for 2 epochs.
  struct Case {
    std::string name, expected;
    std::function<void(const std::string&)> change;
  };
  const std::vector<Case> cases{
      {"renamed", "not the step its name says",
       [&](const std::string& d) {
         for (int r = 0; r < 2; ++r) std::filesystem::rename(ckpt(d, r, 80), ckpt(d, r, 160));
       }},
      {"nan", "is not finite",
       [&](const std::string& d) {
         auto c = gossamer::Checkpoint::load(ckpt(d, 1, 80));
         auto model = c.getArray<float>("model");
         model[3] = std::numeric_limits<float>::quiet_NaN();
         c.putArray<float>("model", model);
         c.save(ckpt(d, 1, 80));
       }},
      {"world", "written by a job of world size 3 and seed",
       [&](const std::string& d) {
         for (int r = 0; r < 2; ++r) {
           auto c = gossamer::Checkpoint::load(ckpt(d, r, 80));
           c.putValue<std::int32_t>("world_size", 3);
           c.save(ckpt(d, r, 80));
         }
       }},
      {"shard", "sampler.shard is not an order of this rank's samples",
       [&](const std::string& d) {
         auto c = gossamer::Checkpoint::load(ckpt(d, 0, 80));
         auto shard = c.getArray<int>("sampler.shard");
         shard[0] = 1'000'000'000;
         c.putArray<int>("sampler.shard", shard);
         c.save(ckpt(d, 0, 80));
       }},
  };
  for (const auto& k : cases) {
    INFO("case " << k.name);
    const std::string d = dir / ("ck-" + k.name);
    std::filesystem::copy(dir / "ck", d);
    k.change(d);
    const auto [code, err] = train(dir, k.name, withCheckpoints(base, d, true, 2));
    INFO(err);
    CHECK(code == 1);
    CHECK(err.find(k.expected) != std::string::npos);
    CHECK(err.find("checkpoint " + d + "/rank-") != std::string::npos);  // names the file
    CHECK(err.find("check failed") == std::string::npos);
  }
  // checkpoint.dir names a file: refused before any step.
  writeFile(dir / "afile", "not a directory\n");
  const auto [code, err] = train(dir, "file", withCheckpoints(base, dir / "afile", true, 2));
  INFO(err);
  CHECK(code == 1);
  CHECK(err.find("is not a directory") != std::string::npos);
}
