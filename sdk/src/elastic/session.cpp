// Session: the view change and its realignment (gossamer/session.hpp, steps
// 1-3 of the protocol). A view change costs each survivor one state message
// to every member and the coordinator one view message (56 + 4 x members
// bytes, transports/membership), then, where ranks must realign, one
// broadcast of the model (a replicated model, to the ranks behind) or its
// stripes (to a rank that rejoined).
#include <algorithm>
#include <string>

#include "elastic/session_impl.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"

namespace gossamer {

Session::Impl::Impl(const Config& config, int rank, Store& store, const Registry& registry)
    : agent(config, rank, store, registry),
      a(*agent.impl_),
      membership(a.membership()),
      checkpoint(detail::checkpointSettingsFrom(a.config)) {}

std::uint64_t Session::Impl::steps() const {
  if (rounds) return roundsCommitted;
  return resilient != nullptr ? resilient->steps() : (a.optimizer ? a.optimizer->steps() : 0);
}

// Between the last step of an epoch and the end of its evaluation (the flush
// included), a view change must know: a rank that rejoins at that step
// evaluates with the others, one inside the next step does not.
bool Session::Impl::collectivePending() const {
  if (!loop) return false;
  const std::uint64_t spe = loop->plan.stepsPerEpoch;
  return loop->evaluated < loop->plan.epochs &&
         steps() >= spe * static_cast<std::uint64_t>(loop->evaluated + 1);
}

ViewChange Session::Impl::recover() {
  GOSSAMER_ENFORCE(membership != nullptr,
                   "recover() needs the membership service (membership.enabled: true)");
  const std::uint64_t completed = steps();
  const bool owed = owedCollective && *owedCollective == completed;
  const bool pending = evaluating || owed || collectivePending();
  const std::uint64_t reported = resilient != nullptr ? resilient->reportedSteps() : completed;
  ViewChange change = membership->recover(reported, pending);
  // This rank's push-sum weight (1 for optimizers without one) before and
  // after the change, for the `view` record: the mass a change moves.
  const double weightBefore = resilient != nullptr ? resilient->pushSumWeight() : 1.0;
  // Everything built over the old view goes first (it refers to the old communicator).
  if (resilient != nullptr) resilient->dropInner();
  a.communicator.reset();
  a.topology.reset();
  a.rebuildOverView();
  if (resilient != nullptr) {
    resilient->setInner(a.createOptimizer(tensorSizes));
    changes.push_back(change);
    realignOptimizer(change, completed, pending);
  } else {
    changes.push_back(change);
  }
  a.viewNumber = change.view.number;
  record(change, completed, pending, weightBefore, resilient != nullptr ? resilient->pushSumWeight() : 1.0);
  return change;
}

void Session::Impl::realignOptimizer(const ViewChange& change, std::uint64_t completed, bool pending) {
  if (std::find(change.joined.begin(), change.joined.end(), a.rank) != change.joined.end()) {
    // Rejoined: jumps to the survivors' step (also when the model transfer
    // in afterViewChange fails).
    ++moves;
    owedCollective.reset();
  }
  const bool jumped = resilient->afterViewChange(change, *a.communicator, *a.transport);
  if (jumped || !resilient->lockstep()) return;
  // Every member runs the collective of the resume step if a survivor at
  // that step still had it to run, or was inside it (change.evaluating), and
  // none does otherwise.
  if (pending && completed < change.resumeStep) {
    // The others are past it: this rank drops it and skips to their step.
    ++moves;
    owedCollective.reset();
  } else if (!pending && change.evaluating && completed == change.resumeStep) {
    // This rank had completed that collective, another had not: the step in
    // progress returns without stepping, and this rank runs the collective
    // again with the others.
    resilient->returnWithoutStepping();
    ++moves;
    owedCollective = completed;
  }
}

// The `view` record and, when ranks were lost, a warning.
void Session::Impl::record(const ViewChange& change, std::uint64_t completed, bool pending,
                           double weightBefore, double weightAfter) {
  a.metrics->emit("view", steps(),
                  {{"view", static_cast<std::int64_t>(change.view.number)},
                   {"members", change.view.members},
                   {"lost", change.lost},
                   {"joined", change.joined},
                   {"agreement_s", change.seconds},
                   {"resume_step", static_cast<std::int64_t>(change.resumeStep)},
                   {"evaluating", change.evaluating},
                   {"merged", change.merged},
                   {"completed_step", static_cast<std::int64_t>(completed)},
                   {"pending", pending},
                   {"push_sum_weight_before", weightBefore},
                   {"push_sum_weight_after", weightAfter}});
  if (!logEnabled(LogLevel::kWarning) || change.lost.empty()) return;
  std::string lost;
  for (int p : change.lost) lost += (lost.empty() ? "" : ", ") + std::to_string(p);
  log(LogLevel::kWarning, "rank " + std::to_string(a.rank) + ": lost rank(s) " + lost + " at step " +
                              std::to_string(completed) + "; view " + std::to_string(change.view.number) +
                              " has " + std::to_string(change.view.members.size()) + " ranks (agreed in " +
                              std::to_string(change.seconds) + " s)");
}

bool Session::Impl::survive(const std::function<void()>& f) {
  struct Flag {
    bool& b;
    explicit Flag(bool& x) : b(x) { b = true; }
    ~Flag() { b = false; }
  } inside(evaluating);
  owedCollective.reset();  // this is the collective it owed, if any
  const std::uint64_t movesBefore = moves;
  bool failed = false;   // a peer failed: recover before running f again
  bool own = false;      // f's last PeerFailure was its own (not another rank's revocation), not yet counted
  bool allEmpty = true;  // every view installed since f last ran lost and joined nobody
  detail::EmptyChangeCount emptyChanges;
  for (;;) {
    bool recovering = false;
    try {
      if (membership != nullptr && (failed || membership->revoked())) {
        // A PeerFailure from the recovery itself (a peer failed during the
        // change, or during the model transfer of a rank that rejoined)
        // leaves `failed` set: the next view is agreed on, then f runs.
        failed = true;
        recovering = true;
        allEmpty = emptyViewChange(recover()) && allEmpty;
        recovering = false;
        failed = false;
      }
      // A rank that rejoined jumped to the survivors' step, or the
      // survivors are past this collective: it belongs to a step they will
      // not run it at.
      if (moves != movesBefore) return false;
      emptyChanges.recovered(own, allEmpty);
      own = false;
      allEmpty = true;
      f();
      return true;
    } catch (const Expelled&) {
      throw;
    } catch (const PeerFailure& e) {
      if (membership == nullptr) throw;
      if (recovering) {
        allEmpty = false;  // a peer failed during the change
      } else {
        own = detail::EmptyChangeCount::own(e, *membership);
        if (emptyChanges.exhausted(own)) throw;  // not a failure the membership service sees
      }
      failed = true;
    } catch (const TimeoutError&) {
      // From the recovery: the survivors could not agree on a view in
      // agreement_seconds (the view stays revoked, and trying again would
      // wait for good), or a collective of the view change that follows
      // (the model to a rank that rejoined) timed out. The caller's
      // TimeoutError, as step() lets it out of its recovery.
      if (recovering) throw;
      // From f: this rank was stopped past the timeout, and removed meanwhile.
      if (membership == nullptr || !detail::revokedSoon(*membership)) throw;
      own = false;
      failed = true;
    }
  }
}

DistributedOptimizer& Session::Impl::makeOptimizer(const std::vector<std::size_t>& sizes) {
  if (membership == nullptr) return agent.makeOptimizer(sizes);
  resilient = nullptr;
  a.optimizer.reset();
  tensorSizes = sizes;
  // Over a view that is revoked already (this process joins a running job,
  // or a peer failed meanwhile) the optimizer is built by the first step's
  // recovery: building it may take a collective (hierarchical groups split).
  std::unique_ptr<DistributedOptimizer> inner;
  try {
    if (!membership->revoked()) inner = a.createOptimizer(sizes);
  } catch (const PeerFailure&) {
    if (!membership->revoked()) throw;
    inner.reset();
  }
  auto r = std::make_unique<detail::ResilientOptimizer>(std::move(inner), *membership,
                                                        [this] { return recover(); });
  resilient = r.get();
  a.optimizer = a.metered(std::move(r));
  return *a.optimizer;
}

Session::Session(const Config& config, int rank, Store& store, const Registry& registry)
    : impl_(std::make_unique<Impl>(config, rank, store, registry)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Agent& Session::agent() { return impl_->agent; }
bool Session::elastic() const { return impl_->membership != nullptr; }
View Session::view() const { return impl_->agent.view(); }
const std::vector<ViewChange>& Session::viewChanges() const { return impl_->changes; }
DistributedOptimizer& Session::makeOptimizer(const std::vector<std::size_t>& tensorSizes) {
  GOSSAMER_ENFORCE(!impl_->loop, "train() made the optimizer already");
  return impl_->makeOptimizer(tensorSizes);
}
std::uint64_t Session::steps() const { return impl_->steps(); }
ViewChange Session::recover() { return impl_->recover(); }
bool Session::survive(const std::function<void()>& f) { return impl_->survive(f); }
void Session::close() { impl_->agent.close(); }
void Session::abort() { impl_->agent.abort(); }

}  // namespace gossamer
