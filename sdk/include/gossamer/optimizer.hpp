// Distributed optimizer interface: one training step on a flat parameter
// vector, including whatever communication the algorithm does.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "gossamer/kit/wire.hpp"

namespace gossamer {

class Checkpoint;

/// A decentralised training algorithm (AllReduce-SGD, Crossover-SGD, ...).
/// Every rank calls step() the same number of times. Not thread-safe.
/// One synchronous gossip round of the whole model (`params`, P float32
/// elements, updated in place) with the optimizer's peers in round `round`,
/// without a local step.
using ModelExchange = std::function<void(std::span<float> params, std::uint64_t round)>;

class DistributedOptimizer {
 public:
  virtual ~DistributedOptimizer() = default;
  virtual std::string name() const = 0;
  /// One training step. `params` (P elements, float32) is updated in place from
  /// this rank's gradient `grads` (P elements) and the peers' messages.
  /// @throws InvalidArgument on a length mismatch; TimeoutError / PeerFailure
  ///         / ProtocolError from the exchange.
  virtual void step(std::span<float> params, std::span<const float> grads) = 0;
  /// Communication-only form, for a local step that another optimizer makes
  /// (a torch.optim optimizer, Adam, ...). Each training step, after the
  /// backward pass, call
  ///   reduceGradients(grads);  <local step on params with grads>;  mixParameters(params);
  /// Together they do what step() does apart from its own SGD update:
  /// AllReduce-SGD and the gradient compressors average `grads` (P float32,
  /// in place) and leave the parameters alone; the gossip algorithms leave
  /// `grads` alone and mix `params` (P float32, in place) with their peers'
  /// after the step (push-sum keeps its weight; overlap and async modes keep
  /// their semantics); hierarchical groups do both. Each step calls both,
  /// in that order, on every rank.
  /// @throws InvalidArgument on a length mismatch, or if this optimizer has
  ///         no communication-only form (the default); TimeoutError /
  ///         PeerFailure / ProtocolError from the exchange.
  virtual void reduceGradients(std::span<float> grads);
  /// See reduceGradients. Counts a step.
  virtual void mixParameters(std::span<float> params);
  /// Whether reduceGradients and mixParameters are implemented.
  virtual bool hasCommunicationOnlyForm() const { return false; }
  /// True after a reduceGradients that leaves this step out: with the
  /// membership service, a view change inside it found this rank behind
  /// the survivors (or rejoining), so it takes their step count (and, with
  /// a replicated model, their model) instead; `grads` is left as given.
  /// The caller then makes no local step and calls mixParameters, which
  /// exchanges nothing; steps() then gives the survivors' count. False
  /// otherwise (the default, and always without membership). A replicated
  /// model's realignment writes into the parameters last given to
  /// mixParameters or flush: call flush(params) once before the first step.
  virtual bool skipsLocalStep() const { return false; }
  /// Completes communication still in flight (overlapping variants); a no-op
  /// for synchronous ones. Call before evaluating or saving the model.
  virtual void flush(std::span<float> params) { (void)params; }
  /// Steps taken so far.
  virtual std::uint64_t steps() const = 0;
  /// Announces how many steps the run takes in all (the trainer knows it, the
  /// config does not), before the first step. Algorithms with a special last
  /// step use it: A2SGD synchronises the models after step `totalSteps`
  /// (Bhattacharya et al., "O(1) Communication for Distributed SGD through
  /// Two-Level Gradient Averaging", Algorithm 1, lines 9-10). Optional;
  /// the default ignores it. 0 means unknown.
  virtual void setTotalSteps(std::uint64_t totalSteps) { (void)totalSteps; }
  /// True when every rank holds the same model after each step (AllReduce-SGD,
  /// compressors whose decoded average is the same everywhere): after a
  /// membership view change a rank that is behind copies the model of one
  /// that is not (Agent::recover). The default: false.
  virtual bool replicatedModel() const { return false; }
  /// True when every step exchanges with peers at the same step (synchronous
  /// and overlapping modes): after a view change the survivors realign their
  /// step counts (a rank that is behind skips the steps it missed). False for
  /// the async modes, whose ranks step at their own pace. The default: true.
  virtual bool lockstep() const { return true; }
  /// This rank's push-sum weight w (SGP: the model is the numerator / w; a
  /// positive double, 1 at the start, whose sum over the ranks is the world
  /// size when nothing is in flight). 1 for algorithms without one.
  virtual double pushSumWeight() const { return 1.0; }
  /// Messages from peers refused instead of mixed in: a NaN or infinite
  /// value, or a push-sum weight that cannot be one (gossip optimizers with
  /// `algorithm.check_received`, on by default). 0 for the others.
  virtual std::uint64_t rejectedMessages() const { return 0; }
  /// Writes what the optimizer carries from one step to the next (its step
  /// count, momentum, push-sum weight, ...) into `out`, in sections named
  /// `prefix` + a name of its own. Call it after flush(), at the same step on
  /// every rank. The default: InvalidArgument (not supported).
  /// @throws InvalidArgument if the optimizer (or its mode) cannot be saved.
  virtual void saveState(Checkpoint& out, const std::string& prefix) const;
  /// Restores what saveState wrote, before the next step. The optimizer must
  /// have been built with the same config and model size.
  /// @throws InvalidArgument for a missing section or a size mismatch, or if
  ///         not supported (the default).
  virtual void loadState(const Checkpoint& in, const std::string& prefix);
  /// The optimizer's own model exchange, for wrappers that replace its
  /// steps but keep how it mixes models (compressed training's model sync);
  /// empty when it has none (e.g. AllReduce-SGD, whose exchange is the
  /// allreduce). The function refers to this optimizer, which must outlive it.
  virtual ModelExchange modelExchange() { return {}; }
  /// Asks the optimizer to send its model exchanges' values as `wire`
  /// (DType::kBfloat16 or kFloat16: 2 bytes per element instead of 4; push-sum
  /// weights stay float64), before the first step; the model itself stays
  /// float32. Returns false when it has no model exchange that can (the
  /// default, e.g. AllReduce-SGD: compression.kind bf16 compresses its
  /// gradients instead). Crossover-SGD and SGP can (sync mode; SGP in every
  /// mode); how each keeps the models' mean despite the rounding is in its file.
  /// @throws InvalidArgument for a `wire` other than float32, float16, bfloat16.
  virtual bool setExchangeType(DType wire) {
    (void)wire;
    return false;
  }
};

}  // namespace gossamer
