// Concrete topologies: pure math, no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/kit/network.hpp"
#include "gossamer/topology.hpp"

namespace gossamer::topologies {

/// Undirected ring: rank i exchanges with i-1 and i+1 and averages the three
/// models with weight s on its own and (1 - s) / 2 on each neighbour's, s = 1/3
/// by default (N = 2: weight 1/2 with the single neighbour; N = 1: the
/// identity). Symmetric and doubly stochastic; static in `step`. Its
/// eigenvalues are s + (1 - s) cos(2 pi k / N): the smallest is 2s - 1 for an
/// even N (-1/3 at s = 1/3; 0 at s = 1/2, as D² needs above -1/3).
class Ring final : public Topology {
 public:
  /// @param selfWeight s, in (0, 1).
  /// @throws InvalidArgument if worldSize < 1 or s is outside (0, 1).
  explicit Ring(int worldSize, double selfWeight = 1.0 / 3);
  int worldSize() const override { return n_; }
  std::string name() const override { return "ring"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

 private:
  int n_;
  double selfWeight_;
};

/// Random topology with fair peer selection (Crossover-SGD; Yeo et al.,
/// "Crossover-SGD: A gossip-based communication in distributed deep learning
/// for alleviating large mini-batch problem and enhancing scalability",
/// Algorithm 2). For every (step, segment) each rank gets one destination such
/// that nobody sends to itself and every rank receives exactly one segment: the
/// destinations form a permutation without fixed points (a derangement). Ranks
/// are visited in order 0..N-1; rank i draws from its roulette row
/// (probabilities over destinations, zero on the diagonal) after zeroing the
/// destinations already taken and renormalising.
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
///
/// Probability tables and Selection::kMatched. With a non-uniform table the
/// sequential draw does not give each rank its row: the ranks that draw
/// early get their preferences, and the later ones take what is left. No
/// fair scheme can realise an arbitrary table either. Because every rank
/// receives exactly once, the matrix of marginals P(i sends to j) is always
/// doubly stochastic. kMatched therefore first balances the table into the
/// doubly stochastic matrix T by Sinkhorn scaling (a balancing, not the nearest
/// such matrix in any norm). For a table that is already doubly stochastic,
/// such as any symmetric table with equal row sums, T is the table itself. It
/// then writes T as a convex combination of derangements (Birkhoff–von Neumann
/// decomposition), T = sum_k theta_k P_k, and each (step, segment) draws P_k
/// with probability theta_k. The draws are fair by construction and their
/// marginals equal T exactly. This is the selection the config uses whenever
/// `topology.probabilities` is given.
class FairRoulette final : public Topology {
 public:
  /// kSequential: the paper's Algorithm 2 (see above). kMatched: exact
  /// marginals for a probability table (see above; uniform without one).
  enum class Selection { kSequential, kMatched };

  /// @param probabilities optional N x N roulette table (row = sender; rows
  ///        need not be normalised; the diagonal is ignored). Empty = uniform.
  /// @throws InvalidArgument if worldSize < 2, the table has the wrong shape,
  ///         a negative or non-finite entry, or a row without positive
  ///         off-diagonal mass; with kMatched also if the table's zero pattern
  ///         admits no fair assignment (Sinkhorn scaling does not converge).
  FairRoulette(int worldSize, std::uint64_t seed, std::vector<std::vector<double>> probabilities = {},
               Selection selection = Selection::kSequential);

