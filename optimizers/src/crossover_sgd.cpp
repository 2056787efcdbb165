// Crossover-SGD: segment-wise gossip over the fair roulette topology.
// Yeo et al., "Crossover-SGD: A gossip-based communication in distributed deep
// learning for alleviating large mini-batch problem and enhancing scalability",
// Algorithm 1 (segments, all sends and receives in flight at once, then
// averaging) and Algorithm 2 (topology); the overlap of communication with the
// next computation is the paper's future work (Sec. 3.1), done here with a
// snapshot correction.
//
// Per exchange each rank sends every segment once (4P bytes in all) and
// receives one message per segment per in-neighbour. Receives are posted for
// all segments before any send.
//
// Modes:
//  sync     x_s <- selfWeight x_s + sum_k w_k recv_k, within the step.
//  overlap  round k starts after step k's local update from a snapshot s of x;
//           at step k+1 (after the next gradient was computed) it finishes
//           with x_s <- x_s + (selfWeight - 1) s_s + sum_k w_k recv_k: the
//           averaged snapshot plus the local progress made since. With a
//           doubly stochastic topology the mean over ranks is still kept.
//  async    no waiting for a given peer, push-sum per segment (as SGP, Assran et al. 2019,
//           Alg. 1, for each segment): segment s carries a weight w_s
//           (initially 1); a send keeps the share 1/(k+1) of w_s and pushes
//           the same share with the de-biased segment z_s to each of its k
//           destinations ([w share: float64][z_s: float32], 8 + 4 |s| bytes);
//           whatever has arrived from anyone is folded in as
//           z_s <- (w_s z_s + sum w_j z_j) / (w_s + sum w_j), w_s += sum w_j.
//           The weighted sum over ranks is kept exactly (the average of the
//           models is not lost, whatever the timing). As in async SGP, the
//           SGD step is taken on each segment's numerator (z_s <- z_s -
//           lr u_s / w_s), and a segment is pushed only when its weight is
//           at least max(1/2, options.weightFloor); while one is not, the
//           rank first waits up to options.asyncWaitSeconds for pushes from
//           anyone, and a segment still below keeps its mass that step. So
//           at most 4N messages of a segment are in flight however slow the
//           transport, no weight underflows, and a rank that outpaces the
//           transport still mixes (sgp.cpp has the reasons). flush() ends the async phase
//           (push_sum_agreement.hpp): the pushes in flight are taken in and
//           every rank gets each segment's push-sum average.
//
// 16-bit wire (setExchangeType, compression.kind bf16 / fp16; sync and
// overlap modes): each segment goes out rounded to nearest even, Q(x_s),
// 2|s| bytes instead of 4|s|, and is mixed in difference form,
//   x_s <- x_s + (selfWeight - 1) Q(s_s) + sum_k w_k recv_k,
// s the model when the round started (sync: x itself): the overlap formula
// with Q(s) for s. Each rank's own rounding cancels against what it sends
// (with a symmetric doubly stochastic topology, as the fair roulette's, the
// mean over ranks is kept exactly in exact arithmetic), and ranks that agree
// stop moving: the quantised consensus of Aysal, Coates and Rabbat,
// "Distributed average consensus with dithered quantization" (IEEE TSP
// 2008), Sec. II, without the dither.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/detail/collective_wait.hpp"
#include "gossamer/log.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "push_sum_agreement.hpp"
#include "wire16.hpp"

