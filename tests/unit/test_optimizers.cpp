// Optimizers over the inproc transport (threads, no sockets).
#include <catch2/catch.hpp>

#include "registry.hpp"

#include "models.hpp"
#include "threads.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"

using namespace gossamer;
using gossamer::testing::consensusDistance;
using gossamer::testing::meanOver;
using gossamer::testing::onEveryRank;

namespace {}  // namespace

TEST_CASE("LocalSgd applies heavy-ball momentum and weight decay", "[optimizer]") {
  optimizers::LocalSgd sgd(2, {0.1, 0.5, 0.01});
  std::vector<float> x = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 1.0f};
  sgd.apply(x, g);  // v = g + wd x = (0.51, 0.98); x -= 0.1 v
  CHECK(x[0] == Approx(1.0 - 0.051));
  CHECK(x[1] == Approx(-2.0 - 0.098));
  sgd.apply(x, g);  // v = 0.5 v + g + wd x
  const double v0 = 0.5 * 0.51 + 0.5 + 0.01 * (1.0 - 0.051);
  CHECK(x[0] == Approx(1.0 - 0.051 - 0.1 * v0));
  CHECK_THROWS_AS(sgd.apply(x, std::vector<float>(3)), InvalidArgument);
  CHECK_THROWS_AS(optimizers::LocalSgd(2, {0.1, 1.0, 0.0}), InvalidArgument);
}

TEST_CASE("Crossover-SGD keeps the global mean of the parameters when the learning rate is zero",
          "[optimizer][crossover]") {
  for (int n : {2, 3, 4, 7, 8}) {
    auto fabric = inproc::makeFabric(n);
    const std::vector<std::size_t> tensors = {300, 7, 50, 3};
    topologies::FairRoulette topo(n, 1234);
    std::vector<std::vector<float>> params(static_cast<std::size_t>(n), std::vector<float>(360));
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& p : params)
      for (auto& v : p) v = normal(rng);
    const auto mean0 = meanOver(params);
    const double dist0 = consensusDistance(params);
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      optimizers::CrossoverOptions o;
      o.sgd = {0.0, 0.9, 0.0};
      o.segments = 4;
      optimizers::CrossoverSgd opt(*t, topo, tensors, o);
      std::vector<float> grad(360);
      std::mt19937 g(static_cast<unsigned>(r) + 99);
      std::normal_distribution<float> noise(0.0f, 1.0f);  // one per rank: a distribution keeps state
      for (int step = 0; step < 30; ++step) {
        for (auto& v : grad) v = noise(g);  // ignored: learning rate 0
        opt.step(params[static_cast<std::size_t>(r)], grad);
      }
      RANK_CHECK(opt.steps() == 30);
    });
    const auto mean1 = meanOver(params);
    for (std::size_t i = 0; i < mean0.size(); ++i) REQUIRE(mean1[i] == Approx(mean0[i]).margin(1e-5));
    INFO("world size " << n << ": consensus distance " << dist0 << " -> " << consensusDistance(params));
    CHECK(consensusDistance(params) < 1e-3 * dist0);
  }
}

TEST_CASE("Crossover-SGD exchanges only every `interval` steps", "[optimizer][crossover]") {
  const int n = 3;
  auto fabric = inproc::makeFabric(n);
  topologies::FairRoulette topo(n, 7);
  std::vector<std::uint64_t> sent(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::CrossoverOptions o;
    o.sgd = {0.01, 0.0, 0.0};
    o.segments = 2;
    o.interval = 4;
    optimizers::CrossoverSgd opt(*t, topo, {10, 10}, o);
    std::vector<float> x(20, static_cast<float>(r)), g(20, 1.0f);
    for (int s = 0; s < 12; ++s) opt.step(x, g);
    sent[static_cast<std::size_t>(r)] = t->stats().bytesSent;
  });
  for (auto b : sent) CHECK(b == 3 * 20 * sizeof(float));  // 3 exchanges of the whole model
}

