// Training algorithms built from the sdk primitives.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gossamer/checkpoint.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/defaults.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/optimizers/gossip_screen.hpp"
#include "gossamer/topology.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::optimizers {

/// Hyper-parameters of the local SGD step.
struct SgdOptions {
  double learningRate = 0.01;  ///< Step size (>= 0).
  double momentum = 0.9;       ///< Heavy-ball coefficient in [0, 1).
  double weightDecay = 0.0;    ///< L2 coefficient (>= 0).
};

/// Mini-batch SGD with heavy-ball momentum on a flat vector of P elements:
///   v <- momentum * v + (g + weightDecay * x);  x <- x - learningRate * v
/// (the PyTorch convention). Holds the velocity v (P floats).
class LocalSgd {
 public:
  /// @throws InvalidArgument for out-of-range options.
  LocalSgd(std::size_t numParams, const SgdOptions& options);
  /// @throws InvalidArgument if params or grads do not have P elements.
  void apply(std::span<float> params, std::span<const float> grads);
  const SgdOptions& options() const { return options_; }
  /// Saves the velocity as section `prefix` + "velocity" (P float32).
  void saveState(Checkpoint& out, const std::string& prefix) const;
  /// @throws InvalidArgument if the section is missing or not P floats.
  void loadState(const Checkpoint& in, const std::string& prefix);

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
};

/// AllReduce-SGD: every step the gradients (P float32) are averaged over all
/// ranks with the ring allreduce (Wang et al., "A Communication Efficient
/// ADMM-based Distributed Algorithm Using Two-Dimensional Torus Grouping
/// AllReduce" (2023), Eq. 2), then each rank applies the same LocalSgd step, so
/// models stay identical. Bytes sent per rank per step: 2 (N-1)/N * 4P.
class AllReduceSgd final : public DistributedOptimizer {
 public:
  AllReduceSgd(Communicator& communicator, std::size_t numParams, const SgdOptions& options);
  std::string name() const override { return "allreduce_sgd"; }
  /// Every rank applies the same averaged gradient: the models are identical.
  bool replicatedModel() const override { return true; }
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Averages `grads` (P float32) over all ranks in place.
  void reduceGradients(std::span<float> grads) override;
  /// Saves the step count and velocity (and what the mode carries; async
  /// mode is not supported); see DistributedOptimizer::saveState.
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  /// Counts the step; the parameters need no mixing.
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  std::uint64_t steps() const override { return steps_; }

 private:
  Communicator& comm_;
  LocalSgd sgd_;
  std::vector<float> buffer_;
  std::uint64_t steps_ = 0;
};

/// How a gossip optimizer waits for its peers.
enum class GossipMode {
  kSync,     ///< Round k's messages are sent and received within step k.
  kOverlap,  ///< Round k's messages are consumed at step k+1 (bounded staleness 1),
             ///< so the exchange overlaps the next gradient computation.
  kAsync,    ///< Wait for no peer in particular: send, then mix whatever has arrived
             ///< (a rank too light to push waits a bounded time for anyone's push).
             ///< A slow or dead peer does not hold the others back.
};

/// Parses "sync" / "overlap" / "async". @throws InvalidArgument.
GossipMode parseGossipMode(const std::string& name);

