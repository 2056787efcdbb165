#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

namespace {
SgdOptions sgdFrom(const Config& c) {
  return SgdOptions{c.training.learningRate, c.training.momentum, c.training.weightDecay};
}
CrossoverOptions crossoverFrom(const Config& c) {
  CrossoverOptions o;
  o.sgd = sgdFrom(c);
  o.segments = c.algorithm.segments;
  o.interval = c.algorithm.interval;
  o.timeoutSeconds = c.transport.timeoutSeconds;
  o.mode = parseGossipMode(c.algorithm.mode);
  return o;
}
std::size_t total(const std::vector<std::size_t>& sizes) {
  std::size_t p = 0;
  for (auto s : sizes) p += s;
  return p;
}
}  // namespace

void registerBuiltins(Registry& registry) {
  registry.addOptimizer("allreduce_sgd", [](const OptimizerContext& ctx) {
    return std::make_unique<AllReduceSgd>(ctx.communicator, total(ctx.tensorSizes), sgdFrom(ctx.config));
  });
  registry.addOptimizer("crossover_sgd", [](const OptimizerContext& ctx) {
    return std::make_unique<CrossoverSgd>(ctx.transport, ctx.topology, ctx.tensorSizes,
                                          crossoverFrom(ctx.config));
  });
  registry.addOptimizer("sgp", [](const OptimizerContext& ctx) {
    SgpOptions o{sgdFrom(ctx.config), ctx.config.transport.timeoutSeconds,
                 parseGossipMode(ctx.config.algorithm.mode)};
    return std::make_unique<Sgp>(ctx.transport, ctx.topology, total(ctx.tensorSizes), o);
  });
  registry.addOptimizer("hierarchical", [](const OptimizerContext& ctx) {
    const Config& c = ctx.config;
    auto groups = topologies::makeGroups(c.worldSize, c.algorithm.groupSize, c.algorithm.groups);
    const int leaders = static_cast<int>(groups.size());
    std::unique_ptr<Topology> topo;
    if (c.algorithm.interAlgorithm == "sgp")
      topo = std::make_unique<topologies::DirectedExponential>(leaders, c.topology.peersPerStep);
    else if (leaders >= 2)
      topo = std::make_unique<topologies::FairRoulette>(leaders, c.seed);
    else
      topo = std::make_unique<topologies::Ring>(leaders);
    return std::make_unique<Hierarchical>(ctx.transport, std::move(groups), c.algorithm.interAlgorithm,
                                          std::move(topo), ctx.tensorSizes, crossoverFrom(c));
  });
}

}  // namespace gossamer::optimizers