TEST_CASE("Crossover-SGD rejects mismatched sizes and options", "[optimizer][crossover]") {
  auto fabric = inproc::makeFabric(2);
  auto t = inproc::makeTransport(fabric, 0, 1.0);
  topologies::FairRoulette topo(2, 1);
  topologies::FairRoulette wrongSize(3, 1);
  optimizers::CrossoverOptions o;
  CHECK_THROWS_AS(optimizers::CrossoverSgd(*t, wrongSize, {4}, o), InvalidArgument);
  o.interval = 0;
  CHECK_THROWS_AS(optimizers::CrossoverSgd(*t, topo, {4}, o), InvalidArgument);
  o.interval = 1;
  optimizers::CrossoverSgd opt(*t, topo, {4}, o);
  std::vector<float> x(5), g(5);
  CHECK_THROWS_AS(opt.step(x, g), InvalidArgument);
  // Push-sum weights (a star: rank 0 sends to two ranks, each sends back to
  // one) never average to consensus; a directed ring's do.
  auto three = inproc::makeTransport(inproc::makeFabric(3), 0, 1.0);
  const topologies::ExplicitGraph star(3, {{0, 1}, {1, 0}, {0, 2}, {2, 0}});
  CHECK_THROWS_WITH(
      optimizers::CrossoverSgd(*three, star, {4}, o),
      Catch::Contains("gives rank 0 weights summing to 1.333") && Catch::Contains("use algorithm sgp"));
  const topologies::ExplicitGraph ring(3, {{0, 1}, {1, 2}, {2, 0}});
  CHECK_NOTHROW(optimizers::CrossoverSgd(*three, ring, {4}, o));
  o.mode = optimizers::GossipMode::kAsync;  // push-sum weights of its own
  CHECK_NOTHROW(optimizers::CrossoverSgd(*three, star, {4}, o));
}

TEST_CASE("AllReduce-SGD keeps every rank's model identical and equal to centralised SGD",
          "[optimizer][allreduce]") {
  const int n = 4;
  const std::size_t p = 57;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::vector<float>> params(n, std::vector<float>(p, 0.5f));
  std::vector<std::vector<std::vector<float>>> grads(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < 10; ++s) {
      grads[static_cast<std::size_t>(r)].emplace_back(p);
      for (auto& v : grads[static_cast<std::size_t>(r)].back()) v = u(rng);
    }
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    Communicator comm(*t, 10.0);
    optimizers::AllReduceSgd opt(comm, p, {0.1, 0.9, 0.0});
    for (int s = 0; s < 10; ++s)
      opt.step(params[static_cast<std::size_t>(r)],
               grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
  });
  // Centralised reference: SGD on the mean gradient.
  std::vector<float> ref(p, 0.5f), mean(p);
  optimizers::LocalSgd sgd(p, {0.1, 0.9, 0.0});
  for (int s = 0; s < 10; ++s) {
    std::fill(mean.begin(), mean.end(), 0.0f);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < p; ++i)
        mean[i] += grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)][i] / n;
    sgd.apply(ref, mean);
  }
  for (int r = 1; r < n; ++r) CHECK(params[static_cast<std::size_t>(r)] == params[0]);
  for (std::size_t i = 0; i < p; ++i) CHECK(params[0][i] == Approx(ref[i]).margin(1e-5));
}

TEST_CASE("an Agent built from a Config averages a vector over inproc peers", "[agent]") {
  const int n = 3;
  Config c = gossamer::test::defaultConfig();
  c.set("world_size", n);
  c.set<std::string>("transport.kind", "inproc");
  c.set<double>("transport.timeout_seconds", 10);
  auto fabric = inproc::makeFabric(n);
  Registry reg;
  inproc::registerWith(reg, fabric);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  MemoryStore store;
  std::vector<std::vector<float>> v(n, std::vector<float>(100));
  onEveryRank(n, [&](int r) {
    Agent agent(c, r, store, reg);
    RANK_CHECK(agent.rank() == r);
    RANK_CHECK(agent.worldSize() == n);
    RANK_CHECK(agent.topology().name() == "fair_roulette");
    for (std::size_t i = 0; i < 100; ++i) v[static_cast<std::size_t>(r)][i] = static_cast<float>(r * i);
    agent.average(v[static_cast<std::size_t>(r)]);
    auto& opt = agent.makeOptimizer({100});
    RANK_CHECK(opt.name() == "crossover_sgd");
    agent.close();
  });
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 100; ++i)
      REQUIRE(v[static_cast<std::size_t>(r)][i] == Approx(static_cast<double>(i)));
}

TEST_CASE("an Agent rejects unknown component names before connecting", "[agent]") {
  Config c = gossamer::test::defaultConfig();
  c.set("world_size", 2);
  c.set<std::string>("transport.kind", "inproc");
  Registry reg;  // nothing registered
  MemoryStore store;
  try {
    Agent agent(c, 0, store, reg);
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "topology.kind");
  }
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  try {
    Agent agent(c, 0, store, reg);
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "transport.kind");
    CHECK(std::string(e.what()).find("inproc") != std::string::npos);
  }
  CHECK_THROWS_AS(reg.addTopology("ring", [](const Config&) { return std::unique_ptr<Topology>(); }),
                  InvalidArgument);
}

TEST_CASE("stores publish keys and time out on missing ones", "[store]") {
  MemoryStore mem;
  char tmpl[] = "/tmp/gossamer-store-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  FileStore file(tmpl);
  for (Store* s : {static_cast<Store*>(&mem), static_cast<Store*>(&file)}) {
    s->set("job/a", std::string("x\0y", 3));
    CHECK(s->get("job/a", 1.0) == std::string("x\0y", 3));
    CHECK_FALSE(s->tryGet("job/missing").has_value());
    CHECK_THROWS_AS(s->get("job/missing", 0.05), TimeoutError);
    CHECK_THROWS_AS(s->set("../escape", "v"), InvalidArgument);
    CHECK_THROWS_AS(s->set("", "v"), InvalidArgument);
    // Values up to kMaxStoreValueBytes; a larger one is refused, and the key keeps its value.
    const std::string largest(gossamer::kMaxStoreValueBytes, 'v');
    s->set("job/big", largest);
    CHECK(s->get("job/big", 1.0) == largest);
    CHECK_THROWS_WITH(s->set("job/big", largest + "v"), Catch::Contains("above the store's 1048576 bytes"));
    CHECK_THROWS_AS(s->claim("job/bigger", largest + "v"), InvalidArgument);
    CHECK(s->get("job/big", 1.0) == largest);
    CHECK_FALSE(s->tryGet("job/bigger").has_value());
    std::thread late([s] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s->set("job/late", "here");
    });
    CHECK(s->get("job/late", 5.0) == "here");
    late.join();
  }
  // A value file written past the cap by something other than a store is an
  // Error when read, not an allocation of whatever size it has.
  {
    std::ofstream f(std::string(tmpl) + "/@job%huge", std::ios::binary);
    f << std::string(gossamer::kMaxStoreValueBytes + 1, 'h');
  }
  CHECK_THROWS_WITH(file.tryGet("job/huge"), Catch::Contains("more than any value a store writes"));
  std::filesystem::remove_all(tmpl);
}

