// Session: the epochs of a training run over view changes (gossamer/session.hpp,
// step 4 of the protocol). The epochs follow the optimizer's steps: epoch e
// is steps (e - 1) S + 1 .. e S (S steps per epoch) and its evaluation, which
// every member of the view runs once. After a view change each member is at
// the survivors' step s (a rank that rejoined jumped there; in lockstep
// algorithms the others are there or skip to it), and the survivors are past
// every epoch that ended by s, except one that ends at s if a survivor still
// had its evaluation to run (ViewChange::evaluating): then every member runs
// it, one that had completed it too. Nothing is sent here beyond the
// evaluation's own collectives.
#include <algorithm>

#include "elastic/session_impl.hpp"
#include "gossamer/errors.hpp"

namespace gossamer {

namespace {
std::uint64_t endOf(const EpochLoop& l, int epoch) {
  return l.plan.stepsPerEpoch * static_cast<std::uint64_t>(epoch);
}
}  // namespace

// After the view changes since the last call, the epochs whose evaluation is
// behind every member of the view (see the file comment). Returns whether
// `evaluated` changed or this rank rejoined.
bool Session::Impl::realign() {
  EpochLoop& l = *loop;
  const int was = l.evaluated;
  bool rejoined = false;
  const std::uint64_t spe = l.plan.stepsPerEpoch;
  for (; l.changesSeen < changes.size(); ++l.changesSeen) {
    const ViewChange& c = changes[l.changesSeen];
    const bool joined = std::find(c.joined.begin(), c.joined.end(), a.rank) != c.joined.end();
    if (!joined && !a.optimizer->lockstep()) continue;  // async: each rank keeps its own step
    const std::uint64_t s = c.resumeStep;
    int done = static_cast<int>(s / spe);
    if (c.evaluating && s % spe == 0 && done > 0) --done;
    l.evaluated = done;  // also back, if this side of a partition was ahead
    if (joined) {
      rejoined = true;
      l.rejoinedAt.push_back(s);
    }
  }
  return rejoined || l.evaluated != was;
}

DistributedOptimizer& Session::train(const TrainingPlan& plan) {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(!m.loop, "train() was called already");
  GOSSAMER_ENFORCE(!m.rounds, "train() inside runRounds()");
  GOSSAMER_ENFORCE(!plan.params.empty(), "the model has no parameters");
  GOSSAMER_ENFORCE(plan.stepsPerEpoch >= 1, "stepsPerEpoch " << plan.stepsPerEpoch);
  GOSSAMER_ENFORCE(plan.epochs >= 1, "epochs " << plan.epochs);
  std::size_t total = 0;
  for (std::size_t s : plan.tensorSizes) total += s;
  GOSSAMER_ENFORCE(total == plan.params.size(),
                   "tensor sizes sum to " << total << " elements, the model has " << plan.params.size());
  auto& optimizer = m.makeOptimizer(plan.tensorSizes);
  m.checkCheckpointable(optimizer);
  EpochLoop l;
  l.plan = plan;
  l.params = plan.params;
  l.totalSteps = plan.stepsPerEpoch * static_cast<std::uint64_t>(plan.epochs);
  // A2SGD synchronises the models after the last step (its final sync).
  optimizer.setTotalSteps(l.totalSteps);
  m.loop = std::move(l);
  m.resume();
  const std::uint64_t resumed = optimizer.steps();
  m.loop->evaluated = static_cast<int>(resumed / plan.stepsPerEpoch);
  // A checkpoint at an epoch's last step is written inside that step, before
  // the epoch's evaluation, with the epoch's loss sum: resumed from one, the
  // evaluation runs (maybe again), with that sum, and the next epoch starts
  // from 0.
  if (m.loop->resumedFrom >= 0 && resumed % plan.stepsPerEpoch == 0 && m.loop->evaluated > 0)
    --m.loop->evaluated;
  m.loop->changesSeen = m.changes.size();
  return optimizer;
}

bool Session::nextEpoch() {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.loop, "nextEpoch() before train()");
  EpochLoop& l = *m.loop;
  m.realign();  // view changes not looked at yet (they may move the epoch back)
  if (l.evaluated >= l.plan.epochs) return false;
  l.epoch = l.evaluated + 1;
  l.firstStep = m.steps();
  l.moved = false;
  return true;
}

