// Builds a Platform in the running SimGrid engine (platform.cpp).
#pragma once

#include "gossamer/transports/simgrid.hpp"

namespace gossamer::simgrid {

/// Builds `p` (validated) in the engine made by simulate(): hosts "rank-R"
/// in their islands' zones, or `p.file`'s platform.
/// @throws InvalidArgument if the file lacks a host rank-R for R < p.hosts;
///         SimGrid's own errors for a file it cannot load.
void build(const Platform& p);

}  // namespace gossamer::simgrid
