// The gossip optimizers' configuration, shared by their registrations
// (register.cpp) and by the algorithms built on a gossip exchange
// (src/algorithms/: gradient tracking, D², quasi-global momentum), which read
// the same `algorithm:` keys and build their exchange with the same options.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/schema.hpp"

namespace gossamer::optimizers::detail {

/// training.learning_rate, momentum, weight_decay.
SgdOptions sgdFrom(const Config& c);
/// Crossover-SGD's options from `algorithm:` and `transport.timeout_seconds`.
CrossoverOptions crossoverFrom(const Config& c);
/// SGP's options from `algorithm:` and `transport.timeout_seconds`.
SgpOptions sgpFrom(const Config& c);
/// The sum of `sizes` (elements).
std::size_t total(const std::vector<std::size_t>& sizes);
/// The keys every gossip optimizer reads: mode, weight_floor,
/// async_wait_seconds, check_received; with the rules of async mode for
/// optimizer `owner` (its algorithm.name): async_wait_seconds at most
/// transport.timeout_seconds, and no checkpoints.
KeySet gossipKeys(const std::string& owner);
/// gossipKeys(owner) and Crossover-SGD's segments and interval.
KeySet crossoverKeys(const std::string& owner);

/// crossoverKeys(owner) and `base` (crossover_sgd or sgp): the keys of an
/// algorithm that runs on a gossip optimizer's exchange.
KeySet correctedGossipKeys(const std::string& owner);

/// The gossip optimizer named by `algorithm.base` (crossover_sgd or sgp), with
/// the options of `ctx.config`, over the flat vector whose tensors have
/// `tensorSizes` elements (for an exchange of more than the model, e.g. the
/// model and a gradient tracker side by side).
/// @throws InvalidArgument / ConfigError as the optimizers' constructors.
std::unique_ptr<DistributedOptimizer> makeGossipBase(const OptimizerContext& ctx,
                                                     const std::vector<std::size_t>& tensorSizes);

}  // namespace gossamer::optimizers::detail
