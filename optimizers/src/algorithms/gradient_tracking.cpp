// Gradient tracking: decentralized SGD along a gossiped estimate of the
// average gradient, so that non-IID data leave no bias at a constant step.
// Pu and Nedić, "Distributed stochastic gradient tracking methods", Math.
// Programming 2021, Eq. (3) (DSGT); Nedić, Olshevsky and Shi, "Achieving
// geometric convergence for distributed optimization over time-varying
// graphs", SIAM J. Optim. 2017, DIGing (Eq. 3) and Push-DIGing (Sec. 4).
//
// Each rank keeps its model x and a tracker y (P float32 each). A step t with
// the gradient g_t at x_t:
//   1. y_t = (W y_{t-1}) + g_t - g_{t-1}, y_0 = g_0 (reduceGradients);
//   2. the local step along y_t: momentum SGD, x <- x - lr v, v <- mu v + y_t;
//   3. one round of the base's gossip on the stacked vector [x; y]
//      (mixParameters): x_{t+1} = W x, and W y_t kept for step t+1.
// W is the base's mixing: Crossover-SGD's fair roulette segments (doubly
// stochastic: the sum of the y over the ranks stays the sum of the g) or
// SGP's push-sum (column stochastic: y enters the exchange divided by the
// push-sum weight w and leaves multiplied by the new w, so that the
// numerators w y are what is mixed and summed, as Push-DIGing mixes y; the
// step in 2 is taken along y / w, on the numerator of the de-biased model).
//
// Bytes on the wire per step: the base's exchange of 2P elements, twice the
// base's (Crossover-SGD: 8P bytes per rank with float32, 4P with the 16-bit
// wire of compression.kind bf16 / fp16; SGP: 8 + 8P per destination).
// Registered as algorithm.name gradient_tracking, with algorithm.base and the
// base's keys (gossip_config.hpp).
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
}  // namespace

GradientTracking::GradientTracking(std::unique_ptr<DistributedOptimizer> base, std::size_t numParams,
                                   const SgdOptions& sgd)
    : base_(std::move(base)), numParams_(numParams), sgd_(numParams, sgd) {
  GOSSAMER_ENFORCE(base_ != nullptr, "gradient_tracking: no base optimizer");
  GOSSAMER_ENFORCE(base_->hasCommunicationOnlyForm(),
                   "gradient_tracking: base " << base_->name() << " has no communication-only form");
  GOSSAMER_ENFORCE(base_->lockstep(), "gradient_tracking: base "
                                          << base_->name()
                                          << " runs in async mode; gradient tracking needs every rank's y in "
                                             "each round (algorithm.mode sync or overlap)");
  stacked_.assign(2 * numParams_, 0.0f);
}

std::span<const float> GradientTracking::tracker() const {
  if (lastGrad_.empty()) return {};
  return {stacked_.data() + numParams_, numParams_};
}

void GradientTracking::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "gradient_tracking: expected " << numParams_ << " gradients, got " << grads.size());
  auto y = vec(stacked_.data() + numParams_, numParams_);
  auto g = vec(grads.data(), numParams_);
  if (lastGrad_.empty()) {  // the first step: y_0 = g_0
    y = g;
    lastGrad_.assign(grads.begin(), grads.end());
  } else {
    auto last = vec(lastGrad_.data(), numParams_);
    y += g - last;
    last = g;
  }
  const double w = base_->pushSumWeight();
  if (w == 1.0)
    g = y;
  else
    g = y * static_cast<float>(1.0 / w);
  trackerReady_ = true;
}

void GradientTracking::throughBase(std::span<float> params, bool mix) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "gradient_tracking: expected " << numParams_ << " parameters, got " << params.size());
  std::copy(params.begin(), params.end(), stacked_.begin());
  // Over push-sum the numerators w y are mixed: y enters as y / w and leaves as (its mix) * w'.
  auto y = vec(stacked_.data() + numParams_, numParams_);
  const double before = base_->pushSumWeight();
  if (before != 1.0) y *= static_cast<float>(1.0 / before);
  if (mix)
    base_->mixParameters(stacked_);
  else
    base_->flush(stacked_);
  const double after = base_->pushSumWeight();
  if (after != 1.0) y *= static_cast<float>(after);
  std::copy(stacked_.begin(), stacked_.begin() + static_cast<std::ptrdiff_t>(numParams_), params.begin());
}

void GradientTracking::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(trackerReady_, "gradient_tracking: reduceGradients must come before each mixParameters");
  throughBase(params, true);
  trackerReady_ = false;
  ++steps_;
}

void GradientTracking::step(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "gradient_tracking: expected " << numParams_ << " gradients, got " << grads.size());
  scratch_.assign(grads.begin(), grads.end());
  reduceGradients(scratch_);
  sgd_.apply(params, scratch_);
  mixParameters(params);
}

void GradientTracking::flush(std::span<float> params) { throughBase(params, false); }

void GradientTracking::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putArray<float>(prefix + "tracker", std::span<const float>(stacked_.data() + numParams_, numParams_));
  out.putArray<float>(prefix + "last_gradient", lastGrad_);
  sgd_.saveState(out, prefix);
  base_->saveState(out, prefix + "base.");
}

void GradientTracking::loadState(const Checkpoint& in, const std::string& prefix) {
  const auto tracker = in.getArray<float>(prefix + "tracker");
  auto last = in.getArray<float>(prefix + "last_gradient");  // empty before the first step
  GOSSAMER_ENFORCE(tracker.size() == numParams_ && (last.empty() || last.size() == numParams_),
                   "gradient_tracking: checkpoint holds a tracker of "
                       << tracker.size() << " and a gradient of " << last.size() << " elements, expected "
                       << numParams_);
  base_->loadState(in, prefix + "base.");
  sgd_.loadState(in, prefix);
  std::copy(tracker.begin(), tracker.end(), stacked_.begin() + static_cast<std::ptrdiff_t>(numParams_));
  lastGrad_ = std::move(last);
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
}

namespace algorithms {

void register_gradient_tracking(Registry& registry) {
  registry.addOptimizer(
      "gradient_tracking",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        const Config& c = ctx.config;
        if (c.get<std::string>("algorithm.mode") == "async")
          throw ConfigError(
              c.sourceFile, 0, "algorithm.mode",
              "gradient_tracking needs every rank's tracker in each round: algorithm.mode sync or "
              "overlap, not async");
        // The base mixes the model's tensors and then the tracker's, as one vector.
        std::vector<std::size_t> stacked = ctx.tensorSizes;
        stacked.insert(stacked.end(), ctx.tensorSizes.begin(), ctx.tensorSizes.end());
        return std::make_unique<GradientTracking>(detail::makeGossipBase(ctx, stacked),
                                                  detail::total(ctx.tensorSizes),
                                                  detail::sgdFrom(ctx.config));
      },
      detail::correctedGossipKeys("gradient_tracking"));
}

}  // namespace algorithms

}  // namespace gossamer::optimizers
