// The optimizers' registrations: each one's factory and its YAML keys under
// `algorithm:` (and the local SGD step's keys under `training:`), with their
// checks. The compressors register in their own files
// (src/compressors/*.cpp); registerBuiltins lists them all.
#include <climits>
#include <optional>
#include <sstream>

#include "gossamer/kit/network.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossip_config.hpp"

namespace gossamer::optimizers {

namespace detail {

namespace {
const std::vector<std::string> kModes{"sync", "overlap", "async"};
// Async flush: with the membership service on, a rank behind is waited for
// as long as it lives (the service ends the wait for a dead or silent one).
double flushWaitFrom(const Config& c) { return c.getOr<bool>("membership.enabled", false) ? 86400.0 : 0.0; }
GossipMode modeFrom(const Config& c) { return parseGossipMode(c.get<std::string>("algorithm.mode")); }

/// What async mode of optimizer `owner` (when it is algorithm.name) cannot
/// do: wait for pushes longer than the transport's bound, or be checkpointed.
ConfigRule asyncLimits(std::string owner) {
  return [owner](const Config& c) -> std::optional<ConfigIssue> {
    if (c.get<std::string>("algorithm.name") != owner || c.get<std::string>("algorithm.mode") != "async")
      return std::nullopt;
    const double wait = c.get<double>("algorithm.async_wait_seconds");
    const double timeout = c.get<double>("transport.timeout_seconds");
    if (wait > timeout)
      return ConfigIssue{"algorithm.async_wait_seconds",
                         formatConfigValue(wait) + " s is above transport.timeout_seconds (" +
                             formatConfigValue(timeout) + " s), which bounds every wait of async mode"};
    if (auto asked = checkpointsRequested(c))
      return ConfigIssue{"algorithm.mode", owner + " in async mode cannot be checkpointed, and " + *asked +
                                               " (sync and overlap can be; or turn checkpoints off)"};
    return std::nullopt;
  };
}
}  // namespace

SgdOptions sgdFrom(const Config& c) {
  return SgdOptions{c.get<double>("training.learning_rate"), c.get<double>("training.momentum"),
                    c.get<double>("training.weight_decay")};
}
CrossoverOptions crossoverFrom(const Config& c) {
  CrossoverOptions o;
  o.sgd = sgdFrom(c);
  o.segments = c.get<int>("algorithm.segments");
  o.interval = c.get<int>("algorithm.interval");
  o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
  o.mode = modeFrom(c);
  o.weightFloor = c.get<double>("algorithm.weight_floor");
  o.asyncWaitSeconds = c.get<double>("algorithm.async_wait_seconds");
  o.flushWaitSeconds = flushWaitFrom(c);
  o.agreement = collectiveOptionsFrom(c);
  o.checkReceived = c.get<bool>("algorithm.check_received");
  return o;
}
std::size_t total(const std::vector<std::size_t>& sizes) {
  std::size_t p = 0;
  for (auto s : sizes) p += s;
  return p;
}
SgpOptions sgpFrom(const Config& c) {
  SgpOptions o;
  o.sgd = sgdFrom(c);
  o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
  o.mode = modeFrom(c);
  o.weightFloor = c.get<double>("algorithm.weight_floor");
  o.asyncWaitSeconds = c.get<double>("algorithm.async_wait_seconds");
  o.flushWaitSeconds = flushWaitFrom(c);
  o.agreement = collectiveOptionsFrom(c);
  o.checkReceived = c.get<bool>("algorithm.check_received");
  return o;
}

KeySet gossipKeys(const std::string& owner) {
  return KeySet()
      .text("mode", "sync", kModes,
            "sync (wait for this step's messages), overlap (consume at step k+1 what was sent at step k) "
            "or async (mix whatever has arrived)")
      .real(
          "weight_floor", SgpOptions{}.weightFloor, {0.0, false, 1.0, false},
          "async mode: a rank pushes its model (SGP) or a segment (Crossover-SGD) only while that push-sum "
          "weight is at least max(0.5, this), otherwise keeping its mass until the peers' pushes raise it; "
          "loss-tolerant SGP: a weight below this keeps its mass instead of pushing (no underflow; the mass "
          "stays exact)")
      .real("async_wait_seconds", SgpOptions{}.asyncWaitSeconds, {0.0, true, 3600.0, true},
            "async mode: a rank whose push-sum weight (SGP's, or a Crossover-SGD segment's) is too low to "
            "push waits up to this long for pushes from any peer (bounded staleness; 0 never waits; at most "
            "transport.timeout_seconds; unused in sync and overlap)")
      .boolean("check_received", true,
               "refuse a peer's gossip message holding a NaN or infinite value, or a push-sum weight outside "
               "[0, world_size], instead of mixing it in (counted and logged: one corrupt peer cannot poison "
               "the average)")
      .rule(asyncLimits(owner))
      // Set under an algorithm that does not read it (interval under sgp), a
      // key is an error rather than a setting without effect.
      .onlyWhenSelected();
}
KeySet crossoverKeys(const std::string& owner) {
  return gossipKeys(owner)
      .integer("segments", 4, 1, 4096, "Crossover-SGD segments S per model")
      .integer("interval", 1, 1, INT_MAX, "local steps between exchanges");
}

KeySet correctedGossipKeys(const std::string& owner) {
  return crossoverKeys(owner).text(
      "base", "crossover_sgd", {"crossover_sgd", "sgp"},
      "gradient_tracking, d2, quasi_global_momentum: the gossip algorithm whose exchange "
      "mixes the models (crossover_sgd: segments over a doubly stochastic topology, fair or "
      "bandwidth roulette or ring; sgp: push-sum over any topology.kind, directed ones "
      "included; d2 takes crossover_sgd on a fixed symmetric one, the ring)");
}

std::unique_ptr<DistributedOptimizer> makeGossipBase(const OptimizerContext& ctx,
                                                     const std::vector<std::size_t>& tensorSizes) {
  const Config& c = ctx.config;
  if (c.get<std::string>("algorithm.base") == "sgp")
    return std::make_unique<Sgp>(ctx.transport, ctx.topology, total(tensorSizes), sgpFrom(c));
  return std::make_unique<CrossoverSgd>(ctx.transport, ctx.topology, tensorSizes, crossoverFrom(c));
}

}  // namespace detail

namespace {
using detail::crossoverFrom;
using detail::crossoverKeys;
using detail::gossipKeys;
using detail::sgdFrom;
using detail::sgpFrom;
using detail::total;

/// algorithm.groups: when given, a partition of [0, world_size).
std::optional<ConfigIssue> checkGroups(const Config& c) {
  return checkRankPartition(c, "algorithm.groups", "group");
}

}  // namespace

void registerLocalSgdKeys(Registry& registry) {
  const SgdOptions d;
  registry.addSection(
      "training", "How each peer trains.",
      KeySet()
          .real("learning_rate", d.learningRate, {0.0, true, kUnbounded, false}, "SGD step size")
          .real("momentum", d.momentum, {0.0, true, 1.0, false}, "heavy-ball momentum")
          .real("weight_decay", d.weightDecay, {0.0, true, kUnbounded, false}, "L2 coefficient"));
}

void registerAllReduceSgd(Registry& registry) {
  registry.addOptimizer(
      "allreduce_sgd", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        return std::make_unique<AllReduceSgd>(ctx.communicator, total(ctx.tensorSizes), sgdFrom(ctx.config));
      });
}