  /// kMatched: the doubly stochastic target T (N x N) that the marginals equal;
  /// kSequential: empty.
  const Eigen::MatrixXd& matchedMarginals() const { return target_; }
  /// kMatched: number of derangements in the decomposition.
  std::size_t decompositionSize() const { return perms_.size(); }
  int worldSize() const override { return n_; }
  std::string name() const override { return "fair_roulette"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;
  /// The step's mixing matrix (N x N, doubles) from one draw of the
  /// destinations, O(N^2) (the default asks peers() of every rank, each of
  /// which draws them again: O(N^2 log N)). Same matrix as the default.
  Eigen::MatrixXd mixingMatrix(std::uint64_t step, int segment = 0) const override;

  /// dest[i] = the rank that rank i sends `segment` to at `step`; a derangement.
  std::vector<int> destinations(std::uint64_t step, int segment) const;

  /// Same draw without fair selection (the "conventional random topology" the
  /// paper compares with): each rank draws from its full row, so several may
  /// pick the same destination. For the mixing analysis only.
  std::vector<int> destinationsWithoutFairness(std::uint64_t step, int segment) const;

 private:
  void decompose();
  int n_;
  std::uint64_t seed_;
  std::vector<std::vector<double>> table_;  // empty = uniform
  Selection selection_;
  Eigen::MatrixXd target_;               // kMatched: balanced table
  std::vector<std::vector<int>> perms_;  // kMatched: derangements (dest per rank)
  std::vector<double> cumulative_;       // kMatched: cumulative theta
};

/// The bandwidth-aware fair roulette: Crossover-SGD's random topology with
/// fair peer selection (Yeo et al., Sec. 3.2, Algorithm 2)
/// made symmetric and weighted by the links' bandwidths, so that segments
/// cross the slow links between islands (NetworkLayout) less often.
///
/// Each (step, segment) pairs the ranks: a perfect matching for an even world
/// size, a matching that leaves exactly one rank out for an odd one. The two
/// ranks of a pair swap the segment and both keep the average (W(i,i) =
/// W(i,j) = 1/2); the rank left out keeps its own (W(i,i) = 1). Every round's
/// W is symmetric and doubly stochastic, so the models' average is kept
/// exactly (Theorem 3.1). (FairRoulette draws a derangement instead: i sends
/// to j does not mean j sends to i.)
///
/// The draw, the same on every rank from (seed, step, segment) alone: while
/// two or more ranks are unpaired, a caller is drawn uniformly among them, and
/// it draws its partner among the other unpaired ranks with probability
/// proportional to the link weight
///     w(i, j) = (bandwidthGbps(i, j) / fastest link's Gbit/s) ^ exponent,
/// i.e. Algorithm 2's roulette row with the taken ranks zeroed and
/// renormalised, the pair being taken on both sides. Every weight is > 0, so
/// every pair has a positive probability and the expected mixing matrix has
/// a spectral gap > 0 whatever the islands. With one island (or exponent 0)
/// every matching is equally likely: each rank's partner is uniform over the
/// others, P(i, j) = 1/(N-1) for an even N (1/N for an odd one, where each
/// rank sits out with probability 1/N). An island with an odd number of
/// ranks always has a rank paired outside it (or, for one island of an odd
/// N, left out): two islands of 3 and 5 ranks send at least 1 pair in 4
/// across every round, whatever the exponent.
///
/// Randomness: as FairRoulette, a splitmix64 hash of (seed, step, segment)
/// seeds a std::mt19937_64 and uniforms use its top 53 bits.
class BandwidthRoulette final : public Topology {
 public:
  /// Smallest link weight (slow / fast bandwidth)^exponent allowed: below it
  /// the slow links would practically never be drawn.
  static constexpr double kMinLinkWeight = 1e-12;
  /// Most states (prod over islands of (island size + 1)) the exact
  /// computation of pairProbabilities() walks.
  static constexpr std::size_t kMaxExactStates = std::size_t{1} << 22;

  /// @param network the islands and their links' bandwidths (Gbit/s); its
  ///        world size is the topology's.
  /// @param seed the job's shared seed (config.seed).
  /// @param exponent how strongly slow links are avoided (topology.bandwidth_exponent):
  ///        0 = uniform, 1 = a link is drawn in proportion to its bandwidth,
  ///        larger = slow links still less often.
  /// @throws InvalidArgument if the world size is < 2, the exponent is
  ///         negative or not finite, or it makes the slowest link's weight
  ///         smaller than kMinLinkWeight (the message names
  ///         topology.bandwidth_exponent and the largest exponent allowed).
  BandwidthRoulette(NetworkLayout network, std::uint64_t seed, double exponent = 1.0);

