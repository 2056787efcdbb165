// Gradient compressors (A2SGD, Top-K, Gaussian-K, QSGD, dense) and the optimizer that
// exchanges compressed gradients (CompressedSgd). Paper: Bhattacharya et al.,
// "O(1) Communication for Distributed SGD through Two-Level Gradient Averaging"
// (A2SGD, Eq. 2 and Algorithm 1; Top-K, Gaussian-K and QSGD are its baselines,
// Table 2).
//
// A Compressor is pure local math, no I/O: encode() turns this rank's
// gradient (n float32 elements) into a payload of payloadBytes() bytes and
// keeps whatever local state decode() needs; the optimizer combines the
// ranks' payloads (an element-wise average of float32 payloads, or all N
// payloads gathered in rank order, see PayloadCombine); decode() turns the
// combined payloads back into the gradient to step with. Every buffer is
// allocated in the constructor: encode and decode never allocate.
// Not thread-safe: one compressor per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topology.hpp"

namespace gossamer::optimizers {

/// How the ranks' payloads are combined before Compressor::decode.
enum class PayloadCombine {
  /// The payload is float32 elements; `combined` is their element-wise
  /// average over the ranks (an allreduce, or a push-sum gossip estimate of it).
  kAverage,
  /// The payload is opaque bytes of the same length on every rank;
  /// `combined` is the N payloads one after another in rank order (an allgather).
  kGather,
};

/// Encodes a gradient into bytes plus local state, and decodes combined
/// payloads back into a gradient (see the file comment).
class Compressor {
 public:
  virtual ~Compressor() = default;
  /// "none", "a2sgd", "topk", "gaussk" or "qsgd".
  virtual std::string name() const = 0;
  /// n: elements of the gradients this compressor takes (fixed at construction).
  std::size_t size() const { return size_; }
  virtual PayloadCombine combine() const = 0;
  /// Bytes of one rank's payload: a multiple of 4, the same on every rank and
  /// every step for a given n (so gathered payloads are equal chunks).
  virtual std::size_t payloadBytes() const = 0;
  /// True when every rank decodes the same gradient from the same combined
  /// payloads, so that models which start equal stay equal (none, Top-K,
  /// QSGD). False for A2SGD, whose decode adds this rank's own error vector.
  virtual bool identicalDecode() const = 0;

  /// Encodes `gradient` (n elements) into `payload` (payloadBytes() bytes)
  /// and updates the local state (means, error vector, random state).
  /// @throws InvalidArgument on a length mismatch or a non-finite entry
  ///         (NaN or infinity; the message names the first such index).
  virtual void encode(std::span<const float> gradient, std::span<std::byte> payload) = 0;

  /// Decodes the combined payloads (see PayloadCombine: payloadBytes() bytes
  /// for kAverage; a whole number k >= 1 of payloads for kGather) into `out`
  /// (n elements): the gradient to step with. `gradient` must be the vector
  /// given to the last encode (A2SGD reads it again; the others ignore it);
  /// `out` may be the same memory as `gradient`.
  /// @throws InvalidArgument on a length mismatch; ProtocolError (peer = the
  ///         payload's rank) for a gathered payload that does not decode,
  ///         e.g. a Top-K index outside [0, n).
  virtual void decode(std::span<const std::byte> combined, std::span<const float> gradient,
                      std::span<float> out) = 0;

  /// The local error vector (n elements) if this compressor keeps one (Top-K:
  /// the residual fed back into the next encode; A2SGD with keepError: the
  /// last step's g - enc(g)); empty otherwise.
  virtual std::span<const float> error() const { return {}; }
  /// With PayloadCombine::kAverage, the payload's element type: float32
  /// (the default), or DType::kBfloat16 / kFloat16 for a 16-bit payload,
  /// averaged by a 16-bit allreduce (reduced in float32, rounded once per hop).
  virtual DType payloadType() const { return DType::kFloat32; }

 protected:
  /// @throws InvalidArgument if n is 0 or does not fit in 32 bits.
  explicit Compressor(std::size_t n);

