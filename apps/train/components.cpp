// gossamer-train's registry (see components.hpp).
#include "components.hpp"

#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/builtins.hpp"
#include "sim_config.hpp"
#include "train_config.hpp"

namespace gossamer::train {

Registry makeTrainRegistry() {
  Registry r;
  transports::registerBuiltins(r);
  topologies::registerBuiltins(r);
  optimizers::registerBuiltins(r);
  registerTrainSections(r);
  registerSimSection(r);
  return r;
}

}  // namespace gossamer::train
