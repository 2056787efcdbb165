// Synchronous collectives over any Transport.
//
// Element types: the collective templates below are instantiated for float,
// double, float16 and bfloat16 (gossamer/half.hpp; alltoallv for
// std::int64_t too). A 16-bit vector travels as 2 bytes per element; every
// reduction of 16-bit elements converts both operands to float32, combines
// them there and rounds once to nearest even, so an element is rounded once
// per hop that reduces it. With u the type's unit roundoff (kUnitRoundoff:
// 2^-11 binary16, 2^-8 bfloat16) and x_1..x_N the ranks' values of an element,
// a sum over N ranks differs from the exact sum by at most
// (N - 1) u sum_i |x_i| (to first order in u; the ring rounds N - 1 times,
// the trees and grids fewer), and kAverage adds one more rounding, u |result|.
// kMax is exact. Every rank gets the same bits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gossamer/defaults.hpp"
#include "gossamer/half.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

/// Element-wise reduction. kAverage is the sum divided by the world size
/// (for integers, the quotient truncated toward zero; for float16 and
/// bfloat16 each rank's values are scaled by 1/N before the sum, so that it
/// overflows only where the average does). A NaN wins in kMax and kMin;
/// integer sums and products wrap around.
enum class ReduceOp { kSum, kAverage, kMax, kMin, kProduct };

/// Allreduce algorithms. kAuto picks by message size (see allreduce()).
enum class AllreduceAlgorithm {
  kAuto,
  kRing,
  kRecursiveDoubling,
  kTorus2d,
  kHierarchical,
  kTga2d,
  kHips,
  kRabenseifner
};

/// Parses "auto", "ring", "recursive_doubling", "rabenseifner", "torus2d",
/// "hierarchical", "tga2d", "hips" (HiPS with automatic levels and ring
/// stages; see hips.hpp for the other options). @throws InvalidArgument.
AllreduceAlgorithm parseAllreduceAlgorithm(const std::string& name);
const char* toString(AllreduceAlgorithm algorithm);
/// Whether `algorithm` builds SubTransport views of its transport inside a
/// call (torus2d, hierarchical, tga2d, hips): it then needs a top-level
/// transport and a sequence below 2^32. False for kAuto, whose choice
/// depends on the size and the transport.
bool allreduceBuildsViews(AllreduceAlgorithm algorithm);

/// Number of AllreduceAlgorithm values (kAuto included): the size of
/// per-algorithm tables indexed by static_cast<std::size_t>(algorithm).
inline constexpr std::size_t kAllreduceAlgorithmCount = 8;

/// One calibration point of one algorithm: at a vector of `bytes`, the
/// measured time divided by the formula's prediction (dimensionless, > 0).
struct CostCorrection {
  std::size_t bytes = 0;  ///< Vector size the algorithm was timed at, bytes.
  double factor = 1.0;    ///< Measured seconds / predicted seconds.
  friend bool operator==(const CostCorrection&, const CostCorrection&) = default;
};