/// Options of Crossover-SGD.
struct CrossoverOptions {
  SgdOptions sgd;
  int segments = 4;  ///< S: segments of the flat vector (along tensor boundaries).
  int interval = 1;  ///< Local steps between exchanges (>= 1).
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on each exchange's waits.
  GossipMode mode = GossipMode::kSync;
  /// Async mode: a segment pushes only while its push-sum weight is at
  /// least max(0.5, this), otherwise keeping its mass until pushes from
  /// peers raise it; in (0, 1).
  double weightFloor = 1e-3;
  /// Async mode: while a segment's weight is too low to push, the rank waits
  /// up to this long (seconds, >= 0) for its peers' pushes before it steps
  /// on; 0 never waits (bounded staleness, as SgpOptions::asyncWaitSeconds).
  /// At most timeoutSeconds in async mode; unused in the others.
  double asyncWaitSeconds = 0.005;
  /// Async mode: the longest wait (seconds) in flush() for every rank to
  /// reach the agreement that ends the phase (0: timeoutSeconds). A rank
  /// that steps slower arrives later by the time it is behind. With the
  /// membership service on, the registry sets it to a day: the service
  /// removes a dead or silent rank, which ends the wait, so only a live rank
  /// that is behind (it still heartbeats) is waited for.
  double flushWaitSeconds = 0;
  /// Async mode: the collectives' settings of flush()'s agreement (its two
  /// allreduces: algorithm, size thresholds, cost model; their sequence and
  /// timeout are the agreement's own). The registry gives it the job's
  /// `collectives:` section (collectiveOptionsFrom), so that a job that
  /// names its allreduce gets it here too; the default is kAuto. Algorithms that
  /// build views of their own (torus2d, hierarchical, tga2d, hips; auto with
  /// a cost model) run the agreement as recursive doubling.
  CollectiveOptions agreement;
  /// Refuse a received segment with a NaN or infinite value, or (async) a
  /// push-sum weight outside [0, world size], instead of mixing it in
  /// (GossipScreen; rejectedMessages() counts them).
  bool checkReceived = true;
};