  int worldSize() const override { return network_.worldSize(); }
  std::string name() const override { return "bandwidth_roulette"; }
  /// Paired: sendTo = recvFrom = {partner}, weights 1/2 and 1/2. Left out:
  /// no peers, selfWeight 1.
  /// @throws InvalidArgument for a rank outside [0, worldSize).
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

  /// partner[i] = the rank that rank i swaps `segment` with at `step`, or i
  /// itself if it sits the round out. An involution (partner[partner[i]] == i)
  /// with at most one fixed point, and none for an even world size.
  std::vector<int> partners(std::uint64_t step, int segment) const;

  /// Relative weight w(a, b) of the link between ranks a != b, in
  /// [kMinLinkWeight, 1] (1 for the fastest links of the network), the
  /// partner weight of the draw. (For a == b there is no link: the value is
  /// that of a link inside a's island.)
  /// @throws InvalidArgument for a rank outside [0, worldSize).
  double linkWeight(int a, int b) const;

  /// Exact N x N matrix of one round's pairing probabilities: entry (i, j),
  /// i != j, is the probability that i and j are paired; entry (i, i) that i
  /// sits the round out. Symmetric, rows sum to 1. Computed by a recursion
  /// over the numbers of unpaired ranks per island (the ranks of an island
  /// are exchangeable in the draw).
  /// Cost O(states * islands^2), states = prod_A (|A| + 1).
  /// @throws InvalidArgument if states > kMaxExactStates (estimate with
  ///         estimateExpectedMixing in mixing.hpp instead).
  Eigen::MatrixXd pairProbabilities() const;
  /// Exact expected mixing matrix of a round, E[W] = (I + pairProbabilities()) / 2.
  /// Same errors as pairProbabilities().
  Eigen::MatrixXd expectedMixingMatrix() const;
  /// Exact expected share of one round's segment messages that cross between
  /// islands (0 with one island). Same errors as pairProbabilities().
  double expectedCrossIslandShare() const;

  const NetworkLayout& network() const { return network_; }
  double exponent() const { return exponent_; }

 private:
  NetworkLayout network_;
  std::uint64_t seed_;
  double exponent_;
  std::vector<std::vector<double>> islandWeight_;  // w between islands A and B
};

/// SGP's time-varying directed exponential graph (Assran et al., ICML 2019,
/// Sec. 3 / App. A; Yeo et al. use it as the SGP baseline). With offsets
/// 2^0, 2^1, ..., 2^(m-1) (all powers of two below N), at step k rank i sends
/// to i + 2^(k mod m) (1-peer), or to i + offsets[2k mod m] and
/// i + offsets[(2k+1) mod m] (2-peer), modulo N. Every rank has the same out-
/// and in-degree d, and splits its mass uniformly over itself and its d
/// out-peers: W(i,i) = W(i,j) = 1/(d+1), so W is doubly stochastic. For N a
/// power of two, the 1-peer product over m consecutive steps is exactly the
/// uniform averaging matrix.
class DirectedExponential final : public Topology {
 public:
  /// @throws InvalidArgument if worldSize < 1 or peersPerStep not in {1, 2}.
  DirectedExponential(int worldSize, int peersPerStep = 1);
  int worldSize() const override { return n_; }
  std::string name() const override { return "directed_exponential"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;
  /// Offsets (2^i < N) cycled through by the schedule.
  const std::vector<int>& offsets() const { return offsets_; }

 private:
  std::vector<int> offsetsAt(std::uint64_t step) const;
  int n_;
  int peersPerStep_;
  std::vector<int> offsets_;
};

/// A fixed directed graph given as edges (from, to). Rank j splits its mass
/// uniformly over itself and its out-neighbours (push-sum weights):
/// W(i,j) = 1/(outdeg(j)+1) for each edge j -> i, W(i,i) = 1/(outdeg(i)+1).
/// Column-stochastic; doubly stochastic only for regular graphs.
class ExplicitGraph final : public Topology {
 public:
  /// @throws InvalidArgument for ranks outside [0, worldSize), self-loops or
  ///         duplicate edges.
  ExplicitGraph(int worldSize, std::vector<std::pair<int, int>> edges);
  int worldSize() const override { return n_; }
  std::string name() const override { return "explicit"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

 private:
  int n_;
  std::vector<std::vector<int>> out_, in_;
};

/// The random topology *without* fair selection that Yeo et al. compare with
/// (Sec. 3.2, Theorem 3.3): each rank draws a destination from its roulette
/// row independently, so some ranks receive several segments and others none;
/// a receiver averages itself with everything it got, equally. The mixing
/// matrix is row-stochastic but in general not column-stochastic. For the
/// mixing analysis and ablations.
class UnfairRoulette final : public Topology {
 public:
  /// Same arguments and errors as FairRoulette.
  UnfairRoulette(int worldSize, std::uint64_t seed, std::vector<std::vector<double>> probabilities = {});
  int worldSize() const override { return roulette_.worldSize(); }
  std::string name() const override { return "roulette_unfair"; }
  PeerSet peers(int rank, std::uint64_t step, int segment = 0) const override;