/// Gossamer's alpha-beta-gamma cost model (the notation of Wang et al., "A
/// Communication Efficient ADMM-based Distributed Algorithm Using
/// Two-Dimensional Torus Grouping AllReduce" (2023), Table 1; not the formulas
/// of its Table 2, which model idealised schedules): a message of B bytes costs
/// alpha + B beta on the wire, plus B gamma to reduce it.
/// predictAllreduceSeconds sums these over the messages of each algorithm as
/// implemented here (ring pieces of at most chunkBytes counted as messages,
/// recursive doubling's fold for non-powers of two, the grids' and groups'
/// sub-rings and binomial trees, HiPS's stages).
///
/// Two additions measure what the paper's formula leaves out on a real
/// machine (calibrateCostModel sets both; the defaults leave them out):
/// - `contention`: a step in which c ranks send at once costs
///   (1 + contention (c - 1)) times as much as one message alone. 0 means
///   independent links; on one host whose ranks share a few cores it is
///   typically 0.1-1, so that a step of a sub-ring of L < N ranks, or a ring
///   on a vector of fewer than N elements (most chunks empty), is cheaper.
/// - `corrections[a]`: per algorithm, measured / predicted at a few vector
///   sizes (ascending bytes). Between two points the factor is interpolated
///   geometrically in log(bytes); below the first and above the last it is
///   the first's / the last's. An empty list means factor 1.
/// The defaults (no calibration) are typical of ZeroMQ over loopback on a
/// small machine.
struct CostModel {
  double alphaSeconds = 50e-6;           ///< Per-message latency, seconds (>= 0).
  double betaSecondsPerByte = 1e-9;      ///< Inverse bandwidth, seconds per byte (>= 0).
  double gammaSecondsPerByte = 0.25e-9;  ///< Reduction cost, seconds per byte (>= 0).
  double contention = 0.0;               ///< Cost growth per extra concurrent sender (>= 0).
  /// Index: static_cast<std::size_t>(AllreduceAlgorithm); see above.
  std::array<std::vector<CostCorrection>, kAllreduceAlgorithmCount> corrections{};
  /// True if calibrateCostModel measured `algorithm` (it has corrections).
  bool calibrated(AllreduceAlgorithm algorithm) const {
    return !corrections[static_cast<std::size_t>(algorithm)].empty();
  }
  friend bool operator==(const CostModel&, const CostModel&) = default;
};

/// Options shared by the collectives. Every rank of a collective must pass the
/// same `sequence` and algorithm settings: the sequence keeps the messages of
/// successive calls apart (the Communicator below numbers them for you).
struct CollectiveOptions {
  CollectiveOptions() = default;
  /// The common fields first; the others keep their defaults.
  CollectiveOptions(std::uint64_t seq, double timeout, AllreduceAlgorithm algo = AllreduceAlgorithm::kAuto,
                    std::size_t chunk = defaults::kChunkBytes)
      : sequence(seq), timeoutSeconds(timeout), algorithm(algo), chunkBytes(chunk) {}

  std::uint64_t sequence = 0;                         ///< Distinct per call, same on all ranks (< 2^40).
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on each wait inside the collective, seconds.
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  /// Ring pipelining: each ring step's chunk travels as pieces of at most this
  /// many bytes, so that receiving, reducing and forwarding overlap. A value
  /// above maxMessageBytes counts as maxMessageBytes.
  std::size_t chunkBytes = defaults::kChunkBytes;
  /// The largest message the collectives send, bytes (at least one element;
  /// a value above kMaxPayloadBytes, 1 GiB, the largest frame a transport
  /// takes, counts as kMaxPayloadBytes). A vector, share or piece above it
  /// moves as several messages: a 1.2 GB broadcast as two.
  std::size_t maxMessageBytes = kMaxPayloadBytes;
  /// kAuto without the cost model: vectors of at most this many bytes use
  /// recursive doubling (log2 N latency-bound rounds), larger ones
  /// Rabenseifner's algorithm up to midMessageBytes, the ring above.
  std::size_t smallMessageBytes = defaults::kSmallMessageBytes;
  /// kAuto without the cost model: vectors above smallMessageBytes and up to
  /// this many bytes use Rabenseifner's algorithm (the ring's bytes in 2 log2 N
  /// steps), larger ones the ring (bytes).
  std::size_t midMessageBytes = defaults::kMidMessageBytes;
  /// kTorus2d: rows of the rank grid (0 = the largest divisor of N that is at
  /// most sqrt(N); a prime N degenerates to one row, i.e. a ring).
  int torusRows = 0;
  /// kHierarchical, kTga2d: ranks per group (consecutive ranks; the last group
  /// may be smaller; 0 = the largest divisor of N at most sqrt(N)).
  int groupSize = 0;
  /// kAuto with useCostModel: the algorithm with the lowest predicted time
  /// (predictAllreduceSeconds under `model`; see chooseAllreduce);
  /// otherwise the smallMessageBytes threshold.
  bool useCostModel = false;
  CostModel model;  ///< Used by kAuto with useCostModel, and by predictAllreduceSeconds.
};

struct Config;

