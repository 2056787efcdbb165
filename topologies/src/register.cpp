// The built-in topologies, each registered by its own file.
#include "gossamer/registry.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::topologies {

void registerBuiltins(Registry& registry) {
  registerRing(registry);
  registerFairRoulette(registry);
  registerBandwidthRoulette(registry);
  registerDirectedExponential(registry);
  registerExplicitGraph(registry);
  registry.setDefault("topology", "fair_roulette");
}

}  // namespace gossamer::topologies
