// Local SGD with momentum and AllReduce-SGD.
#include <Eigen/Core>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"

namespace gossamer::optimizers {

LocalSgd::LocalSgd(std::size_t numParams, const SgdOptions& o) : options_(o), velocity_(numParams, 0.0f) {
  GOSSAMER_ENFORCE(o.learningRate >= 0, "learning rate " << o.learningRate);
  GOSSAMER_ENFORCE(o.momentum >= 0 && o.momentum < 1, "momentum " << o.momentum << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.weightDecay >= 0, "weight decay " << o.weightDecay);
}

void LocalSgd::apply(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(params.size() == velocity_.size() && grads.size() == velocity_.size(),
                   "expected " << velocity_.size() << " parameters and gradients, got " << params.size()
                               << " and " << grads.size());
  const auto n = static_cast<Eigen::Index>(params.size());
  Eigen::Map<Eigen::VectorXf> x(params.data(), n), v(velocity_.data(), n);
  Eigen::Map<const Eigen::VectorXf> g(grads.data(), n);
  const auto m = static_cast<float>(options_.momentum), lr = static_cast<float>(options_.learningRate),
             wd = static_cast<float>(options_.weightDecay);
  if (wd != 0.0f)
    v = m * v + g + wd * x;
  else
    v = m * v + g;
  x -= lr * v;
}

AllReduceSgd::AllReduceSgd(Communicator& c, std::size_t numParams, const SgdOptions& o)
    : comm_(c), sgd_(numParams, o), buffer_(numParams) {}

void AllReduceSgd::step(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(grads.size() == buffer_.size(),
                   "expected " << buffer_.size() << " gradients, got " << grads.size());
  std::copy(grads.begin(), grads.end(), buffer_.begin());
  reduceGradients(buffer_);
  sgd_.apply(params, buffer_);
  mixParameters(params);
}

void AllReduceSgd::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == buffer_.size(),
                   "expected " << buffer_.size() << " gradients, got " << grads.size());
  comm_.allreduce(grads, ReduceOp::kAverage);
}

void AllReduceSgd::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == buffer_.size(),
                   "expected " << buffer_.size() << " parameters, got " << params.size());
  ++steps_;
}

void LocalSgd::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putArray<float>(prefix + "velocity", velocity_);
}

void LocalSgd::loadState(const Checkpoint& in, const std::string& prefix) {
  auto v = in.getArray<float>(prefix + "velocity");
  GOSSAMER_ENFORCE(v.size() == velocity_.size(),
                   "checkpoint velocity has " << v.size() << " elements, the model " << velocity_.size());
  velocity_ = std::move(v);
}

void AllReduceSgd::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  sgd_.saveState(out, prefix);
}

void AllReduceSgd::loadState(const Checkpoint& in, const std::string& prefix) {
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
  sgd_.loadState(in, prefix);
}

}  // namespace gossamer::optimizers