/// The Communicator's options from the `collectives:` section of a completed
/// Config (timeoutSeconds from transport.timeout_seconds; sequence 0). The
/// section's keys and their defaults (CollectiveOptions' own) are declared
/// by every Registry.
/// @throws InvalidArgument if a key is not set (a Config not completed by
///         Registry::complete), ConfigError for an unknown algorithm name.
CollectiveOptions collectiveOptionsFrom(const Config& config);

/// Predicted seconds of one allreduce of a vector of `bytes` over `worldSize`
/// ranks with `algorithm` under `options.model` (see CostModel), with the
/// grid, group and piece sizes of `options` (torusRows, groupSize,
/// chunkBytes); elements are taken to be 4 bytes (float32) where the
/// algorithms cut the vector into chunks. 0 for bytes == 0 or worldSize <= 1.
/// kAuto predicts the algorithm chooseAllreduce picks. Non-decreasing in
/// `bytes` for an uncalibrated model. Each algorithm's rounds are those its
/// implementation runs (sdk/src/collectives/, docs/collectives.md).
/// @throws InvalidArgument if
/// worldSize < 1.
double predictAllreduceSeconds(AllreduceAlgorithm algorithm, std::size_t bytes, int worldSize,
                               const CollectiveOptions& options);

/// The algorithm kAuto runs for a vector of `bytes` over `worldSize` ranks.
/// Without options.useCostModel: recursive doubling up to
/// options.smallMessageBytes, Rabenseifner up to options.midMessageBytes,
/// the ring above. With it: the lowest
/// predictAllreduceSeconds among ring, recursive doubling, Rabenseifner, 2D torus (unless
/// options.torusRows does not divide worldSize), hierarchical, 2D-TGA and
/// HiPS; if the model is calibrated, only among the algorithms calibrated
/// (CostModel::calibrated). An algorithm that sends the same messages as an
/// earlier one in that list for this size and N (at N = 2 every ring-based
/// one is a ring of two; at N = 4 HiPS is the 2 x 2 torus) is left out, so
/// calibration noise between identical schedules does not decide; ties go
/// to the earlier one too.
/// Deterministic: every rank picks the same one given the same options.
/// With the cost model, each thread remembers its last 16 choices under the
/// last model it was given (compared by value on every call), so a repeated
/// call costs a comparison, not 1-2 us of predictions.
AllreduceAlgorithm chooseAllreduce(std::size_t bytes, int worldSize, const CollectiveOptions& options);

/// True if algorithms `a` and `b` send the same messages for a vector of
/// `bytes` over `worldSize` ranks with the grid, group and piece sizes of
/// `options` (torusRows, groupSize, chunkBytes): the same sequence of steps,
/// in each step the same number of concurrent senders, each sending the same
/// number of messages of the same sizes (to within one element, where a
/// chunk boundary falls) and its receiver reducing the same number of bytes.
/// Which rank of a pair sends a given chunk first may differ (the ring
/// phases' chunk shift). These are the rounds predictAllreduceSeconds sums
/// (the schedule each implementation runs, sdk/src/collectives/), compared in
/// order, not their cost. kAuto stands for chooseAllreduce's pick. With the
/// default options: at a prime N (2, 3, 5, ...) the ring, 2D torus (1 x N),
/// hierarchical and 2D-TGA (groups of one rank) and HiPS (one stage) are all
/// the ring of N; at N = 4 the 2 x 2 torus and HiPS (stages 2, 2) exchange
/// between the same pairs, and on a one-element vector hierarchical too.
/// Reflexive and symmetric; true for any pair when worldSize == 1 or
/// bytes == 0 (nothing is sent). @throws InvalidArgument if worldSize < 1.
bool sameAllreduceSchedule(AllreduceAlgorithm a, AllreduceAlgorithm b, std::size_t bytes, int worldSize,
                           const CollectiveOptions& options);