namespace gossamer::optimizers {

GossipMode parseGossipMode(const std::string& name) {
  if (name == "sync") return GossipMode::kSync;
  if (name == "overlap") return GossipMode::kOverlap;
  if (name == "async") return GossipMode::kAsync;
  throw InvalidArgument("unknown gossip mode '" + name + "' (sync, overlap, async)");
}

struct CrossoverSgd::Pending {
  std::vector<PeerSet> peerSets;
  std::vector<float> recvBuffer;
  std::vector<std::size_t> recvOffset;
  std::vector<Request> recvs, sends;
  std::vector<float> snapshot;                // overlap: the model at the start; 16-bit: Q(that model)
  std::vector<std::uint16_t> send16, recv16;  // 16-bit wire: Q(x), and the segments received
  std::vector<float> segment;                 // 16-bit wire: one received segment as float32
};

namespace {
// Async mode: a segment whose weight is below this does not push (as SGP).
constexpr double kAsyncPushWeight = 0.5;
std::size_t totalOf(const std::vector<std::size_t>& sizes) {
  std::size_t p = 0;
  for (auto t : sizes) p += t;
  return p;
}
Eigen::Map<Eigen::VectorXf> view(float* p, std::size_t n) { return {p, static_cast<Eigen::Index>(n)}; }
}  // namespace

CrossoverSgd::CrossoverSgd(Transport& transport, const Topology& topology,
                           const std::vector<std::size_t>& tensorSizes, const CrossoverOptions& o)
    : transport_(transport),
      topology_(topology),
      options_(o),
      sgd_(totalOf(tensorSizes), o.sgd),
      numParams_(totalOf(tensorSizes)),
      screen_(o.checkReceived, "crossover_sgd") {
  GOSSAMER_ENFORCE(o.segments >= 1 && o.segments <= static_cast<int>(Tag::kMaxSegment) + 1,
                   "segments " << o.segments);
  GOSSAMER_ENFORCE(o.interval >= 1, "interval " << o.interval);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.weightFloor > 0 && o.weightFloor < 1,
                   "weight floor " << o.weightFloor << " outside (0, 1)");
  GOSSAMER_ENFORCE(o.flushWaitSeconds >= 0, "flush wait " << o.flushWaitSeconds << " s");
  GOSSAMER_ENFORCE(
      o.asyncWaitSeconds >= 0 && (o.mode != GossipMode::kAsync || o.asyncWaitSeconds <= o.timeoutSeconds),
      "async wait " << o.asyncWaitSeconds << " s outside [0, timeout " << o.timeoutSeconds << " s]");
  GOSSAMER_ENFORCE(
      topology.worldSize() == transport.worldSize(),
      "topology world size " << topology.worldSize() << " != transport world size " << transport.worldSize());
  segments_ = topologies::segmentsAlongTensors(tensorSizes, o.segments);
  pending_ = std::make_unique<Pending>();  // reused by every exchange: no allocation per step
  // Plain averaging needs each rank's weights to sum to 1 (a row-stochastic
  // mixing matrix); push-sum weights (a directed graph whose ranks have
  // unequal in- and out-degrees) would leave the ranks apart, never at
  // consensus. Every rank checks every row (of the first segments' first
  // round), so all of them refuse alike. Async mode carries push-sum
  // weights of its own, whatever the topology's.
  if (o.mode != GossipMode::kAsync)
    for (int r = 0; r < topology.worldSize(); ++r)
      for (int s = 0; s < std::min(o.segments, 4); ++s) {
        const PeerSet p = topology.peers(r, 0, s);
        double row = p.selfWeight;
        for (double w : p.recvWeights) row += w;
        GOSSAMER_ENFORCE(std::abs(row - 1.0) <= 1e-9,
                         "crossover_sgd averages with weights that sum to 1 on every rank, but topology '"
                             << topology.name() << "' gives rank " << r << " weights summing to " << row
                             << " (push-sum weights: a directed graph whose ranks have unequal in- and "
                                "out-degrees); use algorithm sgp, or a graph where every rank has as many "
                                "in-edges as out-edges");
      }
}

// Receives still posted write into buffers this object owns: cancel them
// (after cancel() returns a buffer is never written).
CrossoverSgd::~CrossoverSgd() {
  for (auto& r : asyncRecv_) r.cancel();
  for (auto& r : pending_->recvs) r.cancel();
}

void CrossoverSgd::step(std::span<float> params, std::span<const float> grads) {
  if (options_.mode != GossipMode::kAsync || transport_.worldSize() == 1) {
    sgd_.apply(params, grads);
  } else {
    // On each segment's numerator x_s = w_s z_s (as SGP, Alg. 1): z_s <- z_s - lr u_s / w_s.
    GOSSAMER_ENFORCE(params.size() == numParams_,
                     "expected " << numParams_ << " parameters, got " << params.size());
    startAsync();
    stepStart_.assign(params.begin(), params.end());
    sgd_.apply(params, grads);
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      const auto [b, e] = segments_[s];
      auto z = view(params.data() + b, e - b);
      const Eigen::Map<const Eigen::VectorXf> z0(stepStart_.data() + b, static_cast<Eigen::Index>(e - b));
      z = z0 + static_cast<float>(1.0 / asyncWeight_[s]) * (z - z0);
    }
  }
  mixParameters(params);
}