int Session::epoch() const { return impl_->loop ? impl_->loop->epoch : 0; }

bool Session::stepping() const {
  const Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.loop, "stepping() before train()");
  return !m.loop->moved && m.steps() < endOf(*m.loop, m.loop->epoch);
}

bool Session::step(std::span<const float> grads, double loss) {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.loop, "step() before train()");
  EpochLoop& l = *m.loop;
  GOSSAMER_ENFORCE(grads.size() == l.params.size(),
                   "gradient of " << grads.size() << " elements, the model has " << l.params.size());
  l.lossSum += loss;
  ++l.lossSteps;
  const std::uint64_t before = m.steps();
  m.a.optimizer->step(l.params, grads);
  const std::uint64_t after = m.steps();
  // A step that did not count one: a view change moved this rank (it
  // rejoined and jumped to the others' step, maybe in another epoch, or it
  // goes back to the evaluation of the step it had completed).
  if (after != before + 1) {
    l.moved = true;
    return false;
  }
  m.a.metrics->note("loss", loss);
  const std::uint64_t every = m.checkpoint.everySteps;
  if (every > 0 && after % every == 0 && after < l.totalSteps) m.save(after);
  return true;
}

bool Session::evaluate(const std::function<void(const EpochEnd&)>& f) {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.loop, "evaluate() before train()");
  EpochLoop& l = *m.loop;
  // Completes exchanges still in flight (overlap); async modes agree on the push-sum average.
  m.a.optimizer->flush(l.params);
  // Realigned by a view change, or moved within it: the epoch to run is nextEpoch()'s.
  if (m.realign() || l.moved) {
    l.lossSum = 0;
    l.lossSteps = 0;
    return false;
  }
  // The mean over the steps this rank took in the epoch: all of them, or
  // those after the step it rejoined at.
  double loss = l.lossSteps > 0 ? l.lossSum / static_cast<double>(l.lossSteps) : 0.0;
  std::uint64_t lossSteps = l.lossSteps;
  // An evaluation this rank runs again without training (it was sent back to it).
  if (m.steps() == l.firstStep && l.lossEpoch == l.epoch) {
    loss = l.epochLoss;
    lossSteps = l.epochLossSteps;
  }
  l.lossEpoch = l.epoch;
  l.epochLoss = loss;
  l.epochLossSteps = lossSteps;
  const EpochEnd end{l.epoch, l.epoch == l.plan.epochs, loss, endOf(l, l.epoch), lossSteps};
  const bool completed = m.survive([&] {
    if (f) f(end);
    if (end.last && l.plan.closing) l.plan.closing();
  });
  l.closed = false;
  // Realigned also when the evaluation did not complete: this rank rejoined
  // inside it, maybe behind its own last evaluation (its side of a healed
  // partition was ahead), and the next epoch is the view's, not its own.
  const bool realigned = m.realign();
  if (!completed || realigned) {
    l.lossSum = 0;
    l.lossSteps = 0;
    return false;
  }
  l.closed = end.last;
  l.lossSum = 0;
  l.lossSteps = 0;
  l.evaluated = l.epoch;
  return true;
}

void Session::finish() {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.loop, "finish() before train()");
  if (!m.loop->closed && m.loop->plan.closing) m.survive(m.loop->plan.closing);
  m.loop->closed = true;
}

std::int64_t Session::resumedFromStep() const { return impl_->loop ? impl_->loop->resumedFrom : -1; }

const std::vector<std::uint64_t>& Session::rejoinedAtStep() const {
  static const std::vector<std::uint64_t> none;
  return impl_->loop ? impl_->loop->rejoinedAt : none;
}

}  // namespace gossamer