/// What calibrateCostModel measures.
struct CalibrationOptions {
  /// Vector sizes timed, bytes (ascending, multiples of 4, at least 2). The
  /// first fits alpha (a ring of one element sends one message per step), the
  /// second the contention, the last beta; every one gives each algorithm a
  /// correction point. The default: 4 B, 64 B and 1 KiB (latency-bound),
  /// then steps of 4 up to 16 MiB. A transport's per-message cost has steps
  /// (the socket transport changes how it reads at 16 KiB and 64 KiB), and a
  /// grid with steps of 16 interpolates across them: recursive doubling's
  /// 64 KiB message at N = 2 was predicted 11% faster than the ring's two
  /// 32 KiB ones, and measured 33% slower. 16 MiB is the first size whose
  /// vector and scratch leave the 2 MiB L2 cache per core here: beyond it the
  /// ring's checksum forwarding (which the 2-rank phases of the torus and HiPS
  /// cannot use) made it 10% faster than both at 16 MiB and 17% at 64 MiB
  /// over the socket transport (4 ranks), which corrections from 4 MiB,
  /// extrapolated flat, did not show.
  std::vector<std::size_t> sizes = {4,
                                    64,
                                    std::size_t{1} << 10,
                                    std::size_t{4} << 10,
                                    std::size_t{16} << 10,
                                    std::size_t{64} << 10,
                                    std::size_t{256} << 10,
                                    std::size_t{1} << 20,
                                    std::size_t{4} << 20,
                                    std::size_t{16} << 20};
  int reps = 5;  ///< Timed calls per (algorithm, size), at least (>= 1); the median is used.
  /// Timed calls per (algorithm, size), at most: more than `reps` when a
  /// round of every algorithm takes less than secondsPerSize / reps. (With a
  /// cap of 40, the one-element calls of a 2-rank socket transport, 5-15 us
  /// each, would all be timed within 3 ms, one scheduler time slice, and one
  /// preemption could reorder ring and recursive doubling.)
  int maxReps = 400;
  /// Roughly how long the timed calls of one size take (>= 0; 0: `reps`).
  /// Cheap sizes get more repetitions, so their medians are steadier.
  double secondsPerSize = 0.15;
  /// Untimed rounds (every algorithm once) per size before them (>= 0); the
  /// first one, timed on the slowest rank, sizes the repetitions. One more
  /// untimed round at the first size comes before everything, so that the
  /// calls that set up connections and scratch do not size any repetitions.
  int warmups = 1;
  /// The timed calls of every size are split into this many passes over all
  /// the sizes (>= 1; each pass after the first starts a size with one
  /// untimed round), and the median is taken over all of them: a burst of
  /// load from other processes then spoils a part of every size's samples,
  /// not all of one size's.
  int passes = 3;
  /// Algorithms timed (kAuto ignored). Empty: ring, recursive doubling,
  /// Rabenseifner, 2D torus (if options.torusRows divides N), hierarchical,
  /// 2D-TGA and HiPS, or only the first three on a SubTransport (the others
  /// need a top-level one).
  std::vector<AllreduceAlgorithm> algorithms;
};

/// Measures the cost model on `transport` by timing the allreduce algorithms
/// themselves (float32 sums) at calibration.sizes, every algorithm once per
/// repetition in a shuffled order, each call after a barrier, the
/// repetitions of each size spread over calibration.passes passes; a call's time
/// is the slowest rank's. From the ring: alpha (the first size, where a
/// one-element vector makes every step a single message), the contention
/// (the second size, where every rank sends at once) and beta (the last
/// size); gamma from a local 4 MiB reduction. Then, per algorithm and size,
/// the correction measured / predicted. Rank 0's model is broadcast, so every
/// rank returns the same bits. On an oversubscribed host the effective
/// per-message cost grows with the world size: calibrate with the world size,
/// transport and options (chunkBytes, torusRows, groupSize) you will run.
/// With worldSize 1 returns options.model unchanged.
///
/// Collective: every rank calls it with the same arguments. Uses the
/// sequences options.sequence, options.sequence + 1, ...; on return
/// options.sequence is one past the last one used (and options.model is
/// untouched). Takes about secondsPerSize per size, or (warmups + reps +
/// passes - 1) rounds of every algorithm where that is longer (the largest
/// size), plus one round at the first size. With the defaults, on 2 cores
/// (zmq and socket transports, tcp and ipc): 1-2 s for 2 ranks, 3-5 s for 4,
/// 6-9 s for 8.
/// @throws InvalidArgument for fewer than two sizes, sizes not ascending or
///         not positive multiples of 4, reps < 1, warmups < 0, passes < 1 or
///         secondsPerSize < 0; as allreduce (TimeoutError, PeerFailure).
CostModel calibrateCostModel(Transport& transport, CollectiveOptions& options,
                             const CalibrationOptions& calibration = {});

