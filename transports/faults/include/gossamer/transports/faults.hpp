// Fault injection on the transport, for tests and demos: a wrapper that
// drops and duplicates this rank's outgoing messages with given
// probabilities, from a seeded generator (the same seed and the same sends
// give the same faults), and cuts the job into groups for a while (a
// partition: sends between groups are dropped).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  /// A partition: each rank's group (empty: none). While it is in force,
  /// every send (gossip or not) to a rank of another group is dropped.
  std::vector<std::vector<int>> partitionGroups;
  double partitionStartSeconds = 0;  ///< When it starts, seconds after the wrapper is made (>= 0).
  double partitionSeconds = 0;       ///< How long it lasts, seconds (>= 0).
};

/// Parses "0,1,2,3|4,5,6,7" (groups separated by '|', ranks by ',') into
/// groups of a job of `worldSize` ranks; "" is no partition.
/// @throws InvalidArgument (naming the text) for a rank outside the job, a
///         rank in two groups, an empty group or fewer than two groups.
std::vector<std::vector<int>> parsePartition(const std::string& text, int worldSize);

/// What the wrapper did so far.
struct FaultStats {
  std::uint64_t dropped = 0;      ///< Sends that were never sent.
  std::uint64_t duplicated = 0;   ///< Sends that were sent twice.
  std::uint64_t partitioned = 0;  ///< Sends dropped because the partition was in force.
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
