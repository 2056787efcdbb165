// The registry gossamer-config checks configs against (programs.hpp).
#include "programs.hpp"

#include "admm_config.hpp"
#include "components.hpp"
#include "sparse_trainer.hpp"

namespace gossamer::apps {

Registry makeProgramsRegistry() {
  Registry registry = train::makeTrainRegistry();
  sparse::registerAdmmSection(registry);
  sparse::registerSparseSection(registry);
  return registry;
}

}  // namespace gossamer::apps
