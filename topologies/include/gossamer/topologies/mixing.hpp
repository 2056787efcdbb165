// Mixing analysis of a topology: how fast repeated gossip rounds drive the
// ranks' models to the uniform (AllReduce) average. Pure math, no I/O.
//
// Source: Yeo et al., "Crossover-SGD: A gossip-based communication in
// distributed deep learning for alleviating large mini-batch problem and
// enhancing scalability", Section 3.2 and Figure 6: the second largest
// eigenvalue of M^k, the product of k mixing matrices, and the "imbalance
// factor" between M^k and the AllReduce matrix M_AR (every entry 1/N);
// Theorems 3.1 and 3.3 (products of doubly stochastic matrices converge to
// M_AR, products of merely row-stochastic ones to a rank-one matrix with
// identical but in general non-uniform rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "gossamer/kit/network.hpp"
#include "gossamer/topology.hpp"

namespace gossamer::topologies {

/// The N x N mixing matrix of gossip round `step` for the whole model
/// (N = t.worldSize()).
///
/// Segment-wise topologies (Crossover-SGD; Yeo et al., Sec. 3.1) mix every
/// segment s of the flat parameter vector with its own matrix
/// W_s = t.mixingMatrix(step, s). Coordinate c of segment s of rank i becomes
/// sum_j W_s(i,j) x_j[c], so over all P = sum_s size_s coordinates the
/// fraction of rank i's new parameters that came from rank j is
///
///     M(i,j) = sum_s size_s * W_s(i,j) / sum_s size_s,
///
/// the segment-size-weighted mean of the segments' matrices. That is what this
/// returns. It keeps every property the W_s share (row-, column- or doubly
/// stochastic, non-negative), and equals W_0 for topologies that ignore the
/// segment. Weighting by size (not 1/S) makes the number describe the model
/// actually exchanged: a 10-element bias segment mixes far fewer parameters
/// than a 25,000-element weight block.
///
/// @param segmentSizes element count of each segment, in segment order
///        (segment index s = position). Empty = one segment (index 0).
///        Zero-sized segments get weight 0.
/// @throws InvalidArgument if segmentSizes is non-empty but sums to 0.
Eigen::MatrixXd stepMixingMatrix(const Topology& t, std::uint64_t step,
                                 const std::vector<std::size_t>& segmentSizes);

/// Mixing statistics of the product of the first `step` rounds.
///
/// With M_r = stepMixingMatrix(t, r, sizes) for round r = 0, 1, ... (the
/// round numbers the optimizers pass to Topology::peers), the product after
/// k rounds is
///
///     P_k = M_{k-1} * ... * M_1 * M_0      (N x N; new rounds multiply on
///                                           the left: x_k = P_k x_0)
///
/// and row i of P_k is how much of every rank's initial model rank i holds.
struct MixingStats {
  /// k: the number of rounds in the product (1-based; step 1 = P_1 = M_0).
  std::uint64_t step = 0;
  /// Second largest eigenvalue modulus of P_k (eigenvalues from
  /// Eigen::EigenSolver, complex moduli sorted in decreasing order; the
  /// largest is 1 for a row- or column-stochastic P_k). This is the paper's
  /// lambda(2) of M^k (Fig. 6, top): for large k, ||P_k x - limit|| shrinks
  /// like slem^k for a fixed M, so it is the asymptotic consensus rate. It is
  /// not a bound for finite k when P_k is not normal.
  double slem = 0;
  /// Second largest singular value of P_k. For a doubly stochastic P_k this
  /// is exactly ||P_k - J||_2 (J = 11^T/N), the worst-case contraction of the
  /// consensus distance after k rounds:
  ///     ||P_k x - xbar 1|| <= sigma2 * ||x - xbar 1||   (xbar = mean of x),
  /// a finite-k bound (unlike slem). For a P_k that is only row-stochastic,
  /// the worst-case contraction ||(I - J) P_k||_2 is >= sigma2 (so sigma2 is
  /// then a lower bound on it, not an upper one).
  double sigma2 = 0;
  /// The paper's imbalance factor (Fig. 6, bottom): the "variance between
  /// M^k and M_AR", here the mean over all N^2 entries of the squared
  /// difference to the AllReduce matrix,
  ///     imbalance = (1/N^2) * sum_{i,j} (P_k(i,j) - 1/N)^2
  ///               = ||P_k - J||_F^2 / N^2.
  /// It tends to 0 for products of doubly stochastic matrices (Theorem 3.1)
  /// and to ||pi - 1/N||^2 / N > 0 when P_k -> 1 pi^T with non-uniform pi
  /// (row-stochastic case, Theorem 3.3).
  double imbalance = 0;
};

/// Statistics of P_1, ..., P_steps (one entry per k = 1..steps, in order).
/// For world size 1 every number is 0 (there is nothing to mix).
///
/// Cost: `steps` * (S mixing matrices + an N x N product, eigen- and singular
/// value decompositions), O(steps * (S * cost(mixingMatrix) + N^3)).
/// @param segmentSizes as for stepMixingMatrix (empty = one segment).
/// @throws InvalidArgument as stepMixingMatrix, or if the topology's mixing
///         matrices are inconsistent (Topology::mixingMatrix).
std::vector<MixingStats> analyzeMixing(const Topology& t, std::uint64_t steps,
                                       const std::vector<std::size_t>& segmentSizes = {});

/// One round of a random topology on average: the expected mixing matrix,
/// the rates it gives, and how much of the traffic crosses between islands.
/// Estimated by Monte Carlo over rounds 0..rounds-1 and segments
/// 0..segments-1 (each (round, segment) matrix W is one sample; the random
/// topologies draw every segment from the same distribution).
struct ExpectedMixing {
  std::uint64_t rounds = 0;  ///< Rounds sampled.
  int segments = 0;          ///< Segments per round sampled (rounds * segments samples).
  /// Estimate of E[W] (N x N).
  Eigen::MatrixXd mean;
  /// Second largest eigenvalue modulus of `mean`; 1 - slem is its spectral
  /// gap. For a symmetric E[W], slem < 1 means the expected graph is
  /// connected.
  double slem = 0;
  /// Mean-square consensus rate per round: the largest eigenvalue of
  /// (I - J) E[W^T (I - J) W] (I - J), J = 11^T/N, so that
  ///     E ||x' - xbar' 1||^2 <= rate * ||x - xbar 1||^2
  /// for one round x' = W x (Boyd et al., randomized gossip). For doubly
  /// stochastic W it is the second largest eigenvalue of E[W^T W]; for the
  /// symmetric pairings of BandwidthRoulette (W^T W = W) it equals slem.
  double meanSquareRate = 0;
  /// The same matrix's mean eigenvalue on the disagreement space,
  /// trace / (N - 1): the expected mean-square contraction of a disagreement
  /// vector drawn uniformly at random (meanSquareRate is the worst one's).
  /// For a topology whose expected mixing is the same in every direction
  /// (the uniform roulettes) the two are equal, and this one is the better
  /// estimate from samples: the largest eigenvalue of a sampled matrix is
  /// biased upwards by the sampling noise, the trace is not.
  double meanSquareRateAverage = 0;
  /// Share of a round's segment messages (PeerSet::sendTo of every rank, all
  /// segments) whose two ranks are in different islands of `network`, the
  /// mean over the rounds. (The roulettes send as many messages every round,
  /// so it is also the share of all messages.)
  double crossShare = 0;
  /// Standard error of crossShare: the standard deviation of the per-round
  /// shares over sqrt(rounds) (rounds are independent draws).
  double crossShareStdError = 0;
  /// Segment messages each rank sends per round, on average.
  double messagesPerRank = 0;
};

/// Monte Carlo estimate of one round's expected mixing (see ExpectedMixing).
/// Cost: rounds * segments * N calls of t.peers() and t.mixingMatrix(), and
/// two N x N eigenvalue problems.
/// @throws InvalidArgument if rounds < 2, segments < 1, or network's world
///         size is not t.worldSize(); as Topology::mixingMatrix for an
///         inconsistent topology.
ExpectedMixing estimateExpectedMixing(const Topology& t, const NetworkLayout& network, std::uint64_t rounds,
                                      int segments = 1);

}  // namespace gossamer::topologies
