// Schedules for synchronising a sparse model over symmetric ranks (Yokoyama and
// Araki, "Efficient Distributed Machine Learning for Large-scale Models by
// Reducing Redundant Communication"): pure functions of which features each
// rank touches in each round, computed once before training (no I/O), and
// SparseExchange, which runs them over a Transport.
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
//   SparseExchange                    Section V: the reduce / direct /
//                                     broadcast of one rank over a transport
//
// Notation (the paper's Table I): N ranks (nodes), M rounds (mini-batches per
// rank), D_{n,m} the sorted unique features rank n touches in round m.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gossamer/transport.hpp"

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

/// The existing method (Section IV-B, V-B): every touched feature is reduced
/// to its owner after each round and broadcast back before it, F^R_{n,m} =
/// F^B_{n,m} = D_{n,m}, no direct sends (counts: reduce = broadcast =
/// baseline, direct = 0, decreasingRate 1).
/// @throws InvalidArgument as checkTouched.
DirectSchedule existingSchedule(const TouchedFeatures& touched);

/// Algorithm 3 and the replacement with direct transmission (Section IV-C,
/// IV-D), in the form that keeps synchronous SGD exact. For a feature f let
/// r_1 < ... < r_K be the rounds touching it (Algorithm 3's neighbour rounds
/// are consecutive r_i) and T_i the ranks touching it in r_i. Each hop r_i ->
/// r_{i+1} goes one of three ways:
///   - |T_i| = 1 (Algorithm 2's single-rank (f, a, r_i), its forward
///     neighbour r_{i+1}): a computes the new value itself and sends it to
///     each rank of T_{i+1} (F^D(a, b, r_i)); no reduce from a, no broadcast
///     at r_{i+1};
///   - |T_i| > 1, T_{i+1} = {b}, b in T_i (the single-rank (f, b, r_{i+1})
///     and its backward neighbour r_i): every other rank of T_i sends b its
///     gradient (F^D(a, b, r_i)); b, which holds the value of r_i, sums them
///     in rank order and applies the step; no reduce, no broadcast to b;
///   - otherwise through the owner: reduce from T_i at r_i, broadcast to
///     T_{i+1} at r_{i+1}.
/// Plus: a broadcast to T_1 at r_1 (the owner has the initial value); a
/// reduce from T_K at r_K (the owner ends with the final value); and a reduce
/// from a at r_i when the hop from r_i is direct with |T_i| = 1 and r_{i+1}
/// reduces gradients to the owner (so the owner is never stale when it
/// applies a step). A reduce from a round with one rank carries the new
/// value, from a round with several the gradients.
/// Where this departs from the paper, and why: the paper also replaces the
/// backward hop when b did not touch f in r_i (b would get gradients but not
/// the value they apply to) and always takes f out of F^R at r_i (the owner
/// could then apply a later reduce to a stale value); both would change the
/// result, which the paper says its method does not. Sends from a rank to
/// itself are not transmissions (DirectCounts::keptElements).
/// @throws InvalidArgument as checkTouched.
DirectSchedule planDirectTransmission(const TouchedFeatures& touched);

// ---- the exchange --------------------------------------------------------------------------

/// Elements (float64 values, not features) one rank sent, excluding what it
/// passed to itself, and the seconds it spent in each phase.
struct ExchangeStats {
  std::uint64_t reduceElements = 0;     ///< to owners, after a round
  std::uint64_t directElements = 0;     ///< straight to the ranks of the next round
  std::uint64_t broadcastElements = 0;  ///< from owners, before a round
  double reduceSeconds = 0;             ///< the reduce + direct alltoallv and the owner's step
  double broadcastSeconds = 0;          ///< the broadcast alltoallv
};

