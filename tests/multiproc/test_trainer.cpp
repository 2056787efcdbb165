// gossamer-train as real processes on loopback: a full run, a peer killed
// mid-run, and bad configs rejected before any peer starts; over zmq and,
// when it is built, over libfabric (tcp and shm providers).
#include <catch2/catch.hpp>

#include "build_paths.hpp"
#include "dataset.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "gossamer/store.hpp"
#include "job_config.hpp"
#include "process.hpp"

using gossamer::testing::errorsFirst;
using gossamer::testing::readFile;
using gossamer::testing::removeShmRegionsOf;
using gossamer::testing::smallConfig;
using gossamer::testing::spawn;
using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;
using gossamer::testing::writeFile;

namespace {

/// The transports a peer is SIGKILLed on: zmq, socket, composite and, when built,
/// libfabric tcp and shm. (A shm peer killed while it holds a spin lock in
/// shared memory can wedge a survivor's progress thread inside libfabric 1.17;
/// the application threads never call into libfabric, so the survivor still
/// reports an error within the timeout: docs/libfabric.md.)
std::vector<std::string> killableTransports() {
#ifdef GOSSAMER_HAVE_LIBFABRIC
  return {"zmq", "socket", "composite", "libfabric-tcp", "libfabric-shm"};
#else
  return {"zmq", "socket", "composite"};
#endif
}

/// Reaps every rank still running when a test ends, whatever failed
/// (resuming stopped ones first, so that they can be killed and reaped).
struct Reaper {
  std::vector<pid_t>& pids;
  ~Reaper() {
    for (pid_t& pid : pids)
      if (pid > 0) {
        kill(pid, SIGCONT);
        waitBounded(pid, 0);
      }
  }
};

// The JSON summary a run wrote to --summary-json `path`.
nlohmann::json summaryAt(const std::string& path) {
  const std::string text = readFile(path);
  REQUIRE_FALSE(text.empty());
  return nlohmann::json::parse(text);
}

// Every algorithm as 3 processes over `transport` for 2 epochs; checks the summary.
void trainEveryAlgorithm(const std::string& transport) {
  TempDir dir;
  for (const std::string algorithm : {"crossover_sgd", "allreduce_sgd", "sgp", "hierarchical"}) {
    INFO("transport " << transport << ", algorithm " << algorithm);
    writeFile(dir / "run.yaml", smallConfig(transport, algorithm, 3, 2, 20));
    const pid_t pid =
        spawn({gossamer::testing::trainExe(), "--config", dir / "run.yaml", "--summary-json", dir / "s.json"},
              dir / "out", dir / "err");
    const auto status = waitBounded(pid, 180);
    const std::string out = readFile(dir / "out");
    INFO("stdout:\n" << out << "\nstderr:\n" << readFile(dir / "err"));
    REQUIRE(status.has_value());
    REQUIRE(WIFEXITED(*status));
    REQUIRE(WEXITSTATUS(*status) == 0);
    CHECK(out.find("epoch 1/2") != std::string::npos);
    CHECK(out.find("epoch 2/2") != std::string::npos);
    const auto j = summaryAt(dir / "s.json");
    CHECK(out.find("\ndone: " + algorithm + ", 3 ranks, 2 epochs") != std::string::npos);
    CHECK(out.find("{\"") == std::string::npos);  // the JSON is in files, not on stdout
    CHECK(j["algorithm"] == algorithm);
    CHECK(j["transport"] == transport.substr(0, transport.find('-')));
    CHECK(j["world_size"] == 3);
    CHECK(j["epochs"] == 2);
    CHECK(j["test_accuracy"].get<double>() > 0.6);
    CHECK(j["test_accuracy_rank0"].get<double>() > 0.6);
    CHECK(j["bytes_sent_per_peer"].get<double>() > 0);
    CHECK(j["wall_seconds"].get<double>() > 0);
    if (algorithm == "allreduce_sgd") CHECK(j["consensus_distance"].get<double>() < 1e-10);
    CHECK(j["steps_per_second_by_rank"].size() == 3);
    CHECK(j["bytes_per_step"].get<double>() > 0);
    std::filesystem::remove_all(j["run_dir"].get<std::string>());
  }
}

}  // namespace

TEST_CASE("gossamer-train trains over the native socket transport as well as over zmq",
          "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  double accuracy[2] = {0, 0};
  int i = 0;
  for (const std::string transport : {"zmq", "socket"}) {
    writeFile(dir / "run.yaml", smallConfig(transport, "allreduce_sgd", 3, 1, 20));
    const pid_t pid = spawn(
        {gossamer::testing::trainExe(), "--config", dir / "run.yaml", "--summary-json", dir / "summary"},
        dir / "out", dir / "err");
    const auto status = waitBounded(pid, 120);
    INFO(transport << " stderr:\n" << readFile(dir / "err"));
    REQUIRE(status.has_value());
    REQUIRE(WEXITSTATUS(*status) == 0);
    const auto j = summaryAt(dir / "summary");
    CHECK(j["transport"] == transport);
    CHECK(j["consensus_distance"].get<double>() < 1e-10);
    accuracy[i++] = j["test_accuracy"].get<double>();
  }
  // Same seed, same data, same reduction order: the transport must not change the result.
  CHECK(accuracy[1] == Approx(accuracy[0]).margin(1e-9));
  CHECK(accuracy[1] > 0.6);
}

TEST_CASE("gossamer-train runs every peer as a process over zmq and reports a JSON summary",
          "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  trainEveryAlgorithm("zmq");
}

TEST_CASE(
    "gossamer-train runs every algorithm over the composite transport (socket inside, zmq between islands)",
    "[multiproc][train][composite]") {
  gossamer::testing::requireFashionMnist();
  trainEveryAlgorithm("composite");
}

#ifdef GOSSAMER_HAVE_LIBFABRIC
TEST_CASE("gossamer-train runs every peer as a process over libfabric: tcp provider",
          "[multiproc][train][libfabric]") {
  gossamer::testing::requireFashionMnist();
  trainEveryAlgorithm("libfabric-tcp");
}
TEST_CASE("gossamer-train runs every peer as a process over libfabric: shm provider",
          "[multiproc][train][libfabric]") {
  gossamer::testing::requireFashionMnist();
  trainEveryAlgorithm("libfabric-shm");
}
#endif