 private:
  std::size_t size_;
};

/// No compression (dense AllReduce-SGD): the payload is the gradient itself
/// (4n bytes), averaged by an allreduce; decode copies the average.
class DenseCompressor final : public Compressor {
 public:
  explicit DenseCompressor(std::size_t n);
  std::string name() const override { return "none"; }
  PayloadCombine combine() const override { return PayloadCombine::kAverage; }
  std::size_t payloadBytes() const override { return 4 * size(); }
  bool identicalDecode() const override { return true; }
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;
  void decode(std::span<const std::byte> combined, std::span<const float> gradient,
              std::span<float> out) override;
};

/// Options of the A2SGD compressor.
struct A2sgdOptions {
  /// Also store the error vector eps = g - enc(g) (n floats) in decode's pass,
  /// for inspection through error(). Off by default: Algorithm 1 adds eps
  /// back within the same iteration (line 6), so the rebuild does not need
  /// it stored, and storing it costs a second output stream (n * 4 bytes
  /// written per step).
  bool keepError = false;
  /// decode writes outputs of at least this many elements (default 16 Mi, 64
  /// MiB) with non-temporal (streaming) stores on x86-64, bypassing the
  /// caches it would not fit in anyway; smaller ones with plain stores, so the
  /// SGD step that follows finds them in cache. Not used in place or with
  /// keepError.
  std::size_t streamingFloats = std::size_t{16} << 20;
};

/// A2SGD, two-level gradient averaging (the A2SGD paper, Eq. 2 and Algorithm 1
/// lines 3-6). For a gradient g of n elements:
///   mu+ = mean of the entries g_i >= 0,   mu- = mean of |g_i| over g_i < 0
///   (0 when there is no such entry),
///   enc(g) = pos(g) mu+ - neg(g) mu-,     eps = g - enc(g)  (kept locally),
/// the payload is the two float32 means (8 bytes, kAverage: averaged over the
/// ranks into mu+bar, mu-bar), and decode rebuilds
///   g' = eps + pos(g) mu+bar - neg(g) mu-bar.
/// encode is one pass over g (both sums and counts, float lanes summed into
/// double every 4096 elements); decode is one pass that computes g' as
/// g + pos(g) (mu+bar - mu+) - neg(g) (mu-bar - mu-), which equals the line
/// above and is exactly g when the means did not change (world size 1). The
/// sign masks pos(g), neg(g) are read off the sign of g in both passes rather
/// than stored, which is cheaper than writing and re-reading a mask.
class A2sgdCompressor final : public Compressor {
 public:
  explicit A2sgdCompressor(std::size_t n, const A2sgdOptions& options = {});
  std::string name() const override { return "a2sgd"; }
  PayloadCombine combine() const override { return PayloadCombine::kAverage; }
  std::size_t payloadBytes() const override { return 2 * sizeof(float); }
  bool identicalDecode() const override { return false; }
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;
  /// As Compressor::decode; also throws ProtocolError (peer -1, offset of the
  /// mean) when an averaged mean is not finite and >= 0.
  void decode(std::span<const std::byte> combined, std::span<const float> gradient,
              std::span<float> out) override;
  std::span<const float> error() const override;

  /// This rank's means of the last encode: mu+ (>= 0) and mu- (>= 0, the
  /// mean absolute value of the negative entries).
  float meanPositive() const { return meanPositive_; }
  float meanNegative() const { return meanNegative_; }
  /// Entries counted as non-negative / negative by the last encode.
  std::size_t countPositive() const { return countPositive_; }
  std::size_t countNegative() const { return size() - countPositive_; }

 private:
  A2sgdOptions options_;
  float meanPositive_ = 0, meanNegative_ = 0;
  std::size_t countPositive_ = 0;
  bool encoded_ = false;
  std::vector<float> error_;  // n floats with keepError, else empty
};

/// The common part of the sparse compressors with error feedback (Top-K,
/// Gaussian-K): k = max(1, ceil(ratio * n)) payload slots in one wire format,
/// k uint32 indices (ascending, in [0, n)) then k float32 values, 8k bytes,
/// gathered (kGather); the residual e (n floats) that the next encode adds to
/// its gradient; and the decode, which adds the gathered sparse vectors in
/// rank order, each value divided by their number as it is added (no partial
/// sum leaves float32's range where the average fits it), so that every rank
/// gets bitwise the same gradient.
class SparseCompressor : public Compressor {
 public:
  PayloadCombine combine() const override { return PayloadCombine::kGather; }
  std::size_t payloadBytes() const override { return 8 * k_; }
  bool identicalDecode() const override { return true; }
  /// Decodes `combined` (a whole number >= 1 of payloads) into `out` (n floats).
  /// @throws InvalidArgument on a length mismatch; ProtocolError (peer = the
  ///         payload's rank, offset within it) for an index outside [0, n) or
  ///         not above the one before it, or a value that is not finite.
  void decode(std::span<const std::byte> combined, std::span<const float> gradient,
              std::span<float> out) final;
  /// The residual e: n floats.
  std::span<const float> error() const override { return residual_; }
  /// Payload slots (entries sent) per step.
  std::size_t k() const { return k_; }

