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

}  // namespace gossamer
