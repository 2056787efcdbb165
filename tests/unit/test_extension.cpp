// Components an application registers itself: a transport, an optimizer and a
// section of its own, each with YAML keys declared next to its factory, are
// loaded from YAML, checked with file:line errors, and run by an Agent. Nothing
// in the SDK names them.
#include <catch2/catch.hpp>

#include "build_paths.hpp"
#include "registry.hpp"
#include "threads.hpp"

#include <atomic>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "admm_config.hpp"
#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "programs.hpp"
#include "sparse_trainer.hpp"

using namespace gossamer;

namespace {

/// A test-only optimizer: averages the gradients over all ranks (allreduce)
/// and steps params -= step_scale * lr * mean(grad), where lr is its own
/// `algorithm.base_rate`. Every rank ends with the same, predictable model.
class ScaledSgd final : public DistributedOptimizer {
 public:
  ScaledSgd(Communicator& comm, double rate) : comm_(comm), rate_(rate) {}
  std::string name() const override { return "scaled_sgd"; }
  void step(std::span<float> params, std::span<const float> grads) override {
    GOSSAMER_ENFORCE(params.size() == grads.size(), "length mismatch");
    std::vector<float> mean(grads.begin(), grads.end());
    comm_.allreduce(std::span<float>(mean), ReduceOp::kAverage);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= static_cast<float>(rate_) * mean[i];
    ++steps_;
  }
  std::uint64_t steps() const override { return steps_; }

 private:
  Communicator& comm_;
  double rate_;
  std::uint64_t steps_ = 0;
};

/// What the test-only transport's factory saw, per rank.
struct TransportProbe {
  std::atomic<int> made{0};
  std::atomic<int> lastTag{-1};
};

/// The registry of an application with its own transport ("probe_inproc",
/// keys `probe_tag` and `probe_timeout_seconds`), optimizer ("scaled_sgd",
/// keys `step_scale` and `base_rate`, and a rule tying them) and section
/// (`experiment:` with `label`).
Registry makeAppRegistry(std::shared_ptr<inproc::Fabric> fabric, std::shared_ptr<TransportProbe> probe) {
  Registry reg;
  reg.addTransport(
      "probe_inproc",
      [fabric, probe](const TransportContext& ctx) {
        probe->made.fetch_add(1);
        probe->lastTag.store(ctx.config.get<int>("transport.probe_tag"));
        return inproc::makeTransport(fabric, ctx.rank,
                                     ctx.config.get<double>("transport.probe_timeout_seconds"));
      },
      KeySet()
          .integer("probe_tag", 0, 0, 1000, "a number the factory records")
          .real("probe_timeout_seconds", 5.0, {0.0, false, 60.0, true}, "bound on waits, seconds"),
      TransportTraits{.spansProcesses = false});  // threads of one process, as inproc
  reg.addOptimizer(
      "scaled_sgd",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        const double rate =
            ctx.config.get<double>("algorithm.step_scale") * ctx.config.get<double>("algorithm.base_rate");
        return std::make_unique<ScaledSgd>(ctx.communicator, rate);
      },
      KeySet()
          .real("step_scale", 1.0, {0.0, false, 10.0, true}, "multiplies base_rate")
          .real("base_rate", 0.1, {0.0, false, 1.0, true}, "step size before scaling")
          .rule([](const Config& c) -> std::optional<ConfigIssue> {
            if (c.get<std::string>("algorithm.name") != "scaled_sgd") return std::nullopt;
            const double rate = c.get<double>("algorithm.step_scale") * c.get<double>("algorithm.base_rate");
            if (rate <= 1.0) return std::nullopt;
            return ConfigIssue{"algorithm.step_scale", "step_scale * base_rate must be <= 1"};
          })
          .onlyWhenSelected());
  reg.addSection(
      "experiment", "The application's own settings.",
      KeySet().text("label", "unnamed", {}, "a name for the run").integer("repeats", 1, 1, 100, "repeats"));
  topologies::registerRing(reg);
  reg.setDefault("transport", "probe_inproc");
  reg.setDefault("topology", "ring");
  return reg;
}

const char* const kAppYaml =
    "world_size: 3\n"
    "transport:\n"
    "  kind: probe_inproc\n"
    "  probe_tag: 17\n"
    "  probe_timeout_seconds: 7.5\n"
    "algorithm:\n"
    "  name: scaled_sgd\n"
    "  step_scale: 2.5\n"
    "  base_rate: 0.2\n"
    "experiment:\n"
    "  label: sweep-a\n"
    "  repeats: 3\n";