 protected:
  /// `label` ("Top-K", "Gaussian-K", static storage) names the compressor in errors.
  /// @throws InvalidArgument unless 0 < ratio <= 1, or for n as Compressor's.
  SparseCompressor(std::size_t n, double ratio, const char* label);

  std::size_t k_;
  std::vector<float> residual_;  // e, n floats
  const char* label_;
};

/// Top-K sparsification with error feedback (Stich et al., "Sparsified SGD
/// with memory"; the Top-K baseline of the A2SGD paper, Table 2). Each encode
/// adds the residual e to the gradient, a = g + e, selects the k entries of
/// largest |a| (ties broken by the lower index), sends them as k uint32
/// indices (ascending) then k float32 values (8k bytes, kGather), and keeps
/// the rest as the new residual: e = a with the selected entries zeroed.
/// decode averages the gathered sparse vectors in rank order (as
/// SparseCompressor), so every rank gets bitwise the same gradient; it refuses
/// (ProtocolError) a payload whose indices are not ascending within [0, n)
/// or whose values are not finite. Selection is O(n): one pass
/// writes |a| to a scratch vector, std::nth_element finds the k-th largest,
/// one pass collects the entries above it (then ties, by index).
class TopKCompressor final : public SparseCompressor {
 public:
  /// k = max(1, ceil(ratio * n)).
  /// @throws InvalidArgument unless 0 < ratio <= 1.
  TopKCompressor(std::size_t n, double ratio);
  std::string name() const override { return "topk"; }
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;

 private:
  std::vector<float> magnitude_;  // scratch |a|, n floats
};

/// Options of Gaussian-K.
struct GaussianKOptions {
  double ratio = 0.01;  ///< Fraction of the entries sent per step, (0, 1]: k = max(1, ceil(ratio * n)).
  int adjustments = 3;  ///< Threshold corrections at most per step (0 .. 16).
};

/// Gaussian-K sparsification with error feedback (Shi et al., "Understanding
/// Top-k Sparsification in Distributed Deep Learning", 2019, and its code,
/// github.com/hclhkbu/GaussianK-SGD, compression.py GaussianCompressor; the
/// Gaussian-K baseline of the A2SGD paper, Section 4 and
/// Table 2). Like Top-K it forms a = g + e (e: the residual) and sends about
/// k = ceil(ratio * n) entries of large |a|, but it finds them without a
/// selection over all n entries: it assumes a ~ N(mu, sigma^2) and takes the
/// threshold
///   tau = |mu| + sigma * z,   z = Phi^-1(1 - ratio / 2)
/// (mu, sigma: the mean and the population standard deviation of a; Phi: the
/// standard normal CDF), under which a Gaussian vector has ratio * n entries
/// with |a_i - mu| > z sigma. The candidates are the entries with |a_i| > tau.
/// While fewer than 2k/3 or more than 4k/3 pass, tau is halved or multiplied
/// by 1.5 and the candidates counted again, at most `adjustments` times (the
/// reference's rule). Of the c final candidates, min(c, k) are sent: all of
/// them when c <= k, else the k of largest |a| (std::nth_element over the
/// candidates only, ties to the lower index). The payload is Top-K's wire
/// format exactly (k uint32 indices ascending, then k float32 values; 8k
/// bytes, kGather), so decode is Top-K's; when fewer than k entries are
/// selected the remaining slots carry the value 0 at the lowest indices not
/// selected. The residual is e = a with the sent (selected) entries zeroed;
/// padding slots keep theirs. Cost per encode: one pass for mu and sigma, one
/// that writes a into e and collects the candidates, one more per adjustment.
class GaussianKCompressor final : public SparseCompressor {
 public:
  /// n elements; k = max(1, ceil(options.ratio * n)); z is computed here.
  /// @throws InvalidArgument unless 0 < ratio <= 1 and 0 <= adjustments <= 16
  ///         (or for n as Compressor's constructor).
  GaussianKCompressor(std::size_t n, const GaussianKOptions& options = {});
  std::string name() const override { return "gaussk"; }
  /// Encodes `gradient` (n float32) into `payload` (8k bytes) and updates the
  /// residual (see the class comment).
  /// @throws InvalidArgument on a length mismatch or a non-finite gradient
  ///         entry (the residual is then left as it was).
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;
  /// z = Phi^-1(1 - ratio / 2), dimensionless (0 for ratio 1).
  double zScore() const { return z_; }
  /// Of the last encode: the candidates above the final threshold (c), the
  /// entries sent with their value (min(c, k); the other slots are padding),
  /// the final threshold tau (>= 0, in gradient units) and the threshold
  /// corrections made (0 .. adjustments).
  std::size_t candidates() const { return candidates_; }
  std::size_t selected() const { return selected_; }
  float threshold() const { return threshold_; }
  int adjustmentsMade() const { return adjustmentsMade_; }

