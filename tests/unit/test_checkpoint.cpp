// Checkpoint files (sdk/include/gossamer/checkpoint.hpp): sections round-trip;
// torn, corrupt and foreign files are rejected with the byte offset; a
// process killed (SIGKILL) while saving leaves the previous checkpoint
// loadable; optimizer state saved and restored continues bit for bit.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "threads.hpp"

using namespace gossamer;

namespace {

struct TempFolder {
  std::filesystem::path path;
  TempFolder() {
    char tmpl[] = "/tmp/gossamer-ckpt-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

Checkpoint sample(std::size_t n, float base) {
  Checkpoint c;
  std::vector<float> model(n);
  for (std::size_t i = 0; i < n; ++i) model[i] = base + static_cast<float>(i);
  c.putArray<float>("model", model);
  c.putValue<std::uint64_t>("step", 42);
  c.putValue<double>("weight", 0.25);
  return c;
}

}  // namespace

TEST_CASE("checkpoint: sections round-trip through a file", "[checkpoint]") {
  TempFolder dir;
  const auto path = (dir.path / "a.ckpt").string();
  sample(1000, 1.5f).save(path);
  const Checkpoint c = Checkpoint::load(path);
  const auto model = c.getArray<float>("model");
  REQUIRE(model.size() == 1000);
  CHECK(model[0] == 1.5f);
  CHECK(model[999] == 1000.5f);
  CHECK(c.getValue<std::uint64_t>("step") == 42);
  CHECK(c.getValue<double>("weight") == 0.25);
  CHECK_THROWS_AS(c.get("missing"), InvalidArgument);
  CHECK_THROWS_AS(c.getValue<std::uint32_t>("step"), InvalidArgument);  // 8 bytes, not 4
  // No temporary file is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) ==
        1);
  // A directory (whose size reads as -1) is refused by name, not sized.
  CHECK_THROWS_WITH(Checkpoint::load(dir.path.string()), Catch::Contains("is not a regular file"));
  CHECK_THROWS_WITH(Checkpoint::load((dir.path / "none.ckpt").string()),
                    Catch::Contains("is not a regular file"));
}

TEST_CASE("checkpoint: a NaN or infinity in floating-point state is refused as it is read", "[checkpoint]") {
  // A file whose checksum was recomputed over such a value passes load():
  // the reads refuse it, naming the section and the element.
  Checkpoint c;
  c.putArray<float>("velocity", std::vector<float>{0.5f, std::numeric_limits<float>::quiet_NaN(), 1.0f});
  c.putValue<double>("weight", std::numeric_limits<double>::infinity());
  c.putArray<int>("shard", std::vector<int>{3, 1, 2});
  const Checkpoint back = Checkpoint::parse(c.serialize());
  CHECK_THROWS_WITH(back.getArray<float>("velocity"),
                    Catch::Contains("section 'velocity': value 1 (nan) is not finite"));
  CHECK_THROWS_AS(back.getValue<double>("weight"), InvalidArgument);
  CHECK(back.getArray<int>("shard") == std::vector<int>{3, 1, 2});  // (integers: no such check)
  CHECK_THROWS_WITH(back.get("missing"), Catch::Contains("the checkpoint has no section 'missing'"));
  CHECK_THROWS_WITH(back.get("missing"), !Catch::Contains("check failed"));
}

TEST_CASE("checkpoint: torn, corrupt and foreign files are rejected with the byte offset", "[checkpoint]") {
  const auto good = sample(64, 0.0f).serialize();
  auto expectError = [](std::vector<std::byte> bytes, std::size_t offset, const char* what) {
    INFO(what);
    try {
      Checkpoint::parse(bytes);
      FAIL("accepted");
    } catch (const ProtocolError& e) {
      CHECK(e.offset() == offset);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  auto flipped = good;
  flipped[100] ^= std::byte{1};
  expectError(flipped, good.size() - 4, "checksum mismatch");
  expectError(std::vector<std::byte>(good.begin(), good.begin() + 60), 56, "checksum mismatch");
  auto foreign = good;
  foreign[0] = std::byte{'X'};
  expectError(foreign, 0, "bad magic");
  expectError(std::vector<std::byte>(5), 0, "only 5 bytes");
}

TEST_CASE("checkpoint: a process killed while saving leaves the previous checkpoint loadable",
          "[checkpoint]") {
  TempFolder dir;
  const auto path = (dir.path / "rank-0.ckpt").string();
  sample(16, 7.0f).save(path);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    int saved[2];
    REQUIRE(::pipe(saved) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Saves large checkpoints (32 MiB) over and over until killed; says
      // so once the first is whole.
      ::close(saved[0]);
      const Checkpoint big = sample(8u << 20, 100.0f + static_cast<float>(trial));
      big.save(path);
      const char one = 1;
      if (::write(saved[1], &one, 1) != 1) ::_exit(1);
      for (;;) big.save(path);
    }
    ::close(saved[1]);
    // The kill lands while it writes a later one (at most 60 s for the first).
    pollfd p{saved[0], POLLIN, 0};
    char one = 0;
    const bool first = ::poll(&p, 1, 60000) == 1 && ::read(saved[0], &one, 1) == 1;
    ::close(saved[0]);
    if (first)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 150)(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(first);
    // Whatever moment it died at, the file is a whole checkpoint: a complete
    // big one (the first one was replaced before the kill).
    const Checkpoint c = Checkpoint::load(path);
    const auto model = c.getArray<float>("model");
    CHECK(model.size() == (8u << 20));
    CHECK(model.front() == 100.0f + static_cast<float>(trial));  // this trial's
    CHECK(model.back() == model.front() + static_cast<float>(model.size() - 1));
  }
}

TEST_CASE("checkpoint: SGP and Crossover-SGD continue bit for bit from saved state", "[checkpoint]") {
  // Two runs of 4 inproc ranks for 30 steps; the second saves at step 12,
  // builds fresh optimizers, loads and continues.
  const std::string algorithm =
      GENERATE(as<std::string>{}, "sgp", "crossover_sgd", "allreduce_sgd", "diloco", "diloco_gossip");
  INFO(algorithm);
  const int n = 4, steps = 30, cut = 12;
  const std::size_t p = 10;
  auto run = [&](bool interrupt) {
    auto fabric = inproc::makeFabric(n);
    std::vector<std::vector<float>> finals(n);
    gossamer::testing::onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 20.0);
      Communicator comm(*t, 20.0);
      std::unique_ptr<Topology> topo;
      if (algorithm == "sgp")
        topo = std::make_unique<topologies::DirectedExponential>(n, 1);
      else
        topo = std::make_unique<topologies::FairRoulette>(n, 3);
      auto make = [&]() -> std::unique_ptr<DistributedOptimizer> {
        optimizers::SgdOptions sgd{0.05, 0.9, 0.0};
        if (algorithm == "sgp") {
          optimizers::SgpOptions o;
          o.sgd = sgd;
          return std::make_unique<optimizers::Sgp>(*t, *topo, p, o);
        }
        if (algorithm == "crossover_sgd") {
          optimizers::CrossoverOptions o;
          o.sgd = sgd;
          o.segments = 2;
          return std::make_unique<optimizers::CrossoverSgd>(*t, *topo, std::vector<std::size_t>{p}, o);
        }
        if (algorithm.starts_with("diloco")) {
          optimizers::DilocoOptions o;
          o.sgd = sgd;
          o.innerSteps = 5;  // the cut at step 12 is inside a round
          o.outer =
              algorithm == "diloco" ? optimizers::DilocoOuter::kAllreduce : optimizers::DilocoOuter::kGossip;
          return std::make_unique<optimizers::Diloco>(comm, p, o);
        }
        return std::make_unique<optimizers::AllReduceSgd>(comm, p, sgd);
      };
      auto opt = make();
      std::vector<float> x(p, 0.0f), g(p);
      std::mt19937 rng(static_cast<unsigned>(r));
      for (int s = 0; s < steps; ++s) {
        for (auto& v : g) v = std::uniform_real_distribution<float>(-1, 1)(rng);
        opt->step(x, g);
        if (interrupt && s + 1 == cut) {
          Checkpoint c;
          opt->saveState(c, "opt.");
          opt = make();
          opt->loadState(Checkpoint::parse(c.serialize()), "opt.");
        }
      }
      finals[static_cast<std::size_t>(r)] = x;
    });
    return finals;
  };
  const auto plain = run(false);
  const auto resumed = run(true);
  for (int r = 0; r < n; ++r)
    CHECK(resumed[static_cast<std::size_t>(r)] == plain[static_cast<std::size_t>(r)]);
}
