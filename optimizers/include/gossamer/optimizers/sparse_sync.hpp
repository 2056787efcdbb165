// Schedules for synchronising a sparse model over symmetric ranks (paper
// 001_0e82f64010384eaf.txt, Yokoyama & Araki, "Efficient Distributed Machine
// Learning for Large-scale Models by Reducing Redundant Communication"):
// pure functions of which features each rank touches in each round, computed
// once before training. No I/O: the collective that runs them is separate.
//
//   partitionRanges / featureCounts   Section V-A: the parameter vector [0, d)
//                                     split into one contiguous range per rank,
//                                     balanced by feature occurrence counts
//   planKeyOmission                   Section V-B: alltoallv with the keys
//                                     exchanged once up front, values per round
//   singleRankFeatures                Section IV-C, Algorithm 2
//   planDirectTransmission            Section IV-C/D, Algorithm 3 and the
//                                     replacement with direct transmission;
//                                     element counts as in Table II
//
// Notation (the paper's Table I): N ranks (nodes), M rounds (mini-batches per
// rank), D_{n,m} the sorted unique features rank n touches in round m.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gossamer::optimizers::sparse_sync {

/// touched[n][m] = D_{n,m}: the feature indices (uint32, strictly ascending,
/// no repeats) rank n touches in round m. Every rank has the same number of
/// rounds M (a round may be empty). N = touched.size() >= 1.
using TouchedFeatures = std::vector<std::vector<std::vector<std::uint32_t>>>;

/// Checks `touched` (see TouchedFeatures) and returns M, the rounds per rank.
/// `dimension` d: when non-zero every feature must be < d.
/// @throws InvalidArgument naming the rank, round and position of the first
///         problem: no ranks, ranks with different round counts, a feature
///         list not strictly ascending, or a feature >= d.
std::size_t checkTouched(const TouchedFeatures& touched, std::size_t dimension = 0);

// ---- range partition (Section V-A) ------------------------------------------------------

/// counts[f] = the number of (rank, round) pairs whose D_{n,m} holds f, for
/// f in [0, d): "count the number of mini-batches in which each feature
/// appears" (Section V-A). Shape: d uint64 counts.
/// @throws InvalidArgument as checkTouched (d >= 1, every feature < d), or
///         for d > 2^32 (features are uint32).
std::vector<std::uint64_t> featureCounts(const TouchedFeatures& touched, std::size_t dimension);

/// Contiguous ranges of [0, d), d = counts.size(), one per rank, "in order
/// that the sums of the counts are nearly equal" (Section V-A). Returns
/// bounds of N + 1 entries: bounds[0] = 0, bounds[N] = d, rank r owns
/// features [bounds[r], bounds[r+1]) (possibly empty). Rule: with S the sum
/// of the counts, bounds[r] (0 < r < N) is the smallest j >= bounds[r-1]
/// whose prefix sum counts[0] + ... + counts[j-1] reaches r S / N. So every
/// range's sum is below S/N + max(counts), and zero-count features at a
/// boundary go to the later range. When S = 0 the ranges split [0, d) into
/// equal lengths instead (r d / N, rounded down).
/// @throws InvalidArgument for ranks < 1, an empty `counts`, or d > 2^32.
std::vector<std::size_t> partitionRanges(const std::vector<std::uint64_t>& counts, int ranks);

/// Checks range bounds (see partitionRanges): N + 1 >= 2 entries, the first
/// 0, none below the one before it.
/// @throws InvalidArgument naming the first bad entry.
void checkRanges(const std::vector<std::size_t>& bounds);

/// The rank whose range (from partitionRanges) holds `feature` (O(log N)).
/// @throws InvalidArgument as checkRanges, or for feature >= d = bounds.back().
int ownerOf(const std::vector<std::size_t>& bounds, std::uint32_t feature);

// ---- key omission (Section V-B) ---------------------------------------------------------

/// What each rank sends in the alltoallv of each round, with the keys
/// omitted: keys[m][src][dst] = D_{src,m} restricted to dst's range, sorted;
/// these lists are exchanged once before training, so that in round m rank
/// src sends dst only counts[m][src][dst] float values, in that key order,
/// and dst knows which features they are. The diagonal (src == dst) is the
/// rank's own part (an alltoallv counts it; it is a local copy).
struct KeyOmissionPlan {
  /// [M][N][N] sorted uint32 feature lists.
  std::vector<std::vector<std::vector<std::vector<std::uint32_t>>>> keys;
  /// [M][N][N] the alltoallv send counts (elements) of round m: keys[m][src][dst].size().
  std::vector<std::vector<std::vector<std::size_t>>> counts;
  /// Keys sent up front in total (elements; sum of counts over m, src, dst != src).
  std::size_t keyElements = 0;
};