 private:
  std::size_t collect(float tau, bool fromGradient, std::span<const float> gradient);

  GaussianKOptions options_;
  double z_;
  std::vector<std::uint32_t> indices_;  // scratch: the candidates, ascending (n slots)
  std::size_t candidates_ = 0, selected_ = 0;
  float threshold_ = 0;
  int adjustmentsMade_ = 0;
};

/// 16-bit gradients with error feedback (compression.kind bf16 or fp16;
/// H = bfloat16 or float16): each step a = g + e is rounded to H to nearest
/// even, the 16-bit vector is averaged over the ranks by a 16-bit allreduce
/// (2 bytes per element on the wire, half of dense), and the rounding error
/// e = a - float(round(a)) is kept for the next step, as Top-K keeps its
/// residual (Stich et al., "Sparsified SGD with memory"). An entry beyond
/// H's largest finite value is sent as that value (its excess kept in e),
/// never as infinity. decode widens the
/// average to float32: every rank decodes the same gradient. The allreduce
/// adds in H, so values that are each finite can sum beyond H's range: decode
/// then throws Error (fp16 tops at 65504; bf16 has float32's range).
template <typename H>
class HalfCompressor final : public Compressor {
 public:
  explicit HalfCompressor(std::size_t n);
  std::string name() const override;
  PayloadCombine combine() const override { return PayloadCombine::kAverage; }
  /// 2n bytes, rounded up to a multiple of 4 (one zero element pads an odd n).
  std::size_t payloadBytes() const override { return (size() + 1) / 2 * 4; }
  bool identicalDecode() const override { return true; }
  DType payloadType() const override { return DTypeOf<H>::value; }
  /// @throws InvalidArgument on a length mismatch, a payload not aligned
  ///         to 2 bytes, or a non-finite entry.
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;
  /// @throws InvalidArgument on a length mismatch or a payload not aligned
  ///         to 2 bytes; Error on an average beyond H's range.
  void decode(std::span<const std::byte> combined, std::span<const float> gradient,
              std::span<float> out) override;
  /// The rounding error carried into the next encode (n elements).
  std::span<const float> error() const override { return residual_; }

 private:
  std::vector<float> residual_;
};

/// Options of QSGD.
struct QsgdOptions {
  int levels = 4;                ///< s: quantisation levels (1 .. 65535).
  std::size_t bucketSize = 512;  ///< Elements per bucket, each with its own norm (>= 1).
  std::uint64_t seed = 42;       ///< Stochastic rounding stream (mixed with `rank`).
  int rank = 0;                  ///< This rank: gives each rank its own stream.
};

/// QSGD (Alistarh et al., NeurIPS 2017; the QSGD baseline of the A2SGD paper,
/// Table 2) with s levels and stochastic rounding, bucketed: for each bucket
/// v of `bucketSize` elements with norm ||v||_2, each element is sent as its
/// sign and a level l in {0..s} with
///   l = floor(s |v_i| / ||v||) + 1 with probability frac(s |v_i| / ||v||), else + 0,
/// and decoded as ||v|| sign(v_i) l / s, so E[decode] = v (unbiased).
/// Payload (kGather): one float32 norm per bucket, then one code of
/// b = 1 + bit_width(s) bits per element (level, then the sign bit),
/// bit-packed little-endian, padded to 4 bytes: 4 bits per element for s = 4.
/// decode averages the gathered payloads in rank order, each rank's unit
/// ||v|| / s divided by their number in double before it is used (no partial
/// sum leaves float32's range where the average fits it). No error feedback (QSGD is unbiased): error() is
/// empty.
class QsgdCompressor final : public Compressor {
 public:
  /// @throws InvalidArgument for levels outside [1, 65535] or bucketSize 0.
  QsgdCompressor(std::size_t n, const QsgdOptions& options = {});
  std::string name() const override { return "qsgd"; }
  PayloadCombine combine() const override { return PayloadCombine::kGather; }
  std::size_t payloadBytes() const override { return payloadBytes_; }
  bool identicalDecode() const override { return true; }
  void encode(std::span<const float> gradient, std::span<std::byte> payload) override;
  void decode(std::span<const std::byte> combined, std::span<const float> gradient,
              std::span<float> out) override;
  /// Bits per element: 1 (sign) + bit_width(levels).
  int bitsPerElement() const { return bits_; }
  std::size_t buckets() const { return buckets_; }