TEST_CASE("gossamer-train runs peers as threads over the inproc transport", "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  writeFile(dir / "run.yaml", smallConfig("inproc", "crossover_sgd", 4, 1, 20));
  const pid_t pid =
      spawn({gossamer::testing::trainExe(), "--config", dir / "run.yaml", "--summary-json", dir / "summary"},
            dir / "out", dir / "err");
  const auto status = waitBounded(pid, 120);
  INFO("stderr:\n" << readFile(dir / "err"));
  REQUIRE(status.has_value());
  REQUIRE(WEXITSTATUS(*status) == 0);
  const auto j = summaryAt(dir / "summary");
  // The same summary is in the run directory, which has every rank's metrics.
  const std::string runDir = j["run_dir"].get<std::string>();
  REQUIRE_FALSE(runDir.empty());
  CHECK(nlohmann::json::parse(readFile(runDir + "/summary.json")) == j);
  for (int r = 0; r < 4; ++r) CHECK_FALSE(readFile(runDir + "/rank-" + std::to_string(r) + ".jsonl").empty());
  std::filesystem::remove_all(runDir);
  CHECK(j["transport"] == "inproc");
  CHECK(j["world_size"] == 4);
  CHECK(j["test_accuracy"].get<double>() > 0.5);
}

namespace {

/// A 4-rank job of `algorithm` over `transport` and the topology section
/// `topology` in which rank 3 is cut off from 0.2 s on (the job takes a few
/// seconds): ranks 0-2 go on as a view of their own (rank 3 as one of its
/// own), the topology rebuilt over it from the keys that name ranks,
/// renumbered. The two views never join again, and the summary that stands,
/// in the file and in the run directory, is the larger one's, whichever ends
/// first. `training` adds keys to the training section. Returns
/// gossamer-train's stderr once it finished with exit code 0.
std::string cutOffRank3(const std::string& algorithm, const std::string& topology,
                        const std::string& transport = "inproc", const std::string& training = "") {
  TempDir dir;
  std::string config = smallConfig(transport, algorithm, 4, 20, 5.0);
  REQUIRE(config.find("\ntraining:\n") != std::string::npos);
  config.insert(config.find("\ntraining:\n") + 11, training);
  const std::string plain = "topology:\n  kind: fair_roulette\n";
  REQUIRE(config.find(plain) != std::string::npos);
  config.replace(config.find(plain), plain.size(), topology);
  config +=
      "membership:\n  enabled: true\n  suspect_seconds: 1\n"
      "faults:\n  enabled: true\n  partition: \"0,1,2|3\"\n  partition_start_seconds: 0.2\n"
      "  partition_seconds: 600\n";
  writeFile(dir / "run.yaml", config);
  const pid_t pid = spawn({gossamer::testing::trainExe(), "--config", dir / "run.yaml", "--summary-json",
                           dir / "summary", "--progress", "off"},
                          dir / "out", dir / "err");
  const auto status = waitBounded(pid, 240);
  const std::string err = readFile(dir / "err");
  INFO("config:\n" << config << "stderr:\n" << err);
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(err.find("rank 0: lost rank(s) 3") != std::string::npos);
  const auto j = summaryAt(dir / "summary");
  CHECK(j["survivors"] == nlohmann::json({0, 1, 2}));
  CHECK(j["test_accuracy"].get<double>() > 0.5);
  CHECK(j["job"].get<std::string>().size() == 16);
  if (transport == "inproc") CHECK(err.find("ended split in 2 views") != std::string::npos);
  const std::string runDir = j.value("run_dir", std::string());
  if (!runDir.empty()) {
    CHECK(nlohmann::json::parse(readFile(runDir + "/summary.json")) == j);
    std::filesystem::remove_all(runDir);
  }
  return err;
}

}  // namespace

TEST_CASE(
    "over a view without a lost rank, a roulette table and explicit edges are renumbered to the survivors",
    "[multiproc][train][membership]") {
  gossamer::testing::requireFashionMnist();
  SECTION("a table that still holds over the survivors: its rows and columns for ranks 0-2") {
    const std::string err = cutOffRank3(
        "crossover_sgd",
        "topology:\n  kind: fair_roulette\n  probabilities: [[0, 1, 2, 1], [1, 0, 1, 1], [2, 1, 0, 1], "
        "[1, 1, 1, 0]]\n");
    CHECK(err.find("takes its default") == std::string::npos);
  }
  SECTION("a table whose rank 0 sent only to the lost rank: the survivors' roulette is uniform") {
    const std::string err = cutOffRank3(
        "crossover_sgd",
        "topology:\n  kind: fair_roulette\n  probabilities: [[0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0], "
        "[1, 0, 0, 0]]\n");
    CHECK(err.find("key 'topology.probabilities[0]'") != std::string::npos);
    CHECK(err.find("topology.probabilities takes its default, the topology is fair_roulette") !=
          std::string::npos);
  }
  SECTION("a ring that the lost rank broke: the survivors take the default topology") {
    const std::string err =
        cutOffRank3("sgp", "topology:\n  kind: explicit\n  edges: [[0, 1], [1, 2], [2, 3], [3, 0]]\n");
    CHECK(err.find("key 'topology.edges") != std::string::npos);
    CHECK(err.find("topology.edges takes its default, the topology is") != std::string::npos);
    CHECK(err.find("(the default)") != std::string::npos);
  }
}

TEST_CASE(
    "a job split in views that never join again keeps the larger view's summary, whichever ends first: "
    "processes over zmq",
    "[multiproc][train][membership]") {
  gossamer::testing::requireFashionMnist();
  SECTION("rank 3 alone, at full speed (it mostly ends first, and the larger side writes over it)") {
    cutOffRank3("crossover_sgd", "topology:\n  kind: fair_roulette\n", "zmq");
  }
  SECTION("rank 3 alone ends last (a straggler): it leaves the larger side's summary") {
    const std::string err = cutOffRank3("crossover_sgd", "topology:\n  kind: fair_roulette\n", "zmq",
                                        "  straggler_rank: 3\n  straggler_delay_seconds: 0.02\n");
    CHECK(err.find("keeps the summary of ranks 0, 1, 2, which outranks this view's (ranks 3)") !=
          std::string::npos);
  }
}