void CrossoverSgd::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "expected " << numParams_ << " gradients, got " << grads.size());
}

void CrossoverSgd::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  ++steps_;
  if (options_.mode == GossipMode::kOverlap && inFlight_) {
    finish(params, *pending_, true);
    inFlight_ = false;
  }
  if (steps_ % static_cast<std::uint64_t>(options_.interval) != 0 || transport_.worldSize() == 1) return;
  switch (options_.mode) {
    case GossipMode::kSync:
      exchange(params, rounds_++);
      break;
    case GossipMode::kOverlap:
      start(params, rounds_++, *pending_);
      inFlight_ = true;
      break;
    case GossipMode::kAsync:
      asyncExchange(params, rounds_++);
      break;
  }
}

void CrossoverSgd::flush(std::span<float> params) {
  if (inFlight_) {
    finish(params, *pending_, true);
    inFlight_ = false;
  }
  if (options_.mode == GossipMode::kAsync && transport_.worldSize() > 1) {
    GOSSAMER_ENFORCE(params.size() == numParams_,
                     "expected " << numParams_ << " parameters, got " << params.size());
    startAsync();
    try {
      detail::agreePushSum(
          transport_, sentTo_,
          [&] {
            foldArrived(params);
            return received_;
          },
          [&](double seconds) { return detail::awaitArrival(asyncRecv_, seconds); }, params, segments_,
          asyncWeight_, options_.agreement, detail::agreementSequence(transport_, agreements_++),
          options_.timeoutSeconds, options_.flushWaitSeconds);
    } catch (const PeerFailure& e) {
      // A rank is gone and no view replaces it: only what arrived is taken in.
      GOSSAMER_LOG(kWarning,
                   "crossover_sgd: the ranks cannot agree (" << e.what() << "); folding in what arrived");
      const auto deadline = Clock::now() + clockDuration(std::chrono::milliseconds(50));
      while (Clock::now() < deadline) {
        foldArrived(params);
        sleepFor(1e-3);
      }
    }
  }
}

void CrossoverSgd::exchange(std::span<float> params, std::uint64_t round) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  if (transport_.worldSize() == 1) return;
  start(params, round, *pending_);
  finish(params, *pending_, false);
}

void CrossoverSgd::start(std::span<const float> params, std::uint64_t round, Pending& p) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  const int rank = transport_.rank();
  const std::size_t numSeg = segments_.size();
  p.recvs.clear();
  p.sends.clear();
  p.recvOffset.clear();
  p.peerSets.resize(numSeg);
  std::size_t need = 0;
  for (std::size_t s = 0; s < numSeg; ++s) {
    p.peerSets[s] = topology_.peers(rank, round, static_cast<int>(s));
    need += p.peerSets[s].recvFrom.size() * (segments_[s].second - segments_[s].first);
  }
  const bool half = detail::isWire16(wire_);
  if (half)
    p.recv16.resize(need);
  else
    p.recvBuffer.resize(need);
  std::size_t off = 0;
  for (std::size_t s = 0; s < numSeg; ++s) {
    const auto [b, e] = segments_[s];
    const auto tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, static_cast<std::uint32_t>(s));
    for (int src : p.peerSets[s].recvFrom) {
      p.recvs.push_back(
          half ? transport_.irecvOf<std::uint16_t>(src, tag,
                                                   std::span<std::uint16_t>(p.recv16.data() + off, e - b))
               : transport_.irecvOf<float>(src, tag, std::span<float>(p.recvBuffer.data() + off, e - b)));
      p.recvOffset.push_back(off);
      off += e - b;
    }
  }
  if (half) {  // Q(x) for the wire, and as float32 for the difference form
    p.send16.resize(numParams_);
    detail::encode16(wire_, params, p.send16.data());
    p.snapshot.resize(numParams_);
    detail::decode16(wire_, p.send16.data(), p.snapshot);
  }
  for (std::size_t s = 0; s < numSeg; ++s) {
    const auto [b, e] = segments_[s];
    const auto tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, static_cast<std::uint32_t>(s));
    for (int dst : p.peerSets[s].sendTo)
      p.sends.push_back(
          half ? detail::isend16(transport_, dst, tag, wire_, p.send16.data() + b, e - b)
               : transport_.isendOf<float>(dst, tag, std::span<const float>(params.data() + b, e - b)));
  }
  if (options_.mode == GossipMode::kOverlap && !half) p.snapshot.assign(params.begin(), params.end());
}

