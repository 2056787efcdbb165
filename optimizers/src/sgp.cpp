// Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019, Alg. 1):
// push-sum gossip with a push-sum weight per rank. See optimizers.hpp.
//
// Wire: one message per out-peer per push, dtype bytes, layout
// [w share: float64][de-biased model z: P float32] (8 + 4P bytes). Sending z
// rather than the numerator x = w z keeps float32 from underflowing when a
// weight gets small (async mode); the receiver forms x = sum w_j z_j, w =
// sum w_j and z = x / w as a running weighted average. Tag (kGossip, round,
// segment 0); in async mode the round in the tag is 0 and receives take
// messages from anyone, in arrival order.
//
// 16-bit wire (setExchangeType, compression.kind bf16 / fp16):
// [w share: float64][Q(z): P bfloat16 or binary16] (8 + 2P bytes), Q rounding
// to nearest even; the weight stays exact. A sender that pushed Q(z) to m
// peers with the share s of its mass, keeping the share k, keeps
//   z <- z + (m s / k) (z - Q(z)),
// the mass it did not push (w z - m s w Q(z) = k w z_kept), so that the sum
// of w z over ranks and messages in flight is kept as with float32 (up to
// float32 arithmetic), the rounding error staying with its owner rather
// than being lost: the error feedback of Stich et al., "Sparsified SGD with
// memory" (NeurIPS 2018), applied to the push-sum mass.
//
// The SGD step is on the numerator in sync and async modes (Alg. 1: x <- x -
// lr u, so z <- z - lr u / w; while w is 1, as on a regular graph in sync
// mode, that is z's own step). Overlap mode, and the loss-tolerant variant
// (whose weights may get small: 1/w would blow the step up), step z.
//
// Async mode (waits for no peer in particular). Each step:
//   1. the SGD step on the numerator, as in Alg. 1 (x <- x - lr u, so
//      z <- z - lr u / w): every gradient moves the push-sum average
//      sum_i x_i / N by the same amount, whatever the rank's weight;
//   2. every message that has arrived is folded in; a rank whose weight is
//      below kAsyncPushWeight (or the weight floor, if higher) waits up to
//      options.asyncWaitSeconds for messages from anyone to raise it;
//   3. a push (as in sync mode, to the current round's out-peers) if the
//      weight is at least kAsyncPushWeight; otherwise the rank keeps all of
//      its mass this step;
//   4. every message that has arrived is folded in.
// The weight rule bounds the staleness: a push carries at least 1/4 of a
// unit of mass and the N units are conserved, so at most 4N messages are in
// flight however slow the transport. Without it, when the transport is
// slower than the steps (8 ranks on 2 cores, 400 KB a message), the pushes
// queue up, most of the mass is in flight (dozens of steps stale) and the
// ranks step with weights near 0. The bounded wait of step 2 is the bounded
// staleness of SGP's overlap variant (Assran et al., Sec. 3) with any
// sender: without it a rank that out-steps the transport pushes a few times
// an epoch and the models drift apart as in local SGD (on the main job, 8
// ranks, 20 epochs: 1 push in 20 steps and 1 point of accuracy lost); with
// it the ranks push in about half of their steps. It cannot deadlock: when
// no message is in flight the N units are all held by ranks, so one of them
// holds at least 1 and pushes. Nor does it wait for a straggler: any
// sender's mass ends the wait.
// flush() ends the async phase (push_sum_agreement.hpp): the pushes in
// flight are taken in and every rank gets the push-sum average.
#include <Eigen/Core>
#include <chrono>
#include <cstring>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/detail/collective_wait.hpp"
#include "gossamer/log.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "push_sum_agreement.hpp"
#include "wire16.hpp"