/// Returns once every rank has entered it: the dissemination barrier
/// (ceil(log2 N) rounds of one 1-byte message each way, in the barrier's own
/// tag space with options.sequence, so that it never pairs with another
/// rank's allreduce). @throws TimeoutError after options.timeoutSeconds;
/// PeerFailure from the transport.
void barrier(Transport& transport, const CollectiveOptions& options);

/// Allreduce of `data` (L elements, the same L on every rank), in place, with
/// the algorithm in `options` (kAuto: chooseAllreduce; on a SubTransport only
/// the ring or recursive doubling, since the others build views of their
/// own). Every algorithm gives every rank bitwise the same result. A 16-bit
/// kAverage scales `data` by 1/N before the sum (docs/collectives.md). After
/// an exception `data` holds no defined values (partial sums, or the 1/N
/// scaling of a 16-bit average refused by an algorithm's own checks).
/// @throws as ringAllreduce.
template <typename T>
void allreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options);

/// Out-of-place form: `out` (same length as `in`) receives the reduction of
/// `in`; `in` is not modified. @throws InvalidArgument on a length mismatch.
template <typename T>
void allreduce(Transport& transport, std::span<const T> in, std::span<T> out, ReduceOp op,
               const CollectiveOptions& options);

/// Recursive-doubling allreduce: in round k rank r exchanges its whole vector
/// with r XOR 2^k and both combine, log2 P rounds for the P = 2^floor(log2 N)
/// ranks of the largest power of two; the N - P other ranks first fold their
/// vector into a partner and get the result back at the end. Each rank sends
/// about L log2 N elements: for small vectors, where the ring's 2(N-1)
/// sequential steps dominate. @throws as ringAllreduce.
template <typename T>
void recursiveDoublingAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                                const CollectiveOptions& options);

/// Rabenseifner's allreduce (Thakur, Rabenseifner and Gropp, IJHPCA 2005,
/// Sec. 4.4): a reduce-scatter by recursive halving (log2 P steps, each
/// exchanging half of the previous step's window with the rank 2^k away)
/// then an allgather by recursive doubling, over the P = 2^floor(log2 N)
/// ranks of the largest power of two; the N - P other ranks first fold their
/// vector into a partner and get the result back at the end. Each rank sends
/// 2 (P-1)/P of the vector, the ring's bytes, in 2 log2 P messages instead of
/// 2 (N-1): for mid-sized vectors. Any length works (chunks as chunkRange
/// over P). In place, like ringAllreduce. @throws as ringAllreduce.
template <typename T>
void rabenseifnerAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                           const CollectiveOptions& options);

/// Ring allreduce (the 2D-TGA paper, Eq. 2 and Section 2): a
/// reduce-scatter of N-1 steps followed by an allgather of N-1 steps over the
/// ring rank -> rank+1. Each rank sends 2(N-1)/N of the vector in all. The
/// vector is split into N chunks whose lengths differ by at most one element,
/// so any length (including 0 and lengths below N) works; N = 1 returns at once.
/// Pipelined: every chunk moves as pieces of at most options.chunkBytes, and a
/// piece is forwarded to the next step as soon as it has been reduced.
/// In place: `data` (length L elements, the same L on every rank) holds the sum
/// or the average on return.
/// @throws TimeoutError, PeerFailure, ProtocolError (a peer sent a chunk of the
///         wrong length), InvalidArgument.
template <typename T>
void ringAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options);

/// 2D-torus allreduce (the 2D-TGA paper, Sec. 2.2): ranks in an
/// R x C grid (rank = row * C + col); a ring reduce-scatter along each row,
/// a ring allreduce of the owned 1/C chunk along each column, and a ring
/// allgather along the row. Per rank: 2(C-1)/C + 2(R-1)/(RC) of the vector
/// sent, in 2(C-1) + 2(R-1) steps. Must run on a top-level transport (it
/// builds SubTransport views). @throws as ringAllreduce; InvalidArgument if
/// options.torusRows does not divide N.
template <typename T>
void torus2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options);

