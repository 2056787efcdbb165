// Heterogeneity-corrected decentralized SGD: algorithms that remove the bias
// plain gossip SGD has when the peers' data differ (non-IID), each built on a
// gossip optimizer's exchange (Crossover-SGD or SGP) and each in its own file
// under optimizers/src/algorithms/ with its paper:
//
//   GradientTracking      gradient_tracking.cpp  (DIGing / Push-DIGing)
//   D2                    d2.cpp                 (Tang et al., ICML 2018)
//   QuasiGlobalMomentum   quasi_global_momentum.cpp (Lin et al., ICML 2021)
//
// Each takes the gossip optimizer it mixes with (its `base`) and uses only its
// communication-only form (mixParameters), so they work over every topology
// and mode the base supports, within the limits each class states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gossamer/optimizer.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topology.hpp"

namespace gossamer::optimizers {

/// Gradient tracking: each rank gossips, beside its model x (P float32), an
/// estimate y (P float32) of the average gradient over all ranks, and steps
/// along y instead of its own gradient g:
///   y_t = W y_{t-1} + g_t - g_{t-1}   (y_0 = g_0)
///   x_{t+1} = W (x_t - lr * momentum-SGD(y_t))
/// The sum of the y over the ranks equals the sum of the g, so at a fixed
/// point the models agree and the average gradient is 0: with a constant
/// step it reaches the minimizer of the average loss, where plain gossip SGD
/// stops at a point biased towards each rank's own minimizer. Pu and Nedić,
/// "Distributed stochastic gradient tracking methods" (Math. Programming
/// 2021), Eq. (3); Nedić, Olshevsky and Shi, "Achieving geometric convergence
/// for distributed optimization over time-varying graphs" (SIAM J. Optim.
/// 2017), Alg. DIGing and, over push-sum (SGP), Push-DIGing (Sec. 4).
///
/// The base exchanges [x; y] (2P elements) in one round, so every step sends
/// twice the base's bytes (8P per destination with float32 on the wire; the
/// base's 16-bit wire halves both). Sync and overlap modes; async is refused.
class GradientTracking final : public DistributedOptimizer {
 public:
  /// @param base a gossip optimizer built over 2P elements (the model's
  ///        tensors twice: x then y), with a communication-only form, in a
  ///        lockstep mode (sync or overlap). Owned.
  /// @param numParams P, the model's elements.
  /// @param sgd the local step applied along y (momentum and weight decay included).
  /// @throws InvalidArgument for a null base, one without a communication-only
  ///         form, an async base, or bad SGD options.
  GradientTracking(std::unique_ptr<DistributedOptimizer> base, std::size_t numParams, const SgdOptions& sgd);
  std::string name() const override { return "gradient_tracking"; }
  /// reduceGradients, the local SGD step along y, mixParameters.
  /// @throws InvalidArgument on a length mismatch; the base's errors.
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Replaces `grads` (g_t, P float32, in place) with this rank's tracker
  /// y_t (divided by the push-sum weight over SGP: a step on the numerator).
  void reduceGradients(std::span<float> grads) override;
  /// Mixes [x; y] with the peers (x = `params`, P float32, in place).
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  void flush(std::span<float> params) override;
  std::uint64_t steps() const override { return steps_; }
  bool lockstep() const override { return true; }
  double pushSumWeight() const override { return base_->pushSumWeight(); }
  std::uint64_t rejectedMessages() const override { return base_->rejectedMessages(); }
  /// Saves the step count, y, the last gradient, the local step's velocity
  /// and the base's state (section prefix + "base.").
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  /// The base's 16-bit wire, for x and y alike (compression.kind bf16 / fp16).
  bool setExchangeType(DType wire) override { return base_->setExchangeType(wire); }
  /// The tracker y (P float32; empty before the first step).
  std::span<const float> tracker() const;

 private:
  // [params; y] through the base's mixParameters (mix) or flush, y as numerators over push-sum.
  void throughBase(std::span<float> params, bool mix);

  std::unique_ptr<DistributedOptimizer> base_;
  std::size_t numParams_;
  LocalSgd sgd_;
  std::vector<float> stacked_;   // [x; y] (2P): y holds W y_{t-1} between steps
  std::vector<float> lastGrad_;  // g_{t-1}; empty before the first step
  std::vector<float> scratch_;   // step(): the gradient, replaced by y
  bool trackerReady_ = false;    // reduceGradients ran since the last mixParameters
  std::uint64_t steps_ = 0;
};

/// D² (Tang, Lian, Yan, Zhang and Liu, "D²: Decentralized Training over
/// Decentralized Data", ICML 2018, Algorithm 1): each rank mixes, instead of
/// its locally stepped model a_t = x_t - lr d_t, the corrected
///   x_{t+1} = W (2 x_t - x_{t-1} - lr (d_t - d_{t-1})) = W (a_t + x_t - a_{t-1})
/// (x_1 = W a_0). Summed over the ranks the corrections telescope, so the
/// mean model follows SGD on the average gradient, and at a fixed point the
/// average gradient is 0: the bias of plain gossip under non-IID data is
/// removed with no extra bytes on the wire (the base's, 4P per destination).
/// Needs a fixed symmetric doubly stochastic mixing matrix whose smallest
/// eigenvalue exceeds -1/3 (Theorem 1's conditions), checked on the
/// topology's first rounds (the ring; with an even number of ranks at
/// topology.self_weight 0.5); sync mode only. The communication-only form works with any
/// local step (d_t is what the local optimizer applied).
class D2 final : public DistributedOptimizer {
 public:
  /// @param base a Crossover-SGD optimizer over the model's P elements in sync mode. Owned.
  /// @param topology the base's topology, checked here (kept only for the check).
  /// @param segments the base's segments (each segment's matrix is checked).
  /// @throws InvalidArgument for a null base, one that is not a sync
  ///         Crossover-SGD, or mixing matrices of rounds 0-7 that change from
  ///         round to round, are not symmetric and doubly stochastic or have
  ///         an eigenvalue <= -1/3 (the message names the round, segment and
  ///         eigenvalue).
  D2(std::unique_ptr<DistributedOptimizer> base, const Topology& topology, int segments,
     std::size_t numParams, const SgdOptions& sgd);
  std::string name() const override { return "d2"; }
  /// The local SGD step, then mixParameters.
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Leaves `grads` alone (checks its length).
  void reduceGradients(std::span<float> grads) override;
  /// Mixes a_t + x_t - a_{t-1} (`params` holds a_t, P float32; the result
  /// x_{t+1} is written back).
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t rejectedMessages() const override { return base_->rejectedMessages(); }
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  /// The base's 16-bit wire (compression.kind bf16 / fp16).
  bool setExchangeType(DType wire) override { return base_->setExchangeType(wire); }