 private:
  QsgdOptions options_;
  int bits_;
  std::size_t buckets_;
  std::size_t payloadBytes_;
  std::uint64_t state_;  // random stream
};

/// Compressor settings (the `compression:` YAML section, see README).
struct CompressionOptions {
  std::string kind = "none";  ///< "none", "a2sgd", "topk", "gaussk" or "qsgd".
  double topkRatio = 0.01;    ///< topk: fraction of entries sent, (0, 1].
  GaussianKOptions gaussk;    ///< gaussk: ratio and threshold corrections.
  QsgdOptions qsgd;           ///< qsgd: levels, bucket, seed, rank.
  A2sgdOptions a2sgd;         ///< a2sgd: keepError.
};

/// Makes the compressor `options.kind` for gradients of n elements.
/// @throws InvalidArgument for an unknown kind or bad options.
std::unique_ptr<Compressor> makeCompressor(const CompressionOptions& options, std::size_t n);

/// Where A2SGD's two means travel.
enum class MeansExchange {
  kAllreduce,  ///< Average over all ranks with the communicator's allreduce (the paper).
  kGossip,     ///< Push-sum among the topology's peers: no global collective.
};

/// How CompressedSgd brings drifting models back together.
enum class ModelSync {
  kAllreduce,  ///< Average the models over all ranks (exact consensus).
  kGossip,     ///< One synchronous gossip round of the model (ModelAverager).
};

/// One synchronous gossip round of the whole model, without an SGD step:
/// e.g. CrossoverSgd::exchange or Sgp::gossip. `round` numbers the syncs
/// (0, 1, ...), the same on every rank.
using ModelAverager = std::function<void(std::span<float> params, std::uint64_t round)>;

/// Options of CompressedSgd.
struct CompressedSgdOptions {
  SgdOptions sgd;
  /// kAverage payloads (A2SGD): how the means are averaged.
  MeansExchange means = MeansExchange::kAllreduce;
  /// kGossip means: push-sum rounds per step (>= 1), each with the
  /// topology's peers of round step * gossipRounds + r.
  int gossipRounds = 1;
  ModelSync sync = ModelSync::kAllreduce;
  /// Steps between model synchronisations (0 = none besides the final one).
  /// Only for compressors whose ranks' models drift (A2SGD) or gossiped means.
  std::uint64_t syncPeriod = 0;
  /// Synchronise the models after the last step (the A2SGD paper, Algorithm 1,
  /// lines 9-10), when the total is known (DistributedOptimizer::setTotalSteps).
  bool finalSync = true;
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on every wait.
};

/// Counters of CompressedSgd, payload bytes this rank sent (from the
/// transport's stats, frame headers excluded).
struct CompressionStats {
  std::uint64_t exchangeBytes = 0;  ///< Gradient exchanges (means, sparse or quantised payloads).
  std::uint64_t syncBytes = 0;      ///< Model synchronisations.
  std::uint64_t syncs = 0;          ///< Model synchronisations done.
};

/// AllReduce-SGD (or gossip) with compressed gradient exchanges (the A2SGD
/// paper, Algorithm 1, generalised to any Compressor and
/// to gossip deployments). Each step:
///   1. encode this rank's gradient (Compressor::encode);
///   2. combine the payloads: kAverage by the communicator's allreduce
///      (average) or, with MeansExchange::kGossip, by push-sum among the
///      topology's peers (each rank keeps (s, w) = (payload, 1), keeps the
///      share 1/(d+1) and pushes the same share to each of its d out-peers,
///      adds what it receives, and uses s / w; 12 bytes per message for
///      A2SGD); kGather by a ring allgather;
///   3. decode into the gradient to step with, and take the LocalSgd step;
///   4. if the models may drift apart (!identicalDecode() or gossiped means),
///      synchronise them every syncPeriod steps and after the last step.
/// Payload bytes sent per rank per step, for any model size n: A2SGD with
/// allreduce 8 per recursive-doubling round (what kAuto picks for 8 bytes):
/// 8 log2 N for N a power of two (24 at N = 8), at most 8 (log2 P + 1) with P
/// the largest power of two <= N, so <= 64 for N <= 256; A2SGD with gossip
/// 12 d gossipRounds (d out-peers; 12 for the fair roulette). Then Top-K
/// (N-1) 8k; QSGD (N-1) payloadBytes(); dense 2 (N-1)/N 4n (ring). Plus, per
/// model synchronisation, 2 (N-1)/N 4n (ring allreduce) or the gossip
/// optimizer's exchange (4n for Crossover-SGD, 8 + 4n per out-peer for SGP).
class CompressedSgd final : public DistributedOptimizer {
 public:
  /// @param communicator the allreduces (means, model sync). Its transport
  ///        also carries the allgathers and the gossip of the means, on a
  ///        communicator split from it (Communicator::split hands out its
  ///        message context). Collective: every rank constructs it together.
  /// @param topology peers for gossiped means; may be null otherwise.
  /// @param averager the gossip model sync for ModelSync::kGossip; may be
  ///        empty otherwise.
  /// @throws InvalidArgument for bad options, a missing topology or averager,
  ///         gossiped means with a kGather compressor, or a topology of
  ///         another world size; TimeoutError, PeerFailure from the split.
  CompressedSgd(Communicator& communicator, const Topology* topology, std::unique_ptr<Compressor> compressor,
                ModelAverager averager, const CompressedSgdOptions& options);
  /// "compressed_sgd/<compressor name>".
  std::string name() const override;
  /// One step (see the class comment) on `params` (n floats) with this rank's
  /// gradient `grads` (n floats). Collective: every rank steps together.
  /// @throws InvalidArgument on a length mismatch or a non-finite gradient
  ///         entry; TimeoutError, PeerFailure, ProtocolError (a malformed
  ///         payload or push-sum message) from the exchange.
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Encodes `grads` (n floats), exchanges the payloads and writes the
  /// rebuilt gradient back into `grads` (lines 3-6 of Algorithm 1).
  /// @throws as step.
  void reduceGradients(std::span<float> grads) override;
  /// Counts the step and synchronises `params` (n floats) when the periodic
  /// or final synchronisation is due (lines 9-10). @throws as step.
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  std::uint64_t steps() const override { return steps_; }
  void setTotalSteps(std::uint64_t totalSteps) override { totalSteps_ = totalSteps; }
  /// True when the models never drift apart (an identical decode of
  /// allreduced means): then every rank holds the same model.
  bool replicatedModel() const override { return !drifts(); }