namespace gossamer::optimizers {

namespace {
Eigen::Map<Eigen::VectorXf> view(float* p, std::size_t n) { return {p, static_cast<Eigen::Index>(n)}; }
// Async mode: a rank whose weight is below this does not push (see above).
constexpr double kAsyncPushWeight = 0.5;
}  // namespace

Sgp::Sgp(Transport& transport, const Topology& topology, std::size_t numParams, const SgpOptions& o)
    : transport_(transport),
      topology_(topology),
      options_(o),
      sgd_(numParams, o.sgd),
      numParams_(numParams),
      sendBuf_(sizeof(double) + numParams * sizeof(float)),
      sentTo_(static_cast<std::size_t>(transport.worldSize()), 0),
      screen_(o.checkReceived, "sgp") {
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(
      o.asyncWaitSeconds >= 0 && (o.mode != GossipMode::kAsync || o.asyncWaitSeconds <= o.timeoutSeconds),
      "async wait " << o.asyncWaitSeconds << " s outside [0, timeout " << o.timeoutSeconds << " s]");
  GOSSAMER_ENFORCE(o.weightFloor > 0 && o.weightFloor < 1,
                   "weight floor " << o.weightFloor << " outside (0, 1)");
  GOSSAMER_ENFORCE(o.flushWaitSeconds >= 0, "flush wait " << o.flushWaitSeconds << " s");
  GOSSAMER_ENFORCE(
      topology.worldSize() == transport.worldSize(),
      "topology world size " << topology.worldSize() << " != transport world size " << transport.worldSize());
}

Sgp::~Sgp() {
  for (auto& r : asyncRecv_) r.cancel();  // they write into recvBufs_
}

void Sgp::step(std::span<float> params, std::span<const float> grads) {
  if (options_.mode == GossipMode::kOverlap || (options_.mode == GossipMode::kSync && weight_ == 1.0)) {
    // Sync: z = x while the weight is 1 (every rank's, on a regular graph).
    // Overlap steps z: its weight is the share of its mass not in flight,
    // and a 1/w scaling would follow that share rather than the graph.
    sgd_.apply(params, grads);
  } else {
    // On the numerator x = w z (Alg. 1): z <- z - lr u / w. A step on z
    // itself would move x by w lr u, weighting each rank's gradient by its
    // push-sum weight: on a graph whose weights drift from 1 the ranks
    // would settle at a weighted optimum, not the average's.
    GOSSAMER_ENFORCE(params.size() == numParams_,
                     "expected " << numParams_ << " parameters, got " << params.size());
    stepStart_.assign(params.begin(), params.end());
    sgd_.apply(params, grads);
    auto z = view(params.data(), numParams_);
    const Eigen::Map<const Eigen::VectorXf> z0(stepStart_.data(), static_cast<Eigen::Index>(numParams_));
    z = z0 + static_cast<float>(1.0 / weight_) * (z - z0);
  }
  mixParameters(params);
}

void Sgp::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "expected " << numParams_ << " gradients, got " << grads.size());
}

void Sgp::mixParameters(std::span<float> params) {
  gossip(params, steps_);
  ++steps_;
}

// Keeps the self share of w and pushes the other shares with the de-biased
// model z. In async mode a send to a peer known to be gone keeps its share,
// and a rank with too little weight keeps its mass.
void Sgp::send(std::span<float> z, const PeerSet& p, Tag tag) {
  if (options_.mode == GossipMode::kAsync && !canPush()) return;  // keep the mass
  const double share = 1.0 / static_cast<double>(p.sendTo.size() + 1);
  const double wShare = weight_ * share;
  const bool half = detail::isWire16(wire_);
  auto* values = sendBuf_.data() + sizeof(double);
  std::memcpy(sendBuf_.data(), &wShare, sizeof(double));
  if (half)
    detail::encode16(wire_, z, reinterpret_cast<std::uint16_t*>(values));
  else
    std::memcpy(values, z.data(), numParams_ * sizeof(float));
  double keep = share;
  std::size_t pushed = 0;
  for (int dst : p.sendTo) {
    try {
      transport_.isend(dst, tag, sendBuf_);
      ++sentTo_[static_cast<std::size_t>(dst)];
      ++pushed;
    } catch (const PeerFailure&) {
      if (options_.mode != GossipMode::kAsync) throw;
      keep += share;  // route around: the share stays here
    }
  }
  weight_ *= keep;
  if (half && pushed > 0) {
    // Keeps the mass not pushed: z <- z + (m s / k) (z - Q(z)) (see the top).
    decoded_.resize(numParams_);
    detail::decode16(wire_, reinterpret_cast<const std::uint16_t*>(values), decoded_);
    const auto c = static_cast<float>(static_cast<double>(pushed) * share / keep);
    auto zv = view(z.data(), numParams_);
    zv +=
        c * (zv - Eigen::Map<const Eigen::VectorXf>(decoded_.data(), static_cast<Eigen::Index>(numParams_)));
  }
}