  /// Checks the D² condition on `topology`'s rounds [0, rounds) and segments
  /// [0, segments): each segment's mixing matrix the same in every round,
  /// symmetric and doubly stochastic (1e-9), with smallest eigenvalue > -1/3.
  /// @throws InvalidArgument naming the round, segment and eigenvalue.
  static void checkMixing(const Topology& topology, int segments, int rounds = 8);

 private:
  std::unique_ptr<DistributedOptimizer> base_;
  std::size_t numParams_;
  LocalSgd sgd_;
  std::vector<float> correction_;  // x_t - a_{t-1}
  std::vector<float> stepped_;     // a_t, kept across the mix
  std::uint64_t steps_ = 0;
};

/// Quasi-global momentum (Lin, Karimireddy, Stich and Jaggi, "Quasi-Global
/// Momentum: Accelerating Decentralized Deep Learning on Heterogeneous Data",
/// ICML 2021, Algorithm 1, QG-DSGDm): the momentum buffer is fed not with the
/// rank's own gradient but with the model's whole displacement over a step,
/// local step and gossip together, which approximates the global direction:
///   m_t = beta m^_{t-1} + g_t;   x_{t+1} = W (x_t - lr s_t)
///   d_t = (x_t - x_{t+1}) / lr;  m^_t = beta m^_{t-1} + (1 - beta) d_t
/// with s_t = g_t + beta m_t (QG-DSGDm-N; algorithm.nesterov, the config's
/// default) or s_t = m_t (heavy ball); beta = training.momentum, the paper's mu = beta;
/// weight decay is added to g. No extra bytes: the base's exchange, in any
/// of its modes.
class QuasiGlobalMomentum final : public DistributedOptimizer {
 public:
  /// @param base a gossip optimizer over the model's P elements with a communication-only form. Owned.
  /// @param sgd learning rate (> 0), beta = momentum, weight decay.
  /// @param nesterov step along g + beta m_t (QG-DSGDm-N, as algorithm.nesterov's default) or, false, along
  /// m_t.
  /// @param mode the base's gossip mode. As Sgp::step, the step is taken on
  /// the push-sum numerator, divided by the base's weight, except in overlap
  /// mode (there the weight is the share of mass not in flight).
  /// @throws InvalidArgument for a null base, one without a communication-only
  ///         form, or a learning rate of 0.
  QuasiGlobalMomentum(std::unique_ptr<DistributedOptimizer> base, std::size_t numParams,
                      const SgdOptions& sgd, bool nesterov = true, GossipMode mode = GossipMode::kSync);
  std::string name() const override { return "quasi_global_momentum"; }
  /// The step above on `params` (P float32, in place) from `grads` (P float32).
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Communication-only form, for a local optimizer that is plain SGD at
  /// training.learning_rate without momentum (weight decay left to it):
  /// replaces `grads` with the step's direction (m_t, or g + beta m_t).
  void reduceGradients(std::span<float> grads) override;
  /// Mixes `params` (x_t - lr s_t) and updates m^ from the displacement.
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  void flush(std::span<float> params) override { base_->flush(params); }
  std::uint64_t steps() const override { return steps_; }
  bool lockstep() const override { return base_->lockstep(); }
  double pushSumWeight() const override { return base_->pushSumWeight(); }
  std::uint64_t rejectedMessages() const override { return base_->rejectedMessages(); }
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  /// The base's 16-bit wire (compression.kind bf16 / fp16).
  bool setExchangeType(DType wire) override { return base_->setExchangeType(wire); }

 private:
  // The step's direction s_t from g_t (+ weight_decay params, when given), into direction_.
  void setDirection(std::span<const float> grads, std::span<const float> params);

  std::unique_ptr<DistributedOptimizer> base_;
  std::size_t numParams_;
  SgdOptions sgd_;
  bool nesterov_;
  GossipMode mode_;
  std::vector<float> momentum_;   // m^ (P)
  std::vector<float> direction_;  // s_t, this step's (set by reduceGradients)
  std::vector<float> stepped_;    // x_t - lr s_t, before the mix
  bool haveDirection_ = false;
  std::uint64_t steps_ = 0;
};

}  // namespace gossamer::optimizers