/// Crossover-SGD (Yeo et al., "Crossover-SGD: A gossip-based communication in
/// distributed deep learning for alleviating large mini-batch problem and
/// enhancing scalability", Algorithm 1): after each local SGD step (every
/// `interval` steps) the flat parameter vector is cut into S segments along
/// tensor boundaries; for every segment s the topology (normally FairRoulette,
/// Algorithm 2) names one destination per rank; all S receives are posted and
/// all S sends issued at once, then each segment is mixed with the topology's
/// weights — for the fair roulette
///   x_s <- (x_s + received_s) / 2.
/// Bytes sent per rank per exchange: 4P (the model once). With a doubly
/// stochastic mixing matrix the average of the models over ranks is unchanged
/// by an exchange. Async mode is push-sum per segment, with SGP's rules (the
/// step on the numerator, at most one round of pushes in flight, a push only
/// with weight >= 1/2); crossover_sgd.cpp has the details.
class CrossoverSgd final : public DistributedOptimizer {
 public:
  /// @param tensorSizes element counts of the model's tensors, in flat order.
  /// @throws InvalidArgument for bad options or a topology of another world size.
  CrossoverSgd(Transport& transport, const Topology& topology, const std::vector<std::size_t>& tensorSizes,
               const CrossoverOptions& options);
  ~CrossoverSgd() override;
  std::string name() const override { return "crossover_sgd"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Leaves the gradients alone: Crossover-SGD mixes models, not gradients.
  void reduceGradients(std::span<float> grads) override;
  /// The exchange step() makes after its SGD update (every `interval`
  /// steps, in the configured mode), on `params` (P float32, in place).
  void mixParameters(std::span<float> params) override;
  /// Saves the step count and velocity (and what the mode carries; async
  /// mode is not supported); see DistributedOptimizer::saveState.
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  /// Async mode steps at its own pace; the other modes in lockstep.
  bool lockstep() const override { return options_.mode != GossipMode::kAsync; }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t rejectedMessages() const override { return screen_.rejected(); }

  /// Completes an exchange still in flight (overlap mode) so that `params`
  /// includes every message sent so far; a no-op in sync mode. Async mode:
  /// a collective of every rank that takes in every push still in flight
  /// and gives every rank each segment's push-sum average, with weight 1
  /// (as Sgp::flush).
  /// @throws TimeoutError if a rank does not take part within the timeout.
  void flush(std::span<float> params) override;

  /// One synchronous gossip exchange of every segment in round `round` (no
  /// SGD step). Exposed for tests, benchmarks and averaging-only use.
  void exchange(std::span<float> params, std::uint64_t round);
  /// exchange() as a ModelExchange: the sync exchange, whatever the mode.
  ModelExchange modelExchange() override {
    return [this](std::span<float> params, std::uint64_t round) { exchange(params, round); };
  }
  /// 16-bit segments on the wire (sync and overlap modes; false in async
  /// mode): see DistributedOptimizer::setExchangeType and crossover_sgd.cpp.
  bool setExchangeType(DType wire) override;
  const std::vector<std::pair<std::size_t, std::size_t>>& segments() const { return segments_; }
  /// Async mode: each segment's push-sum weight (empty before the first exchange).
  const std::vector<double>& asyncWeights() const { return asyncWeight_; }

 private:
  struct Pending;  // one exchange's requests and buffers
  void start(std::span<const float> params, std::uint64_t round, Pending& p);
  void finish(std::span<float> params, Pending& p, bool snapshotCorrection);
  void asyncExchange(std::span<float> params, std::uint64_t round);
  void foldArrived(std::span<float> params);  // async: folds in every segment that has arrived
  bool canPush(std::size_t segment) const;    // async: the segment's weight is high enough to push
  void startAsync();                          // async: standing receives and segment weights, once

  Transport& transport_;
  const Topology& topology_;
  CrossoverOptions options_;
  LocalSgd sgd_;
  std::size_t numParams_;
  std::vector<std::pair<std::size_t, std::size_t>> segments_;
  std::unique_ptr<Pending> pending_;  // buffers of the exchange, reused every step
  bool inFlight_ = false;             // overlap: an exchange started and not finished
  // async mode: push-sum per segment, one standing receive per segment from
  // any other rank ([w: float64][z: float32 x segment])
  std::vector<std::vector<std::byte>> asyncBuf_;
  std::vector<std::byte> asyncSend_;
  std::vector<double> asyncWeight_;
  std::vector<Request> asyncRecv_;
  std::vector<int> others_;            // every rank but this one
  std::vector<std::uint64_t> sentTo_;  // async: segment messages pushed to each rank
  std::uint64_t received_ = 0;         // async: segment messages folded in
  std::uint64_t agreements_ = 0;       // async: flushes so far
  std::vector<float> stepStart_;       // async: z before the SGD step
  std::uint64_t steps_ = 0;
  std::uint64_t rounds_ = 0;
  DType wire_ = DType::kFloat32;  // the segments' type on the wire
  GossipScreen screen_;           // refuses segments with NaN, Inf or an impossible weight
};

/// Options of SGP.
struct SgpOptions {
  SgdOptions sgd;
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on each wait.
  GossipMode mode = GossipMode::kSync;
  /// Async mode: a rank whose weight w is below this (or below 1/2) does not
  /// push (it keeps all of its mass) until pushes from its peers raise w
  /// again, in (0, 1). A rank that steps faster than its peers push to it
  /// would otherwise halve w at every push until it underflows to 0.
  double weightFloor = 1e-3;
  /// Async mode: a rank whose weight is too low to push waits up to this
  /// long (seconds, >= 0) for its peers' pushes before it steps on; 0 never
  /// waits. A bounded staleness that yields the CPU to the transport when
  /// the steps outpace it (sgp.cpp). At most timeoutSeconds in async mode;
  /// unused in the others.
  double asyncWaitSeconds = 0.005;
  /// Async mode: the longest wait (seconds) in flush() for every rank to
  /// reach the agreement that ends the phase (0: timeoutSeconds). A rank
  /// that steps slower arrives later by the time it is behind. With the
  /// membership service on, the registry sets it to a day: the service
  /// removes a dead or silent rank, which ends the wait, so only a live rank
  /// that is behind (it still heartbeats) is waited for.
  double flushWaitSeconds = 0;
  /// Async mode: the collectives' settings of flush()'s agreement (its two
  /// allreduces: algorithm, size thresholds, cost model; their sequence and
  /// timeout are the agreement's own). The registry gives it the job's
  /// `collectives:` section (collectiveOptionsFrom), so that a job that
  /// names its allreduce gets it here too; the default is kAuto. Algorithms that
  /// build views of their own (torus2d, hierarchical, tga2d, hips; auto with
  /// a cost model) run the agreement as recursive doubling.
  CollectiveOptions agreement{};
  /// Refuse a received message whose push-sum weight is not finite or lies
  /// outside [0, world size], or whose values hold a NaN or infinity,
  /// instead of mixing it in (GossipScreen; rejectedMessages() counts them).
  bool checkReceived = true;
};

/// Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019,
/// Alg. 1; the baseline of Yeo et al.): push-sum gossip over a directed,
/// possibly time-varying graph. Each rank keeps a numerator x (P floats) and a
/// push-sum weight w (a double, initially 1) and trains the de-biased model
/// z = x / w, which is what `params` holds between steps. A step:
///   1. local SGD (momentum) on z with this rank's gradient at z (async
///      mode: on x, i.e. z <- z - lr u / w, as in Alg. 1);
///   2. with x = z * w: keep the share 1/(d+1) of (x, w) and push the same
///      share to each of the d out-peers of the topology's current round;
///   3. add the (x, w) shares received (sync: this round's; overlap: last
///      round's; async: whatever has arrived), then z = x / w.
/// The total mass sum_i w_i (plus what is in flight) stays N: the invariant
/// the tests check. One message per out-peer per step: 8 + 4P bytes
/// ([w share: float64][z: P float32], dtype bytes; the receiver scales).
/// In async mode a send to a peer known to be gone keeps that share locally,
/// so the mass is not lost and the others route around the peer. Async mode
/// also steps the numerator as Alg. 1 does (z <- z - lr u / w), and a rank
/// pushes only when its weight is at least max(1/2, options.weightFloor);
/// otherwise it waits up to options.asyncWaitSeconds for pushes from anyone
/// to raise it, and keeps all its mass that step if they do not. So at most
/// 4N messages are in flight however slow the transport, and every weight
/// stays >= 1/(2 (d+1)) (sgp.cpp has the reasons). flush() ends an async
/// phase with every rank at the push-sum average.
class Sgp final : public DistributedOptimizer {
 public:
  /// @throws InvalidArgument for a topology of another world size or bad options.
  Sgp(Transport& transport, const Topology& topology, std::size_t numParams, const SgpOptions& options);
  ~Sgp() override;
  std::string name() const override { return "sgp"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Leaves the gradients alone: SGP mixes models, not gradients.
  void reduceGradients(std::span<float> grads) override;
  /// The push-sum round step() makes after its SGD update, on the de-biased
  /// model `params` (P float32, in place); the weight w is kept as in step().
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  /// Async mode steps at its own pace; the other modes in lockstep.
  bool lockstep() const override { return options_.mode != GossipMode::kAsync; }
  /// Saves the step count and velocity (and what the mode carries; async
  /// mode is not supported); see DistributedOptimizer::saveState.
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  /// Consumes the messages still in flight to this rank (overlap mode: the
  /// last round's). Async mode: a collective of every rank (the trainer
  /// calls it at each epoch's end) that takes in every push still in
  /// flight and gives every rank the push-sum average sum w z / sum w, with
  /// weight 1 (push_sum_agreement.hpp). With a rank gone and no membership
  /// view to replace it, it only takes in what arrives within 50 ms.
  /// @throws TimeoutError if a rank does not take part within the timeout.
  void flush(std::span<float> params) override;
  std::uint64_t steps() const override { return steps_; }
  double pushSumWeight() const override { return weight_; }
  std::uint64_t rejectedMessages() const override { return screen_.rejected(); }
  /// One push-sum round without an SGD step (tests, averaging-only use).
  void gossip(std::span<float> params, std::uint64_t round);
  /// gossip() as a ModelExchange.
  ModelExchange modelExchange() override {
    return [this](std::span<float> params, std::uint64_t round) { gossip(params, round); };
  }
  /// 16-bit de-biased models on the wire, the weight float64 (every mode):
  /// see DistributedOptimizer::setExchangeType and sgp.cpp. Before the first step.
  bool setExchangeType(DType wire) override;

 private:
  void send(std::span<float> z, const PeerSet& p, Tag tag);
  void addMessage(std::span<float> z, std::span<const std::byte> msg, int from);
  void receiveRound(std::span<float> z, std::uint64_t round);
  /// Async mode: folds in what has arrived; waits up to waitSeconds for
  /// more (with untilPushable, only until canPush()).
  void drainAsync(std::span<float> z, double waitSeconds, bool untilPushable = false);
  /// Async mode: the weight is high enough to push.
  bool canPush() const;

  Transport& transport_;
  const Topology& topology_;
  SgpOptions options_;
  LocalSgd sgd_;
  std::size_t numParams_;
  double weight_ = 1.0;
  std::vector<std::byte> sendBuf_;  // [w][x share]
  std::vector<std::vector<std::byte>> recvBufs_;
  std::vector<Request> asyncRecv_;     // async: standing receives (one per buffer)
  std::uint64_t asyncReceived_ = 0;    // async: messages folded in
  std::vector<std::uint64_t> sentTo_;  // async: messages pushed to each rank
  std::uint64_t agreements_ = 0;       // async: flushes so far
  std::vector<float> stepStart_;       // z before the SGD step (async, or sync with a weight other than 1)
  bool roundPending_ = false;          // overlap: a round's messages not yet consumed
  std::uint64_t pendingRound_ = 0;
  std::uint64_t steps_ = 0;
  DType wire_ = DType::kFloat32;  // z's type on the wire
  std::vector<float> decoded_;    // 16-bit wire: a message's z, or the z sent, as float32
  GossipScreen screen_;           // refuses messages with NaN, Inf or an impossible weight
};

/// Loss-tolerant SGP (`algorithm: {name: sgp, loss_tolerant: true}`): push-sum
/// with running sums per edge and sequence numbers (Hadjicostis,
/// Dominguez-Garcia and Vaidya, IEEE TAC 2016), so that lost, duplicated or
/// reordered messages lose no mass and count nothing twice. Never waits for a
/// message (as SGP's async mode). One message per out-peer per step: 16 + 8P
/// bytes ([seq: u64][sum of w: f64][sum of x: P f64]). See
/// sgp_running_sums.cpp for the steps.
class LossTolerantSgp final : public DistributedOptimizer {
 public:
  /// @throws InvalidArgument for a topology of another world size or bad options.
  LossTolerantSgp(Transport& transport, const Topology& topology, std::size_t numParams,
                  const SgpOptions& options);
  ~LossTolerantSgp() override;
  std::string name() const override { return "sgp/loss_tolerant"; }
  std::uint64_t rejectedMessages() const override { return screen_.rejected(); }
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Leaves the gradients alone: SGP mixes models.
  void reduceGradients(std::span<float> grads) override;
  /// The running-sum push-sum round on the de-biased model `params` (P float32).
  /// While the push-sum weight is below options.weightFloor the rank pushes
  /// nothing and only takes in arrivals (the weight cannot underflow).
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  /// Never waits for a peer's message: each rank steps at its own pace.
  bool lockstep() const override { return false; }
  /// Re-sends every edge's latest sums kFlushRepeats times and takes in what
  /// arrives (about 210 ms): after every rank flushed, what was lost is made
  /// up. Sums that arrive later (a peer that started its flush over 200 ms
  /// after this rank) are taken in by the next step or flush.
  void flush(std::span<float> params) override;
  std::uint64_t steps() const override { return steps_; }
  double pushSumWeight() const override { return weight_; }
  static constexpr int kFlushRepeats = 5;

