// DistributedOptimizer's defaults for optimizers without a communication-only form.
#include "gossamer/optimizer.hpp"

#include "gossamer/errors.hpp"

namespace gossamer {

void DistributedOptimizer::reduceGradients(std::span<float>) {
  throw InvalidArgument("optimizer '" + name() +
                        "' has no communication-only form (reduceGradients/mixParameters): use step()");
}

void DistributedOptimizer::mixParameters(std::span<float>) {
  throw InvalidArgument("optimizer '" + name() +
                        "' has no communication-only form (reduceGradients/mixParameters): use step()");
}

void DistributedOptimizer::saveState(Checkpoint&, const std::string&) const {
  throw InvalidArgument("optimizer '" + name() + "' cannot be checkpointed");
}

void DistributedOptimizer::loadState(const Checkpoint&, const std::string&) {
  throw InvalidArgument("optimizer '" + name() + "' cannot be restored from a checkpoint");
}

}  // namespace gossamer
