// DiLoCo: H inner steps of local SGD with no communication, then one outer
// step of Nesterov momentum on the averaged pseudo-gradient.
//
// Papers (cited by arXiv id):
//  - Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training
//    of Language Models", arXiv 2311.08105, Algorithm 1: each worker i copies
//    theta and takes H inner steps to theta_i; the outer gradient is
//    Delta = (1/k) sum_i (theta - theta_i) and theta <- OuterOpt(theta,
//    Delta), SGD with Nesterov momentum; the paper's outer learning rate 0.7
//    and momentum 0.9 are the defaults here. The inner optimizer is the project's LocalSgd
//    (the paper's is AdamW); its velocity carries over from round to round.
//  - Kolehmainen et al. 2025, "NoLoCo: No-all-reduce Low Communication
//    Training Method for Large Models", arXiv 2506.10911: no all-reduce,
//    each sync with one randomly chosen peer. The gossip exchange takes that
//    idea and averages the pair's outer parameters outright before the outer
//    step; the noloco exchange takes NoLoCo's modified outer step instead, in
//    which the pair's mean theta enters the momentum with a weight gamma (as
//    the authors' reference implementation does it: heavy-ball form, step 3').
//  - Overlap (one round late): the "delayed outer gradients" of Kale,
//    Douillard and Donchev 2025, "Eager Updates For Overlapped Communication
//    and Computation in DiLoCo", arXiv 2502.12996; the local copy keeps this
//    rank's own progress of the round in flight (below).
//
// State per rank, P float32 each: theta (outer parameters), m (outer
// momentum), the anchor a (where this round's inner steps started), the
// LocalSgd velocity; and per exchange in flight its own pseudo-gradient and
// the message buffers (P for allreduce, 4P for gossip).
//
// An outer round, after H inner steps on the local copy x (= `params`):
//   1. Delta = a - x (this rank's progress over the round); a <- x.
//   2. The exchange gives (theta_bar, Delta_bar):
//      allreduce  theta_bar = theta, Delta_bar = mean over all ranks of Delta
//                 (Communicator::allreduce, kAverage: collectives.allreduce
//                 picks the algorithm). Every rank ends with the same theta.
//      gossip     round r pairs the ranks by topologies::randomPairing(N,
//                 seed, r), a perfect matching every rank computes alike (no
//                 message to agree on it, no barrier: each rank waits only
//                 for its partner). The two swap [theta | Delta] and take
//                 theta_bar, Delta_bar = the pair's means (computed in the
//                 same order on both sides: the same bits). With N odd one
//                 rank sits the round out (its own theta, Delta). A message
//                 holding a NaN or infinity is refused (GossipScreen) and the
//                 rank goes on as if it had sat out.
//   3. Nesterov (PyTorch's SGD with nesterov=True, as the paper's OuterOpt):
//      m <- mu m + Delta_bar;  theta <- theta_bar - lr (Delta_bar + mu m).
//   3'. noloco (the gossip exchange's pairs and messages):
//      m <- mu m + lr Delta_bar + gamma (theta - theta_bar);  theta <- theta - m.
//      Each rank keeps its own theta; a pair's two thetas move towards each
//      other by gamma of their gap per round (momentum 0), and the sum of
//      theta over the ranks moves by -lr sum(Delta) as in step 3.
//   4. x <- theta; a <- theta.
// With lr 1 and mu 0, step 3 gives theta = mean(x): model averaging every H
// steps (over all ranks, or over the pair). Momentum 0: the sum of theta over
// the ranks moves by -lr sum(Delta) with either exchange (gossip mixes with a
// doubly stochastic matrix).
//
// Overlap (algorithm.overlap): round k's exchange starts at the end of round
// k (step 2), and the inner steps of round k+1 go on from x without waiting;
// at the end of round k+1 it is completed and applied (step 3) before round
// k+1's own exchange starts. Step 4 becomes x <- x + (theta_new - theta_old)
// + Delta_k (and a likewise): the local copy is the newest theta plus this
// rank's own progress not yet in it, so no inner step is lost and none
// counted twice (with one rank, lr 1 and mu 0 it is plain local SGD). The
// allreduce runs on a thread of its own while the inner steps go on (the
// Communicator is used by that thread alone until it is joined: the caller
// makes no collective of its own in between, flush() first); gossip
// leaves its isend/irecv in flight. flush() completes and applies the round
// in flight (the trainer calls it before each evaluation).
//
// The first step takes theta from the model after its inner step
// (allreduce: its mean over the ranks, one allreduce of P float32, so theta
// is the same on every rank even when the local copies differ, as after a
// membership view change rebuilds the optimizer); the rounds of H inner
// steps follow. It is the model after that step, not before, so that the
// communication-only form (mixParameters after a local step made elsewhere,
// which never sees the model before it) reproduces step() bit for bit. The
// step count given to setTotalSteps ends with a last, synchronous round
// (whatever is in flight is applied first) and x = theta.
//
// Bytes on the wire per rank per round (every H steps), payload only:
//   allreduce  the collective's own: 2 (N-1)/N * 4P with the ring (N-1
//              segments out and N-1 back), 4P log2 N with recursive doubling;
//              per step that is 1/H of AllReduce-SGD's.
//   gossip     one message of 8P bytes ([theta | Delta], float32) to the
//   (noloco)   partner, and one received: N/2 independent pairs, no
//              collective. Per step 8P / H.
// Tags: gossip Op::kGossip, step = round (mod 2^40), segment 0.
#include <Eigen/Core>
#include <thread>
#include <utility>

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/executor.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