bool CrossoverSgd::setExchangeType(DType wire) {
  detail::checkExchangeType(wire);
  if (options_.mode == GossipMode::kAsync) return wire == DType::kFloat32;
  GOSSAMER_ENFORCE(steps_ == 0, "setExchangeType after the first step");
  wire_ = wire;
  return true;
}

void CrossoverSgd::finish(std::span<float> params, Pending& p, bool snapshotCorrection) {
  const bool half = detail::isWire16(wire_);
  snapshotCorrection = snapshotCorrection || half;  // the difference form, with Q(x) as the snapshot
  const std::size_t elementBytes = dtypeSize(wire_);
  std::size_t r = 0;
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    const auto [b, e] = segments_[s];
    const auto& ps = p.peerSets[s];
    auto x = view(params.data() + b, e - b);
    if (snapshotCorrection)
      x += static_cast<float>(ps.selfWeight - 1.0) * view(p.snapshot.data() + b, e - b);
    else
      x *= static_cast<float>(ps.selfWeight);
    double refused = 0;  // mixing weight of segments the screen refused
    for (std::size_t k = 0; k < ps.recvFrom.size(); ++k, ++r) {
      gossamer::detail::await(transport_, p.recvs[r], options_.timeoutSeconds, "Crossover-SGD gossip");
      if (p.recvs[r].bytes() != (e - b) * elementBytes)
        throw ProtocolError(ps.recvFrom[k], frame_offset::kPayloadBytes,
                            "gossip segment of " + std::to_string(p.recvs[r].bytes()) + " bytes, expected " +
                                std::to_string((e - b) * elementBytes));
      const float* got = nullptr;
      if (half) {
        p.segment.resize(e - b);
        detail::decode16(wire_, p.recv16.data() + p.recvOffset[r], p.segment);
        got = p.segment.data();
      } else {
        got = p.recvBuffer.data() + p.recvOffset[r];
      }
      if (!screen_.admit(ps.recvFrom[k], std::span<const float>(got, e - b))) {
        refused += ps.recvWeights[k];
        continue;
      }
      x += static_cast<float>(ps.recvWeights[k]) *
           Eigen::Map<const Eigen::VectorXf>(got, static_cast<Eigen::Index>(e - b));
    }
    // A refused segment's share goes to this rank's own: its snapshot, or
    // (the mix scaled in place) by renormalising what was kept.
    if (refused > 0 && snapshotCorrection)
      x += static_cast<float>(refused) * view(p.snapshot.data() + b, e - b);
    else if (refused > 0 && refused < 1)
      x *= static_cast<float>(1.0 / (1.0 - refused));
  }
  gossamer::detail::awaitAll(transport_, p.sends, options_.timeoutSeconds, "Crossover-SGD gossip");
}

void CrossoverSgd::asyncExchange(std::span<float> params, std::uint64_t round) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  const int rank = transport_.rank();
  const std::size_t numSeg = segments_.size();
  startAsync();
  foldArrived(params);
  const auto lacking = [&] {
    for (std::size_t s = 0; s < numSeg; ++s)
      if (!canPush(s)) return true;
    return false;
  };
  if (options_.asyncWaitSeconds > 0 && lacking()) {
    const auto deadline =
        Clock::now() + clockDuration(std::chrono::duration<double>(options_.asyncWaitSeconds));
    while (lacking()) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0 || !detail::awaitArrival(asyncRecv_, left)) break;  // (false: every other rank left)
      foldArrived(params);
    }
  }
  for (std::size_t s = 0; s < numSeg; ++s) {
    double& w = asyncWeight_[s];
    if (!canPush(s)) continue;  // keep the mass
    const auto [b, e] = segments_[s];
    const std::vector<int> dsts = topology_.peers(rank, round, static_cast<int>(s)).sendTo;
    const double share = 1.0 / static_cast<double>(dsts.size() + 1);
    const double wShare = w * share;
    asyncSend_.resize(sizeof(double) + (e - b) * sizeof(float));
    std::memcpy(asyncSend_.data(), &wShare, sizeof(double));
    std::memcpy(asyncSend_.data() + sizeof(double), params.data() + b, (e - b) * sizeof(float));
    double keep = share;
    for (int dst : dsts) {
      try {
        transport_.isend(dst, Tag::make(Op::kGossip, 0, static_cast<std::uint32_t>(s)), asyncSend_);
        ++sentTo_[static_cast<std::size_t>(dst)];
      } catch (const PeerFailure&) {
        keep += share;  // route around a peer that is gone: its share stays here
      }
    }
    w *= keep;
  }
  foldArrived(params);
}