 private:
  struct Edge;             // running sums pushed to one peer
  struct Inbound;          // running sums last taken from one peer
  bool sendEdge(int dst);  // false: the peer is gone (nothing sent)
  void takeArrived();
  void writeModel(std::span<float> params);

  Transport& transport_;
  const Topology& topology_;
  SgpOptions options_;
  LocalSgd sgd_;
  std::size_t numParams_;
  double weight_ = 1.0;
  std::vector<double> x_;     // numerator, P
  std::vector<float> lastZ_;  // the model last written to params
  std::vector<Edge> out_;     // by destination rank
  std::vector<Inbound> in_;   // by source rank
  std::vector<int> others_;
  std::vector<std::byte> message_, recvBuf_;
  Request recv_;
  std::uint64_t steps_ = 0;
  std::uint64_t rounds_ = 0;
  GossipScreen screen_;  // refuses running sums holding a NaN or infinity
};

/// Hierarchical gossip with leader groups (Yeo et al., Sec. 3.3). Ranks are
/// split into groups; the first rank of each is its leader. Each step:
///   1. the gradients are averaged inside the group to the leader (binomial
///      reduce on the group's communicator, split from `transport`); with
///      groups of unequal sizes, summed and scaled by L/N instead (L groups,
///      N ranks), so that each rank's gradient counts alike however large its
///      group: the leaders' equal-weight mixing then minimises the average of
///      all N ranks' losses, not of the L groups' averages;
///   2. the leader runs the inter-group optimizer (Crossover-SGD or SGP over
///      the leaders only) with that gradient: its local SGD step and gossip;
///   3. the leader broadcasts its model to the group.
/// Every member's `params` equals its leader's after each step. Bytes per
/// step: 4P per member (reduce) + the leader's gossip + 4P per member
/// (broadcast) in log2(group size) rounds.
class Hierarchical final : public DistributedOptimizer {
 public:
  /// @param groups a partition of the ranks (see topologies::makeGroups).
  /// @param interAlgorithm "crossover_sgd" or "sgp".
  /// @param leaderTopology topology over the L leaders (world size L).
  /// Collective: every rank of `transport` constructs it together (the group
  /// and leader communicators come from Communicator::split, which hands out
  /// their message contexts).
  /// @throws InvalidArgument for bad groups, names or sizes; TimeoutError,
  ///         PeerFailure from the split.
  Hierarchical(Transport& transport, std::vector<std::vector<int>> groups, const std::string& interAlgorithm,
               std::unique_ptr<Topology> leaderTopology, const std::vector<std::size_t>& tensorSizes,
               const CrossoverOptions& options);
  ~Hierarchical() override;
  std::string name() const override { return "hierarchical"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Averages `grads` over the group (allreduce on the group's communicator),
  /// so every member makes the leader's local step.
  void reduceGradients(std::span<float> grads) override;
  /// The leader mixes `params` with the other leaders (the inter-group
  /// optimizer's mixParameters), then broadcasts them to its group.
  /// Saves the step count and velocity (and what the mode carries; async
  /// mode is not supported); see DistributedOptimizer::saveState.
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  void flush(std::span<float> params) override;
  std::uint64_t steps() const override { return steps_; }
  bool isLeader() const { return leaderComm_ != nullptr; }

 private:
  void broadcastFromLeader(std::span<float> params);  // the group broadcast, failures job-wide

  Transport& transport_;
  double timeout_;
  std::vector<std::vector<int>> groups_;
  std::unique_ptr<Topology> leaderTopology_;
  std::unique_ptr<Communicator> groupComm_;   // this rank's group, split from the transport
  std::unique_ptr<Communicator> leaderComm_;  // the leaders, split too; null on members
  std::unique_ptr<DistributedOptimizer> inter_;
  std::vector<float> grad_;
  std::uint64_t steps_ = 0;
  float sumScale_ = 0.0f;  // groups of unequal sizes: L / N, applied to the group's sum; 0: equal groups
};

/// Where DiLoCo averages its pseudo-gradients.
enum class DilocoOuter {
  kAllreduce,  ///< Over every rank: the communicator's allreduce (collectives.allreduce).
  kGossip,     ///< With one peer per round, a random perfect matching; the pair's theta averaged outright.
  /// As kGossip, with NoLoCo's outer step instead (Kolehmainen et al. 2025,
  /// arXiv 2506.10911): theta is not averaged but pulled towards the pair's
  /// mean through the momentum, with weight nolocoGamma.
  kNoloco,
};

/// Parses "allreduce" / "gossip". @throws InvalidArgument.
DilocoOuter parseDilocoOuter(const std::string& name);

/// Options of DiLoCo (the defaults are the paper's outer settings).
struct DilocoOptions {
  SgdOptions sgd;                  ///< The inner optimizer: LocalSgd, as every other algorithm's local step.
  int innerSteps = 50;             ///< H: inner steps between outer steps (>= 1).
  double outerLearningRate = 0.7;  ///< Outer (Nesterov) step size, in (0, 10].
  double outerMomentum = 0.9;      ///< Outer Nesterov momentum, in [0, 1).
  DilocoOuter outer = DilocoOuter::kAllreduce;
  /// Start round k's exchange and apply it one round late, at the end of
  /// round k+1, so that it overlaps round k+1's inner steps.
  bool overlap = false;
  /// kNoloco: gamma, the weight of the pull towards the pair's mean theta
  /// in the momentum, in [0, 10] (the reference implementation uses the
  /// outer learning rate).
  double nolocoGamma = 0.7;
  std::uint64_t seed = 0;  ///< Gossip: seeds the pairing of each round (topologies::randomPairing).
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on each wait (gossip).
};

/// DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
/// Training of Language Models", arXiv 2311.08105, Algorithm 1): each rank
/// keeps the outer parameters theta (P float32) and an outer momentum buffer
/// (P float32), and trains its local copy, which is what `params` holds, with
/// H = innerSteps steps of LocalSgd and no communication. Then the
/// pseudo-gradient Delta = theta - params is averaged and one outer step of
/// Nesterov momentum (PyTorch's convention) is taken:
///   m <- mu m + mean(Delta);  theta <- theta - lr (mean(Delta) + mu m),
/// and the local copy restarts from the new theta. With lr 1 and mu 0 this is
/// model averaging every H steps (local SGD).
///
/// outer kAllreduce: mean over every rank by the communicator's allreduce;
/// theta is identical on every rank. kGossip (in the manner of NoLoCo,
/// Kolehmainen et al. 2025, arXiv 2506.10911: no all-reduce, one random peer
/// per sync): the ranks are paired by a random perfect matching that every
/// rank computes from the seed and the round; the two of a pair swap
/// (theta, Delta), take the pair's means of both, and make the outer step
/// from the mean theta. The sum of theta over the ranks then moves by
/// exactly -lr sum(Delta) (momentum 0), as with the allreduce. kNoloco:
/// the same pairs and messages, and NoLoCo's modified outer step, in which
/// each rank keeps its own theta and the pair's mean enters the momentum:
///   m <- mu m + lr mean(Delta) + gamma (theta - mean(theta));  theta <- theta - m.
/// With gamma 1, lr 1 and mu 0 it is the kGossip round; with momentum 0 the
/// gap between the two thetas of a pair shrinks by the factor 1 - gamma.
///
/// Bytes sent per rank per round (every H steps), P float32 parameters:
/// allreduce 2 (N-1)/N * 4P with the ring (what collectives.allreduce picks);
/// gossip 8P to one peer. Plus, at the first step, one allreduce of the model
/// (kAllreduce only; see below). diloco.cpp has the details, the overlap
/// mode and the last round.
///
/// The first step takes theta from the model after its inner step (so that
/// the communication-only form, which never sees the model before it, does
/// what step() does); with kAllreduce it is the mean over the ranks (one
/// allreduce of P float32), so theta is the same on every rank whatever they
/// start from: after a membership view change the optimizer is rebuilt over
/// the survivors, whose local copies differ. Rounds of H inner steps follow.
/// After the step count given to setTotalSteps, a last outer round is taken
/// however many inner steps it has, and `params` ends at theta.
class Diloco final : public DistributedOptimizer {
 public:
  /// @param communicator the ranks (kAllreduce: its allreduce; kGossip: its
  ///        transport's point-to-point messages).
  /// @param numParams P, the model's float32 parameters.
  /// @throws InvalidArgument for options out of range.
  Diloco(Communicator& communicator, std::size_t numParams, const DilocoOptions& options);
  ~Diloco() override;
  std::string name() const override { return "diloco"; }
  /// One inner LocalSgd step on `params` (P float32, the local copy), then
  /// mixParameters. @throws InvalidArgument on a length mismatch;
  /// TimeoutError / PeerFailure from an outer round; ProtocolError when a
  /// gossip partner's message is not 8P bytes.
  void step(std::span<float> params, std::span<const float> grads) override;
  /// Leaves the gradients alone: DiLoCo exchanges pseudo-gradients.
  void reduceGradients(std::span<float> grads) override;
  /// Counts an inner step made by another optimizer on `params` (P float32);
  /// every innerSteps steps (and after the last one) takes the outer round
  /// on them. The first call takes theta from `params` (after that step;
  /// kAllreduce: their mean over the ranks, written to `params`).
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return true; }
  /// Overlap mode: waits for the round in flight and applies it (the local
  /// copy moves by what the outer step moved theta, less this rank's own
  /// part of that round, which it already has). A no-op otherwise. With
  /// kAllreduce and overlap, a round in flight runs its allreduce on a
  /// thread of its own over the communicator: call flush() before any other
  /// collective on it (an evaluation, a checkpoint).
  void flush(std::span<float> params) override;
  void setTotalSteps(std::uint64_t totalSteps) override { totalSteps_ = totalSteps; }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t rejectedMessages() const override { return screen_.rejected(); }
  /// Saves steps, rounds, theta, the outer momentum, the round's starting
  /// point and the inner velocity (P float32 each). @throws InvalidArgument
  /// with a round in flight (flush first).
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;

  /// The outer parameters theta (P float32; empty before the first step).
  std::span<const float> outerParameters() const { return theta_; }
  /// The outer momentum buffer m (P float32; empty before the first step).
  std::span<const float> outerMomentum() const { return momentum_; }
  /// Outer rounds completed (applied) so far.
  std::uint64_t rounds() const { return applied_; }
  /// Gossip: the rank paired with this one in the last round started
  /// (itself if it sat out); -1 before the first round and with kAllreduce.
  int lastPartner() const { return lastPartner_; }

 private:
  struct InFlight;  // one outer exchange: its buffers and requests (or thread)
  void outerRound(std::span<float> params, bool last);
  void start(std::span<const float> delta);
  void finish(std::span<float> params, bool resetToTheta);

  Communicator& comm_;
  DilocoOptions options_;
  LocalSgd sgd_;
  std::size_t numParams_;
  std::vector<float> theta_, momentum_;
  std::vector<float> anchor_;  // where this round's inner steps started (the pseudo-gradient's origin)
  std::unique_ptr<InFlight> flight_;
  bool inFlight_ = false;
  std::uint64_t steps_ = 0, started_ = 0, applied_ = 0, totalSteps_ = 0;
  std::uint64_t lastRoundStep_ = 0;  // steps_ at the last outer round
  int lastPartner_ = -1;
  GossipScreen screen_;  // gossip: refuses a peer's (theta, Delta) holding a NaN or infinity
};

/// Registers the optimizers "allreduce_sgd", "crossover_sgd", "sgp",
/// "hierarchical", "diloco" and those of registerAlgorithms (keys under `algorithm:`; the local SGD step's
/// learning_rate, momentum and weight_decay under `training:`) and the
/// compressors "topk", "gaussk", "qsgd" and "a2sgd" (keys under
/// `compression:`), and makes crossover_sgd the default algorithm. A
/// compressor wraps the optimizer the config names (Registry::addCompressor):
/// Top-K, Gaussian-K and QSGD compress AllReduce-SGD's gradients; A2SGD runs under allreduce_sgd, or
/// under crossover_sgd / sgp with their model exchange as its model sync and
/// the means gossiped (unless configured otherwise).
/// @throws InvalidArgument if one of these names is registered already.
void registerBuiltins(Registry& registry);
/// The same, one component at a time (registerLocalSgdKeys declares the
/// `training:` keys every built-in optimizer reads).
void registerLocalSgdKeys(Registry& registry);
void registerAllReduceSgd(Registry& registry);
void registerCrossoverSgd(Registry& registry);
void registerSgp(Registry& registry);
void registerHierarchical(Registry& registry);
void registerDiloco(Registry& registry);
void registerTopK(Registry& registry);
void registerGaussianK(Registry& registry);
void registerQsgd(Registry& registry);
void registerA2sgd(Registry& registry);
/// compression.kind bf16 and fp16 (HalfCompressor; optimizers/src/compressors/half.cpp).
void registerHalfCompressors(Registry& registry);
/// Every optimizer in its own file under optimizers/src/algorithms/ (the list
/// is generated at build time): "gradient_tracking", "d2" and
/// "quasi_global_momentum" (gossamer/optimizers/heterogeneity.hpp).
void registerAlgorithms(Registry& registry);

}  // namespace gossamer::optimizers
