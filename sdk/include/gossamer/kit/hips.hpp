// HiPS: hierarchical parameter synchronisation (Geng et al., "HiPS:
// Hierarchical Parameter Synchronization in Large-Scale Distributed Machine
// Learning" (NetAI '18), Algorithms 1 and 2) as an allreduce over a Transport.
#pragma once

#include <span>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

/// Settings of hipsAllreduce. Every rank must pass the same values.
struct HipsOptions {
  /// Radices k_1..k_h of the mixed-radix (BCube / torus) rank address; their
  /// product must equal the world size. Digit 1 is the least significant:
  /// digit_i(r) = (r / (k_1 ... k_{i-1})) mod k_i. Radix-1 levels are allowed
  /// and skipped. Empty: hipsAutoLevels(worldSize), the prime factors.
  std::vector<int> levels;
  /// Per-level synchronisation (paper Section 2.2): kRing is RS (scatter +
  /// gather around the level's k_i peers, k_i - 1 steps each, Algorithm 2);
  /// kMesh is MS (diffuse + collect: one all-to-all round each).
  enum class Stage { kRing, kMesh } stage = Stage::kRing;
  /// Section 3.3's "h parallel processes": the vector is cut into h parts
  /// (chunkRange) and part s runs the stages in the rotated order
  /// s, s+1, ..., s+h-1 (mod h), all h parts concurrently (one thread each),
  /// so that every level's peer group is busy at once. Needs h <= 10.
  bool parallelStreams = false;
};

/// The automatic factorisation: the prime factors of `worldSize` in ascending
/// order (12 -> {2, 2, 3}; 7 -> {7}; 1 -> {}). With any factorisation each
/// rank sends (N-1)/N of the vector per phase, so the primes, which minimise
/// the ring's sum of (k_i - 1) steps, are the latency-optimal choice.
/// @throws InvalidArgument if worldSize < 1.
std::vector<int> hipsAutoLevels(int worldSize);

/// GetPeers of Algorithm 1: the global ranks whose address differs from
/// `rank`'s only in digit `level` (0-based index into `levels`), ordered by
/// that digit, so `rank` is at position digit_level(rank). k_level entries.
/// @throws InvalidArgument if the radices are < 1, do not multiply to a
///         world size containing `rank`, or `level` is out of range.
std::vector<int> hipsPeers(int rank, std::span<const int> levels, int level);

/// Hierarchical allreduce (HiPS, Geng et al.'s Algorithm 1 with Sync1/Sync2 =
/// Algorithm 2's Scatter/Gather (kRing) or diffuse/collect (kMesh)).
///
/// `data`: L elements (the same L on every rank; any L >= 0), reduced in place
/// with `op` (kAverage: the sum times 1/N, applied once to the final 1/N
/// portion). Stage i = 1..h reduce-scatters the portion left by stage i-1
/// among the k_i peers that differ only in address digit i, leaving each rank
/// chunkRange(portion, k_i, digit_i); after stage h each rank holds a fully
/// reduced portion of about L/N elements; stages h..1 then allgather among the
/// same groups. Per rank: (N-1)/N * L elements sent in each of the two
/// phases; sum_i (k_i - 1) ring steps (kRing) or h rounds (kMesh) per phase.
/// Every element is reduced at exactly one rank, in a fixed order, so every
/// rank ends with bitwise the same vector. N = 1 returns at once.
///
/// Messages: Op::kAllreduce tags with step options.sequence on a SubTransport
/// per level with context 0x90 + index (0x90 + stream * h + index with
/// parallelStreams). So `transport` must be a top-level transport (a
/// SubTransport cannot be nested) and options.sequence < 2^32.
///
/// @throws InvalidArgument for levels whose product is not the world size, a
///         radix < 1, too many levels (contexts above 255), a SubTransport as
///         `transport`, or options.sequence >= 2^32; TimeoutError,
///         PeerFailure, ProtocolError (a peer passed another length) as
///         ringAllreduce.
template <typename T>
void hipsAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options,
                   const HipsOptions& hips);

}  // namespace gossamer
