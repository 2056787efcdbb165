// Fault injection on the transport, for tests and demos: a wrapper that
// drops and duplicates this rank's outgoing messages with given
// probabilities, from a seeded generator (the same seed and the same sends
// give the same faults).
#pragma once

#include <cstdint>
#include <memory>

#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::faults {

/// What the wrapper does to this rank's sends.
struct FaultOptions {
  double dropProbability = 0;  ///< Each send is lost with this probability, in [0, 1).
  double duplicateProbability =
      0;                   ///< Each send that is not lost arrives twice with this probability, in [0, 1).
  std::uint64_t seed = 0;  ///< The generator's seed (mixed with the rank).
  /// Only gossip messages (Op::kGossip) are touched; the collectives' go
  /// through (they assume a reliable transport, as TCP is).
  bool gossipOnly = false;
};

/// What the wrapper did so far.
struct FaultStats {
  std::uint64_t dropped = 0;     ///< Sends that were never sent.
  std::uint64_t duplicated = 0;  ///< Sends that were sent twice.
};

/// A Transport that forwards to `inner`, except that isend/isendBorrowed drop
/// a message (a completed request, nothing on the wire) or send it twice,
/// with the configured probabilities. Sends to this rank itself are never
/// touched. Receives, close and stats are the inner transport's; the faults
/// are counted in faultStats(). Not thread-safe beyond what `inner` is (the
/// generator is guarded by a lock).
/// @throws InvalidArgument from the factory for probabilities outside [0, 1).
std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const FaultOptions& options);

/// The counters of a transport made by wrap(); nullptr for any other transport.
const FaultStats* faultStats(const Transport& transport);

/// Registers the `faults:` section (enabled, drop, duplicate, seed, messages) as a
/// transport service: with `faults.enabled: true` every Agent's transport is
/// wrapped. The seed defaults to the run's `seed`.
void registerWith(Registry& registry);

}  // namespace gossamer::faults
