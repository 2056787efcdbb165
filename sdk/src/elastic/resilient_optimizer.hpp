// The optimizer an Agent hands out when the membership service is on: it
// forwards to the configured optimizer and, when a step fails because a peer
// died or fell silent (PeerFailure, ViewChanged), restores the step's input,
// has the Agent agree on a new view and rebuild the optimizer over it, and
// redoes the step. Internal to the SDK (agent.cpp).
//
// After a view change in a lockstep algorithm (ViewChange::resumeStep), a
// rank that completed fewer steps than the others skips the steps it missed:
// it drops those gradients, and with a replicated model (AllReduce-SGD) it
// first copies the model of the lowest survivor that completed them
// (broadcast over the new view). So every survivor's next step is the same
// step, and no gradient is counted twice: a step that completed somewhere
// is not redone, one that completed nowhere is redone over the survivors.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/checkpoint.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/optimizer.hpp"

namespace gossamer::detail {

/// After a TimeoutError in a step or a collective: whether the membership
/// service revokes the view within `seconds` (polled every 10 ms). A rank
/// that was stopped for longer than the transport's timeout (SIGSTOP, a VM
/// freeze) wakes up past its receive's deadline: the view that removed it
/// is already waiting for its membership service, which revokes within a
/// pass, and the timeout is a view change, not an error. False: a real
/// timeout (rethrow it).
bool revokedSoon(const Membership& membership, double seconds = 5.0);

/// The count behind kMaxEmptyViewChanges, for one call that redoes its work
/// after each view change (Session::survive, a step, runRounds): the work's
/// own PeerFailures in a row that only views losing and joining nobody
/// followed.
class EmptyChangeCount {
 public:
  /// Whether `e`, from the work, is its own: not a ViewChanged, and the view
  /// not revoked (another rank started a change).
  static bool own(const PeerFailure& e, const Membership& m) {
    return dynamic_cast<const ViewChanged*>(&e) == nullptr && !m.revoked();
  }
  /// True when an own failure now is not one the membership service sees:
  /// let it out.
  bool exhausted(bool own) const { return own && n_ >= kMaxEmptyViewChanges; }
  /// After the recovery that followed a failure (`own` as own() said) and
  /// installed views of which all lost and joined nobody (`empty`).
  void recovered(bool own, bool empty) {
    if (own)
      n_ = empty ? n_ + 1 : 0;
    else if (!empty)
      n_ = 0;
  }

 private:
  int n_ = 0;
};

class ResilientOptimizer final : public DistributedOptimizer {
 public:
  /// `recover` runs Agent::recover (agree on a view, rebuild, then call
  /// afterViewChange on this object). `inner` may be null while the view is
  /// revoked (a process that joins a running job): it is built by the first
  /// step's recovery.
  ResilientOptimizer(std::unique_ptr<DistributedOptimizer> inner, Membership& membership,
                     std::function<ViewChange()> recover);

  std::string name() const override { return inner_ ? inner_->name() : "(built over the next view)"; }
  void step(std::span<float> params, std::span<const float> grads) override;
  void reduceGradients(std::span<float> grads) override;
  void mixParameters(std::span<float> params) override;
  bool hasCommunicationOnlyForm() const override { return inner_ && inner_->hasCommunicationOnlyForm(); }
  /// A skipped step (skip_) or one this rank returns from (jumped_) that
  /// the next mixParameters consumes.
  bool skipsLocalStep() const override { return skip_ > 0 || jumped_; }
  void flush(std::span<float> params) override;
  std::uint64_t steps() const override { return completed_; }
  /// The steps this rank reports to a view change: steps(), less one while
  /// the model transfer of the view it joined has not completed, so that it
  /// is behind and (AllReduce-SGD) receives the model again.
  std::uint64_t reportedSteps() const {
    return modelPending_ && completed_ > 0 ? completed_ - 1 : completed_;
  }
  void setTotalSteps(std::uint64_t totalSteps) override;
  bool replicatedModel() const override { return inner_ && inner_->replicatedModel(); }
  bool lockstep() const override { return !inner_ || inner_->lockstep(); }
  /// Whether the optimizer it wraps exists (not before a joining rank's first view).
  bool built() const { return inner_ != nullptr; }
  double pushSumWeight() const override { return inner_ ? inner_->pushSumWeight() : 1.0; }
  std::uint64_t rejectedMessages() const override { return inner_ ? inner_->rejectedMessages() : 0; }
  ModelExchange modelExchange() override;
  /// The configured optimizer's state and the steps completed.
  void saveState(Checkpoint& out, const std::string& prefix) const override;
  void loadState(const Checkpoint& in, const std::string& prefix) override;

