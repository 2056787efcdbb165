// Session: elastic training for one rank. It holds the rank's Agent and runs
// the protocol that keeps a job going while peers die, stop, come back or a
// partition heals: every step, epoch and evaluation of the job's training
// loop goes through it, and it alone talks to the membership service.
//
// The protocol (docs/operations.md, "When a peer dies"):
//   1. A step, or a collective of the application's own (an evaluation),
//      fails with PeerFailure: a peer died or fell silent, or the view was
//      revoked by another rank's suspicion.
//   2. The survivors agree on the next view (Membership::recover). Each
//      reports the steps it completed, and whether it still had a collective
//      of its own to run at that step (inside evaluate() or survive(), or an
//      epoch whose evaluation it had not finished): resumeStep is the most
//      steps any survivor completed, `evaluating` whether a survivor at that
//      step still had its collective to run.
//   3. The Session rebuilds the communicator, topology and optimizer over the
//      view and realigns: in lockstep algorithms a rank behind skips to
//      resumeStep (with a replicated model, AllReduce-SGD, it first receives
//      the model of the lowest survivor that completed it); a rank that
//      rejoins (stopped and resumed, the other side of a healed partition, or
//      a process restarted with membership.restarted) receives the model and
//      jumps to resumeStep; a rank that had completed the evaluation of
//      resumeStep's epoch while another had not runs it again with the others.
//   4. The epochs follow the steps: nextEpoch() hands out the first epoch
//      whose evaluation is still ahead of every member, so that each epoch is
//      evaluated once by every member of the view that evaluates it.
// Programs without a DistributedOptimizer (gossamer-admm's iterations,
// gossamer-sparse's rounds) run lockstep rounds that roll back instead
// (runRounds, RoundProgram): the survivors return to the newest commit every
// one of them holds and go on over the view from there.
//
// A step's redo is exact: a step that completed somewhere is not redone, one
// that completed nowhere is redone over the survivors, and no gradient is
// counted twice. The design follows view-synchronous group membership (Birman
// and Joseph, "Exploiting virtual synchrony in distributed systems", SOSP
// 1987) with ULFM's revoke, agree and shrink for the collectives (Bland et
// al., "Post-failure recovery of MPI communication capability", IJHPCA 2013).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/checkpoint.hpp"
#include "gossamer/config.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"

namespace gossamer {

/// What a Session trains by epochs (Session::train).
struct TrainingPlan {
  /// The model's flat float32 parameters, stepped in place; must outlive the Session.
  std::span<float> params;
  /// Element counts of the model's tensors in flat order (their sum is params.size()).
  std::vector<std::size_t> tensorSizes;
  /// Optimizer steps per epoch (>= 1), the same on every rank.
  std::uint64_t stepsPerEpoch = 0;
  /// Epochs of the run (>= 1).
  int epochs = 1;
  /// Collectives the job runs once, at its very end, on every member of the
  /// last view (e.g. a final statistic): inside the last epoch's evaluation,
  /// after its function, or alone in finish() when a view change left that
  /// evaluation behind this rank. May be empty.
  std::function<void()> closing;
  /// The application's own state in this rank's checkpoints (e.g. its data
  /// sampler), written into and read from the Checkpoint that holds the model
  /// and the optimizer. May be empty. loadState refuses a state that does
  /// not fit this rank by throwing Error or InvalidArgument, which train()
  /// reports as an Error naming the checkpoint's file.
  std::function<void(Checkpoint&)> saveState;
  std::function<void(const Checkpoint&)> loadState;
};

/// An epoch that has ended, as evaluate() hands it to the evaluation.
struct EpochEnd {
  int epoch = 0;           ///< 1-based.
  bool last = false;       ///< epoch == plan.epochs.
  double loss = 0;         ///< Mean of the losses this rank passed to step() over lossSteps steps; 0 if none.
  std::uint64_t step = 0;  ///< Steps done in all (stepsPerEpoch * epoch).
  /// The steps of the epoch this rank took (whose losses `loss` averages):
  /// stepsPerEpoch, or fewer when it rejoined inside the epoch (those after
  /// its rejoin step; 0 when it rejoined at its end). An average over the
  /// ranks weights each rank's loss by it.
  std::uint64_t lossSteps = 0;
};

/// A program of lockstep rounds that has no DistributedOptimizer
/// (Session::runRounds): every member runs the same rounds, each made of
/// computation and collectives over the Session's communicator. The program
/// keeps commits: states it can return to. When a peer fails, the survivors
/// return to the newest commit every one of them holds, rebuild over the new
/// view, and run the rounds from there.
class RoundProgram {
 public:
  virtual ~RoundProgram() = default;
  /// Runs round `round` (0-based): its computation and its collectives over
  /// session.agent().communicator() (or its transport). Returns false when
  /// the program is done after it (every member decides alike, e.g. from an
  /// allreduced value). May throw PeerFailure.
  virtual bool run(std::uint64_t round) = 0;
  /// Called after `rounds` rounds completed on this rank: keeps a commit of
  /// the state after them and returns true, or returns false to keep none
  /// there. A commit must be the same on every member that makes it (a
  /// replicated value, or a rank's own state). Collectives inside commit()
  /// may throw PeerFailure (the commit is then not made). The program always
  /// holds the commit after 0 rounds (its start) and keeps its two newest.
  virtual bool commit(std::uint64_t rounds) = 0;
  /// After a view change: returns to the commit after `rounds` rounds (the
  /// newest one every member holds: this rank's newest or the one before)
  /// and rebuilds what depends on the view (the shard of data a rank owns,
  /// a schedule of messages) over change.view. Called on every member with
  /// the same arguments; may run collectives over the new view.
  virtual void restore(std::uint64_t rounds, const ViewChange& change) = 0;
};

/// One rank of an elastic job (see the file comment). Not thread-safe;
/// move-only; several may live in one process (threads over inproc).
class Session final {
 public:
  /// Connects this rank as Agent(config, rank, store, registry) does, and
  /// takes the membership handle the transport services offer
  /// (ServiceCapabilities: without the membership service, PeerFailure ends
  /// the job as it would without a Session).
  /// @throws as Agent's constructor; ConfigError for a bad `checkpoint:`.
  Session(const Config& config, int rank, Store& store, const Registry& registry);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  /// The rank's Agent: its transport, communicator (replaced at each view
  /// change: do not keep the reference across one), topology and metrics.
  Agent& agent();
  /// Whether the membership service is on (membership.enabled).
  bool elastic() const;
  /// The view in force (every rank of the job without the membership service).
  View view() const;
  /// The view changes so far, oldest first.
  const std::vector<ViewChange>& viewChanges() const;