namespace {

/// Without the membership service, a kill -9 of one of 3 peers running
/// `algorithm` (gossip, or an allreduce every step, which the peer dies in
/// the middle of) over each killable transport.
void killedWithoutMembership(const std::string& algorithm) {
  gossamer::testing::requireFashionMnist();
  const double timeout = 5.0;
  const int n = 3;
  const std::string transport = GENERATE_COPY(from_range(killableTransports()));
  INFO("algorithm " << algorithm << ", transport " << transport);
  TempDir dir;
  writeFile(dir / "long.yaml",
            smallConfig(transport, algorithm, n, 500, timeout) + "membership:\n  enabled: false\n");
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(spawn({gossamer::testing::trainExe(), "--config", dir / "long.yaml", "--rank",
                          std::to_string(r), "--rendezvous", dir / "rdv"},
                         dir / ("out" + std::to_string(r)), dir / ("err" + std::to_string(r))));
  Reaper reaper{pids};  // whatever fails below, no rank outlives the test
  // Wait (bounded) until training is under way: rank 0 has printed an epoch.
  const auto start = std::chrono::steady_clock::now();
  while (readFile(dir / "out0").find("epoch 1/") == std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(90));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pids[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  waitBounded(pids[1], 5);
  removeShmRegionsOf(pids[1]);
  pids[1] = -1;
  for (int r : {0, 2}) {
    const auto status = waitBounded(pids[static_cast<std::size_t>(r)], 4 * timeout);
    pids[static_cast<std::size_t>(r)] = -1;
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    const std::string err = readFile(dir / ("err" + std::to_string(r)));
    INFO("rank " << r << " after " << took << " s, stderr:\n" << err);
    REQUIRE(status.has_value());  // it did not hang
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 1);
    CHECK(took < 4 * timeout);  // (waitBounded's bound: no hang)
    // Either the dead peer itself, or the other survivor that stopped first:
    // its abort's bye, or its connection lost (over shm its exit when its
    // progress thread was stuck on a lock the dead peer held and could not
    // send the bye; over socket a send to it that fails with EPIPE before its
    // bye is read).
    const std::string other = "peer " + std::to_string(2 - r) + " failed: connection lost";
    const bool clear = err.find("peer 1 failed: connection lost") != std::string::npos ||
                       err.find(other) != std::string::npos ||
                       err.find("failed: it stopped after an error of its own") != std::string::npos ||
                       (err.find("timed out") != std::string::npos && err.find("rank") != std::string::npos);
    CHECK(clear);
  }
}

}  // namespace

TEST_CASE(
    "without the membership service, killing one peer makes the others exit with a clear error: "
    "crossover_sgd",
    "[multiproc][failure]") {
  killedWithoutMembership("crossover_sgd");
}
TEST_CASE(
    "without the membership service, killing one peer makes the others exit with a clear error: "
    "allreduce_sgd",
    "[multiproc][failure]") {
  killedWithoutMembership("allreduce_sgd");
}

TEST_CASE("a bad config stops gossamer-train with file and line before any peer starts",
          "[multiproc][config]") {
  TempDir dir;
  struct Case {
    std::string yaml, expect;
  };
  const Case cases[] = {
      {"world_size: 2\ntraining:\n  epochs: 1\n  batch_sze: 32\n", "bad.yaml:4"},
      {"world_size: 2\nseed: 1\ntraining:\n  epochs: three\n", "bad.yaml:4"},
      {"seed: 1\nworld_size: 0\n", "bad.yaml:2"},
  };
  for (const auto& c : cases) {
    writeFile(dir / "bad.yaml", c.yaml);
    const pid_t pid =
        spawn({gossamer::testing::trainExe(), "--config", dir / "bad.yaml"}, dir / "out", dir / "err");
    const auto status = waitBounded(pid, 30);
    const std::string err = readFile(dir / "err");
    INFO(c.yaml << "\nstderr: " << err);
    REQUIRE(status.has_value());
    CHECK(WEXITSTATUS(*status) == 1);
    CHECK(err.find(c.expect) != std::string::npos);
    CHECK(readFile(dir / "out").find("epoch") == std::string::npos);
  }
}

TEST_CASE("ranks started by hand rendezvous through rank 0's tcp store", "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  writeFile(dir / "run.yaml", smallConfig("zmq", "crossover_sgd", 3, 1, 20));
  const int port = gossamer::testing::freeLowPort();
  REQUIRE(port > 0);
  const std::string addr = "tcp://127.0.0.1:" + std::to_string(port);
  std::vector<pid_t> pids;
  for (int r = 2; r >= 0; --r)  // rank 0 last: clients wait for the server
    pids.push_back(
        spawn({gossamer::testing::trainExe(), "--config", dir / "run.yaml", "--rank", std::to_string(r),
               "--rendezvous", addr, "--summary-json", dir / ("summary" + std::to_string(r))},
              dir / ("out" + std::to_string(r)), dir / ("err" + std::to_string(r))));
  for (pid_t pid : pids) {
    const auto status = waitBounded(pid, 120);
    INFO("stderr of rank 0: " << readFile(dir / "err0") << "\nrank 1: " << readFile(dir / "err1"));
    REQUIRE(status.has_value());
    CHECK(WEXITSTATUS(*status) == 0);
  }
  const auto j = summaryAt(dir / "summary0");
  CHECK(j["world_size"] == 3);
  CHECK(j["test_accuracy"].get<double>() > 0.5);
}