bool CrossoverSgd::canPush(std::size_t segment) const {
  return asyncWeight_[segment] >= std::max(kAsyncPushWeight, options_.weightFloor);
}

// Standing receives from anyone, one per segment, and the segments' weights.
void CrossoverSgd::startAsync() {
  if (!asyncRecv_.empty()) return;
  const int rank = transport_.rank(), n = transport_.worldSize();
  for (int q = 0; q < n; ++q)
    if (q != rank) others_.push_back(q);
  sentTo_.assign(static_cast<std::size_t>(n), 0);
  asyncBuf_.resize(segments_.size());
  asyncWeight_.assign(segments_.size(), 1.0);
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    asyncBuf_[s].resize(sizeof(double) + (segments_[s].second - segments_[s].first) * sizeof(float));
    asyncRecv_.push_back(
        transport_.irecv(others_, Tag::make(Op::kGossip, 0, static_cast<std::uint32_t>(s)), asyncBuf_[s]));
  }
}

void CrossoverSgd::foldArrived(std::span<float> params) {
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    const auto [b, e] = segments_[s];
    const std::size_t len = e - b;
    for (;;) {
      try {
        if (!asyncRecv_[s].test()) break;
      } catch (const PeerFailure&) {
        break;  // every other rank has left: nothing more will arrive
      }
      const int from = asyncRecv_[s].peer();
      if (asyncRecv_[s].bytes() != asyncBuf_[s].size())
        throw ProtocolError(from, frame_offset::kPayloadBytes,
                            "async gossip segment of " + std::to_string(asyncRecv_[s].bytes()) +
                                " bytes, expected " + std::to_string(asyncBuf_[s].size()));
      double wj;
      std::memcpy(&wj, asyncBuf_[s].data(), sizeof(double));
      const auto* zj = reinterpret_cast<const float*>(asyncBuf_[s].data() + sizeof(double));
      if (screen_.admit(from, wj, std::span<const float>(zj, len), transport_.worldSize()) && wj > 0) {
        // Running weighted average, so that z never underflows even when w is tiny.
        const double total = asyncWeight_[s] + wj;
        const auto c = static_cast<float>(wj / total);
        auto x = view(params.data() + b, len);
        x += c * (Eigen::Map<const Eigen::VectorXf>(zj, static_cast<Eigen::Index>(len)) - x);
        asyncWeight_[s] = total;
      }
      ++received_;
      asyncRecv_[s] =
          transport_.irecv(others_, Tag::make(Op::kGossip, 0, static_cast<std::uint32_t>(s)), asyncBuf_[s]);
    }
  }
}

void CrossoverSgd::saveState(Checkpoint& out, const std::string& prefix) const {
  GOSSAMER_ENFORCE(options_.mode != GossipMode::kAsync, "crossover_sgd in async mode cannot be checkpointed");
  GOSSAMER_ENFORCE(!inFlight_, "crossover_sgd: flush() before saving (an exchange is in flight)");
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putValue<std::uint64_t>(prefix + "rounds", rounds_);
  sgd_.saveState(out, prefix);
}

void CrossoverSgd::loadState(const Checkpoint& in, const std::string& prefix) {
  GOSSAMER_ENFORCE(options_.mode != GossipMode::kAsync, "crossover_sgd in async mode cannot be checkpointed");
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
  rounds_ = in.getValue<std::uint64_t>(prefix + "rounds");
  sgd_.loadState(in, prefix);
}

}  // namespace gossamer::optimizers