  /// Synchronises the models now with options.sync (collective: every rank
  /// calls it at the same step). @throws as step.
  void synchronize(std::span<float> params);
  const Compressor& compressor() const { return *compressor_; }
  /// Bytes this rank sent in exchanges and syncs so far, and the syncs done.
  const CompressionStats& stats() const { return stats_; }

 private:
  void exchangeGradient(std::span<const float> grads);  // fills gradient_
  void gossipAverage(std::span<float> values);
  bool drifts() const;

  Communicator& comm_;
  const Topology* topology_;
  std::unique_ptr<Compressor> compressor_;
  ModelAverager averager_;
  CompressedSgdOptions options_;
  LocalSgd sgd_;
  std::unique_ptr<Communicator> exchange_;  // all ranks, split from comm_
  std::vector<float> payload_;              // this rank's payload (payloadBytes / 4 floats)
  // payload_'s storage as payloadBytes / 2 16-bit elements (a 16-bit payloadType).
  template <typename H>
  std::span<H> halfPayload() {
    return {reinterpret_cast<H*>(payload_.data()), payload_.size() * sizeof(float) / sizeof(H)};
  }
  std::vector<float> gathered_;    // kGather: N payloads
  std::vector<float> gradient_;    // decoded gradient, n floats
  std::vector<float> pushSum_;     // gossip: [s..., w]
  std::vector<float> pushSumIn_;   // gossip: received messages
  std::vector<Request> requests_;  // gossip: this round's receives, then sends
  std::uint64_t steps_ = 0;
  std::uint64_t totalSteps_ = 0;
  std::uint64_t exchanges_ = 0;  // sequence of the view's collectives and gossip rounds
  CompressionStats stats_;
};

}  // namespace gossamer::optimizers
