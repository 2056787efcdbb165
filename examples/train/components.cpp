// gossamer-train's registry (see components.hpp).
#include "components.hpp"

#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/faults.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/membership.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"
#include "train_config.hpp"
#ifdef GOSSAMER_HAVE_LIBFABRIC
#include "gossamer/transports/libfabric.hpp"
#endif

namespace gossamer::train {

Registry makeTrainRegistry() {
  Registry r;
  zmq::registerWith(r);
  sock::registerWith(r);
  inproc::registerWith(r);
#ifdef GOSSAMER_HAVE_LIBFABRIC
  libfabric::registerWith(r);
#endif
  faults::registerWith(r);
  membership::registerWith(r);
  topologies::registerBuiltins(r);
  optimizers::registerBuiltins(r);
  registerTrainSections(r);
  return r;
}

}  // namespace gossamer::train