TEST_CASE("a rendezvous directory reused after a job was killed starts the next job afresh",
          "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  const int n = 3;
  writeFile(dir / "long.yaml", smallConfig("zmq", "crossover_sgd", n, 500, 20));
  writeFile(dir / "run.yaml", smallConfig("zmq", "crossover_sgd", n, 1, 20));
  const std::string rdv = dir / "rdv";
  const auto endpoint = [&](int r) {
    return readFile(gossamer::FileStore::fileOf(rdv, "gossamer/zmq/" + std::to_string(r)));
  };
  // The ranks of a job, rank 0 held back until the others have published
  // endpoints other than `before`'s (so that they read whatever rank 0's key
  // then is, and rank 0 is the last to open the directory).
  const auto startJob = [&](const std::string& config, const std::string& name,
                            const std::vector<std::string>& before) {
    std::vector<pid_t> pids(n, -1);
    for (int r = n - 1; r >= 0; --r) {
      if (r == 0)
        for (int other = 1; other < n; ++other) {
          const auto start = std::chrono::steady_clock::now();
          for (;;) {
            const std::string now = endpoint(other);
            if (!now.empty() && now != before[static_cast<std::size_t>(other)]) break;
            REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      const std::string tag = name + std::to_string(r);
      pids[static_cast<std::size_t>(r)] =
          spawn({gossamer::testing::trainExe(), "--config", dir / config, "--rank", std::to_string(r),
                 "--rendezvous", rdv, "--progress", "off", "--summary-json", dir / (tag + ".json"), "--set",
                 "run.dir=" + (dir / (name + "-run"))},
                dir / (tag + ".out"), dir / (tag + ".err"));
    }
    return pids;
  };
  {
    std::vector<pid_t> killed = startJob("long.yaml", "killed", std::vector<std::string>(n));
    Reaper reaper{killed};
    const auto start = std::chrono::steady_clock::now();
    while (readFile(dir / "killed0.out").find("epoch 1/") == std::string::npos) {
      REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(90));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (pid_t& pid : killed) {
      kill(pid, SIGKILL);
      waitBounded(pid, 10);
      pid = -1;
    }
  }
  // Every key of the killed job is still there, its endpoints dead.
  std::vector<std::string> stale;
  for (int r = 0; r < n; ++r) stale.push_back(endpoint(r));
  for (const auto& e : stale) REQUIRE_FALSE(e.empty());
  std::vector<pid_t> next = startJob("run.yaml", "next", stale);
  Reaper reaper{next};
  for (int r = 0; r < n; ++r) {
    const auto status = waitBounded(next[static_cast<std::size_t>(r)], 120);
    next[static_cast<std::size_t>(r)] = -1;
    INFO("rank " << r << " stderr:\n" << readFile(dir / ("next" + std::to_string(r) + ".err")));
    REQUIRE(status.has_value());
    CHECK(WEXITSTATUS(*status) == 0);
  }
  const auto j = summaryAt(dir / "next0.json");
  CHECK(j["world_size"] == n);
  CHECK(j["lost"].empty());
  CHECK(j["survivors"].size() == static_cast<std::size_t>(n));
  // The first of ranks 1 and 2 to open the directory cleared it: the job key
  // and the endpoints at least (more if a rank was killed writing one).
  const std::string cleared = readFile(dir / "next1.err") + readFile(dir / "next2.err");
  const auto at = cleared.find("left by processes that have ended");
  INFO(cleared);
  REQUIRE(at != std::string::npos);
  const auto removed = cleared.rfind("removed ", at);
  REQUIRE(removed != std::string::npos);
  CHECK(std::stoi(cleared.substr(removed + 8)) >= n + 1);
  CHECK_FALSE(std::filesystem::exists(rdv));  // its last rank removed the directory it made
}

namespace {

// The arguments of rank r of a job started by hand in `dir`: its summary
// file, the run directory dir/run (rank-R.jsonl) and the stop file dir/stop.
std::vector<std::string> rankArgs(const TempDir& dir, int r) {
  return {gossamer::testing::trainExe(),
          "--config",
          dir / "job.yaml",
          "--rank",
          std::to_string(r),
          "--rendezvous",
          dir / "rdv",
          "--summary-json",
          dir / ("summary" + std::to_string(r)),
          "--set",
          "run.dir=" + (dir / "run"),
          "--set",
          "training.stop_file=" + (dir / "stop")};
}

// Starts n ranks of `config` by hand, each with its own summary file, and
// waits (bounded) until rank 0 has printed its first epoch.
std::vector<pid_t> startRanks(const TempDir& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(
        spawn(rankArgs(dir, r), dir / ("out" + std::to_string(r)), dir / ("err" + std::to_string(r))));
  const auto start = std::chrono::steady_clock::now();
  while (readFile(dir / "out0").find("epoch 1/") == std::string::npos) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(90)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pids;
}

/// Waits (at most `seconds` each) for `ranks` of a job started by startRanks
/// and checks that each exited with status 0; their stderr is shown if not.
void expectFinished(const TempDir& dir, std::vector<pid_t>& pids, const std::vector<int>& ranks,
                    int seconds = 120) {
  for (int r : ranks) {
    const auto status = waitBounded(pids[static_cast<std::size_t>(r)], seconds);
    pids[static_cast<std::size_t>(r)] = -1;
    INFO("rank " << r << " stderr:\n" << errorsFirst(readFile(dir / ("err" + std::to_string(r)))));
    REQUIRE(status.has_value());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 0);
  }
}

std::string membershipConfig(const std::string& transport, const std::string& algorithm, int n, int epochs) {
  return smallConfig(transport, algorithm, n, epochs, 10.0) +
         "membership:\n  enabled: true\n  heartbeat_seconds: 0.1\n  suspect_seconds: 1.5\n";
}

// The job's event the membership tests wait for, in rank 0's metrics.
using Event = std::function<bool(const nlohmann::json& record)>;

/// Ends a job started by startRanks on an event instead of after a fixed
/// number of epochs: reads rank 0's records (dir/run/rank-0.jsonl) until
/// `event` accepts one, then until `epochsAfter` more `epoch` records came,
/// then creates the stop file, so that every rank stops after the epoch
/// whose evaluation sees it. Bounded by `seconds`; fails the test if the
/// event does not come.
void stopAfter(const TempDir& dir, const Event& event, int epochsAfter, int seconds = 120) {
  const auto start = std::chrono::steady_clock::now();
  bool seen = false;
  int epochs = 0;
  std::size_t consumed = 0;  // bytes of whole lines read so far
  while (!seen || epochs < epochsAfter) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(seconds)) {
      const std::string records = readFile(dir / "run/rank-0.jsonl");
      FAIL("no " << (seen ? "epochs after the event" : "event") << " in rank 0's records within " << seconds
                 << " s; they end with:\n"
                 << records.substr(records.size() > 4000 ? records.size() - 4000 : 0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string text = readFile(dir / "run/rank-0.jsonl");
    for (std::size_t end; (end = text.find('\n', consumed)) != std::string::npos; consumed = end + 1) {
      const auto j = nlohmann::json::parse(text.substr(consumed, end - consumed), nullptr, false);
      if (j.is_discarded()) continue;
      if (seen && j["kind"] == "epoch") ++epochs;
      if (!seen && event(j)) seen = true;
    }
  }
  writeFile(dir / "stop", "");
}

/// A `view` record without `rank` (a loss) or with it back (a merge or rejoin).
Event viewWithout(int rank) {
  return [rank](const nlohmann::json& j) {
    return j["kind"] == "view" && std::find(j["lost"].begin(), j["lost"].end(), rank) != j["lost"].end();
  };
}
Event viewWithAll(int n) {
  return [n](const nlohmann::json& j) {
    return j["kind"] == "view" && j["members"].size() == static_cast<std::size_t>(n) && j["view"] != 0;
  };
}

/// Waits (at most `seconds`) until rank `rank`'s records (dir/run/rank-R.jsonl)
/// hold one that `event` accepts; whether one came.
bool recordIn(const TempDir& dir, int rank, const Event& event, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::istringstream lines(readFile(dir / ("run/rank-" + std::to_string(rank) + ".jsonl")));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && event(j)) return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// The summary of a job stopped by stopAfter: it stopped early, after the
/// epochs its history has.
void expectStoppedEarly(const nlohmann::json& s, int epochs) {
  REQUIRE(s["stopped_at_epoch"].get<int>() > 0);
  CHECK(s["stopped_at_epoch"].get<int>() < epochs);
  CHECK(s["history"].size() == s["stopped_at_epoch"].get<std::size_t>());
}

}  // namespace

TEST_CASE("a peer stopped past run.stall_seconds is named, with the operation, by the ranks that wait on it",
          "[multiproc][stall]") {
  gossamer::testing::requireFashionMnist();
  // AllReduce-SGD over a ring of 3: rank 2 receives from rank 1 every step.
  const int n = 3, epochs = 1000, victim = 1;  // ended by the stop file
  TempDir dir;
  writeFile(dir / "job.yaml",
            smallConfig("zmq", "allreduce_sgd", n, epochs, 30.0) +
                "membership:\n  enabled: false\nrun:\n  stall_seconds: 1\n  dir: " + (dir / "run") + "\n");
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  kill(pids[victim], SIGSTOP);
  // Stopped past stall_seconds, until a rank waiting on it said so (at most
  // 20 s more, below the transport's 30 s timeout, however slow the machine).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto said = [&] {
    return readFile(dir / "err0").find("has waited") != std::string::npos ||
           readFile(dir / "err2").find("has waited") != std::string::npos;
  };
  for (int i = 0; i < 200 && !said(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(pids[victim], SIGCONT);
  writeFile(dir / "stop", "");  // every rank stops after the epoch under way
  expectFinished(dir, pids, {0, 1, 2});
  std::string named;
  for (int r : {0, 2}) {
    const std::string err = readFile(dir / ("err" + std::to_string(r)));
    INFO("rank " << r << " stderr:\n" << err);
    const auto at = err.find("stall: rank " + std::to_string(r) + " has waited");
    if (at == std::string::npos) continue;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    if (line.find("rank 1:") != std::string::npos) named = line;
  }
  INFO("rank 2 stderr:\n" << readFile(dir / "err2"));
  REQUIRE_FALSE(named.empty());
  CHECK(named.find("allreduce, step ") != std::string::npos);
  // The stopped rank blames no one for the time it did not run itself.
  const std::string victimErr = readFile(dir / ("err" + std::to_string(victim)));
  INFO("rank 1 stderr:\n" << victimErr);
  CHECK(victimErr.find("stall: rank 1 has waited") == std::string::npos);
  CHECK(victimErr.find("stall watch: rank 1 itself did not run for") != std::string::npos);
  // The same report is a `stall` record in the waiting rank's metrics, with
  // when the stopped rank's last message came.
  bool recorded = false;
  for (int r : {0, 2}) {
    std::istringstream lines(readFile(dir / ("run/rank-" + std::to_string(r) + ".jsonl")));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] != "stall" || j["peers"] != nlohmann::json({victim})) continue;
      INFO(line);
      CHECK(j["rank"] == r);
      CHECK(j["operation"] == "allreduce");
      CHECK(j["waited_s"].get<double>() >= 1.0);
      REQUIRE(j["last_from_peer"].size() == 1);
      CHECK(j["last_from_peer"][0]["rank"] == victim);
      CHECK(j["last_from_peer"][0]["seconds_ago"].get<double>() > 0.5);  // it was stopped
      recorded = true;
    }
  }
  CHECK(recorded);
}

