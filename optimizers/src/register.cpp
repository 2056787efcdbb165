#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::optimizers {

namespace {
SgdOptions sgdFrom(const Config& c) {
  return SgdOptions{c.training.learningRate, c.training.momentum, c.training.weightDecay};
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
    CrossoverOptions o;
    o.sgd = sgdFrom(ctx.config);
    o.segments = ctx.config.algorithm.segments;
    o.interval = ctx.config.algorithm.interval;
    o.timeoutSeconds = ctx.config.transport.timeoutSeconds;
    return std::make_unique<CrossoverSgd>(ctx.transport, ctx.topology, ctx.tensorSizes, o);
  });
}

}  // namespace gossamer::optimizers