/// Hierarchical allreduce (the 2D-TGA paper, Sec. 2.3): binomial reduce inside
/// each group to its leader (lowest rank), ring allreduce among the leaders,
/// then binomial broadcast inside each group. @throws as torus2dAllreduce.
template <typename T>
void hierarchicalAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                           const CollectiveOptions& options);

/// 2D-TGA, two-dimensional torus grouping allreduce (Wang et al., Algorithm 1):
/// ring allreduce inside each group; the L leaders, in a sqrt(L) x sqrt(L)
/// grid (or the nearest R x C with R C = L), run reduce-scatter along rows,
/// the segmented ring along columns and allgather along rows (the 2D torus
/// above); then each leader broadcasts to its group. @throws as torus2dAllreduce.
template <typename T>
void tga2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options);

/// Chunk `i` of a vector of `length` elements cut into `n` chunks whose lengths
/// differ by at most one (the first length % n chunks are one longer): the
/// element range [first, second). @throws InvalidArgument for i outside [0, n).
std::pair<std::size_t, std::size_t> chunkRange(std::size_t length, int n, int i);

/// Ring reduce-scatter (the first half of ringAllreduce), in place: on return
/// rank r's chunk r (see chunkRange) holds the reduction over all ranks and is
/// returned; the other chunks of `data` hold partial results. N-1 steps,
/// (N-1)/N of the vector sent per rank. @throws as ringAllreduce.
template <typename T>
std::span<T> ringReduceScatter(Transport& transport, std::span<T> data, ReduceOp op,
                               const CollectiveOptions& options);

/// Ring allgather (the second half of ringAllreduce), in place: on entry rank
/// r's chunk r of `data` is valid; on return every chunk is, on every rank.
/// T is also std::byte: the bytes of elements of any type (moved, never
/// combined); chunkRange then cuts bytes, which are whole elements when the
/// element count divides by N. @throws as ringAllreduce.
template <typename T>
void ringAllgather(Transport& transport, std::span<T> data, const CollectiveOptions& options);

/// Personalised all-to-all with variable counts (MPI_Alltoallv): rank r sends
/// sendCounts[j] elements to rank j, taken consecutively from `send` in rank
/// order, and receives recvCounts[j] elements from rank j into `recv`, also
/// consecutively in rank order. Every pair exchanges directly (one message per
/// non-empty pair, or blocks of at most options.maxMessageBytes, all posted
/// at once); the part for itself is copied. T is
/// also std::byte (elements of any type as bytes; counts then in bytes).
/// `send` and `recv` must not overlap: receives are posted into `recv`
/// before anything is sent from `send`.
/// @throws InvalidArgument if the counts do not have N entries, do not add
///         up to the buffer lengths, or a share needs more than 65535
///         messages; ProtocolError if a peer sends a count
///         other than the one expected; TimeoutError, PeerFailure.
template <typename T>
void alltoallv(Transport& transport, std::span<const T> send, std::span<const std::size_t> sendCounts,
               std::span<T> recv, std::span<const std::size_t> recvCounts, const CollectiveOptions& options);

/// Binomial-tree broadcast of `data` (L elements, same L on every rank) from
/// `root`: ceil(log2 N) rounds. T is also std::byte (elements of any type as
/// bytes). @throws as ringAllreduce.
template <typename T>
void broadcast(Transport& transport, std::span<T> data, int root, const CollectiveOptions& options);

/// Binomial-tree reduce of `data` (L elements, same L on every rank) to
/// `root`: ceil(log2 N) rounds; on return the root holds the sum (or average),
/// other ranks' `data` holds partial sums (unspecified). @throws as ringAllreduce.
template <typename T>
void reduce(Transport& transport, std::span<T> data, int root, ReduceOp op, const CollectiveOptions& options);

