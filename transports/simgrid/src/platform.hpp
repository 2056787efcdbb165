// Builds a Platform in the running SimGrid engine (platform.cpp).
#pragma once

#include <functional>

#include "gossamer/transports/simgrid.hpp"

namespace gossamer::simgrid {

/// One-way latency from rank `src` to rank `dst` (seconds) of a built platform.
using RouteLatency = std::function<double(int src, int dst)>;

/// Builds `p` (validated) in the engine made by simulate(): hosts "rank-R"
/// in their islands' zones, or `p.file`'s platform. The links carry no
/// latency in SimGrid's flows: the transport holds each message for its
/// route's latency, which this returns (the generated platform's inside
/// latency, plus the between latency across islands; a file's links'
/// latencies summed along SimGrid's route, read before they are zeroed).
/// @throws InvalidArgument if the file lacks a host rank-R for R < p.hosts,
///         or is named *.so or *.dylib (SimGrid's platform libraries) and
///         cannot be loaded or lacks load_platform; SimGrid's own errors for
///         a file it cannot load.
RouteLatency build(const Platform& p);

}  // namespace gossamer::simgrid
