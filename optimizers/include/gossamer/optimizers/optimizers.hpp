// Training algorithms built from the sdk primitives.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/topology.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::optimizers {

/// Hyper-parameters of the local SGD step.
struct SgdOptions {
  double learningRate = 0.01;  ///< Step size (>= 0).
  double momentum = 0.9;       ///< Heavy-ball coefficient in [0, 1).
  double weightDecay = 0.0;    ///< L2 coefficient (>= 0).
};

/// Mini-batch SGD with heavy-ball momentum on a flat vector of P elements:
///   v <- momentum * v + (g + weightDecay * x);  x <- x - learningRate * v
/// (the PyTorch convention). Holds the velocity v (P floats).
class LocalSgd {
 public:
  /// @throws InvalidArgument for out-of-range options.
  LocalSgd(std::size_t numParams, const SgdOptions& options);
  /// @throws InvalidArgument if params or grads do not have P elements.
  void apply(std::span<float> params, std::span<const float> grads);
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
};

/// AllReduce-SGD: every step the gradients (P float32) are averaged over all
/// ranks with the ring allreduce (paper 000_a4345579c41fcb1d.txt, Eq. 2), then
/// each rank applies the same LocalSgd step, so models stay identical. Bytes
/// sent per rank per step: 2 (N-1)/N * 4P.
class AllReduceSgd final : public DistributedOptimizer {
 public:
  AllReduceSgd(Communicator& communicator, std::size_t numParams, const SgdOptions& options);
  std::string name() const override { return "allreduce_sgd"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  std::uint64_t steps() const override { return steps_; }

 private:
  Communicator& comm_;
  LocalSgd sgd_;
  std::vector<float> buffer_;
  std::uint64_t steps_ = 0;
};

/// Options of Crossover-SGD.
struct CrossoverOptions {
  SgdOptions sgd;
  int segments = 4;            ///< S: segments of the flat vector (along tensor boundaries).
  int interval = 1;            ///< Local steps between exchanges (>= 1).
  double timeoutSeconds = 30;  ///< Bound on each exchange's waits.
};

/// Crossover-SGD (paper 004_659e3573d5645e2e.txt, Algorithm 1): after each
/// local SGD step (every `interval` steps) the flat parameter vector is cut
/// into S segments along tensor boundaries; for every segment s the topology
/// (normally FairRoulette, Algorithm 2) names one destination per rank; all S
/// receives are posted and all S sends issued at once, then each segment is
/// mixed with the topology's weights — for the fair roulette
///   x_s <- (x_s + received_s) / 2.
/// Bytes sent per rank per exchange: 4P (the model once). With a doubly
/// stochastic mixing matrix the average of the models over ranks is unchanged
/// by an exchange.
class CrossoverSgd final : public DistributedOptimizer {
 public:
  /// @param tensorSizes element counts of the model's tensors, in flat order.
  /// @throws InvalidArgument for bad options or a topology of another world size.
  CrossoverSgd(Transport& transport, const Topology& topology, const std::vector<std::size_t>& tensorSizes,
               const CrossoverOptions& options);
  std::string name() const override { return "crossover_sgd"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  std::uint64_t steps() const override { return steps_; }

  /// One gossip exchange of every segment in round `round` (no SGD step).
  /// Exposed for tests and for averaging-only use.
  void exchange(std::span<float> params, std::uint64_t round);
  const std::vector<std::pair<std::size_t, std::size_t>>& segments() const { return segments_; }

 private:
  Transport& transport_;
  const Topology& topology_;
  CrossoverOptions options_;
  LocalSgd sgd_;
  std::size_t numParams_;
  std::vector<std::pair<std::size_t, std::size_t>> segments_;
  std::vector<float> recvBuffer_;
  std::uint64_t steps_ = 0;
  std::uint64_t rounds_ = 0;
};

/// Registers "allreduce_sgd" and "crossover_sgd", configured from the
/// `algorithm:` and `training:` sections.
void registerBuiltins(Registry& registry);

}  // namespace gossamer::optimizers