/// Numbers collective calls so that every rank uses the same sequence, and
/// carries the default timeout. One per Transport; not thread-safe (all ranks
/// must issue collectives in the same order, as in MPI).
/// The handle of a non-blocking collective (Communicator::iallreduce,
/// ibroadcast): the collective runs on the communicator's communication
/// thread, in the order the calls were made, while the caller goes on. The
/// caller must not touch the collective's buffer until it is done. Copies
/// share one state. (As gloo's process group runs its work.)
class Work {
 public:
  /// An empty handle: test() and wait() throw InvalidArgument.
  Work() = default;
  /// True once the collective has finished, successfully or not. Never blocks.
  /// @throws InvalidArgument on an empty handle.
  bool test() const;
  /// Blocks until the collective has finished, then rethrows its error if it
  /// failed (TimeoutError, PeerFailure, ProtocolError, ...), on every call.
  /// Each of the collective's own waits is bounded by the communicator's
  /// timeout, so this returns or throws in bounded time.
  /// @throws InvalidArgument on an empty handle; the collective's error.
  void wait() const;
  /// wait(), but gives up after `timeoutSeconds` (>= 0) with TimeoutError;
  /// the collective itself goes on.
  void wait(double timeoutSeconds) const;
  /// Whether this handle refers to a collective.
  bool valid() const { return static_cast<bool>(state_); }

  struct State;  ///< Shared by the handle and the communication thread.

 private:
  friend class Communicator;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  /// @param timeoutSeconds bound on each wait (> 0).
  /// @throws InvalidArgument for a timeout <= 0, or a SubTransport view whose
  ///         context is one of split's (kFirstSplitContext ..).
  explicit Communicator(Transport& transport, double timeoutSeconds);

  int rank() const { return transport_.rank(); }
  int worldSize() const { return transport_.worldSize(); }
  Transport& transport() { return transport_; }
  double timeoutSeconds() const { return timeout_; }

  /// In-place allreduce of float32 / float64 vectors with the communicator's
  /// algorithm settings (setOptions); see gossamer::allreduce.
  void allreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  void allreduce(std::span<double> data, ReduceOp op = ReduceOp::kSum);
  /// In-place allreduce of 16-bit vectors (2 bytes per element on the wire;
  /// reduced in float32, rounded once per hop: see the bound at the top).
  void allreduce(std::span<float16> data, ReduceOp op = ReduceOp::kSum);
  void allreduce(std::span<bfloat16> data, ReduceOp op = ReduceOp::kSum);
  /// Algorithm, chunk size and small-message threshold for later calls (the
  /// sequence and timeout fields are ignored). Same on every rank.
  void setOptions(const CollectiveOptions& options) { defaults_ = options; }
  /// Non-blocking allreduce: starts the allreduce of `data` (in place, as
  /// allreduce()) on this communicator's communication thread (started by
  /// the first non-blocking call) and returns at once. Collectives run in call
  /// order, non-blocking ones first: a blocking call waits for those started
  /// before it. The options (algorithm, chunk size) are those in force at the
  /// call. When one fails, the ones queued behind it fail with the same error
  /// (they were started as if it had succeeded). `data` must stay valid and
  /// untouched until the Work is done.
  Work iallreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  Work iallreduce(std::span<double> data, ReduceOp op = ReduceOp::kSum);
  Work iallreduce(std::span<float16> data, ReduceOp op = ReduceOp::kSum);
  Work iallreduce(std::span<bfloat16> data, ReduceOp op = ReduceOp::kSum);
  /// Non-blocking broadcast from `root`, as iallreduce.
  Work ibroadcast(std::span<float> data, int root);
  Work ibroadcast(std::span<double> data, int root);
  Work ibroadcast(std::span<float16> data, int root);
  Work ibroadcast(std::span<bfloat16> data, int root);
  /// Waits until every non-blocking collective started so far has finished
  /// (their errors stay with their Work). Returns at once without any.
  void synchronize();
  /// Broadcast from `root`; see broadcast.
  void broadcast(std::span<float> data, int root);
  void broadcast(std::span<double> data, int root);
  void broadcast(std::span<float16> data, int root);
  void broadcast(std::span<bfloat16> data, int root);
  /// Reduce to `root`; see reduce.
  void reduce(std::span<float> data, int root, ReduceOp op = ReduceOp::kSum);
  void reduce(std::span<double> data, int root, ReduceOp op = ReduceOp::kSum);
  void reduce(std::span<float16> data, int root, ReduceOp op = ReduceOp::kSum);
  void reduce(std::span<bfloat16> data, int root, ReduceOp op = ReduceOp::kSum);
  /// Measures the cost model with calibrateCostModel (`reps` timed calls per
  /// algorithm and size, the default sizes) and stores it in this
  /// communicator's options, so that later allreduce calls with kAuto and
  /// useCostModel use it. Every rank gets the same model. Collective.
  /// @throws as calibrateCostModel. After a failure the ranks may disagree
  ///         on where it stopped: later collectives on this communicator
  ///         then fail (TimeoutError) where they disagree, and never read a
  ///         message of the calibration.
  CostModel calibrate(int reps);
  /// The same with every calibration setting.
  CostModel calibrate(const CalibrationOptions& calibration = {});
  /// The options of later calls (sequence and timeout aside).
  const CollectiveOptions& options() const { return defaults_; }
  /// Returns once every rank has entered the barrier (dissemination barrier:
  /// ceil(log2 N) rounds of one-byte messages).
  void barrier();