namespace {
Eigen::Map<Eigen::VectorXf> view(float* p, std::size_t n) { return {p, static_cast<Eigen::Index>(n)}; }
Eigen::Map<const Eigen::VectorXf> view(const float* p, std::size_t n) {
  return {p, static_cast<Eigen::Index>(n)};
}
}  // namespace

DilocoOuter parseDilocoOuter(const std::string& name) {
  if (name == "allreduce") return DilocoOuter::kAllreduce;
  if (name == "gossip") return DilocoOuter::kGossip;
  if (name == "noloco") return DilocoOuter::kNoloco;
  throw InvalidArgument("unknown DiLoCo outer exchange '" + name + "' (allreduce, gossip, noloco)");
}

struct Diloco::InFlight {
  std::vector<float> delta;  // this rank's pseudo-gradient of the round
  std::vector<float> send;   // allreduce: Delta, averaged in place; gossip: [theta | Delta]
  std::vector<float> recv;   // gossip: the partner's [theta | Delta]
  int partner = -1;          // gossip: the partner (this rank: it sits out)
  Request sendReq, recvReq;  // gossip
  Task worker;               // allreduce in overlap mode
  std::exception_ptr error;  // what the worker threw
};

Diloco::Diloco(Communicator& communicator, std::size_t numParams, const DilocoOptions& o)
    : comm_(communicator),
      options_(o),
      sgd_(numParams, o.sgd),
      numParams_(numParams),
      flight_(std::make_unique<InFlight>()),
      screen_(true, "diloco") {
  GOSSAMER_ENFORCE(o.innerSteps >= 1, "inner steps " << o.innerSteps << " < 1");
  GOSSAMER_ENFORCE(o.outerLearningRate > 0 && o.outerLearningRate <= 10,
                   "outer learning rate " << o.outerLearningRate << " outside (0, 10]");
  GOSSAMER_ENFORCE(o.outerMomentum >= 0 && o.outerMomentum < 1,
                   "outer momentum " << o.outerMomentum << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.nolocoGamma >= 0 && o.nolocoGamma <= 10,
                   "noloco gamma " << o.nolocoGamma << " outside [0, 10]");
}

Diloco::~Diloco() {
  // A receive still posted writes into flight_->recv; a worker uses comm_.
  if (flight_->worker.joinable()) flight_->worker.join();
  flight_->recvReq.cancel();
}