/// The ConfigError of parsing `yaml` with `reg`; fails the test if none.
ConfigError errorOf(const Registry& reg, const std::string& yaml) {
  try {
    reg.parse(yaml, "app.yaml");
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError for:\n" << yaml);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("extension: an application's transport, optimizer and section load from YAML and run",
          "[extension][config][agent]") {
  const int n = 3;
  auto fabric = inproc::makeFabric(n);
  auto probe = std::make_shared<TransportProbe>();
  const Registry reg = makeAppRegistry(fabric, probe);

  const Config c = reg.parse(kAppYaml, "app.yaml");
  CHECK(c.get<std::string>("transport.kind") == "probe_inproc");
  CHECK(c.get<int>("transport.probe_tag") == 17);
  CHECK(c.get<double>("transport.probe_timeout_seconds") == 7.5);
  CHECK(c.get<double>("algorithm.step_scale") == 2.5);
  CHECK(c.get<std::string>("experiment.label") == "sweep-a");
  CHECK(c.get<int>("experiment.repeats") == 3);
  CHECK(c.get<std::string>("topology.kind") == "ring");  // the application's default

  // Rank r's gradient is (r + 1) * (i + 1); the mean over 3 ranks is 2 * (i + 1).
  const std::size_t len = 8;
  std::vector<std::vector<float>> models(n);
  MemoryStore store;
  gossamer::testing::onEveryRank(n, [&](int r) {
    Agent agent(c, r, store, reg);
    RANK_CHECK(agent.transport().timeoutSeconds() == 7.5);
    auto& opt = agent.makeOptimizer({len});
    RANK_CHECK(opt.name() == "scaled_sgd");
    std::vector<float> params(len, 1.0f), grads(len);
    for (std::size_t i = 0; i < len; ++i) grads[i] = static_cast<float>((r + 1) * (i + 1));
    opt.step(params, grads);
    models[static_cast<std::size_t>(r)] = params;
    agent.close();
  });
  CHECK(probe->made.load() == n);
  CHECK(probe->lastTag.load() == 17);
  for (std::size_t i = 0; i < len; ++i) {
    // rate = 2.5 * 0.2 = 0.5; params = 1 - 0.5 * 2 * (i + 1).
    const float expected = 1.0f - 0.5f * 2.0f * static_cast<float>(i + 1);
    for (int r = 0; r < n; ++r) CHECK(models[static_cast<std::size_t>(r)][i] == Approx(expected));
  }
}

TEST_CASE("extension: an application's keys get file:line errors like the SDK's", "[extension][config]") {
  const Registry reg = makeAppRegistry(inproc::makeFabric(2), std::make_shared<TransportProbe>());

  ConfigError e = errorOf(reg, "algorithm:\n  name: scaled_sgd\n  step_scale: 20\n");
  CHECK(e.file() == "app.yaml");
  CHECK(e.line() == 3);
  CHECK(e.key() == "algorithm.step_scale");
  CHECK(std::string(e.what()).find("<= 10") != std::string::npos);

  e = errorOf(reg, "transport:\n  kind: probe_inproc\n  probe_tga: 3\n");
  CHECK(e.line() == 3);
  CHECK(e.key() == "transport.probe_tga");
  CHECK(std::string(e.what()).find("did you mean 'probe_tag'") != std::string::npos);

  e = errorOf(reg, "world_size: 2\nexperiment:\n  repeats: '4'\n");
  CHECK(e.line() == 3);
  CHECK(e.key() == "experiment.repeats");

  // The optimizer's rule, reported at the key it names.
  e = errorOf(reg, "algorithm:\n  name: scaled_sgd\n  base_rate: 0.5\n  step_scale: 4\n");
  CHECK(e.line() == 4);
  CHECK(e.key() == "algorithm.step_scale");
  CHECK(std::string(e.what()).find("step_scale * base_rate") != std::string::npos);

  // Unknown component names list what is registered.
  e = errorOf(reg, "algorithm:\n  name: sgp\n");
  CHECK(e.line() == 2);
  CHECK(e.key() == "algorithm.name");
  CHECK(std::string(e.what()).find("allowed values: scaled_sgd") != std::string::npos);

  // Keys declared with onlyWhenSelected: an error under another optimizer.
  Registry two = makeAppRegistry(inproc::makeFabric(2), std::make_shared<TransportProbe>());
  two.addOptimizer("plain", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
    return std::make_unique<ScaledSgd>(ctx.communicator, 0.1);
  });
  e = errorOf(two, "algorithm:\n  name: plain\n  step_scale: 2\n");
  CHECK(e.line() == 3);
  CHECK(e.key() == "algorithm.step_scale");
  CHECK(std::string(e.what()).find("applies to algorithm.name 'scaled_sgd' only") != std::string::npos);
}

