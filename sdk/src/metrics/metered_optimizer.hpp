// The optimizer an Agent hands out when run metrics are on (run.metrics): it
// forwards every call to the configured optimizer (or the resilient one) and
// times each step: the seconds since the previous step returned (compute:
// the application's forward and backward pass), the seconds this thread was
// blocked in Request::wait inside the step (waiting), and the rest of the
// step (communication: posting, copying, reducing, the update). It hands
// them to Metrics::accountStep. Nothing goes on the wire. Internal to the
// SDK (agent.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "gossamer/kit/clock.hpp"
#include "gossamer/metrics.hpp"
#include "gossamer/optimizer.hpp"

namespace gossamer::detail {

class MeteredOptimizer final : public DistributedOptimizer {
 public:
  /// `view` returns the membership view number in force (0 without the service).
  MeteredOptimizer(std::unique_ptr<DistributedOptimizer> inner, Metrics& metrics,
                   std::function<std::uint64_t()> view);

  std::string name() const override { return inner_->name(); }
  void step(std::span<float> params, std::span<const float> grads) override;
  void reduceGradients(std::span<float> grads) override;
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return inner_->hasCommunicationOnlyForm(); }
  bool skipsLocalStep() const override { return inner_->skipsLocalStep(); }
  void flush(std::span<float> params) override { inner_->flush(params); }
  std::uint64_t steps() const override { return inner_->steps(); }
  void setTotalSteps(std::uint64_t totalSteps) override { inner_->setTotalSteps(totalSteps); }
  bool replicatedModel() const override { return inner_->replicatedModel(); }
  bool lockstep() const override { return inner_->lockstep(); }
  double pushSumWeight() const override { return inner_->pushSumWeight(); }
  std::uint64_t rejectedMessages() const override { return inner_->rejectedMessages(); }
  void saveState(Checkpoint& out, const std::string& prefix) const override {
    inner_->saveState(out, prefix);
  }
  void loadState(const Checkpoint& in, const std::string& prefix) override { inner_->loadState(in, prefix); }
  ModelExchange modelExchange() override { return inner_->modelExchange(); }

 private:
  // Times `f` as part of the step in progress; accounts the step when it counted one.
  template <typename F>
  void timed(F&& f, bool endsStep);

  std::unique_ptr<DistributedOptimizer> inner_;
  Metrics& metrics_;
  std::function<std::uint64_t()> view_;
  Clock::time_point lastEnd_{};  // when the previous step returned; epoch: none yet
  double compute_ = 0, inside_ = 0,
         waiting_ = 0;  // of the step in progress (reduceGradients + mixParameters)
};

}  // namespace gossamer::detail
