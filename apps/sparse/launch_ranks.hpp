// Starts a sparse program's ranks as local processes: how gossamer-admm and
// gossamer-sparse run a whole job when they are not given --rank.
#pragma once

#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::sparse {

/// Adds to `registry` the rule of `program` (e.g. "gossamer-admm"), which
/// runs its ranks as processes: transport.kind must name a transport that
/// links processes (TransportTraits::spansProcesses; not inproc), so that
/// loading a config that asks otherwise is a ConfigError naming the key.
void requireProcessTransport(Registry& registry, const std::string& program);

/// Runs `program` (its argv[0] name, e.g. "gossamer-admm") once per rank of
/// `c.worldSize` as child processes of this one (launchLocalRanks, launcher.hpp):
/// each gets --config configPath --rank r --rendezvous DIR and every override
/// as --set KEY=VALUE; rank 0 also gets --summary-json summaryPath when it is
/// not empty. A rank that fails makes its peers fail within the transport
/// timeout; stragglers are reaped timeout + linger + 5 s later.
/// @returns 0 when every rank finished, 128 + signal when one was killed by a
///          signal, else 1.
/// @throws Error if the processes cannot be started.
int launchRanks(const std::string& program, const Config& c, const std::string& configPath,
                const std::vector<std::string>& overrides, const std::string& summaryPath);

}  // namespace gossamer::sparse