namespace {

// Rank 2 of 4 is killed with SIGKILL after the first epoch; the survivors
// train on (two more epochs after the loss, then the stop file) and report
// the lost rank.
// `n` ranks (4 unless given), rank 2 killed; `topology` replaces the fair
// roulette's YAML lines when given (D² needs a fixed symmetric matrix).
void survivorsOfKill9(const std::string& algorithm, const std::string& transport, int n = 4,
                      const std::string& topology = "") {
  gossamer::testing::requireFashionMnist();
  const int epochs = 1000, victim = 2;
  TempDir dir;
  std::string config = membershipConfig(transport, algorithm, n, epochs);
  if (!topology.empty()) {
    const std::string roulette = "topology:\n  kind: fair_roulette\n";
    const auto at = config.find(roulette);
    REQUIRE(at != std::string::npos);
    config.replace(at, roulette.size(), topology);
  }
  writeFile(dir / "job.yaml", config);
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  kill(pids[victim], SIGKILL);
  waitBounded(pids[victim], 5);
  pids[victim] = -1;
  stopAfter(dir, viewWithout(victim), 2);
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (r != victim) survivors.push_back(r);
  expectFinished(dir, pids, survivors);
  // Rank 0 (the lowest survivor) wrote the summary: every epoch, over the survivors.
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  INFO("rank 0's summary: " << s.dump());
  expectStoppedEarly(s, epochs);
  CHECK(s["survivors"] == nlohmann::json(survivors));
  REQUIRE(s["lost"].size() == 1);
  CHECK(s["lost"][0]["rank"] == victim);
  CHECK(s["history"].back()["survivors"] == n - 1);
  CHECK(s["test_accuracy"].get<double>() > 0.6);
  CHECK(readFile(dir / "summary1").empty());
  // Each survivor's `view` record of the loss carries its push-sum weight
  // before and after the change (1 for AllReduce-SGD, which has none).
  for (int r : survivors) {
    std::istringstream lines(readFile(dir / ("run/rank-" + std::to_string(r) + ".jsonl")));
    int views = 0;
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] != "view" || j["lost"] != nlohmann::json({victim})) continue;
      INFO(line);
      ++views;
      for (const char* key : {"push_sum_weight_before", "push_sum_weight_after"}) {
        const double w = j[key].get<double>();
        CHECK(std::isfinite(w));
        CHECK(w > 0);
        CHECK(w <= n);
        if (algorithm == "allreduce_sgd") CHECK(w == 1.0);
      }
    }
    CHECK(views == 1);
  }
}

