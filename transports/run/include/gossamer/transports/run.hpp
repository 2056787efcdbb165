// The `run` transport service: what a run reports while it goes. It wraps
// every Agent's transport (below the membership service, so ranks are the
// job's) with the stall report (stall.hpp, run.stall_seconds) and the
// per-peer byte counters of the run metrics (metrics.hpp, run.metrics).
#pragma once

#include "gossamer/registry.hpp"

namespace gossamer::run {

/// Registers the `run.stall_seconds` key (default 10 s; 0 turns the report
/// off) and the service that wraps every Agent's transport with
/// stall::wrap: stalls are logged as warnings and written as `stall`
/// metrics records; bytes per peer go to the Agent's Metrics::links().
void registerWith(Registry& registry);

}  // namespace gossamer::run