  /// The `color` of a rank that joins no communicator in split (MPI_UNDEFINED).
  static constexpr int kUndefinedColor = -1;
  /// The SubTransport contexts split uses, kFirstSplitContext ..
  /// kFirstSplitContext + kSplitContexts - 1 (0x10-0x7F; the library's own
  /// views use 0x01-0x02 and 0x81-0xFF).
  static constexpr int kSplitContexts = 112;
  static constexpr std::uint8_t kFirstSplitContext = 0x10;

  /// MPI_Comm_split. Collective: every rank of this communicator calls it.
  /// The ranks that pass the same color (>= 0) form a new communicator, in
  /// which they are numbered by `key`, ties broken by their rank here. Returns
  /// it, or nullptr for kUndefinedColor.
  ///
  /// The result is a SubTransport view on the top-level transport (a split of
  /// a split, or of a communicator built on a view, maps its members straight
  /// to it), with this communicator's options (algorithm, chunk size, cost
  /// model), the same timeout and a sequence of its own. Its messages are kept
  /// apart by a context (kFirstSplitContext ..) that no member holds in
  /// another live split communicator on the same top-level transport; it is
  /// released when the result is destroyed. The result must not outlive the
  /// top-level transport. Splits on one top-level transport must not run
  /// concurrently on a rank (as for any two collectives on one transport). On
  /// the result, allreduce's kAuto picks only the ring or recursive doubling,
  /// and the algorithms that build views of their own (torus, hierarchical,
  /// 2D-TGA, HiPS) throw.
  ///
  /// Cost: one recursive-doubling allreduce of 6 N doubles (48 N bytes).
  /// @throws InvalidArgument if color is negative but not kUndefinedColor (on
  ///         that rank, before any message: the others then time out), or if
  ///         the members of a color hold all kSplitContexts contexts between
  ///         them (on every member of that color); TimeoutError, PeerFailure
  ///         as allreduce.
  std::unique_ptr<Communicator> split(int color, int key);

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

 private:
  struct SplitContexts;  // the split contexts held on this rank, per top-level transport
  Communicator(std::unique_ptr<Transport> view, double timeoutSeconds, const CollectiveOptions& defaults,
               std::shared_ptr<SplitContexts> contexts, std::uint8_t context);
  CollectiveOptions next();
  CollectiveOptions ordered();  // next(), after the non-blocking collectives started before
  struct Worker;                // the communication thread of the non-blocking calls (nonblocking.cpp)
  Work enqueue(std::function<void()> job);
  std::unique_ptr<Transport> owned_;  // a split's view (declared before transport_, which refers to it)
  Transport& transport_;
  double timeout_;
  CollectiveOptions defaults_;
  std::uint64_t sequence_ = 0;
  std::shared_ptr<SplitContexts> contexts_;  // of the top-level transport, from the first split on
  std::uint8_t context_ = 0;                 // this communicator's own (0: not a split)
  std::unique_ptr<Worker> worker_;           // declared last: stopped (drained) first
};

}  // namespace gossamer