// Rank 1 of 3 is stopped (SIGSTOP) for longer than suspect_seconds, then
// resumed: the others removed it; with rejoin (the default) it asks to come
// back and is taken back (the job stops two epochs after that), with
// `rejoin: false` it exits.
void stoppedPeer(const std::string& algorithm, bool rejoin) {
  gossamer::testing::requireFashionMnist();
  // Hierarchical: groups {0, 1} and {2}; the stopped rank is a member of a group.
  const int n = 3, epochs = 1000, victim = 1;
  TempDir dir;
  writeFile(dir / "job.yaml",
            membershipConfig("zmq", algorithm, n, epochs) + (rejoin ? "" : "  rejoin: false\n"));
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  kill(pids[victim], SIGSTOP);
  // Stopped past suspect_seconds, until the others removed it (at most 60 s,
  // however long a loaded machine takes to suspect it and agree).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(recordIn(dir, 0, viewWithout(victim), 60));
  kill(pids[victim], SIGCONT);
  stopAfter(dir, rejoin ? viewWithAll(n) : viewWithout(victim), 2);
  const auto stopped = waitBounded(pids[victim], 120);
  pids[victim] = -1;
  const std::string err = readFile(dir / ("err" + std::to_string(victim)));
  INFO("stopped rank's stderr:\n" << err);
  REQUIRE(stopped.has_value());
  CHECK(WIFEXITED(*stopped));
  CHECK(err.find("was removed from the job by its peers") != std::string::npos);
  if (rejoin) {
    CHECK(WEXITSTATUS(*stopped) == 0);
    CHECK(err.find("asking to rejoin") != std::string::npos);
  } else {
    CHECK(WEXITSTATUS(*stopped) == 1);
  }
  expectFinished(dir, pids, {0, 2});
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  expectStoppedEarly(s, epochs);
  CHECK(s["lost"].size() == 1);
  if (rejoin) {
    // Back in the view at the end.
    CHECK(s["survivors"] == nlohmann::json({0, 1, 2}));
    CHECK(s["history"].back()["survivors"] == 3);
  } else {
    CHECK(s["survivors"] == nlohmann::json({0, 2}));
  }
}

// Rank 2 of 4 is killed with SIGKILL and restarted with --rejoin from its
// checkpoint after `restartAfterMs`; the job, started with the membership
// defaults, takes it back (and stops two epochs after that).
void restartedPeer(const std::string& algorithm, int restartAfterMs, const std::string& transport = "zmq") {
  gossamer::testing::requireFashionMnist();
  const int n = 4, epochs = 1000, victim = 2;
  TempDir dir;
  writeFile(dir / "job.yaml", membershipConfig(transport, algorithm, n, epochs) +
                                  "checkpoint:\n  every_steps: 40\n  dir: " + (dir / "ck") + "\n");
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  kill(pids[victim], SIGKILL);
  waitBounded(pids[victim], 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(restartAfterMs));
  auto args = rankArgs(dir, victim);
  args.push_back("--rejoin");
  pids[victim] = spawn(args, dir / "out2", dir / "err2");
  stopAfter(
      dir, [](const nlohmann::json& j) { return j["kind"] == "view" && !j["joined"].empty(); }, 2);
  expectFinished(dir, pids, {0, 1, 2, 3});
  const std::string err = readFile(dir / "err2");
  CHECK(err.find("restarts from its checkpoint of step") != std::string::npos);
  CHECK(err.find("asking to rejoin") != std::string::npos);
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  INFO("rank 0's summary: " << s.dump());
  expectStoppedEarly(s, epochs);
  CHECK(s["survivors"] == nlohmann::json({0, 1, 2, 3}));
  CHECK(s["history"].back()["survivors"] == 4);
  REQUIRE(s["lost"].size() == 1);
  CHECK(s["lost"][0]["rank"] == victim);
  REQUIRE(s["joined"].size() == 1);
  CHECK(s["joined"][0]["rank"] == victim);
  CHECK(s["joined"][0]["step"].get<std::uint64_t>() >= s["lost"][0]["step"].get<std::uint64_t>());
  CHECK(s["test_accuracy"].get<double>() > 0.6);
  if (algorithm == "allreduce_sgd") CHECK(s["consensus_distance"].get<double>() < 1e-10);
}

// A 4-rank job with room for 6 (membership.max_world_size): two processes
// started with --join claim ranks 4 and 5, are taken in (one view change
// per join, or one for both) and finish with the others.
void joinedPeers(const std::string& algorithm, const std::string& transport = "zmq") {
  gossamer::testing::requireFashionMnist();
  const int n = 4, epochs = 1000;
  TempDir dir;
  writeFile(dir / "job.yaml", membershipConfig(transport, algorithm, n, epochs) + "  max_world_size: 6\n");
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  for (int j : {4, 5}) {
    auto args = rankArgs(dir, j);
    // --join DIR claims the rank: the arguments keep everything but --rank R.
    args.erase(args.begin() + 3, args.begin() + 5);
    args[3] = "--join";
    pids.push_back(spawn(args, dir / ("out" + std::to_string(j)), dir / ("err" + std::to_string(j))));
  }
  stopAfter(dir, viewWithAll(6), 2);
  expectFinished(dir, pids, {0, 1, 2, 3, 4, 5});
  for (int j : {4, 5}) {
    INFO("joiner " << j);
    CHECK(readFile(dir / ("err" + std::to_string(j))).find("joins the job as rank") != std::string::npos);
  }
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  INFO("rank 0's summary: " << s.dump());
  expectStoppedEarly(s, epochs);
  CHECK(s["survivors"] == nlohmann::json({0, 1, 2, 3, 4, 5}));
  CHECK(s["lost"].empty());
  std::vector<int> joined;
  for (const auto& j : s["joined"]) joined.push_back(j["rank"].get<int>());
  std::sort(joined.begin(), joined.end());
  CHECK(joined == std::vector<int>{4, 5});
  // One view change per join, or one for both: none without a joiner.
  int changes = 0;
  std::istringstream records(readFile(dir / "run/rank-0.jsonl"));
  for (std::string line; std::getline(records, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j["kind"] != "view" || j["view"] == 0) continue;
    ++changes;
    CHECK_FALSE(j["joined"].empty());
  }
  CHECK(changes >= 1);
  CHECK(changes <= 2);
  CHECK(s["test_accuracy"].get<double>() > 0.6);
  if (algorithm == "allreduce_sgd") CHECK(s["consensus_distance"].get<double>() < 1e-10);
}

}  // namespace

TEST_CASE("with membership on, the survivors of a kill -9 go on and report the lost rank: crossover_sgd, zmq",
          "[multiproc][failure][membership]") {
  survivorsOfKill9("crossover_sgd", "zmq");
}
TEST_CASE(
    "with membership on, the survivors of a kill -9 go on and report the lost rank: crossover_sgd, socket",
    "[multiproc][failure][membership]") {
  survivorsOfKill9("crossover_sgd", "socket");
}
TEST_CASE("with membership on, the survivors of a kill -9 go on and report the lost rank: allreduce_sgd, zmq",
          "[multiproc][failure][membership]") {
  survivorsOfKill9("allreduce_sgd", "zmq");
}
TEST_CASE(
    "with membership on, the survivors of a kill -9 go on and report the lost rank: allreduce_sgd, socket",
    "[multiproc][failure][membership]") {
  survivorsOfKill9("allreduce_sgd", "socket");
}

