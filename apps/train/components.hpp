// The components gossamer-train (and gossamer-config) know: every built-in
// transport, topology, optimizer and compressor, and the trainer's sections.
#pragma once

#include "gossamer/registry.hpp"

namespace gossamer::train {

/// A registry with the zmq, socket, inproc (fabric made on first use; one job
/// per registry) and, when built, libfabric transports; the built-in
/// topologies, optimizers and compressors; and `model:`, `data:` and
/// `training:`. Configs loaded against it are gossamer-train's configs.
Registry makeTrainRegistry();

}  // namespace gossamer::train