 private:
  FairRoulette roulette_;
};

/// Splits ranks into leader groups (Yeo et al., Sec. 3.3): `groups` if given
/// (must partition [0, worldSize)), else consecutive groups of `groupSize`
/// (the last one may be smaller). Each group is sorted; its leader is its
/// lowest rank (groups[g][0]). Groups are ordered by leader.
/// @throws InvalidArgument if the explicit groups are not a partition or
///         groupSize < 1.
std::vector<std::vector<int>> makeGroups(int worldSize, int groupSize,
                                         std::vector<std::vector<int>> groups = {});

/// Splits a flat vector made of tensors of `tensorSizes` elements into
/// `segments` contiguous [begin, end) ranges along tensor boundaries
/// (Yeo et al., Section 3.1: a segment is a group of layers). Tensors larger
/// than total/segments are first cut into equal pieces, so the segments stay
/// balanced when one tensor dominates. Returns min(segments, total) non-empty
/// ranges covering [0, total) in order (none when total == 0).
/// @throws InvalidArgument if segments < 1.
std::vector<std::pair<std::size_t, std::size_t>> segmentsAlongTensors(
    const std::vector<std::size_t>& tensorSizes, int segments);

/// splitmix64: the hash behind the topologies' seeding.
std::uint64_t splitmix64(std::uint64_t x);

/// A random perfect matching of the ranks for round `round`, the same on
/// every rank (pure: a function of its arguments only). Returns partner, N
/// ints: partner[r] is the rank r is paired with in that round, and
/// partner[partner[r]] == r. With an odd world size one rank, drawn anew each
/// round, is left over: partner[r] == r. The ranks are shuffled (Fisher-Yates,
/// seeded by splitmix64 of seed and round; the same on every platform) and
/// consecutive ranks of the shuffle are paired, so every matching is equally
/// likely (up to the 2^-53 granularity of the draws). DiLoCo's gossip outer
/// step uses it (optimizers/src/diloco.cpp).
/// @throws InvalidArgument if worldSize < 1.
std::vector<int> randomPairing(int worldSize, std::uint64_t seed, std::uint64_t round);

}  // namespace gossamer::topologies

namespace gossamer {
class Registry;
}
namespace gossamer::topologies {
/// Registers "ring" (no keys), "fair_roulette" (key `probabilities`; seeded
/// with config.seed), "bandwidth_roulette" (`bandwidth_exponent`, and the
/// `network:` section), "directed_exponential" (`peers_per_step`) and
/// "explicit" (`edges`), each with its YAML keys and their checks, and makes
/// fair_roulette the default topology.
/// @throws InvalidArgument if one of these names is registered already.
void registerBuiltins(Registry& registry);
/// The same, one topology at a time.
void registerRing(Registry& registry);
void registerFairRoulette(Registry& registry);
void registerBandwidthRoulette(Registry& registry);
void registerDirectedExponential(Registry& registry);
void registerExplicitGraph(Registry& registry);
}  // namespace gossamer::topologies