void Diloco::step(std::span<float> params, std::span<const float> grads) {
  sgd_.apply(params, grads);
  mixParameters(params);
}

void Diloco::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "expected " << numParams_ << " gradients, got " << grads.size());
}

void Diloco::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  ++steps_;
  if (theta_.empty()) {
    // The first step's model is theta's start; with the allreduce, the mean
    // over the ranks, so that theta is the same on every rank.
    if (options_.outer == DilocoOuter::kAllreduce && comm_.worldSize() > 1)
      comm_.allreduce(params, ReduceOp::kAverage);
    theta_.assign(params.begin(), params.end());
    anchor_ = theta_;
    momentum_.assign(numParams_, 0.0f);
    lastRoundStep_ = steps_;
    return;
  }
  const bool last = totalSteps_ > 0 && steps_ == totalSteps_;
  if (last || steps_ - lastRoundStep_ >= static_cast<std::uint64_t>(options_.innerSteps))
    outerRound(params, last);
}

void Diloco::flush(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  if (inFlight_) finish(params, false);
}

void Diloco::outerRound(std::span<float> params, bool last) {
  lastRoundStep_ = steps_;
  if (inFlight_) finish(params, false);  // overlap: the previous round, one round late
  InFlight& f = *flight_;
  f.delta.resize(numParams_);
  view(f.delta.data(), numParams_) = view(anchor_.data(), numParams_) - view(params.data(), numParams_);
  std::copy(params.begin(), params.end(), anchor_.begin());
  start(f.delta);
  if (options_.overlap && !last) return;
  finish(params, true);
}

// Starts the exchange of this rank's pseudo-gradient `delta` (and, gossip, theta).
void Diloco::start(std::span<const float> delta) {
  InFlight& f = *flight_;
  const std::uint64_t round = started_++;
  inFlight_ = true;
  if (options_.outer == DilocoOuter::kAllreduce) {
    f.send.assign(delta.begin(), delta.end());
    if (comm_.worldSize() == 1) return;
    if (!options_.overlap) {
      comm_.allreduce(std::span<float>(f.send), ReduceOp::kAverage);
      return;
    }
    f.error = nullptr;
    f.worker = startTask([&f, this] {
      try {
        comm_.allreduce(std::span<float>(f.send), ReduceOp::kAverage);
      } catch (...) {
        f.error = std::current_exception();
      }
    });
    return;
  }
  const int rank = comm_.rank();
  f.partner =
      topologies::randomPairing(comm_.worldSize(), options_.seed, round)[static_cast<std::size_t>(rank)];
  lastPartner_ = f.partner;
  if (f.partner == rank) return;
  f.send.resize(2 * numParams_);
  f.recv.resize(2 * numParams_);
  std::copy(theta_.begin(), theta_.end(), f.send.begin());
  std::copy(delta.begin(), delta.end(), f.send.begin() + static_cast<std::ptrdiff_t>(numParams_));
  Transport& t = comm_.transport();
  const Tag tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, 0);
  f.recvReq = t.irecvOf<float>(f.partner, tag, std::span<float>(f.recv));
  f.sendReq = t.isendOf<float>(f.partner, tag, std::span<const float>(f.send));
}

