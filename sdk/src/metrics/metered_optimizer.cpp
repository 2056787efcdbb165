// MeteredOptimizer (metered_optimizer.hpp): step timing for run metrics.
#include "metrics/metered_optimizer.hpp"

#include <algorithm>

#include "gossamer/errors.hpp"

namespace gossamer::detail {

MeteredOptimizer::MeteredOptimizer(std::unique_ptr<DistributedOptimizer> inner, Metrics& metrics,
                                   std::function<std::uint64_t()> view)
    : inner_(std::move(inner)), metrics_(metrics), view_(std::move(view)) {
  GOSSAMER_ENFORCE(inner_ != nullptr, "no optimizer to meter");
}

template <typename F>
void MeteredOptimizer::timed(F&& f, bool endsStep) {
  const auto start = Clock::now();
  if (lastEnd_ != Clock::time_point{}) compute_ += std::chrono::duration<double>(start - lastEnd_).count();
  const double waitedBefore = threadWaitSeconds();
  const std::uint64_t before = inner_->steps();
  try {
    f();
  } catch (...) {
    lastEnd_ = Clock::now();
    throw;
  }
  lastEnd_ = Clock::now();
  const double waited = threadWaitSeconds() - waitedBefore;
  inside_ += std::chrono::duration<double>(lastEnd_ - start).count();
  waiting_ += waited;
  if (!endsStep) return;
  if (inner_->steps() != before) {
    metrics_.accountStep(inner_->steps(), compute_, std::max(0.0, inside_ - waiting_), waiting_,
                         inner_->pushSumWeight(), view_ ? view_() : 0);
  }
  compute_ = inside_ = waiting_ = 0;
}

void MeteredOptimizer::step(std::span<float> params, std::span<const float> grads) {
  timed([&] { inner_->step(params, grads); }, true);
}

void MeteredOptimizer::reduceGradients(std::span<float> grads) {
  timed([&] { inner_->reduceGradients(grads); }, false);
}

void MeteredOptimizer::mixParameters(std::span<float> params) {
  timed([&] { inner_->mixParameters(params); }, true);
}

}  // namespace gossamer::detail