  /// The configured optimizer over the current view, kept by the Agent
  /// (agent().optimizer()), made elastic: a step that fails with PeerFailure
  /// is undone, the survivors agree on a view and the step is redone over
  /// it, skipped (a rank behind, in lockstep algorithms) or the rank jumps
  /// to the survivors' step (it rejoined); steps() says which. Its
  /// step-carried state (push-sum weight, momentum, messages in flight)
  /// starts afresh in each view; the model is kept. For a loop of the
  /// caller's own; train() makes it itself. Without the membership service
  /// it is Agent::makeOptimizer's. A step whose PeerFailure comes back after
  /// kMaxEmptyViewChanges view changes in a row that lost and joined nobody
  /// lets it out, the step's input (parameters or gradients) restored; the
  /// optimizer's own state (messages it sent, push-sum weight) is not.
  /// @throws ConfigError for an unknown algorithm, InvalidArgument for bad sizes.
  DistributedOptimizer& makeOptimizer(const std::vector<std::size_t>& tensorSizes);

  /// Starts training `plan` by epochs: makes the optimizer (makeOptimizer),
  /// sets its total steps, and with `checkpoint.resume` (or as a process that
  /// replaces a failed rank, membership.restarted) loads the model, the
  /// optimizer, the step and plan.loadState's state from the newest
  /// checkpoint every rank has (the restarted rank: its own newest). Then:
  ///
  ///     while (session.nextEpoch()) {
  ///       while (session.stepping()) session.step(gradientOf(params), loss);
  ///       if (session.evaluate([&](const EpochEnd& e) { ...collectives... }))
  ///         report(...);                           // every member evaluated epoch e
  ///     }
  ///     session.finish();
  ///
  /// With `checkpoint.every_steps` the Session saves this rank's state every
  /// that many steps (rank-R-step-S.ckpt in checkpoint.dir, the last two kept).
  /// @throws InvalidArgument for an empty model, sizes that do not add up to
  ///         it, stepsPerEpoch 0, epochs < 1 or a second call; Error for a
  ///         checkpoint that cannot be read or belongs to another job (world
  ///         size, seed, model size), naming its file; ConfigError on
  ///         checkpoint.every_steps or checkpoint.resume when they are on and
  ///         the optimizer cannot save its state (loss-tolerant SGP, the
  ///         compressors); PeerFailure, TimeoutError from the resume's
  ///         allreduce.
  DistributedOptimizer& train(const TrainingPlan& plan);
  /// Whether an epoch remains to train and evaluate; positions the loop at
  /// it (epoch()). After a view change that moved this rank it may be an
  /// epoch it had trained already (the other side of a partition was behind)
  /// or a later one (it rejoined). @throws InvalidArgument before train().
  bool nextEpoch();
  /// The epoch nextEpoch() positioned the loop at, 1-based (0 before).
  int epoch() const;
  /// Whether the epoch has steps left for this rank: false once its last
  /// step is done, or once a view change moved this rank (then evaluate()
  /// returns false and nextEpoch() realigns).
  bool stepping() const;
  /// One optimizer step on plan.params with `grads` (params.size() floats,
  /// computed on the parameters as they are now); `loss` is this step's
  /// training loss, for the epoch's mean (EpochEnd::loss) and the step record.
  /// Returns whether the step counted (steps() advanced by one): false when
  /// a view change moved this rank. Saves a checkpoint when one is due.
  /// @throws Expelled, TimeoutError; PeerFailure without membership, or
  ///         after kMaxEmptyViewChanges empty view changes; with
  ///         checkpoint.every_steps, at a checkpoint's step, Error (or
  ///         std::filesystem::filesystem_error) when it cannot be written,
  ///         and whatever plan.saveState throws.
  bool step(std::span<const float> grads, double loss);
  /// Ends the epoch: completes what is in flight (optimizer flush), then runs
  /// `f` (collectives over agent().communicator(): the evaluation) on every
  /// member, redoing it over the new view when a peer fails inside it, and,
  /// after the last epoch's, plan.closing. Returns true when every member of
  /// the view completed `f` for this epoch; false when a view change moved
  /// this rank (it rejoined at another step, or it is behind or ahead of the
  /// others' epoch): then it continues from nextEpoch().
  /// @throws Expelled, TimeoutError; whatever `f` throws (PeerFailure only
  ///         after kMaxEmptyViewChanges empty view changes).
  bool evaluate(const std::function<void(const EpochEnd&)>& f);
  /// Ends training: runs plan.closing (redone over the survivors like an
  /// evaluation) when a view change left the last epoch's evaluation behind
  /// this rank. Call it once nextEpoch() returned false.
  void finish();
  /// Steps completed (the optimizer's steps()).
  std::uint64_t steps() const;
  /// The step the run resumed at from checkpoints, -1 when it did not.
  std::int64_t resumedFromStep() const;
  /// The steps at which this rank rejoined the job (it was removed and came
  /// back), taking the survivors' model and step.
  const std::vector<std::uint64_t>& rejoinedAtStep() const;

