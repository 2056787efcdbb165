// A compressor as a wrapper of the configured optimizer.
//
// The Agent builds the optimizer algorithm.name names, then hands it to the
// compressor compression.kind names. The wrapper keeps the inner optimizer's
// model exchange, if it has one (Crossover-SGD's segment gossip, SGP's
// push-sum), as CompressedSgd's model synchronisation and its means' gossip
// ("auto" means and sync: gossip); an optimizer without one (AllReduce-SGD)
// leaves both to allreduces. CompressedSgd then takes over the steps: each
// one exchanges the compressed gradient (see compressed_sgd.cpp for the bytes
// on the wire) instead of the inner optimizer's exchange.
#include "wrap.hpp"

#include <span>

#include "gossamer/optimizers/optimizers.hpp"

namespace gossamer::optimizers::detail {

namespace {

std::size_t total(const std::vector<std::size_t>& sizes) {
  std::size_t p = 0;
  for (auto s : sizes) p += s;
  return p;
}

/// Compressed exchanges are synchronous.
std::optional<ConfigIssue> checkCompressedMode(const Config& c) {
  const std::string mode = c.getOr<std::string>("algorithm.mode", "sync");
  if (c.get<std::string>("compression.kind") == "none" || mode == "sync") return std::nullopt;
  return ConfigIssue{"algorithm.mode", "compressed exchanges (compression.kind '" +
                                           c.get<std::string>("compression.kind") +
                                           "') are synchronous: mode must be 'sync', got '" + mode + "'"};
}

/// CompressedSgd's options. "auto" means and sync follow the inner
/// optimizer: gossip when it has a model exchange, allreduce otherwise. The
/// A2SGD keys are read when registered (other compressors keep the defaults).
CompressedSgdOptions compressedFrom(const Config& c, bool gossipOptimizer) {
  CompressedSgdOptions o;
  o.sgd = SgdOptions{c.get<double>("training.learning_rate"), c.get<double>("training.momentum"),
                     c.get<double>("training.weight_decay")};
  const std::string means = c.getOr<std::string>("compression.means", "auto");
  const std::string sync = c.getOr<std::string>("compression.sync", "auto");
  const bool gossipMeans = means == "gossip" || (means == "auto" && gossipOptimizer);
  o.means = gossipMeans ? MeansExchange::kGossip : MeansExchange::kAllreduce;
  o.gossipRounds = c.getOr("compression.gossip_rounds", o.gossipRounds);
  const bool gossipSync = sync == "gossip" || (sync == "auto" && gossipOptimizer);
  o.sync = gossipSync ? ModelSync::kGossip : ModelSync::kAllreduce;
  o.syncPeriod = static_cast<std::uint64_t>(c.getOr("compression.sync_period", 0));
  o.finalSync = c.getOr("compression.final_sync", o.finalSync);
  o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
  return o;
}

}  // namespace

ConfigRule needsAllReduceSgd(const std::string& kind) {
  return [kind](const Config& c) -> std::optional<ConfigIssue> {
    if (c.get<std::string>("compression.kind") != kind ||
        c.get<std::string>("algorithm.name") == "allreduce_sgd")
      return std::nullopt;
    return ConfigIssue{"compression.kind",
                       "'" + kind +
                           "' compresses AllReduce-SGD's gradients: it needs algorithm.name "
                           "'allreduce_sgd', got '" +
                           c.get<std::string>("algorithm.name") + "'"};
  };
}

ConfigRule refuseCheckpoints(const std::string& kind, bool onlyUnderAllReduceSgd) {
  return [kind, onlyUnderAllReduceSgd](const Config& c) -> std::optional<ConfigIssue> {
    if (c.get<std::string>("compression.kind") != kind) return std::nullopt;
    if (onlyUnderAllReduceSgd && c.get<std::string>("algorithm.name") != "allreduce_sgd") return std::nullopt;
    auto asked = checkpointsRequested(c);
    if (!asked) return std::nullopt;
    return ConfigIssue{"compression.kind", "compressed training ('" + kind +
                                               "') cannot be checkpointed, and " + *asked +
                                               " (compression none can be; or turn checkpoints off)"};
  };
}

void registerCompressor(Registry& registry, const std::string& name, MakeCompressor make, KeySet keys) {
  keys.rule(refuseCheckpoints(name, false));
  registerCompressorFactory(registry, name, compressedSgdFactory(std::move(make)), std::move(keys));
}

void registerCompressorFactory(Registry& registry, const std::string& name, CompressorFactory factory,
                               KeySet keys) {
  keys.rule(checkCompressedMode);
  registry.addCompressor(name, std::move(factory), keys);
}

CompressorFactory compressedSgdFactory(MakeCompressor make) {
  return [make = std::move(make)](
             const OptimizerContext& ctx,
             std::unique_ptr<DistributedOptimizer> inner) -> std::unique_ptr<DistributedOptimizer> {
    std::shared_ptr<DistributedOptimizer> keep = std::move(inner);
    ModelExchange exchange = keep ? keep->modelExchange() : ModelExchange{};
    const bool gossip = static_cast<bool>(exchange);
    ModelAverager averager;
    if (gossip) {
      // The lambda owns the inner optimizer its exchange refers to.
      averager = [keep, exchange](std::span<float> params, std::uint64_t round) { exchange(params, round); };
    }
    return std::make_unique<CompressedSgd>(ctx.communicator, &ctx.topology, make(ctx, total(ctx.tensorSizes)),
                                           std::move(averager), compressedFrom(ctx.config, gossip));
  };
}

}  // namespace gossamer::optimizers::detail