TEST_CASE("the collectives section picks the Agent's allreduce algorithm", "[agent][config]") {
  const Config parsed = gossamer::test::trainRegistry().parse(
      "world_size: 6\ntransport:\n  kind: inproc\ncollectives:\n  allreduce: tga2d\n  group_size: 3\n"
      "  chunk_bytes: 64\n  cost_model: true\n  alpha_seconds: 0.0001\n",
      "collectives.yaml");
  CHECK(parsed.get<std::string>("collectives.allreduce") == "tga2d");
  CHECK(parsed.get<int>("collectives.group_size") == 3);
  CHECK(parsed.get<int>("collectives.chunk_bytes") == 64);
  CHECK(parsed.get<bool>("collectives.cost_model"));
  CHECK(parsed.get<double>("collectives.alpha_seconds") == 0.0001);
  try {
    gossamer::test::trainRegistry().parse("world_size: 6\ncollectives:\n  torus_rows: 4\n", "bad.yaml");
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "collectives.torus_rows");
    CHECK(e.line() == 3);
  }
  CHECK_THROWS_AS(gossamer::test::trainRegistry().parse("collectives:\n  allreduce: butterfly\n", "bad.yaml"),
                  ConfigError);
  for (const std::string algorithm : {"tga2d", "torus2d", "hips", "hierarchical", "recursive_doubling"}) {
    Config c = parsed;
    c.set<std::string>("collectives.allreduce", algorithm);
    auto fabric = inproc::makeFabric(6);
    Registry reg;
    inproc::registerWith(reg, fabric);
    topologies::registerBuiltins(reg);
    optimizers::registerBuiltins(reg);
    MemoryStore store;
    std::vector<std::vector<float>> v(6, std::vector<float>(1000));
    onEveryRank(6, [&](int r) {
      Agent agent(c, r, store, reg);
      for (std::size_t i = 0; i < 1000; ++i) v[static_cast<std::size_t>(r)][i] = static_cast<float>(r + i);
      agent.average(v[static_cast<std::size_t>(r)]);
      agent.close();
    });
    INFO(algorithm);
    for (int r = 0; r < 6; ++r)
      for (std::size_t i = 0; i < 1000; ++i)
        REQUIRE(v[static_cast<std::size_t>(r)][i] == Approx(2.5 + static_cast<double>(i)));
  }
}
TEST_CASE("collectives.calibrate measures the cost model at start, and auto uses it",
          "[agent][config][cost]") {
  Config c = gossamer::test::trainRegistry().parse(
      "world_size: 3\ntransport:\n  kind: inproc\ncollectives:\n  gamma_seconds_per_byte: 2e-10\n"
      "  contention: 0.5\n",
      "collectives.yaml");
  CHECK(c.get<double>("collectives.gamma_seconds_per_byte") == 2e-10);
  CHECK(c.get<double>("collectives.contention") == 0.5);
  CHECK_FALSE(c.get<bool>("collectives.calibrate"));
  CHECK_THROWS_AS(gossamer::test::trainRegistry().parse("collectives:\n  contention: -1\n", "bad.yaml"),
                  ConfigError);
  c.set<bool>("collectives.calibrate", true);  // without cost_model: calibrating implies using the model
  auto fabric = inproc::makeFabric(3);
  Registry reg;
  inproc::registerWith(reg, fabric);
  topologies::registerBuiltins(reg);
  optimizers::registerBuiltins(reg);
  MemoryStore store;
  std::vector<CostModel> models(3);
  std::vector<std::vector<float>> v(3, std::vector<float>(100));
  onEveryRank(3, [&](int r) {
    Agent agent(c, r, store, reg);
    const auto& o = agent.communicator().options();
    RANK_CHECK(o.useCostModel);
    RANK_CHECK(o.algorithm == AllreduceAlgorithm::kAuto);
    models[static_cast<std::size_t>(r)] = o.model;
    for (std::size_t i = 0; i < 100; ++i) v[static_cast<std::size_t>(r)][i] = static_cast<float>(r);
    agent.average(v[static_cast<std::size_t>(r)]);
    agent.close();
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(models[static_cast<std::size_t>(r)] == models[0]);
    CHECK(v[static_cast<std::size_t>(r)] == std::vector<float>(100, 1.0f));
  }
  CHECK(models[0].calibrated(AllreduceAlgorithm::kRing));
  CHECK(models[0].calibrated(AllreduceAlgorithm::kHips));
}

TEST_CASE("hierarchical groups of unequal sizes minimise the average of every rank's loss",
          "[optimizer][hierarchical]") {
  // 5 ranks in groups {0, 1, 2, 3} and {4}, f_r(x) = (x - r)^2 / 2: the
  // minimiser of the average is 2. Averaged per group and mixed with equal
  // weights, the lone rank 4 weighed as much as the other four together and
  // every rank settled at 2.75.
  const int n = 5;
  auto fabric = inproc::makeFabric(n);
  const auto groups = topologies::makeGroups(n, 4);
  std::vector<float> final(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    optimizers::CrossoverOptions o;
    o.sgd = {0.05, 0.0, 0.0};
    optimizers::Hierarchical opt(*t, groups, "crossover_sgd",
                                 std::make_unique<topologies::FairRoulette>(2, 42), {1}, o);
    std::vector<float> x{0.0f}, g(1);
    for (int k = 0; k < 1000; ++k) {
      g[0] = x[0] - static_cast<float>(r);
      opt.step(x, g);
    }
    final[static_cast<std::size_t>(r)] = x[0];
  });
  for (float v : final) CHECK(v == Approx(2.0).margin(0.05));
}