  /// Runs `f` (collectives of the caller's own) until it completes: when it
  /// throws PeerFailure and the membership service is on, agrees on a new
  /// view and runs it again over it, so `f` must recompute its inputs each
  /// time. Returns true once `f` completed; false when a view change during
  /// the call moved this rank past the step where `f` belonged (it rejoined,
  /// or in lockstep algorithms the survivors are past that step and did not
  /// run theirs there): then `f` did not complete. Without membership a
  /// PeerFailure propagates, and so does one from `f` after
  /// kMaxEmptyViewChanges view changes in a row that lost and joined nobody.
  /// @throws Expelled, TimeoutError from the agreement; whatever `f` throws.
  bool survive(const std::function<void()>& f);
  /// Takes part in a view change after a PeerFailure: agrees with the
  /// survivors on the next view, rebuilds the communicator, topology and
  /// optimizer over it and realigns (see the file comment). survive(),
  /// evaluate(), step() and runRounds() call it themselves. Every survivor
  /// must call it. Returns the change.
  /// @throws InvalidArgument without the membership service; Expelled if the
  ///         survivors removed this rank; TimeoutError if they do not agree
  ///         within membership.agreement_seconds; PeerFailure if another peer
  ///         fails during the change (call it again).
  ViewChange recover();

  /// Runs `program` for rounds [0, rounds) or until its run() returns false,
  /// rolling back to the newest commit every member holds after a view
  /// change (see RoundProgram). Returns the rounds completed.
  /// @throws ConfigError with membership.rejoin or membership.restarted (a
  ///         rank that comes back has no state to continue from) or
  ///         `checkpoint:` settings (round programs keep no checkpoints);
  ///         InvalidArgument after train(); Expelled, TimeoutError;
  ///         PeerFailure without membership, or the program's own after
  ///         kMaxEmptyViewChanges empty view changes in a row; whatever else
  ///         the program throws.
  std::uint64_t runRounds(std::uint64_t rounds, RoundProgram& program);

  /// Closes the Agent (delivers what is queued, says goodbye). Idempotent.
  void close();
  /// Closes without delivering what is still queued (error paths).
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossamer
