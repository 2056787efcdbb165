// In-process transport: the ranks are threads of one process. Used by tests
// and simulations. Messages are copied once, into the receiver's mailbox.
#pragma once

#include <memory>

#include "gossamer/defaults.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::inproc {

class Fabric;

/// The shared medium of one job's threads. Create one per job and give it to
/// every rank's transport; it outlives them (shared ownership).
std::shared_ptr<Fabric> makeFabric(int worldSize);

/// The transport of `rank` on `fabric`.
/// @param timeoutSeconds default bound for waits (> 0).
/// @throws InvalidArgument for a bad rank, or if the rank had a transport on
///         this fabric already (live or not: a fabric's rank is made once,
///         its peers saw it leave; a job restarted in-process needs a fabric
///         of its own).
std::unique_ptr<Transport> makeTransport(std::shared_ptr<Fabric> fabric, int rank,
                                         double timeoutSeconds = defaults::kTimeoutSeconds);

}  // namespace gossamer::inproc

namespace gossamer {
class Registry;
}
namespace gossamer::inproc {
/// Registers transport kind "inproc" on `fabric` (whose world size must match
/// the config's).
/// @throws InvalidArgument if `fabric` is null or "inproc" is registered already.
void registerWith(Registry& registry, std::shared_ptr<Fabric> fabric);
/// Registers transport kind "inproc" on a fabric made by the first transport
/// the registry creates (for that config's world size) and shared by the
/// ranks after it while any of them lives: one job (one world) at a time per
/// registry; once every transport of a job is destroyed, the next job gets a
/// fabric of its own, of its own world size.
/// @throws InvalidArgument if "inproc" is registered already.
void registerWith(Registry& registry);
}  // namespace gossamer::inproc