bool Sgp::setExchangeType(DType wire) {
  detail::checkExchangeType(wire);
  GOSSAMER_ENFORCE(steps_ == 0 && asyncRecv_.empty(), "setExchangeType after the first step");
  wire_ = wire;
  sendBuf_.assign(sizeof(double) + numParams_ * dtypeSize(wire), std::byte{0});
  return true;
}

// Folds one received (w_j, z_j) into (w, z): x = w z + w_j z_j, w += w_j, as
// a running weighted average so that z never underflows even when w is tiny.
// A message the screen refuses (NaN, Inf, an impossible weight) is left out.
void Sgp::addMessage(std::span<float> z, std::span<const std::byte> msg, int from) {
  double wj;
  std::memcpy(&wj, msg.data(), sizeof(double));
  const float* zj = reinterpret_cast<const float*>(msg.data() + sizeof(double));
  if (detail::isWire16(wire_)) {
    decoded_.resize(numParams_);
    detail::decode16(wire_, reinterpret_cast<const std::uint16_t*>(msg.data() + sizeof(double)), decoded_);
    zj = decoded_.data();
  }
  if (!screen_.admit(from, wj, std::span<const float>(zj, numParams_), transport_.worldSize())) return;
  if (!(wj > 0)) return;  // nothing to fold in (a peer with no mass left)
  const double total = weight_ + wj;
  const auto c = static_cast<float>(wj / total);
  auto zv = view(z.data(), numParams_);
  zv += c * (Eigen::Map<const Eigen::VectorXf>(zj, static_cast<Eigen::Index>(numParams_)) - zv);
  weight_ = total;
}

// Sync and overlap modes: takes in round `round`'s message from each in-peer.
// The waits are a collective's (kit/detail/collective_wait.hpp): an in-peer
// held up by a failed rank (one of the job's, under a FailureScope, as
// Hierarchical sets) ends them with PeerFailure within 50 ms, not at the
// timeout.
void Sgp::receiveRound(std::span<float> z, std::uint64_t round) {
  const PeerSet p = topology_.peers(transport_.rank(), round);
  recvBufs_.resize(std::max(recvBufs_.size(), p.recvFrom.size()));
  std::vector<Request> recvs;
  const auto tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, 0);
  for (std::size_t k = 0; k < p.recvFrom.size(); ++k) {
    recvBufs_[k].resize(sendBuf_.size());
    recvs.push_back(transport_.irecv(p.recvFrom[k], tag, recvBufs_[k]));
  }
  for (std::size_t k = 0; k < recvs.size(); ++k) {
    gossamer::detail::await(transport_, recvs[k], options_.timeoutSeconds, "SGP gossip");
    if (recvs[k].bytes() != sendBuf_.size())
      throw ProtocolError(p.recvFrom[k], frame_offset::kPayloadBytes,
                          "push-sum message of " + std::to_string(recvs[k].bytes()) + " bytes, expected " +
                              std::to_string(sendBuf_.size()));
    addMessage(z, recvBufs_[k], p.recvFrom[k]);
  }
}

bool Sgp::canPush() const { return weight_ >= std::max(kAsyncPushWeight, options_.weightFloor); }