void registerCrossoverSgd(Registry& registry) {
  registry.addOptimizer(
      "crossover_sgd",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        return std::make_unique<CrossoverSgd>(ctx.transport, ctx.topology, ctx.tensorSizes,
                                              crossoverFrom(ctx.config));
      },
      crossoverKeys("crossover_sgd"));
}

void registerSgp(Registry& registry) {
  registry.addOptimizer(
      "sgp",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        if (ctx.config.get<bool>("algorithm.loss_tolerant"))
          return std::make_unique<LossTolerantSgp>(ctx.transport, ctx.topology, total(ctx.tensorSizes),
                                                   sgpFrom(ctx.config));
        return std::make_unique<Sgp>(ctx.transport, ctx.topology, total(ctx.tensorSizes),
                                     sgpFrom(ctx.config));
      },
      gossipKeys("sgp")
          .boolean("loss_tolerant", false,
                   "push-sum with running sums per edge: lost, duplicated or reordered messages lose "
                   "no mass (never waits; 16 + 8P bytes per message)")
          .rule([](const Config& c) -> std::optional<ConfigIssue> {
            // Its running sums per edge are not saved (a resumed rank's
            // sums would disagree with its peers').
            if (c.get<std::string>("algorithm.name") != "sgp" || !c.get<bool>("algorithm.loss_tolerant"))
              return std::nullopt;
            auto asked = checkpointsRequested(c);
            if (!asked) return std::nullopt;
            return ConfigIssue{"algorithm.loss_tolerant", "loss-tolerant SGP cannot be checkpointed, and " +
                                                              *asked +
                                                              " (plain SGP can be; or turn checkpoints off)"};
          }));
}