TEST_CASE("with membership on, the survivors of a kill -9 of one of 8 peers go on: gradient_tracking, zmq",
          "[multiproc][failure][membership][heterogeneity]") {
  survivorsOfKill9("gradient_tracking", "zmq", 8);
}
TEST_CASE("with membership on, the survivors of a kill -9 of one of 8 peers go on: d2 on the ring, zmq",
          "[multiproc][failure][membership][heterogeneity]") {
  survivorsOfKill9("d2", "zmq", 8, "topology:\n  kind: ring\n  self_weight: 0.5\n");
}
TEST_CASE(
    "with membership on, the survivors of a kill -9 of one of 8 peers go on: quasi_global_momentum, zmq",
    "[multiproc][failure][membership][heterogeneity]") {
  survivorsOfKill9("quasi_global_momentum", "zmq", 8);
}

TEST_CASE(
    "with membership on, a stopped peer is removed, rejoins when it resumes, and every rank finishes: "
    "crossover_sgd",
    "[multiproc][failure][membership]") {
  stoppedPeer("crossover_sgd", true);
}
TEST_CASE("with membership on, a stopped peer is removed and, without rejoin, exits: crossover_sgd",
          "[multiproc][failure][membership]") {
  stoppedPeer("crossover_sgd", false);
}
TEST_CASE(
    "with membership on, a stopped peer is removed, rejoins when it resumes, and every rank finishes: "
    "hierarchical",
    "[multiproc][failure][membership]") {
  stoppedPeer("hierarchical", true);
}

TEST_CASE(
    "with membership on and its defaults, a 4|4 partition healed after 10 s trains on both halves and ends "
    "as "
    "one job with one summary",
    "[multiproc][failure][membership]") {
  gossamer::testing::requireFashionMnist();
  const int n = 8, epochs = 100000;
  TempDir dir;
  // Ranks 0-3 and 4-7 cannot reach each other from 4 s to 14 s after rank
  // 0's transport was made. With the membership defaults (suspect_seconds 3,
  // partition: merge) each half removes the other and trains as a view of its
  // own; once healed, one half asks to rejoin the other's view and the two
  // models are merged. The job stops two epochs after rank 0 is in a view of
  // all eight again.
  writeFile(dir / "job.yaml", smallConfig("zmq", "crossover_sgd", n, epochs, 10.0) +
                                  "membership:\n  enabled: true\n"
                                  "faults:\n  enabled: true\n  partition: \"0,1,2,3|4,5,6,7\"\n"
                                  "  partition_start_seconds: 4\n  partition_seconds: 10\n");
  auto pids = startRanks(dir, n);
  Reaper reaper{pids};
  stopAfter(dir, viewWithAll(n), 2, 150);
  expectFinished(dir, pids, {0, 1, 2, 3, 4, 5, 6, 7}, 150);
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  INFO("rank 0's summary: " << s.dump());
  expectStoppedEarly(s, epochs);
  CHECK(s["survivors"] == nlohmann::json({0, 1, 2, 3, 4, 5, 6, 7}));
  CHECK(s["history"].back()["survivors"] == n);
  CHECK(s["test_accuracy"].get<double>() > 0.6);
  // The other half trained on its own meanwhile (rank 4 led its view and
  // evaluated its epochs); then one half asked to rejoin the other's view.
  CHECK(readFile(dir / "out4").find("epoch ") != std::string::npos);
  int asked = 0;
  for (int r = 0; r < n; ++r)
    asked +=
        readFile(dir / ("err" + std::to_string(r))).find("asking to rejoin") != std::string::npos ? 1 : 0;
  CHECK(asked >= 1);
  // Rank 0 reports the other half as lost while the partition lasted.
  std::vector<int> lost;
  for (const auto& l : s["lost"]) lost.push_back(l["rank"].get<int>());
  CHECK(lost == std::vector<int>{4, 5, 6, 7});
  // One job, one summary: rank 4, which led the other half, wrote none.
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r);
    CHECK(readFile(dir / ("summary" + std::to_string(r))).empty());
  }
}

TEST_CASE(
    "with membership on, a peer killed with kill -9 and restarted with --rejoin is taken back: "
    "crossover_sgd, restarted after 2 s",
    "[multiproc][failure][membership]") {
  restartedPeer("crossover_sgd", 2000);
}
TEST_CASE(
    "with membership on, a peer killed with kill -9 and restarted with --rejoin is taken back: "
    "allreduce_sgd, restarted at once",
    "[multiproc][failure][membership]") {
  restartedPeer("allreduce_sgd", 0);
}
TEST_CASE(
    "with membership on, a peer killed with kill -9 and restarted with --rejoin is taken back: "
    "hierarchical over socket, restarted after 500 ms",
    "[multiproc][failure][membership]") {
  restartedPeer("hierarchical", 500, "socket");
}

TEST_CASE(
    "with membership on, ranks beyond world_size join a running job with --join and finish with it: "
    "crossover_sgd",
    "[multiproc][membership][join]") {
  joinedPeers("crossover_sgd");
}
TEST_CASE(
    "with membership on, ranks beyond world_size join a running job with --join and finish with it: "
    "allreduce_sgd over socket",
    "[multiproc][membership][join]") {
  joinedPeers("allreduce_sgd", "socket");
}

#ifdef GOSSAMER_HAVE_LIBFABRIC
TEST_CASE(
    "with membership on, the survivors of a kill -9 go on and report the lost rank: crossover_sgd, libfabric "
    "tcp",
    "[multiproc][failure][membership][libfabric]") {
  survivorsOfKill9("crossover_sgd", "libfabric-tcp");
}
TEST_CASE(
    "with membership on, a peer killed with kill -9 and restarted with --rejoin is taken back: "
    "crossover_sgd over libfabric tcp, restarted after 500 ms",
    "[multiproc][failure][membership][libfabric]") {
  restartedPeer("crossover_sgd", 500, "libfabric-tcp");
}
TEST_CASE(
    "with membership on, ranks beyond world_size join a running job with --join and finish with it: "
    "crossover_sgd over libfabric tcp",
    "[multiproc][membership][join][libfabric]") {
  joinedPeers("crossover_sgd", "libfabric-tcp");
}
#endif