/// One rank's side of sparse synchronous SGD over a schedule (existing or
/// direct): w <- w - rate sum_n g_n per round (Yokoyama and Araki,
/// Algorithm 1), with each sum taken in rank order starting from +0.0, so that
/// every schedule gives the same bits as a dense sum of the N gradient vectors
/// in rank order. See optimizers/src/sparse_sync/exchange.cpp for the steps.
///
/// Parameters are a d x width row-major table of float64 (row j: feature
/// j's values, e.g. [w_j, v_j] of a factorization machine). Every rank keeps
/// a working copy of the whole table; only the rows a round touches are read
/// or written in it. The owner of each range (bounds) keeps the reference
/// copy of its rows.
class SparseExchange {
 public:
  /// Compiles this rank's messages for every round (pure; no I/O).
  /// @param transport   N = touched.size() ranks; this rank = transport.rank()
  /// @param touched     D for every rank (every rank passes the same)
  /// @param bounds      the owners' ranges (partitionRanges), d = bounds.back()
  /// @param schedule    existingSchedule(touched) or planDirectTransmission(touched)
  /// @param width       values per feature, >= 1
  /// @param initial     d x width: the initial table, the same on every rank
  /// @param timeoutSeconds bound on every wait, > 0
  /// @param sequence    first collective sequence number to use (each
  ///                    alltoallv takes the next: 2 per round, 1 per gather())
  /// @throws InvalidArgument as checkTouched / checkRanges, for a world size
  ///         other than N, a schedule of other shape, width 0, an initial
  ///         table of other size, a feature >= d, or timeout <= 0.
  SparseExchange(Transport& transport, const TouchedFeatures& touched, const std::vector<std::size_t>& bounds,
                 const DirectSchedule& schedule, std::size_t width, std::span<const double> initial,
                 double timeoutSeconds, std::uint64_t sequence = 1);
  ~SparseExchange();
  SparseExchange(const SparseExchange&) = delete;
  SparseExchange& operator=(const SparseExchange&) = delete;

  /// Before computing round m: receives into `params` (d x width, this
  /// rank's working copy) the rows of F^B_{rank,m} from their owners.
  /// @throws InvalidArgument for m >= M, m out of order (rounds run 0, 1, ...
  ///         with broadcast before reduce) or a wrong size; TimeoutError,
  ///         PeerFailure, ProtocolError from the transport.
  void broadcast(std::size_t m, std::span<double> params);

  /// After computing round m: `grads` holds |D_{rank,m}| x width float64, the
  /// gradient rows in the order of touched[rank][m]. Sends the reduce and the
  /// direct parts (one alltoallv), applies the step at the owners and at the
  /// receivers of direct gradients, and writes the rows this rank updates
  /// itself (single-rank features) into `params`.
  /// @throws InvalidArgument as broadcast, for a wrong grads size or a rate
  ///         that is not finite; transport errors as broadcast.
  void reduce(std::size_t m, std::span<const double> grads, double rate, std::span<double> params);

  /// The owners' reference rows, assembled on every rank (d x width):
  /// after the last round, the final table; between a round's reduce and the
  /// next one's broadcast, the table so far with existingSchedule (its owners
  /// update every row each round), but not with planDirectTransmission's
  /// schedules, whose rows travel between ranks and reach their owners by
  /// the last round. Changes nothing the rounds after it compute. Collective.
  /// @throws InvalidArgument between a round's broadcast and its reduce;
  ///         transport errors as broadcast.
  std::vector<double> gather();

  /// Elements sent and seconds spent so far by this rank.
  const ExchangeStats& stats() const { return stats_; }

 private:
  struct Round;
  void exchange(std::span<const double> send, const std::vector<std::size_t>& sendCounts,
                std::span<double> recv, const std::vector<std::size_t>& recvCounts);

  Transport& transport_;
  std::size_t width_, lo_, hi_, dimension_;
  std::vector<std::size_t> bounds_;
  std::vector<Round> rounds_;
  std::vector<double> owned_, sum_, sendBuf_, recvBuf_;
  double timeout_;
  std::uint64_t sequence_;
  std::size_t next_ = 0;           // 2 m: broadcast of m next; 2 m + 1: reduce of m next
  std::uint64_t collectives_ = 0;  // alltoallvs so far: the next one's sequence is sequence_ + this
  ExchangeStats stats_;
};

}  // namespace gossamer::optimizers::sparse_sync
