// Redo-after-recovery around the configured optimizer (resilient_optimizer.hpp).
#include "elastic/resilient_optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "collectives/detail.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/wire.hpp"

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"

namespace gossamer::detail {

ResilientOptimizer::ResilientOptimizer(std::unique_ptr<DistributedOptimizer> inner, Membership& membership,
                                       std::function<ViewChange()> recover)
    : inner_(std::move(inner)), membership_(membership), recover_(std::move(recover)) {
  GOSSAMER_CHECK(inner_ != nullptr || membership_.revoked(), "no optimizer to wrap");
}

void ResilientOptimizer::setInner(std::unique_ptr<DistributedOptimizer> inner) {
  GOSSAMER_CHECK(inner != nullptr, "no optimizer to wrap");
  inner_ = std::move(inner);
  inner_->setTotalSteps(remainingSteps());
}

void ResilientOptimizer::setTotalSteps(std::uint64_t totalSteps) {
  total_ = totalSteps;
  if (inner_) inner_->setTotalSteps(remainingSteps());
}

bool revokedSoon(const Membership& membership, double seconds) {
  const auto until = Clock::now() + clockDuration(std::chrono::duration<double>(seconds));
  while (!membership.revoked()) {
    if (Clock::now() >= until) return false;
    sleepFor(10e-3);
  }
  return true;
}

bool ResilientOptimizer::recover() {
  bool empty = true;  // every view installed here lost and joined nobody
  for (;;) {
    try {
      empty = emptyViewChange(recover_()) && empty;
    } catch (const Expelled&) {
      throw;
    } catch (const PeerFailure&) {
      empty = false;
      continue;  // another peer failed during the change (the broadcast): the next view
    }
    if (!membership_.revoked()) return empty;
  }
}

bool ResilientOptimizer::skipped() {
  if (jumped_) {
    // The call in which this rank rejoined, or went back to a collective of
    // the step it had completed: it returns without stepping (steps() tells
    // the caller).
    jumped_ = false;
    return true;
  }
  if (skip_ == 0) return false;
  --skip_;
  ++completed_;
  return true;
}

bool ResilientOptimizer::afterViewChange(const ViewChange& change, Communicator& comm, Transport& transport) {
  skip_ = 0;
  // The optimizer was rebuilt: nothing is in flight. In a lockstep algorithm
  // no member flushes over the new view before its next step (one inside a
  // flush drops it, one inside the caller's collective runs that again), so
  // neither does this rank: one that skips to the resume step (an epoch's
  // end, a checkpoint) or goes back to the collective of the step it had
  // completed would flush alone (hierarchical: a group broadcast that meets
  // the others' reduce, or nobody).
  if (inner_->lockstep()) fresh_ = true;
  // Every member decides alike from the change alone (and from the
  // optimizer, the same everywhere), so all of them take part in the transfers.
  const bool rejoined = !change.joined.empty();
  const int me = transport.rank();
  const bool joining = std::find(change.joined.begin(), change.joined.end(),
                                 change.view.members[static_cast<std::size_t>(me)]) != change.joined.end();
  if (joining) {
    // Back from a stop or a partition: take the survivors' step count,
    // ahead or behind (the trainer follows steps()). Taken before the model
    // transfer, so that a view change during it has this rank report the
    // step of the view it joined, not its own (less one: reportedSteps()).
    completed_ = change.resumeStep;
    inner_->setTotalSteps(remainingSteps());
    jumped_ = stepping_;
    fresh_ = true;
    modelPending_ = true;
  }
  if (rejoined && !inner_->replicatedModel() && !change.merged)
    transferModel(change, comm, transport, joining);
  if (!inner_->lockstep() && !rejoined) return false;
  if (change.merged && inner_->replicatedModel()) {
    // A side of a healed partition joined with the model it trained: every
    // member holds its side's model, and their average over the new view
    // weights each side by its number of ranks.
    // Reduced in a copy: an allreduce that a further view change interrupts
    // leaves partial sums in its buffer, and the model must stay whole.
    GOSSAMER_CHECK(!lastParams_.empty(), "no model to merge: a view changed before the first step");
    std::vector<float> merged(lastParams_.begin(), lastParams_.end());
    comm.allreduce(std::span<float>(merged), ReduceOp::kAverage);
    std::copy(merged.begin(), merged.end(), lastParams_.begin());
  } else if (change.modelSource >= 0 && inner_->replicatedModel()) {
    // The ranks behind (or back) take the model of a rank that completed
    // resumeStep steps; the others receive a copy of what they hold.
    GOSSAMER_CHECK(!lastParams_.empty(), "no model to realign: a view changed before the first step");
    comm.broadcast(lastParams_, change.view.localRank(change.modelSource));
  }
  modelPending_ = false;
  if (joining) return true;
  if (inner_->lockstep() && change.modelSource >= 0 && change.resumeStep > completed_) {
    skip_ = change.resumeStep - completed_;
    // The skipped steps never reach the rebuilt optimizer: it has that many
    // fewer to take, as many as the survivors' (a last step such as DiLoCo's
    // final round or A2SGD's final sync must be the same step everywhere).
    const std::uint64_t remaining = remainingSteps();
    inner_->setTotalSteps(remaining > skip_ ? remaining - skip_ : 0);
  }
  return false;
}

void ResilientOptimizer::transferModel(const ViewChange& change, Communicator& comm, Transport& transport,
                                       bool joining) {
  // Each rank that rejoined gets the model of up to four members that did
  // not, one stripe from each, sent at once (as a torrent would). A side of
  // a healed partition that merges keeps its own model instead (the
  // caller's test): gossip mixes it in, each rank with its push-sum weight.
  std::vector<int> sources;
  for (int g : change.view.members)
    if (std::find(change.joined.begin(), change.joined.end(), g) == change.joined.end() && sources.size() < 4)
      sources.push_back(change.view.localRank(g));
  GOSSAMER_CHECK(!lastParams_.empty(), "no model to transfer: a view changed before the first step");
  const std::size_t n = lastParams_.size(), k = sources.size();
  const int me = transport.rank();
  // First each source's model size (segment 0), checked before any piece
  // is posted: pieces of models of other sizes could match in part.
  const Tag sizeTag = Tag::make(Op::kBroadcast, 0xFFFFFF, 0);
  const auto mine = static_cast<std::int64_t>(n);
  std::vector<std::int64_t> theirs(k, -1);
  std::vector<Request> requests;
  for (std::size_t j = 0; j < k; ++j)
    if (joining)
      requests.push_back(transport.irecvOf<std::int64_t>(sources[j], sizeTag, std::span(&theirs[j], 1)));
    else if (sources[j] == me)
      for (int g : change.joined)
        requests.push_back(
            transport.isendOf<std::int64_t>(change.view.localRank(g), sizeTag, std::span(&mine, 1)));
  waitAll(requests, transport.timeoutSeconds());
  for (std::size_t j = 0; joining && j < k; ++j)
    if (requests[j].bytes() != sizeof(std::int64_t) || theirs[j] != mine)
      throw ProtocolError(sources[j], frame_offset::kPayloadBytes,
                          "a model of " + std::to_string(theirs[j]) +
                              " elements to take back, this rank's has " + std::to_string(n) +
                              " (do all ranks train the same model?)");
  requests.clear();
  // A stripe goes as the collectives' message blocks (at most
  // collectives.max_message_bytes, 1 GiB at most: one frame's payload), each
  // with a segment of its own from 1: stripe j's blocks follow stripe
  // j-1's. (The same options on every member: the job's.)
  const CollectiveOptions& o = comm.options();
  const auto stripe = [&](std::size_t j) {
    return lastParams_.subspan(n * j / k, n * (j + 1) / k - n * j / k);
  };
  std::size_t total = 0;
  for (std::size_t j = 0; j < k; ++j) total += messageBlocks<float>(stripe(j).size(), o);
  if (total > std::size_t{Tag::kMaxSegment})
    throw InvalidArgument(
        "model of " + std::to_string(n) + " elements: too large to transfer to a rank that " +
        "rejoined (at most " + std::to_string(Tag::kMaxSegment) + " pieces of " +
        std::to_string(maxMessageElems<float>(o) * sizeof(float)) + " bytes: collectives.max_message_bytes)");
  std::vector<std::pair<std::size_t, int>> expected;  // a receive's bytes and source (joining)
  std::uint32_t segment = 1;
  for (std::size_t j = 0; j < k; ++j) {
    const std::span<float> part = stripe(j);
    for (std::size_t b = 0; b < messageBlocks<float>(part.size(), o); ++b, ++segment) {
      const Tag tag = Tag::make(Op::kBroadcast, 0xFFFFFF, segment);
      const std::span<float> piece = messageBlock(part, b, o);
      if (joining) {
        requests.push_back(transport.irecvOf<float>(sources[j], tag, piece));
        expected.emplace_back(piece.size_bytes(), sources[j]);
      } else if (sources[j] == me) {
        for (int g : change.joined)
          requests.push_back(
              transport.isendOf<float>(change.view.localRank(g), tag, std::span<const float>(piece)));
      }
    }
  }
  waitAll(requests, transport.timeoutSeconds());
  // A short piece (a source with other collectives options) would leave the
  // rest of it as this rank's own values.
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (requests[i].bytes() != expected[i].first)
      throw ProtocolError(expected[i].second, frame_offset::kPayloadBytes,
                          "model piece of " + std::to_string(requests[i].bytes()) + " bytes, expected " +
                              std::to_string(expected[i].first) +
                              " (do all ranks run with the same settings?)");
}

template <typename Step>
void ResilientOptimizer::attempt(std::span<float> state, bool countsStep, Step&& once, bool recoverFirst) {
  struct Stepping {
    bool& b;
    explicit Stepping(bool& x) : b(x) { b = true; }
    ~Stepping() { b = false; }
  } stepping(stepping_);
  if ((recoverFirst && membership_.revoked()) || !inner_) recover();
  if (countsStep ? skipped() : skipsLocalStep()) return;
  saved_.assign(state.begin(), state.end());
  EmptyChangeCount emptyChanges;
  for (;;) {
    try {
      once();
      fresh_ = false;
      if (countsStep) ++completed_;
      return;
    } catch (const PeerFailure& e) {
      std::copy(saved_.begin(), saved_.end(), state.begin());
      const bool own = EmptyChangeCount::own(e, membership_);
      if (emptyChanges.exhausted(own)) throw;  // not a failure the membership service sees
      emptyChanges.recovered(own, recover());
      if (countsStep ? skipped() : skipsLocalStep()) return;
    } catch (const TimeoutError&) {
      if (!revokedSoon(membership_)) throw;  // (this rank was stopped past the timeout: see revokedSoon)
      std::copy(saved_.begin(), saved_.end(), state.begin());
      emptyChanges.recovered(false, recover());
      if (countsStep ? skipped() : skipsLocalStep()) return;
    }
  }
}

void ResilientOptimizer::step(std::span<float> params, std::span<const float> grads) {
  lastParams_ = params;
  attempt(params, true, [&] { inner_->step(params, grads); });
}

// A skipped step leaves the gradients unreduced: mixParameters consumes it.
void ResilientOptimizer::reduceGradients(std::span<float> grads) {
  attempt(grads, false, [&] { inner_->reduceGradients(grads); });
}

void ResilientOptimizer::mixParameters(std::span<float> params) {
  lastParams_ = params;
  // A replicated model's mixParameters sends nothing: the step's exchange
  // (reduceGradients, or the caller's own allreduce of the gradient)
  // completed, and the step is counted before a view revoked meanwhile is
  // installed (by the next exchange). Recovering first would report the
  // step as not taken though the model holds it, and a survivor whose
  // exchange failed would redo it against this rank's next step.
  const bool sendsNothing = inner_ && inner_->replicatedModel();
  attempt(
      params, true, [&] { inner_->mixParameters(params); }, !sendsNothing);
}

void ResilientOptimizer::flush(std::span<float> params) {
  lastParams_ = params;
  if (membership_.revoked()) recover();
  // After a view change (a lockstep algorithm), or after rejoining, nothing
  // is in flight until the next step (the optimizer was rebuilt), and no
  // other member flushes: a flush here (hierarchical groups broadcast in it)
  // would meet nobody.
  if (fresh_ || !inner_) return;
  saved_.assign(params.begin(), params.end());
  try {
    inner_->flush(params);
  } catch (const PeerFailure&) {
    // What was in flight is dropped with the old view.
    std::copy(saved_.begin(), saved_.end(), params.begin());
    recover();
  } catch (const TimeoutError&) {
    if (!revokedSoon(membership_)) throw;
    std::copy(saved_.begin(), saved_.end(), params.begin());
    recover();
  }
}

void ResilientOptimizer::saveState(Checkpoint& out, const std::string& prefix) const {
  GOSSAMER_ENFORCE(inner_ != nullptr, "no optimizer state to save before this rank joined a view");
  inner_->saveState(out, prefix);
  out.putValue<std::uint64_t>(prefix + "completed", completed_);
}

void ResilientOptimizer::loadState(const Checkpoint& in, const std::string& prefix) {
  // Without an optimizer yet (this rank joins a running job), only the step
  // count is taken: the optimizer built over the view it joins starts afresh,
  // as the members' rebuilt ones do.
  if (inner_) inner_->loadState(in, prefix);
  completed_ = in.getValue<std::uint64_t>(prefix + "completed");
  skip_ = 0;
  if (inner_) inner_->setTotalSteps(remainingSteps());
}

ModelExchange ResilientOptimizer::modelExchange() {
  if (!inner_ || !inner_->modelExchange()) return {};
  return [this](std::span<float> params, std::uint64_t round) { inner_->modelExchange()(params, round); };
}

}  // namespace gossamer::detail