TEST_CASE("a job killed with kill -9 and resumed from its checkpoints ends with the same models, bit for bit",
          "[multiproc][checkpoint]") {
  gossamer::testing::requireFashionMnist();
  const int n = 3, epochs = 6;
  const std::string algorithm = GENERATE(as<std::string>{}, "crossover_sgd", "allreduce_sgd");
  INFO("algorithm " << algorithm);
  TempDir dir;
  const std::string base = smallConfig("zmq", algorithm, n, epochs, 10.0);
  auto configWith = [&](const std::string& ckptDir, bool resume) {
    return base + "checkpoint:\n  every_steps: 40\n  dir: " + ckptDir +
           "\n  resume: " + (resume ? "true" : "false") + "\n";
  };
  auto runAll = [&](const std::string& name, const std::string& yaml, bool killMidway) {
    writeFile(dir / (name + ".yaml"), yaml);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r)
      pids.push_back(spawn(
          {gossamer::testing::trainExe(), "--config", dir / (name + ".yaml"), "--rank", std::to_string(r),
           "--rendezvous", dir / (name + "-rdv"), "--summary-json", dir / (name + ".json")},
          dir / (name + "-out" + std::to_string(r)), dir / (name + "-err" + std::to_string(r))));
    Reaper reaper{pids};
    if (killMidway) {
      // Kill every rank once all of them saved step 120 (of 372).
      const auto start = std::chrono::steady_clock::now();
      auto saved = [&] {
        for (int r = 0; r < n; ++r)
          if (!std::filesystem::exists(dir / ("ckB/rank-" + std::to_string(r) + "-step-120.ckpt")))
            return false;
        return true;
      };
      while (!saved()) {
        REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(90));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      for (pid_t pid : pids) kill(pid, SIGKILL);
      for (pid_t& pid : pids) {
        waitBounded(pid, 5);
        pid = -1;
      }
      return nlohmann::json();
    }
    for (int r = 0; r < n; ++r) {
      const auto status = waitBounded(pids[static_cast<std::size_t>(r)], 120);
      pids[static_cast<std::size_t>(r)] = -1;
      INFO(name << " rank " << r << ": " << readFile(dir / (name + "-err" + std::to_string(r))));
      REQUIRE(status.has_value());
      REQUIRE(WIFEXITED(*status));
      REQUIRE(WEXITSTATUS(*status) == 0);
    }
    return nlohmann::json::parse(readFile(dir / (name + ".json")));
  };
  const auto plain = runAll("A", configWith(dir / "ckA", false), false);
  runAll("B1", configWith(dir / "ckB", false), true);
  const auto resumed = runAll("B2", configWith(dir / "ckB", true), false);
  CHECK(plain["resumed_from_step"] == -1);
  CHECK(resumed["resumed_from_step"].get<int>() >= 120);
  const auto a = plain["model_crc32c_by_rank"];
  REQUIRE(a.size() == static_cast<std::size_t>(n));
  CHECK(resumed["model_crc32c_by_rank"] == a);
}

namespace {
// Starts one gossamer-train process per config (rank r runs configs[r],
// with the arguments sets[r] added when there is one) on one rendezvous;
// returns each one's exit status (nullopt: killed after 120 s) and stderr.
std::vector<std::pair<std::optional<int>, std::string>> runRanks(
    const TempDir& dir, const std::vector<std::string>& configs,
    const std::vector<std::vector<std::string>>& sets = {}) {
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < configs.size(); ++r) {
    const std::string tag = std::to_string(r);
    writeFile(dir / ("rank" + tag + ".yaml"), configs[r]);
    std::vector<std::string> args{gossamer::testing::trainExe(),
                                  "--config",
                                  dir / ("rank" + tag + ".yaml"),
                                  "--rank",
                                  tag,
                                  "--rendezvous",
                                  dir / "rdv",
                                  "--progress",
                                  "off"};
    if (r < sets.size()) args.insert(args.end(), sets[r].begin(), sets[r].end());
    pids.push_back(spawn(args, dir / ("out" + tag), dir / ("err" + tag)));
  }
  std::vector<std::pair<std::optional<int>, std::string>> out;
  for (std::size_t r = 0; r < pids.size(); ++r) {
    const auto code = gossamer::testing::exitCodeWithin(pids[r], 120);  // first: then its stderr is whole
    out.emplace_back(code, readFile(dir / ("err" + std::to_string(r))));
  }
  return out;
}
}  // namespace

TEST_CASE("ranks started with different settings fail at start, the one that differs naming the key",
          "[multiproc][train]") {
  gossamer::testing::requireFashionMnist();
  TempDir dir;
  // Rank 1 was started with another learning rate, and with its own data
  // path (a per-rank key, which may differ: a link to the same files).
  const std::string base = smallConfig("zmq", "crossover_sgd", 3, 1, 10.0);
  std::filesystem::create_directory_symlink(gossamer::testing::fashionMnistDir(), dir / "data");
  std::string other = base;
  other.replace(other.find("learning_rate: 0.01"), 19, "learning_rate: 0.5");
  const std::string path = "path: " + gossamer::testing::fashionMnistDir() + "\n";
  other.replace(other.find(path), path.size(), "path: " + (dir / "data") + "\n");
  const auto ranks = runRanks(dir, {base, other, base});
  std::string all;
  for (const auto& [status, err] : ranks) all += err + "\n---\n";
  INFO(all);
  for (const auto& [status, err] : ranks) {
    REQUIRE(status.has_value());
    CHECK(*status == 1);
  }
  CHECK(ranks[1].second.find("key 'training.learning_rate': is 0.5 at rank 1 but 0.01 at rank 0") !=
        std::string::npos);
  CHECK(ranks[0].second.find("rank 1 runs with other settings than rank 0") != std::string::npos);
  CHECK(ranks[2].second.find("rank 1 runs with other settings than rank 0") != std::string::npos);
  // A difference that comes from --set is named by the override, not the file.
  TempDir again;
  const auto set = runRanks(again, {base, base, base}, {{}, {"--set", "training.learning_rate=0.25"}});
  all.clear();
  for (const auto& [status, err] : set) all += err + "\n---\n";
  INFO(all);
  for (const auto& [status, err] : set) {
    REQUIRE(status.has_value());
    CHECK(*status == 1);
  }
  CHECK(set[1].second.find("override 'training.learning_rate=0.25'") != std::string::npos);
  CHECK(set[1].second.find("is 0.25 at rank 1 but 0.01 at rank 0") != std::string::npos);
}