void registerHierarchical(Registry& registry) {
  registry.addOptimizer(
      "hierarchical",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        const Config& c = ctx.config;
        // Without explicit groups, the leader groups follow the network's islands.
        auto given = c.get<std::vector<std::vector<int>>>("algorithm.groups");
        if (given.empty()) given = c.get<std::vector<std::vector<int>>>("network.islands");
        auto groups = topologies::makeGroups(c.worldSize(), c.get<int>("algorithm.group_size"), given);
        const int leaders = static_cast<int>(groups.size());
        const std::string& inter = c.get<std::string>("algorithm.inter_algorithm");
        std::unique_ptr<Topology> topo;
        if (inter == "sgp")
          topo = std::make_unique<topologies::DirectedExponential>(leaders,
                                                                   c.get<int>("topology.peers_per_step"));
        else if (leaders >= 2)
          topo = std::make_unique<topologies::FairRoulette>(leaders, c.seed());
        else
          topo = std::make_unique<topologies::Ring>(leaders);
        return std::make_unique<Hierarchical>(ctx.transport, std::move(groups), inter, std::move(topo),
                                              ctx.tensorSizes, crossoverFrom(c));
      },
      crossoverKeys("hierarchical")
          .intListList("groups", 0, kMaxWorldSize - 1, true,
                       "explicit leader groups (a partition of the ranks); empty = the network's islands "
                       "(network.islands), else consecutive groups of group_size")
          .namesRanks(RankKey::kPartition)
          .integer("group_size", 4, 1, kMaxWorldSize,
                   "ranks per group when neither groups nor islands are given (the last group keeps the "
                   "remainder; more than the job's ranks makes one group)")
          .text("inter_algorithm", "crossover_sgd", {"crossover_sgd", "sgp"}, "what the group leaders run")
          .rule(checkGroups));
}

namespace {
// NoLoCo's outer step moves the gap e between a pair's thetas (and the gap
// of their momenta, m) as e' = (1 - gamma) e - mu m, m' = mu m + gamma e,
// whose roots stay inside the unit circle only for 0 <= gamma < 2 (1 + mu):
// a larger gamma drives the pair apart, round after round.
std::optional<ConfigIssue> checkNolocoGamma(const Config& c) {
  if (c.get<std::string>("algorithm.outer") != "noloco") return std::nullopt;
  const double gamma = c.get<double>("algorithm.noloco_gamma"),
               mu = c.get<double>("algorithm.outer_momentum");
  if (gamma < 2 * (1 + mu)) return std::nullopt;
  std::ostringstream m;
  m << "noloco_gamma " << gamma << " drives each pair's thetas apart: the outer step is stable only below "
    << "2 (1 + outer_momentum) = " << 2 * (1 + mu);
  return ConfigIssue{"algorithm.noloco_gamma", m.str()};
}
}  // namespace

void registerDiloco(Registry& registry) {
  const DilocoOptions d;
  registry.addOptimizer(
      "diloco",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        const Config& c = ctx.config;
        DilocoOptions o;
        o.sgd = sgdFrom(c);
        o.innerSteps = c.get<int>("algorithm.inner_steps");
        o.outerLearningRate = c.get<double>("algorithm.outer_learning_rate");
        o.outerMomentum = c.get<double>("algorithm.outer_momentum");
        o.outer = parseDilocoOuter(c.get<std::string>("algorithm.outer"));
        o.nolocoGamma = c.get<double>("algorithm.noloco_gamma");
        o.overlap = c.get<bool>("algorithm.overlap");
        o.seed = c.seed();
        o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
        return std::make_unique<Diloco>(ctx.communicator, total(ctx.tensorSizes), o);
      },
      KeySet()
          .integer("inner_steps", d.innerSteps, 1, 1000000,
                   "DiLoCo: local SGD steps (training.*) between outer steps, H")
          .real("outer_learning_rate", d.outerLearningRate, {0.0, false, 10.0, true},
                "DiLoCo: step size of the outer Nesterov step on the averaged pseudo-gradient")
          .real("outer_momentum", d.outerMomentum, {0.0, true, 1.0, false},
                "DiLoCo: Nesterov momentum of the outer step (0 with outer_learning_rate 1: model averaging)")
          .text("outer", "allreduce", {"allreduce", "gossip", "noloco"},
                "DiLoCo: average the pseudo-gradients over every rank (allreduce, as collectives.allreduce) "
                "or with one random peer per round (gossip, a perfect matching seeded by seed; noloco: the "
                "same pairs with NoLoCo's outer step, which pulls theta towards the pair's mean)")
          .real("noloco_gamma", d.nolocoGamma, {0.0, true, 10.0, true},
                "DiLoCo with outer noloco: weight of the pull of theta towards the pair's mean theta")
          .boolean(
              "overlap", d.overlap,
              "DiLoCo: overlap each outer exchange with the next inner steps and apply it one round late")
          .rule(checkNolocoGamma)
          .onlyWhenSelected());
}

void registerBuiltins(Registry& registry) {
  registerLocalSgdKeys(registry);
  registerAllReduceSgd(registry);
  registerCrossoverSgd(registry);
  registerSgp(registry);
  registerHierarchical(registry);
  registerDiloco(registry);
  registerTopK(registry);
  registerGaussianK(registry);
  registerQsgd(registry);
  registerA2sgd(registry);
  registerHalfCompressors(registry);
  registerAlgorithms(registry);
  registry.setDefault("algorithm", "crossover_sgd");
}

}  // namespace gossamer::optimizers
