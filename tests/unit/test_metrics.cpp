// Run metrics (sdk/include/gossamer/metrics.hpp, docs/metrics.md): the
// JSON-lines records, the step records' sums and per-peer bytes, and what an
// Agent records over a real job (inproc threads).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/metrics.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/run.hpp"
#include "log_capture.hpp"
#include "threads.hpp"

using namespace gossamer;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("gossamer-metrics-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<json> readLines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// A registry of inproc on a fabric of its own for `ranks` ranks, the
// built-in topologies and optimizers (and, with `runService`, the run
// service's per-peer bytes).
Registry inprocRegistry(int ranks, bool runService = false) {
  Registry reg;
  inproc::registerWith(reg, inproc::makeFabric(ranks));
  if (runService) run::registerWith(reg);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  return reg;
}

// An AllReduce-SGD job of `ranks` over inproc whose records go to `dir`.
std::string inprocJob(int ranks, const fs::path& dir) {
  return "world_size: " + std::to_string(ranks) +
         "\ntransport: {kind: inproc, timeout_seconds: 20}\nalgorithm: {name: allreduce_sgd}\nrun: {dir: " +
         dir.string() + "}\n";
}
}  // namespace

TEST_CASE("a metrics record is one JSON line with kind, rank, time, step and its fields", "[metrics]") {
  TempDir dir;
  MetricsOptions o;
  o.dir = dir.path.string();
  std::vector<MetricsRecord> seen;
  {
    Metrics m(2, 4, o);
    m.subscribe([&seen](const MetricsRecord& r) { seen.push_back(r); });
    m.emit("probe", 17,
           {{"x", 1.5},
            {"n", std::int64_t{-3}},
            {"ok", true},
            {"name", std::string("a\"b")},
            {"ranks", std::vector<int>{1, 3}},
            {"values", std::vector<double>{0.25}},
            {"nested", JsonText{R"({"a": [1, 2]})"}}});
    CHECK_THROWS_AS(m.emit("probe", 0, {{"rank", 1.0}}), InvalidArgument);
    CHECK_THROWS_AS(m.emit("", 0), InvalidArgument);
    CHECK_THROWS_AS(m.emit("probe", 0, {{"bad", JsonText{"{nope"}}}), InvalidArgument);
    // Deep nesting is refused (100,000 levels overflowed the stack when written).
    const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    CHECK_THROWS_WITH(m.emit("probe", 0, {{"deep", JsonText{nested(100000)}}}),
                      Catch::Contains("nests deeper"));
    CHECK_NOTHROW(m.emit("probe", 18, {{"deep", JsonText{nested(kMaxMetricJsonDepth)}}}));
    m.finish(20);
    m.finish(21);  // once
  }
  const auto lines = readLines(dir.path / "rank-2.jsonl");
  REQUIRE(lines.size() == 3);
  const json& p = lines[0];
  CHECK(p["kind"] == "probe");
  CHECK(p["rank"] == 2);
  CHECK(p["step"] == 17);
  CHECK(std::abs(p["time"].get<double>() -
                 std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) <
        60);
  CHECK(p["x"] == 1.5);
  CHECK(p["n"] == -3);
  CHECK(p["ok"] == true);
  CHECK(p["name"] == "a\"b");
  CHECK(p["ranks"] == json({1, 3}));
  CHECK(p["values"] == json({0.25}));
  CHECK(p["nested"]["a"] == json({1, 2}));
  CHECK(lines[1]["step"] == 18);  // the 64-level field
  CHECK(lines[2]["kind"] == "end");
  CHECK(lines[2]["steps"] == 20);
  // Callbacks get the same records, the file's line as json.
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].kind == "probe");
  CHECK(seen[0].rank == 2);
  CHECK(seen[0].step == 17);
  CHECK(json::parse(seen[0].json) == p);
}

