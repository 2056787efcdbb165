// Fault injection on the transport, for tests and demos: a wrapper that
// drops, duplicates, delays and reorders this rank's outgoing messages with
// given probabilities, from a seeded generator (the same seed gives the k-th
// send to a peer under an op the same fate, whatever other threads send
// meanwhile), and cuts the job into groups for a while (a
// partition: sends between groups are dropped).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
  /// Each send that is not lost arrives twice with this probability, in [0, 1).
  double duplicateProbability = 0;
  /// The draws' seed: a send's fate is a function of (seed, this rank, its
  /// destination, its tag's op, how many sends to that destination under
  /// that op came before it).
  std::uint64_t seed = 0;
  /// Only gossip messages (Op::kGossip) are touched; the collectives' go
  /// through (they assume a reliable transport, as TCP is).
  bool gossipOnly = false;
  /// A partition: each rank's group (empty: none). While it is in force,
  /// every send (gossip or not) to a rank of another group is dropped;
  /// ranks in no group are one more group, cut off from all the others.
  std::vector<std::vector<int>> partitionGroups;
  /// When it starts, seconds after the partition's clock started (>= 0).
  double partitionStartSeconds = 0;
  double partitionSeconds = 0;  ///< How long it lasts, seconds (>= 0).
  /// How long before the wrapper is made the partition's clock started,
  /// seconds (>= 0; 0: when it is made). The registered factory passes the
  /// time since rank 0's injector was made, shared through the store, so
  /// that the window is the same on every rank however far apart their
  /// transports start.
  double partitionClockOffsetSeconds = 0;
  /// Each send that is not lost goes out later with this probability, in
  /// [0, 1] (1: every send): after a time drawn uniformly from
  /// [0, delaySeconds].
  double delayProbability = 0;
  /// The longest delay, and the longest a reordered send is held, seconds
  /// (> 0, finite).
  double delaySeconds = 0.1;
  /// Each send that is not lost or delayed is held back with this probability,
  /// in [0, 1), so that later sends to the same rank overtake it: it goes out
  /// right after the next send to that rank that is not held itself, or after
  /// delaySeconds, whichever comes first.
  double reorderProbability = 0;
  /// A link's propagation delay: every send to rank d (gossip or not, not
  /// drawn: always) goes out linkDelaySeconds[d] seconds later, in order, on
  /// top of any random delay or hold. Empty, or zeros: none. Size the world
  /// size when given; each entry finite and >= 0.
  std::vector<double> linkDelaySeconds;
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
  std::uint64_t delayed = 0;      ///< Sends that went out late.
  std::uint64_t reordered = 0;    ///< Sends held back for later ones to overtake.
  std::uint64_t linkDelayed = 0;  ///< Sends that waited for their link's propagation delay.
};

/// A Transport that forwards to `inner`, except that isend/isendBorrowed drop
/// a message (a completed request, nothing on the wire), send it twice, or
/// send it later (delayed or held back for reordering), with the configured
/// probabilities. A later send copies the payload and returns a completed
/// request, as for an accepted send; a background thread (one per wrapper,
/// started only when delays or reordering are on) sends it when it is due,
/// and a failure then (e.g. the peer left) loses the message silently.
/// close() sends what is still waiting at once, then closes `inner`; abort()
/// (and destroying the wrapper without close()) drops it; neither waits for
/// a due time. Sends to this rank itself are never touched; the partition is
/// checked when isend is called. Receives and stats are the inner
/// transport's; the faults are counted in faultStats(). Not thread-safe
/// beyond what `inner` is (the draws and counters are guarded by a lock).
/// @throws InvalidArgument for probabilities outside [0, 1) ([0, 1] for the
///         delay), a delaySeconds outside (0, 3600], a partition clock offset
///         outside [0, 1e9] seconds, or a partition rank outside the transport's
///         capacity or in two groups.
std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const FaultOptions& options);

/// The counters of a transport made by wrap(), a copy taken under its lock
/// (other threads may be sending); empty for any other transport.
std::optional<FaultStats> faultStats(const Transport& transport);

/// Registers the `faults:` section (enabled, drop, duplicate, seed, messages,
/// partition, partition_start_seconds, partition_seconds, delay,
/// delay_seconds, reorder) as a transport service: with
/// `faults.enabled: true` every Agent's transport is wrapped. The seed
/// defaults to the run's `seed`.
void registerWith(Registry& registry);

}  // namespace gossamer::faults
