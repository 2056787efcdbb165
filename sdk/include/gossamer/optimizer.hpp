// Distributed optimizer interface: one training step on a flat parameter
// vector, including whatever communication the algorithm does.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace gossamer {

/// A decentralised training algorithm (AllReduce-SGD, Crossover-SGD, ...).
/// Every rank calls step() the same number of times. Not thread-safe.
class DistributedOptimizer {
 public:
  virtual ~DistributedOptimizer() = default;
  virtual std::string name() const = 0;
  /// One training step. `params` (P elements, float32) is updated in place from
  /// this rank's gradient `grads` (P elements) and the peers' messages.
  /// @throws InvalidArgument on a length mismatch; TimeoutError / PeerFailure
  ///         / ProtocolError from the exchange.
  virtual void step(std::span<float> params, std::span<const float> grads) = 0;
  /// Completes communication still in flight (overlapping variants); a no-op
  /// for synchronous ones. Call before evaluating or saving the model.
  virtual void flush(std::span<float> params) { (void)params; }
  /// Steps taken so far.
  virtual std::uint64_t steps() const = 0;
  /// Announces how many steps the run takes in all (the trainer knows it, the
  /// config does not), before the first step. Algorithms with a special last
  /// step use it: A2SGD synchronises the models after step `totalSteps`
  /// (paper 002_924d025a547be22c.txt, Algorithm 1, lines 9-10). Optional;
  /// the default ignores it. 0 means unknown.
  virtual void setTotalSteps(std::uint64_t totalSteps) { (void)totalSteps; }
};

}  // namespace gossamer