  /// The optimizer rebuilt over a new view replaces the old one (which is
  /// destroyed first by the Agent: dropInner()).
  void dropInner() { inner_.reset(); }
  void setInner(std::unique_ptr<DistributedOptimizer> inner);
  /// Steps the rebuilt optimizer still has to take (for setTotalSteps).
  std::uint64_t remainingSteps() const { return total_ > completed_ ? total_ - completed_ : 0; }
  /// Realigns after a view change (see the file comment); `comm` is the new
  /// view's communicator. A rank that rejoined receives the model (striped
  /// over up to four members) and jumps to change.resumeStep: returns true
  /// then. @throws PeerFailure from the model transfer.
  bool afterViewChange(const ViewChange& change, Communicator& comm, Transport& transport);
  /// The step in progress returns without stepping and
  /// steps() stays: the caller runs, with the others, the collective of the
  /// step it had completed (Agent::recover). Outside a step (a view change
  /// in Agent::survive or flush) it does nothing: the caller learns there.
  void returnWithoutStepping() { jumped_ = stepping_; }
  DistributedOptimizer& inner() { return *inner_; }

 private:
  /// The model transfer to the ranks that rejoined in `change` (joining:
  /// this rank is one): each source's model size, then its stripe in pieces
  /// of at most the communicator's maxMessageBytes.
  /// @throws ProtocolError naming a source whose model has another size;
  ///         PeerFailure, TimeoutError as the transfer's messages do.
  void transferModel(const ViewChange& change, Communicator& comm, Transport& transport, bool joining);
  /// Runs the Agent's recovery until a view is installed that is not
  /// revoked. Returns whether that view lost and joined nobody.
  bool recover();
  /// Consumes one skipped step; true if this call was one.
  bool skipped();
  /// Runs `once` (one step, or its communication-only half) on `state`
  /// (the vector it changes in place); when it fails with PeerFailure,
  /// restores `state`, recovers and runs it again, unless the step is now
  /// skipped, or kMaxEmptyViewChanges view changes in a row lost and joined
  /// nobody after once()'s own PeerFailure (not a ViewChanged): then it
  /// propagates, `state` restored. `countsStep`: a completed call counts a
  /// step. `recoverFirst`: a view revoked already is installed before
  /// `once` runs.
  template <typename Step>
  void attempt(std::span<float> state, bool countsStep, Step&& once, bool recoverFirst = true);

  std::unique_ptr<DistributedOptimizer> inner_;
  Membership& membership_;
  std::function<ViewChange()> recover_;
  std::uint64_t completed_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t skip_ = 0;
  // The step in progress returns without stepping (rejoined, or back to a
  // collective). Set only inside a step: a rank that moved elsewhere (inside
  // an evaluation) steps at its next step, or it would take that step for the
  // end of an epoch and run an evaluation nobody else runs.
  bool jumped_ = false;
  bool stepping_ = false;        // inside attempt(): a step or one of its halves
  bool fresh_ = false;           // rejoined or (lockstep) a view changed, not stepped since: nothing to flush
  bool modelPending_ = false;    // rejoined, and the model transfer did not complete
  std::span<float> lastParams_;  // the model of the last step, for the catch-up broadcast
  std::vector<float> saved_;     // the input of the step in progress
};

}  // namespace gossamer::detail