TEST_CASE(
    "a metrics file that cannot take a record is reported once, and the records still reach the callbacks",
    "[metrics]") {
  REQUIRE(fs::exists("/dev/full"));
  TempDir dir;
  fs::create_directories(dir.path);
  fs::create_symlink("/dev/full", dir.path / "rank-0.jsonl");  // every write: ENOSPC
  MetricsOptions o;
  o.dir = dir.path.string();
  gossamer::testing::LogCapture log(LogLevel::kWarning);
  int seen = 0;
  Metrics m(0, 1, o);
  m.subscribe([&seen](const MetricsRecord&) { ++seen; });
  CHECK(m.writeError().empty());
  m.emit("probe", 1, {{"x", 1.0}});  // flushed at once
  CHECK(m.writeError().find("No space left on device") != std::string::npos);
  m.emit("probe", 2, {{"x", 2.0}});
  m.finish(2);
  CHECK(seen == 3);
  int warnings = 0;
  for (const auto& [level, text] : log.lines())
    if (text.find("rank-0.jsonl': No space left on device") != std::string::npos) ++warnings;
  CHECK(warnings == 1);
}

TEST_CASE("a noted value may not take the name of a step record's own field", "[metrics]") {
  MetricsOptions o;
  Metrics m(0, 1, o);
  for (const char* name : {"step", "rank", "kind", "time", "steps", "compute_s", "view", "sent_bytes", ""})
    CHECK_THROWS_AS(m.note(name, 1.0), InvalidArgument);
  m.note("loss", 0.5);
  std::string json;
  m.subscribe([&json](const MetricsRecord& r) { json = r.json; });
  m.accountStep(7, 0.1, 0.2, 0.0, 1.0, 0);
  CHECK(nlohmann::json::parse(json)["step"] == 7);
  CHECK(nlohmann::json::parse(json)["loss"] == 0.5);
}

TEST_CASE("a process restarted in place of a killed one cuts the torn last record off before appending",
          "[metrics]") {
  TempDir dir;
  fs::create_directories(dir.path);
  MetricsOptions o;
  o.dir = dir.path.string();
  // Rank 1's file: two whole records, then one cut short by a kill -9.
  // Rank 2's: a torn record only. Rank 3's: whole records only.
  const std::string whole = R"({"kind":"start","rank":1,"time":1.0,"step":0})"
                            "\n" +
                            std::string(R"({"kind":"step","rank":1,"time":2.0,"step":5})") + "\n";
  { std::ofstream(dir.path / "rank-1.jsonl") << whole << R"({"kind":"step","rank":1,"ti)"; }
  { std::ofstream(dir.path / "rank-2.jsonl") << std::string(100000, 'x'); }
  { std::ofstream(dir.path / "rank-3.jsonl") << whole; }
  for (int rank : {1, 2, 3}) {
    Metrics m(rank, 4, o);
    m.emit("probe", 9);
    m.finish(10);
  }
  const auto one = readLines(dir.path / "rank-1.jsonl");  // every line parses
  REQUIRE(one.size() == 4);
  CHECK(one[1]["step"] == 5);
  CHECK(one[2]["kind"] == "probe");
  CHECK(one[3]["kind"] == "end");
  const auto two = readLines(dir.path / "rank-2.jsonl");
  REQUIRE(two.size() == 2);
  CHECK(two[0]["kind"] == "probe");
  CHECK(readLines(dir.path / "rank-3.jsonl").size() == 4);
}

TEST_CASE("a step record sums its steps, carries the bytes per peer since the last one and the noted means",
          "[metrics]") {
  MetricsOptions o;
  o.every = 2;
  Metrics m(0, 3, o);
  std::vector<json> got;
  m.subscribe([&got](const MetricsRecord& r) { got.push_back(json::parse(r.json)); });
  const auto& links = m.links();
  REQUIRE(links != nullptr);
  links->sent(1, 100);
  links->sent(2, 7);
  links->received(2, 50, Tag::make(Op::kGossip, 9, 1).packed());
  links->sent(5, 1000);  // outside the world: ignored
  m.note("loss", 1.0);
  m.accountStep(1, 0.5, 0.25, 0.125, 1.0, 0);
  CHECK(got.empty());  // every 2 steps
  m.note("loss", 3.0);
  links->sent(1, 11);
  m.accountStep(2, 0.5, 0.25, 0.125, 0.75, 4);
  REQUIRE(got.size() == 1);
  const json& s = got[0];
  CHECK(s["kind"] == "step");
  CHECK(s["step"] == 2);
  CHECK(s["steps"] == 2);
  CHECK(s["compute_s"] == 1.0);
  CHECK(s["communication_s"] == 0.5);
  CHECK(s["waiting_s"] == 0.25);
  CHECK(s["sent_bytes"] == json({{"1", 111}, {"2", 7}}));
  CHECK(s["received_bytes"] == json({{"2", 50}}));
  CHECK(s["push_sum_weight"] == 0.75);
  CHECK(s["view"] == 4);
  CHECK(s["loss"] == 2.0);
  // The next record has only what came since.
  links->received(1, 8, Tag::make(Op::kAllreduce, 3).packed());
  m.accountStep(3, 0, 0, 0, 1, 4);
  m.accountStep(4, 0, 0, 0, 1, 4);
  REQUIRE(got.size() == 2);
  CHECK(got[1]["sent_bytes"] == json::object());
  CHECK(got[1]["received_bytes"] == json({{"1", 8}}));
  CHECK_FALSE(got[1].contains("loss"));
  const auto last = links->lastFrom(2);
  CHECK(last.any);
  CHECK(last.tag == Tag::make(Op::kGossip, 9, 1));
  CHECK(last.secondsAgo >= 0);
  CHECK_FALSE(links->lastFrom(0).any);
  CHECK_THROWS_AS(links->lastFrom(3), InvalidArgument);
}

TEST_CASE("with run.metrics false nothing is recorded", "[metrics]") {
  TempDir dir;
  MetricsOptions o;
  o.enabled = false;
  o.dir = dir.path.string();
  Metrics m(0, 2, o);
  int calls = 0;
  m.subscribe([&calls](const MetricsRecord&) { ++calls; });
  m.emit("probe", 1);
  m.accountStep(1, 0, 0, 0, 1, 0);
  m.finish(1);
  CHECK(calls == 0);
  CHECK(m.links() == nullptr);
  CHECK_FALSE(fs::exists(dir.path));
  CHECK_THROWS_AS(Metrics(2, 2, MetricsOptions{}), InvalidArgument);
}

TEST_CASE("an Agent records start, each step's time split and bytes per peer, and end, in one run directory",
          "[metrics]") {
  constexpr int kRanks = 2, kSteps = 6;
  const Registry reg = inprocRegistry(kRanks, true);
  TempDir dir;
  const Config c = reg.parse(inprocJob(kRanks, dir.path), "test");
  MemoryStore store;
  std::mutex mu;
  std::vector<json> fromCallback;
  testing::onEveryRank(kRanks, [&](int r) {
    Agent agent(c, r, store, reg);
    RANK_CHECK(agent.metrics().dir() == dir.path.string());
    if (r == 0)
      agent.metrics().subscribe([&](const MetricsRecord& rec) {
        std::lock_guard<std::mutex> lk(mu);
        fromCallback.push_back(json::parse(rec.json));
      });
    auto& opt = agent.makeOptimizer({64});
    std::vector<float> x(64, 1.0f), g(64, 0.5f);
    for (int s = 0; s < kSteps; ++s) {
      // Rank 1 computes for 30 ms before each step: rank 0 waits for it.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      agent.metrics().note("loss", static_cast<double>(s));
      opt.step(x, g);
    }
    agent.close();
  });
  for (int r = 0; r < kRanks; ++r) {
    const auto lines = readLines(dir.path / ("rank-" + std::to_string(r) + ".jsonl"));
    INFO("rank " << r);
    REQUIRE(lines.size() == kSteps + 2);
    CHECK(lines.front()["kind"] == "start");
    CHECK(lines.front()["world_size"] == kRanks);
    CHECK(lines.front()["algorithm"] == "allreduce_sgd");
    CHECK(lines.back()["kind"] == "end");
    CHECK(lines.back()["steps"] == kSteps);
    double compute = 0, waiting = 0;
    std::uint64_t sent = 0, received = 0;
    for (int s = 1; s <= kSteps; ++s) {
      const json& rec = lines[static_cast<std::size_t>(s)];
      REQUIRE(rec["kind"] == "step");
      CHECK(rec["step"] == s);
      CHECK(rec["loss"] == static_cast<double>(s - 1));
      const std::string peer = std::to_string(1 - r);
      // 64 floats averaged between two ranks: every byte goes to the other rank.
      CHECK(rec["sent_bytes"].size() == 1);
      CHECK(rec["received_bytes"].size() == 1);
      sent += rec["sent_bytes"].value(peer, std::uint64_t{0});
      received += rec["received_bytes"].value(peer, std::uint64_t{0});
      if (s > 1) compute += rec["compute_s"].get<double>();
      waiting += rec["waiting_s"].get<double>();
    }
    CHECK(sent >= kSteps * 64 * sizeof(float) / 2);
    CHECK(received == sent);  // symmetric exchange
    if (r == 1) CHECK(compute >= 0.9 * (kSteps - 1) * 0.030);
    // Rank 0 keeps pace with rank 1 (30 ms a step): its steps' time, split
    // into compute (whatever it did between steps, descheduled included) and
    // waiting, covers that; and it waited at some point.
    if (r == 0) CHECK(compute + waiting >= 0.9 * (kSteps - 1) * 0.030);
    if (r == 0) CHECK(waiting > 0);
  }
  std::lock_guard<std::mutex> lk(mu);
  REQUIRE(fromCallback.size() == kSteps + 2);  // start (replayed), the steps and end
  CHECK(fromCallback.front()["kind"] == "start");
}

TEST_CASE(
    "an Agent closes its transport even if a subscriber throws at the end record, and a move-assigned one "
    "ends its run",
    "[metrics]") {
  const Registry reg = inprocRegistry(1);
  TempDir dir;
  const Config c = reg.parse(inprocJob(1, dir.path), "test");
  MemoryStore store;
  {
    Agent agent(c, 0, store, reg);
    agent.metrics().subscribe([](const MetricsRecord& rec) {
      if (rec.kind == "end") throw std::runtime_error("subscriber failed");
    });
    CHECK_THROWS_WITH(agent.close(), Catch::Contains("subscriber failed"));
    // Closed all the same: a send fails as after close().
    std::byte b{};
    CHECK_THROWS_AS(agent.transport().isend(0, Tag::make(Op::kUser, 1), std::span<const std::byte>(&b, 1)),
                    Cancelled);
  }
  // Assigning over an Agent closes its run (its end record) first. (Each
  // Agent on a fabric of its own: an inproc rank attaches once.)
  const Registry reg2 = inprocRegistry(1), reg3 = inprocRegistry(1);
  TempDir dir2;
  MemoryStore store2, store3;
  Agent first(reg2.parse(inprocJob(1, dir2.path), "test"), 0, store2, reg2);
  first = Agent(reg3.parse(inprocJob(1, dir.path), "test"), 0, store3, reg3);
  const auto lines = readLines(dir2.path / "rank-0.jsonl");
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back()["kind"] == "end");
  first.close();
}

TEST_CASE("run.dir auto is one new directory for every rank of a job", "[metrics]") {
  constexpr int kRanks = 3;
  auto fabric = inproc::makeFabric(kRanks);
  Registry reg;
  inproc::registerWith(reg, fabric);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  const Config c = reg.parse("world_size: 3\ntransport: {kind: inproc, timeout_seconds: 20}\n", "test");
  MemoryStore store;
  std::vector<std::string> dirs(kRanks);
  testing::onEveryRank(kRanks, [&](int r) {
    Agent agent(c, r, store, reg);
    dirs[static_cast<std::size_t>(r)] = agent.metrics().dir();
    agent.close();
  });
  REQUIRE_FALSE(dirs[0].empty());
  CHECK(dirs[1] == dirs[0]);
  CHECK(dirs[2] == dirs[0]);
  const fs::path d(dirs[0]);
  CHECK(d.is_absolute());
  CHECK(d.parent_path().filename() == "runs");
  for (int r = 0; r < kRanks; ++r) CHECK(fs::exists(d / ("rank-" + std::to_string(r) + ".jsonl")));
  fs::remove_all(d);
}