void Sgp::drainAsync(std::span<float> z, double waitSeconds, bool untilPushable) {
  const int rank = transport_.rank(), n = transport_.worldSize();
  std::vector<int> others;
  for (int q = 0; q < n; ++q)
    if (q != rank) others.push_back(q);
  const auto tag = Tag::make(Op::kGossip, 0, 0);
  if (asyncRecv_.empty()) {
    recvBufs_.assign(1, std::vector<std::byte>(sendBuf_.size()));
    asyncRecv_.push_back(transport_.irecv(others, tag, recvBufs_[0]));
  }
  const auto deadline = Clock::now() + clockDuration(std::chrono::duration<double>(waitSeconds));
  for (;;) {
    for (;;) {
      try {
        if (!asyncRecv_[0].test()) break;
      } catch (const PeerFailure&) {
        return;  // every other rank has left: nothing more will arrive
      }
      const int from = asyncRecv_[0].peer();
      if (const std::size_t got = asyncRecv_[0].bytes(); got != sendBuf_.size()) {
        // Not folded in (the buffer's tail is the last message's); the
        // receive is posted again first, so the next call goes on.
        asyncRecv_[0] = transport_.irecv(others, tag, recvBufs_[0]);
        throw ProtocolError(from, frame_offset::kPayloadBytes,
                            "push-sum message of " + std::to_string(got) + " bytes, expected " +
                                std::to_string(sendBuf_.size()));
      }
      addMessage(z, recvBufs_[0], from);
      ++asyncReceived_;
      asyncRecv_[0] = transport_.irecv(others, tag, recvBufs_[0]);
    }
    if (untilPushable && canPush()) break;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) break;
    Request::waitAny(asyncRecv_, left);  // an arrival, a failure (the loop above returns) or the deadline
  }
}

void Sgp::gossip(std::span<float> params, std::uint64_t round) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  if (transport_.worldSize() == 1) return;
  const PeerSet p = topology_.peers(transport_.rank(), round);
  switch (options_.mode) {
    case GossipMode::kSync:
      send(params, p, Tag::make(Op::kGossip, round & Tag::kMaxStep, 0));
      receiveRound(params, round);
      break;
    case GossipMode::kOverlap:
      send(params, p, Tag::make(Op::kGossip, round & Tag::kMaxStep, 0));
      if (roundPending_) receiveRound(params, pendingRound_);
      roundPending_ = true;
      pendingRound_ = round;
      break;
    case GossipMode::kAsync:
      drainAsync(params, canPush() ? 0.0 : options_.asyncWaitSeconds, true);
      send(params, p, Tag::make(Op::kGossip, 0, 0));
      drainAsync(params, 0.0);
      break;
  }
}

void Sgp::flush(std::span<float> params) {
  if (options_.mode == GossipMode::kOverlap && roundPending_) {
    receiveRound(params, pendingRound_);
    roundPending_ = false;
  } else if (options_.mode == GossipMode::kAsync && transport_.worldSize() > 1) {
    const std::pair<std::size_t, std::size_t> all{0, numParams_};
    try {
      detail::agreePushSum(
          transport_, sentTo_,
          [&] {
            drainAsync(params, 0.0);
            return asyncReceived_;
          },
          [&](double seconds) { return detail::awaitArrival(asyncRecv_, seconds); }, params,
          std::span(&all, 1), std::span(&weight_, 1), options_.agreement,
          detail::agreementSequence(transport_, agreements_++), options_.timeoutSeconds,
          options_.flushWaitSeconds);
    } catch (const PeerFailure& e) {
      // A rank is gone and no view replaces it: only what arrived is taken in.
      GOSSAMER_LOG(kWarning, "sgp: the ranks cannot agree (" << e.what() << "); folding in what arrived");
      drainAsync(params, 0.05);
    }
  }
}

void Sgp::saveState(Checkpoint& out, const std::string& prefix) const {
  GOSSAMER_ENFORCE(options_.mode != GossipMode::kAsync, "sgp in async mode cannot be checkpointed");
  GOSSAMER_ENFORCE(!roundPending_, "sgp: flush() before saving (a round is in flight)");
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putValue<double>(prefix + "weight", weight_);
  sgd_.saveState(out, prefix);
}

void Sgp::loadState(const Checkpoint& in, const std::string& prefix) {
  GOSSAMER_ENFORCE(options_.mode != GossipMode::kAsync, "sgp in async mode cannot be checkpointed");
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
  const double weight = in.getValue<double>(prefix + "weight");
  if (!(weight > 0))
    throw InvalidArgument("checkpoint push-sum weight " + std::to_string(weight) + " is not positive");
  weight_ = weight;
  sgd_.loadState(in, prefix);
}

}  // namespace gossamer::optimizers