/// Splits each D_{src,m} by the owners' ranges (Section V-B).
/// @param touched D (see TouchedFeatures), N = touched.size() ranks.
/// @param bounds ranges from partitionRanges: N + 1 ascending entries from 0
///        to d; every feature must be < d.
/// @throws InvalidArgument as checkTouched, for bounds of the wrong size or
///         not ascending from 0, or a feature outside [0, d).
KeyOmissionPlan planKeyOmission(const TouchedFeatures& touched, const std::vector<std::size_t>& bounds);

// ---- Algorithm 2 ------------------------------------------------------------------------

/// A feature updated by one rank only in a round: (f, n) of the paper's S.
struct SingleRankFeature {
  std::uint32_t feature = 0;
  int rank = 0;
  bool operator==(const SingleRankFeature&) const = default;
};

/// Algorithm 2 (Section IV-C): per round m, the features in exactly one
/// D_{n,m}, with that rank n. Returns M lists, each sorted by feature. (At
/// N = 1 every touched feature is one.)
/// @throws InvalidArgument as checkTouched.
std::vector<std::vector<SingleRankFeature>> singleRankFeatures(const TouchedFeatures& touched);

// ---- Algorithm 3 and the direct transmission --------------------------------------------

/// Element counts in the form of the paper's Table II, plus the exact sums.
struct DirectCounts {
  /// Without direct transmission: sum over n, m of |D_{n,m}|, the elements of
  /// the reduce, and as many of the broadcast.
  std::size_t baselineElements = 0;
  /// With it: sum of |F^R_{n,m}| (reduce) and of |F^B_{n,m}| (broadcast).
  std::size_t reduceElements = 0;
  std::size_t broadcastElements = 0;
  /// Sum of |F^D(src, dst, m)| over src != dst: the directly transmitted elements.
  std::size_t directElements = 0;
  /// Values a rank passes to itself (src == dst: it keeps them, nothing is sent).
  std::size_t keptElements = 0;
  /// (reduce + broadcast + direct) / (2 baseline): elements sent with direct
  /// transmission over those without (1 when baseline is 0). The paper's
  /// "decreasing rate" (2 n_r + n_d) / (2 n_r + 2 n_d) approximates it.
  double decreasingRate = 1.0;
};

/// The schedule of Section IV-D: the collective sets with the single-rank
/// features taken out, and the direct transmissions that replace them.
struct DirectSchedule {
  /// [M][N] sorted features rank n reduces to their owners after round m (F^R_{n,m}).
  std::vector<std::vector<std::vector<std::uint32_t>>> reduce;
  /// [M][N] sorted features rank n receives from their owners before round m (F^B_{n,m}).
  std::vector<std::vector<std::vector<std::uint32_t>>> broadcast;
  /// [M][N][N] sorted features rank src sends rank dst directly after round m
  /// (F^D(src, dst, m)); empty on the diagonal (see DirectCounts::keptElements).
  std::vector<std::vector<std::vector<std::vector<std::uint32_t>>>> direct;
  DirectCounts counts;
};

/// Algorithm 3 and the replacement (Section IV-C, IV-D). Starts from F^R_{n,m}
/// = F^B_{n,m} = D_{n,m}. For each (f0, n0, m0) of Algorithm 2, with m'0 the
/// backward and m''0 the forward neighbour round (the nearest earlier / later
/// round in which any rank touches f0):
///   - if m'0 exists: f0 leaves F^R_{n,m'0} for every rank n touching it in
///     m'0, and F^B_{n0,m0}; it joins F^D(n, n0, m'0);
///   - if m''0 exists: f0 leaves F^R_{n0,m0}, and F^B_{n,m''0} for every rank
///     n touching it in m''0; it joins F^D(n0, n, m0).
/// Without a backward neighbour F^B_{n0,m0} stays (only the owner has the
/// value); without a forward one F^R_{n0,m0} stays (the owner must get the
/// last update). The paper removes all four and states no such case.
/// A transmission from a rank to itself is not sent (keptElements).
/// @throws InvalidArgument as checkTouched.
DirectSchedule planDirectTransmission(const TouchedFeatures& touched);

}  // namespace gossamer::optimizers::sparse_sync
