// Quasi-global momentum: the momentum of decentralized SGD fed with the
// model's displacement over a whole step (local step and gossip), which
// follows the global direction, instead of the rank's own gradient, which
// under non-IID data points at the rank's own optimum. Lin, Karimireddy,
// Stich and Jaggi, "Quasi-Global Momentum: Accelerating Decentralized Deep
// Learning on Heterogeneous Data", ICML 2021, Algorithm 1 (QG-DSGDm, the
// heavy-ball form; the paper's mu taken equal to beta, as in its experiments).
//
// Each step t, with gradient g_t at x_t and m^ the quasi-global buffer (P):
//   1. m_t = beta m^ + g_t + weight_decay x_t          (reduceGradients)
//      the step's direction s_t = g_t + weight_decay x_t + beta m_t
//      (algorithm.nesterov, the default: QG-DSGDm-N, the paper's Nesterov
//      form), or s_t = m_t (heavy ball, QG-DSGDm)
//   2. x_{t+1/2} = x_t - lr s_t                         (the local step)
//   3. x_{t+1} = W x_{t+1/2}, one round of the base's gossip (mixParameters)
//   4. d_t = (x_t - x_{t+1}) / lr = s_t + (x_{t+1/2} - x_{t+1}) / lr
//      m^ <- beta m^ + (1 - beta) d_t
// With beta = 0 it is the base's plain SGD. No extra bytes on the wire: the
// base's exchange (Crossover-SGD: 4P bytes per rank; SGP: 8 + 4P per
// destination), in any of its modes (in overlap and async modes x_{t+1} is
// what the base returned, the mix of what had arrived). Memory: 3P floats.
// Registered as algorithm.name quasi_global_momentum with algorithm.base and
// the base's keys and algorithm.nesterov; beta is training.momentum.
#include <Eigen/Core>
#include <algorithm>

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/heterogeneity.hpp"
#include "gossamer/registry.hpp"
#include "gossip_config.hpp"

namespace gossamer::optimizers {

namespace {
Eigen::Map<Eigen::VectorXf> vec(float* p, std::size_t n) { return {p, static_cast<Eigen::Index>(n)}; }
Eigen::Map<const Eigen::VectorXf> vec(const float* p, std::size_t n) {
  return {p, static_cast<Eigen::Index>(n)};
}
}  // namespace

QuasiGlobalMomentum::QuasiGlobalMomentum(std::unique_ptr<DistributedOptimizer> base, std::size_t numParams,
                                         const SgdOptions& sgd, bool nesterov, GossipMode mode)
    : base_(std::move(base)), numParams_(numParams), sgd_(sgd), nesterov_(nesterov), mode_(mode) {
  GOSSAMER_ENFORCE(base_ != nullptr, "quasi_global_momentum: no base optimizer");
  GOSSAMER_ENFORCE(base_->hasCommunicationOnlyForm(),
                   "quasi_global_momentum: base " << base_->name() << " has no communication-only form");
  GOSSAMER_ENFORCE(sgd.learningRate > 0,
                   "quasi_global_momentum: learning rate " << sgd.learningRate << " (must be > 0)");
  GOSSAMER_ENFORCE(sgd.momentum >= 0 && sgd.momentum < 1,
                   "quasi_global_momentum: momentum " << sgd.momentum << " outside [0, 1)");
  GOSSAMER_ENFORCE(sgd.weightDecay >= 0, "quasi_global_momentum: weight decay " << sgd.weightDecay);
  momentum_.assign(numParams_, 0.0f);
  direction_.assign(numParams_, 0.0f);
}

void QuasiGlobalMomentum::setDirection(std::span<const float> grads, std::span<const float> params) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "quasi_global_momentum: expected " << numParams_ << " gradients, got " << grads.size());
  const auto beta = static_cast<float>(sgd_.momentum);
  auto s = vec(direction_.data(), numParams_);
  s = vec(grads.data(), numParams_);
  if (sgd_.weightDecay != 0 && !params.empty())
    s += static_cast<float>(sgd_.weightDecay) * vec(params.data(), numParams_);
  // m_t = beta m^ + g; Nesterov: g + beta m_t = (1 + beta) g + beta^2 m^.
  if (nesterov_)
    s = (1.0f + beta) * s + (beta * beta) * vec(momentum_.data(), numParams_);
  else
    s += beta * vec(momentum_.data(), numParams_);
  haveDirection_ = true;
}

void QuasiGlobalMomentum::reduceGradients(std::span<float> grads) {
  setDirection(grads, {});
  std::copy(direction_.begin(), direction_.end(), grads.begin());
}

void QuasiGlobalMomentum::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "quasi_global_momentum: expected " << numParams_ << " parameters, got " << params.size());
  GOSSAMER_ENFORCE(haveDirection_,
                   "quasi_global_momentum: reduceGradients must come before each mixParameters");
  haveDirection_ = false;
  stepped_.assign(params.begin(), params.end());
  base_->mixParameters(params);
  // d_t = m_t + (x_{t+1/2} - x_{t+1}) / lr;  m^ <- beta m^ + (1 - beta) d_t
  const auto beta = static_cast<float>(sgd_.momentum);
  const auto inverseRate = static_cast<float>(1.0 / sgd_.learningRate);
  auto mhat = vec(momentum_.data(), numParams_);
  mhat = beta * mhat +
         (1.0f - beta) * (vec(direction_.data(), numParams_) +
                          inverseRate * (vec(stepped_.data(), numParams_) - vec(params.data(), numParams_)));
  ++steps_;
}

void QuasiGlobalMomentum::step(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "quasi_global_momentum: expected " << numParams_ << " parameters, got " << params.size());
  setDirection(grads, params);
  auto x = vec(params.data(), numParams_);
  // On the push-sum numerator w z, as Sgp::step: z <- z - lr s / w (w is 1
  // for Crossover-SGD, and for SGP in sync mode on a regular graph). Not in
  // overlap mode, whose weight is the share of mass not in flight.
  const double w = mode_ == GossipMode::kOverlap ? 1.0 : base_->pushSumWeight();
  x -= static_cast<float>(sgd_.learningRate / w) * vec(direction_.data(), numParams_);
  mixParameters(params);
}

void QuasiGlobalMomentum::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putArray<float>(prefix + "quasi_global_momentum", momentum_);
  base_->saveState(out, prefix + "base.");
}

void QuasiGlobalMomentum::loadState(const Checkpoint& in, const std::string& prefix) {
  const auto m = in.getArray<float>(prefix + "quasi_global_momentum");
  GOSSAMER_ENFORCE(m.size() == numParams_, "quasi_global_momentum: checkpoint holds a buffer of "
                                               << m.size() << " elements, expected " << numParams_);
  base_->loadState(in, prefix + "base.");
  momentum_ = m;
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
}

namespace algorithms {

void register_quasi_global_momentum(Registry& registry) {
  registry.addOptimizer(
      "quasi_global_momentum",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        return std::make_unique<QuasiGlobalMomentum>(
            detail::makeGossipBase(ctx, ctx.tensorSizes), detail::total(ctx.tensorSizes),
            detail::sgdFrom(ctx.config), ctx.config.get<bool>("algorithm.nesterov"),
            parseGossipMode(ctx.config.get<std::string>("algorithm.mode")));
      },
      detail::correctedGossipKeys("quasi_global_momentum")
          .boolean(
              "nesterov", true,
              "quasi_global_momentum: step along g + beta m (QG-DSGDm-N, the default) or, false, along m "
              "(heavy ball, QG-DSGDm)"));
}

}  // namespace algorithms

}  // namespace gossamer::optimizers
