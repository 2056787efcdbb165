// Concrete topologies: pure math, no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/topology.hpp"

namespace gossamer::topologies {

/// Undirected ring: rank i exchanges with i-1 and i+1 and averages the three
/// models with weight 1/3 each (N = 2: weight 1/2 with the single neighbour;
/// N = 1: the identity). Symmetric and doubly stochastic; static in `step`.
class Ring final : public Topology {
 public:
  /// @throws InvalidArgument if worldSize < 1.
  explicit Ring(int worldSize);
  int worldSize() const override { return n_; }
  std::string name() const override { return "ring"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

 private:
  int n_;
};

/// Random topology with fair peer selection (Crossover-SGD; paper
/// 004_659e3573d5645e2e.txt, Algorithm 2). For every (step, segment) each rank
/// gets one destination such that nobody sends to itself and every rank
/// receives exactly one segment: the destinations form a permutation without
/// fixed points (a derangement). Ranks are visited in order 0..N-1; rank i
/// draws from its roulette row (probabilities over destinations, zero on the
/// diagonal) after zeroing the destinations already taken and renormalising.
///
/// Dead end: when only rank N-1 is left and the only destination not yet
/// taken is N-1 itself, we swap: an earlier rank j is drawn from rank N-1's
/// roulette row (uniform by default), rank N-1 takes j's destination and j
/// sends to N-1. This keeps both invariants, touches only the last draw, and
/// is deterministic, so all ranks still agree. (Redrawing the whole step
/// would also work but costs O(N^2) expected work per retry.)
///
/// Randomness: a splitmix64 hash of (seed, step, segment) seeds a
/// std::mt19937_64; uniforms use its top 53 bits, so the assignment is the
/// same on every platform.
///
/// The mixing matrix of a (step, segment) is W = (I + P) / 2 where P is the
/// receive permutation: doubly stochastic.
class FairRoulette final : public Topology {
 public:
  /// @param probabilities optional N x N roulette table (row = sender; rows
  ///        need not be normalised; the diagonal is ignored). Empty = uniform.
  /// @throws InvalidArgument if worldSize < 2, the table has the wrong shape,
  ///         a negative or non-finite entry, or a row without positive
  ///         off-diagonal mass.
  FairRoulette(int worldSize, std::uint64_t seed, std::vector<std::vector<double>> probabilities = {});
  int worldSize() const override { return n_; }
  std::string name() const override { return "fair_roulette"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

  /// dest[i] = the rank that rank i sends `segment` to at `step`; a derangement.
  std::vector<int> destinations(std::uint64_t step, int segment) const;

  /// Same draw without fair selection (the "conventional random topology" the
  /// paper compares with): each rank draws from its full row, so several may
  /// pick the same destination. For the mixing analysis only.
  std::vector<int> destinationsWithoutFairness(std::uint64_t step, int segment) const;

 private:
  int n_;
  std::uint64_t seed_;
  std::vector<std::vector<double>> table_;  // empty = uniform
};

/// Splits a flat vector made of tensors of `tensorSizes` elements into
/// `segments` contiguous [begin, end) ranges along tensor boundaries
/// (paper 004, Section 3.1: a segment is a group of layers). Tensors larger
/// than total/segments are first cut into equal pieces, so the segments stay
/// balanced when one tensor dominates. Returns min(segments, total) non-empty
/// ranges covering [0, total) in order (none when total == 0).
/// @throws InvalidArgument if segments < 1.
std::vector<std::pair<std::size_t, std::size_t>> segmentsAlongTensors(
    const std::vector<std::size_t>& tensorSizes, int segments);

/// splitmix64: the hash behind the topologies' seeding.
std::uint64_t splitmix64(std::uint64_t x);

}  // namespace gossamer::topologies

namespace gossamer {
class Registry;
}
namespace gossamer::topologies {
/// Registers "ring" and "fair_roulette" (uniform table, seeded with config.seed).
void registerBuiltins(Registry& registry);
}  // namespace gossamer::topologies