TEST_CASE("extension: a registry refuses clashing or malformed declarations", "[extension][config]") {
  Registry reg;
  // A default outside its own range, or of another type.
  CHECK_THROWS_AS(KeySet().integer("k", 5, 0, 3, "doc"), InvalidArgument);
  CHECK_THROWS_AS(KeySet().text("k", "c", {"a", "b"}, "doc"), InvalidArgument);
  CHECK_THROWS_AS(KeySet().integer("k", 1, 0, 3, "doc").integer("k", 1, 0, 3, "doc"), InvalidArgument);
  // The same key declared twice in one section with another range.
  reg.addSection("app", "", KeySet().integer("k", 1, 0, 3, "doc"));
  CHECK_THROWS_AS(reg.addSection("app", "", KeySet().integer("k", 1, 0, 4, "doc")), InvalidArgument);
  // Two optimizers may share a key only with the same declaration.
  reg.addOptimizer(
      "a", [](const OptimizerContext&) { return std::unique_ptr<DistributedOptimizer>(); },
      KeySet().real("shared", 1.0, {0.0, true, 2.0, true}, "doc"));
  CHECK_NOTHROW(reg.addOptimizer(
      "b", [](const OptimizerContext&) { return std::unique_ptr<DistributedOptimizer>(); },
      KeySet().real("shared", 1.0, {0.0, true, 2.0, true}, "doc")));
  CHECK_THROWS_AS(reg.addOptimizer(
                      "c", [](const OptimizerContext&) { return std::unique_ptr<DistributedOptimizer>(); },
                      KeySet().real("shared", 0.5, {0.0, true, 2.0, true}, "doc")),
                  InvalidArgument);
  // A refused registration changes nothing: "c" is neither a choice nor
  // taken, and registers once its keys agree.
  CHECK_THROWS_WITH(reg.parse("algorithm:\n  name: c\n", "c.yaml"), Catch::Contains("'c'"));
  CHECK(reg.optimizerNames() == std::vector<std::string>{"a", "b"});
  CHECK_NOTHROW(reg.addOptimizer(
      "c", [](const OptimizerContext&) { return std::unique_ptr<DistributedOptimizer>(); },
      KeySet().real("shared", 1.0, {0.0, true, 2.0, true}, "doc")));
  const auto transport = [](const TransportContext&) { return std::unique_ptr<Transport>(); };
  reg.addTransport("t1", transport, KeySet().integer("port", 1, 0, 9, "doc"));
  CHECK_THROWS_AS(reg.addTransport("t2", transport, KeySet().integer("port", 2, 0, 9, "doc")),
                  InvalidArgument);
  CHECK(reg.transportNames() == std::vector<std::string>{"t1"});
  CHECK_NOTHROW(reg.addTransport("t2", transport, KeySet().integer("port", 1, 0, 9, "doc")));
  CHECK(reg.transportTraits("t2").spansProcesses);
  CHECK_THROWS_AS(
      reg.addSection("app", "", KeySet().integer("k2", 1, 0, 3, "doc").integer("k", 2, 0, 3, "doc")),
      InvalidArgument);
  CHECK_THROWS_WITH(reg.parse("app:\n  k2: 1\n", "k2.yaml"), Catch::Contains("unknown key"));
  // A default component must be registered.
  CHECK_THROWS_AS(reg.setDefault("algorithm", "zzz"), InvalidArgument);
  // Without a default, a config must name the component.
  ConfigError e = errorOf(reg, "world_size: 1\n");
  CHECK(e.key() == "transport.kind");
}

TEST_CASE("extension: a factory that builds nothing is refused with its name", "[extension][agent]") {
  auto fabric = inproc::makeFabric(1);
  Registry reg = makeAppRegistry(fabric, std::make_shared<TransportProbe>());
  reg.addTransport(
      "nothing", [](const TransportContext&) { return std::unique_ptr<Transport>(); }, {},
      TransportTraits{.spansProcesses = false});
  reg.addOptimizer("no_optimizer",
                   [](const OptimizerContext&) { return std::unique_ptr<DistributedOptimizer>(); });
  MemoryStore store;
  CHECK_THROWS_WITH(
      Agent(
          reg.parse("world_size: 1\ntransport:\n  kind: nothing\nalgorithm:\n  name: scaled_sgd\n", "t.yaml"),
          0, store, reg),
      Catch::Contains("transport 'nothing' built nothing"));
  Agent agent(reg.parse("world_size: 1\nalgorithm:\n  name: no_optimizer\n", "o.yaml"), 0, store, reg);
  CHECK_THROWS_AS(agent.makeOptimizer({4}), InvalidArgument);
  CHECK_THROWS_WITH(agent.makeOptimizer({4}), Catch::Contains("optimizer 'no_optimizer' built nothing"));
  agent.close();
}

