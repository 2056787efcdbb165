#include "gossamer/optimizers/compress.hpp"
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
SgpOptions sgpFrom(const Config& c) {
  return SgpOptions{sgdFrom(c), c.transport.timeoutSeconds, parseGossipMode(c.algorithm.mode)};
}

// `compression:` -> the compressor and CompressedSgd's options. "auto" means
// and sync follow the algorithm: allreduce under allreduce_sgd, gossip under
// the gossip optimizers.
std::unique_ptr<Compressor> compressorFrom(const OptimizerContext& ctx) {
  const CompressionConfig& z = ctx.config.compression;
  CompressionOptions o;
  o.kind = z.kind;
  o.topkRatio = z.topkRatio;
  o.qsgd.levels = z.qsgdLevels;
  o.qsgd.bucketSize = static_cast<std::size_t>(z.qsgdBucketSize);
  o.qsgd.seed = ctx.config.seed;
  o.qsgd.rank = ctx.transport.rank();
  o.a2sgd.keepError = z.keepError;
  return makeCompressor(o, total(ctx.tensorSizes));
}
CompressedSgdOptions compressedFrom(const Config& c, bool gossipAlgorithm) {
  const CompressionConfig& z = c.compression;
  CompressedSgdOptions o;
  o.sgd = sgdFrom(c);
  const bool gossipMeans = z.means == "gossip" || (z.means == "auto" && gossipAlgorithm);
  o.means = gossipMeans ? MeansExchange::kGossip : MeansExchange::kAllreduce;
  o.gossipRounds = z.gossipRounds;
  const bool gossipSync = z.sync == "gossip" || (z.sync == "auto" && gossipAlgorithm);
  o.sync = gossipSync ? ModelSync::kGossip : ModelSync::kAllreduce;
  o.syncPeriod = static_cast<std::uint64_t>(z.syncPeriod);
  o.finalSync = z.finalSync;
  o.timeoutSeconds = c.transport.timeoutSeconds;
  return o;
}
// A2SGD in a gossip deployment: the gossip optimizer's exchange (no SGD step)
// is the model synchronisation.
std::unique_ptr<DistributedOptimizer> compressedGossip(const OptimizerContext& ctx, ModelAverager averager) {
  return std::make_unique<CompressedSgd>(ctx.communicator, &ctx.topology, compressorFrom(ctx),
                                         std::move(averager), compressedFrom(ctx.config, true));
}
}  // namespace

void registerBuiltins(Registry& registry) {
  registry.addOptimizer(
      "allreduce_sgd", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        if (ctx.config.compression.kind != "none") {
          return std::make_unique<CompressedSgd>(ctx.communicator, &ctx.topology, compressorFrom(ctx),
                                                 nullptr, compressedFrom(ctx.config, false));
        }
        return std::make_unique<AllReduceSgd>(ctx.communicator, total(ctx.tensorSizes), sgdFrom(ctx.config));
      });
  registry.addOptimizer(
      "crossover_sgd", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        if (ctx.config.compression.kind != "none") {
          auto crossover = std::make_shared<CrossoverSgd>(ctx.transport, ctx.topology, ctx.tensorSizes,
                                                          crossoverFrom(ctx.config));
          return compressedGossip(ctx, [crossover](std::span<float> params, std::uint64_t round) {
            crossover->exchange(params, round);
          });
        }
        return std::make_unique<CrossoverSgd>(ctx.transport, ctx.topology, ctx.tensorSizes,
                                              crossoverFrom(ctx.config));
      });
  registry.addOptimizer("sgp", [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
    if (ctx.config.compression.kind != "none") {
      auto sgp =
          std::make_shared<Sgp>(ctx.transport, ctx.topology, total(ctx.tensorSizes), sgpFrom(ctx.config));
      return compressedGossip(
          ctx, [sgp](std::span<float> params, std::uint64_t round) { sgp->gossip(params, round); });
    }
    return std::make_unique<Sgp>(ctx.transport, ctx.topology, total(ctx.tensorSizes), sgpFrom(ctx.config));
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