// Completes the exchange in flight and takes the outer step. resetToTheta:
// the local copy restarts from theta (the synchronous round); otherwise
// (overlap) it moves with theta and drops this rank's own part of the round.
void Diloco::finish(std::span<float> params, bool resetToTheta) {
  InFlight& f = *flight_;
  inFlight_ = false;
  const std::size_t p = numParams_;
  const float* thetaBar = theta_.data();
  const float* deltaBar = f.delta.data();
  if (options_.outer == DilocoOuter::kAllreduce) {
    if (f.worker.joinable()) {
      f.worker.join();
      if (f.error) std::rethrow_exception(std::exchange(f.error, nullptr));
    }
    deltaBar = f.send.data();
  } else if (f.partner != comm_.rank()) {
    f.recvReq.wait(options_.timeoutSeconds);
    f.sendReq.wait(options_.timeoutSeconds);
    if (f.recvReq.bytes() != 2 * p * sizeof(float))
      throw ProtocolError(f.partner, frame_offset::kPayloadBytes,
                          "diloco message of " + std::to_string(f.recvReq.bytes()) + " bytes, expected " +
                              std::to_string(2 * p * sizeof(float)));
    if (screen_.admit(f.partner, std::span<const float>(f.recv))) {
      // The pair's means, into the receive buffer: (own + partner's) / 2 in
      // the same order on both sides, so both get the same bits.
      auto mine = view(f.send.data(), 2 * p);
      auto both = view(f.recv.data(), 2 * p);
      both = (mine + both) * 0.5f;
      thetaBar = f.recv.data();
      deltaBar = f.recv.data() + p;
    }
  }
  const auto mu = static_cast<float>(options_.outerMomentum),
             lr = static_cast<float>(options_.outerLearningRate);
  auto theta = view(theta_.data(), p), m = view(momentum_.data(), p);
  const auto d = view(deltaBar, p);
  Eigen::VectorXf next;
  if (options_.outer == DilocoOuter::kNoloco) {
    const auto gamma = static_cast<float>(options_.nolocoGamma);
    m = mu * m + lr * d + gamma * (theta - view(thetaBar, p));
    next = theta - m;
  } else {
    m = mu * m + d;
    next = view(thetaBar, p) - lr * (d + mu * m);
  }
  auto x = view(params.data(), p), a = view(anchor_.data(), p);
  if (resetToTheta) {
    theta = next;
    x = theta;
    a = theta;
  } else {
    // theta_new computed as in the synchronous round (the same bits on every
    // rank of the allreduce), then the local copy moves by theta_new -
    // theta_old + this rank's own Delta of the round, now part of theta.
    const Eigen::VectorXf shift = next - theta + view(f.delta.data(), p);
    theta = next;
    x += shift;
    a += shift;
  }
  ++applied_;
}

void Diloco::saveState(Checkpoint& out, const std::string& prefix) const {
  GOSSAMER_ENFORCE(!inFlight_, "diloco: flush() before saving (an outer round is in flight)");
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putValue<std::uint64_t>(prefix + "rounds_started", started_);
  out.putValue<std::uint64_t>(prefix + "rounds_applied", applied_);
  out.putValue<std::uint64_t>(prefix + "last_round_step", lastRoundStep_);
  out.putArray<float>(prefix + "theta", theta_);
  out.putArray<float>(prefix + "outer_momentum", momentum_);
  out.putArray<float>(prefix + "anchor", anchor_);
  sgd_.saveState(out, prefix);
}

void Diloco::loadState(const Checkpoint& in, const std::string& prefix) {
  auto theta = in.getArray<float>(prefix + "theta");
  auto momentum = in.getArray<float>(prefix + "outer_momentum");
  auto anchor = in.getArray<float>(prefix + "anchor");
  // Saved before the first step: all three are empty.
  GOSSAMER_ENFORCE((theta.empty() || theta.size() == numParams_) && momentum.size() == theta.size() &&
                       anchor.size() == theta.size(),
                   "checkpoint outer state of " << theta.size() << ", " << momentum.size() << " and "
                                                << anchor.size() << " elements, the model has "
                                                << numParams_);
  GOSSAMER_ENFORCE(!inFlight_, "diloco: cannot load with an outer round in flight");
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
  started_ = in.getValue<std::uint64_t>(prefix + "rounds_started");
  applied_ = in.getValue<std::uint64_t>(prefix + "rounds_applied");
  lastRoundStep_ = in.getValue<std::uint64_t>(prefix + "last_round_step");
  theta_ = std::move(theta);
  momentum_ = std::move(momentum);
  anchor_ = std::move(anchor);
  sgd_.loadState(in, prefix);
}

}  // namespace gossamer::optimizers