TEST_CASE("extension: a program sets its own default for a declared key", "[extension][config]") {
  Registry reg = makeAppRegistry(inproc::makeFabric(1), std::make_shared<TransportProbe>());
  reg.addSection("app", "", KeySet().integer("k", 1, 0, 3, "doc").boolean("flag", true, "doc"));
  reg.setKeyDefault("app", "flag", false);
  reg.setKeyDefault("app", "k", 2);
  Config c = reg.parse("world_size: 1\nalgorithm: {name: scaled_sgd}\n");
  CHECK_FALSE(c.get<bool>("app.flag"));
  CHECK(c.get<int>("app.k") == 2);
  CHECK(reg.complete(Config{}).get<bool>("app.flag") == false);
  CHECK(reg.schema().markdown().find("| `flag` | bool | `false` |") != std::string::npos);
  // The YAML still decides.
  c = reg.parse("world_size: 1\nalgorithm: {name: scaled_sgd}\napp:\n  flag: true\n");
  CHECK(c.get<bool>("app.flag"));
  CHECK_THROWS_AS(reg.setKeyDefault("app", "flag", 1), InvalidArgument);         // another type
  CHECK_THROWS_AS(reg.setKeyDefault("app", "nope", true), InvalidArgument);      // not declared
  CHECK_THROWS_AS(reg.setKeyDefault("nowhere", "flag", true), InvalidArgument);  // no such section
  // gossamer-admm and gossamer-sparse take no rank back; every other program does.
  CHECK_FALSE(sparse::makeAdmmRegistry().parse("world_size: 1\n").get<bool>("membership.rejoin"));
  CHECK_FALSE(sparse::makeSparseRegistry().parse("world_size: 1\n").get<bool>("membership.rejoin"));
  CHECK(apps::makeProgramsRegistry().parse("world_size: 1\n").get<bool>("membership.rejoin"));
}

TEST_CASE("extension: gossamer-sparse and gossamer-admm refuse a transport that cannot link processes",
          "[extension][config]") {
  const std::string yaml = "world_size: 2\ntransport:\n  kind: inproc\n";
  for (const auto& [program, registry] : {std::pair{"gossamer-sparse", sparse::makeSparseRegistry()},
                                          {"gossamer-admm", sparse::makeAdmmRegistry()}}) {
    INFO(program);
    try {
      registry.parse(yaml, "job.yaml");
      FAIL("inproc was accepted");
    } catch (const ConfigError& e) {
      CHECK(e.key() == "transport.kind");
      CHECK(e.line() == 3);
      CHECK(std::string(e.what()).find(std::string(program) + " runs its ranks as processes") !=
            std::string::npos);
    }
    CHECK_NOTHROW(registry.parse("world_size: 2\ntransport:\n  kind: socket\n"));
  }
  // gossamer-train runs inproc ranks as threads.
  CHECK_NOTHROW(apps::makeProgramsRegistry().parse(yaml));
}

TEST_CASE("extension: the generated reference lists every registered key", "[extension][config]") {
  const Registry reg = makeAppRegistry(inproc::makeFabric(2), std::make_shared<TransportProbe>());
  const std::string md = reg.schema().markdown();
  for (const char* needle : {"### `transport:`", "| `probe_tag` | integer | `0` | 0..1000 |",
                             "| `step_scale` |", "scaled_sgd (only when selected)", "### `experiment:`",
                             "| `label` | string | `unnamed` |", "### `collectives:`", "| `world_size` |"}) {
    INFO(needle);
    CHECK(md.find(needle) != std::string::npos);
  }
}

TEST_CASE("extension: README's configuration reference is the one the registry generates",
          "[extension][docs]") {
  const std::string path = gossamer::testing::sourceDir() + "/README.md";
  std::ifstream in(path);
  REQUIRE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- BEGIN gossamer-config --schema --markdown -->\n";
  const std::string end = "<!-- END gossamer-config --schema --markdown -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  REQUIRE(b < e);
  const std::string inReadme = text.substr(b + begin.size(), e - b - begin.size());
  INFO("regenerate with scripts/update-config-reference.sh");
  // gossamer-config's registry: every program's sections.
  CHECK(inReadme == gossamer::apps::makeProgramsRegistry().schema().markdown());
}
