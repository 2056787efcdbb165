// Loss-tolerant SGP: push-sum with running sums per edge (Hadjicostis,
// Dominguez-Garcia and Vaidya, "Robust distributed average consensus via
// exchange of running sums", IEEE TAC 61(6), 2016, Sec. III; the push-sum
// optimizer of Assran et al., ICML 2019, Alg. 1, on top).
//
// Each rank keeps its numerator x (P doubles) and weight w. A step:
//   1. local SGD (momentum) on the de-biased model z = x / w (`params`);
//   2. x = w z; for each of the d out-peers j of the topology's round, the
//      running sums of what was ever pushed along the edge grow by the share,
//      sigma_ij += (x, w) / (d+1), and the rank keeps (x, w) / (d+1) (plus the
//      share of each out-peer already known to be gone, whose edge is left);
//   3. to each out-peer one message [seq_ij: u64][sigma_ij w: f64][sigma_ij x: P f64]
//      (16 + 8P bytes), never waited for;
//   4. every message that has arrived with a sequence number above the last
//      one taken from that peer adds sigma - rho to (x, w), where rho is the
//      last sum taken (older or repeated messages add nothing), then z = x / w.
// A lost message loses nothing: the next one on the same edge carries the
// total. Duplicates and reordering add nothing twice. flush() re-sends every
// edge's latest sums a few times and takes in what arrives, so that at the end
// sum_i w_i = N and sum_i x_i = the sum of the initial models (without local
// steps), even with messages lost. A rank whose weight fell below
// options.weightFloor (one that has received nothing for a while: its weight
// halves, or worse, at every push) skips step 2 and keeps its mass until
// arrivals raise it, so w never underflows to 0 and z = x / w stays finite;
// skipping a push moves no mass, so the sums stay exact.
#include <Eigen/Core>
#include <chrono>
#include <cstring>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/optimizers/optimizers.hpp"

namespace gossamer::optimizers {

namespace {
constexpr std::size_t kHeader = sizeof(std::uint64_t) + sizeof(double);
}

struct LossTolerantSgp::Edge {
  std::uint64_t seq = 0;
  double sigmaW = 0;
  std::vector<double> sigmaX;
};

struct LossTolerantSgp::Inbound {
  std::uint64_t seq = 0;
  double rhoW = 0;
  std::vector<double> rhoX;
};

LossTolerantSgp::LossTolerantSgp(Transport& transport, const Topology& topology, std::size_t numParams,
                                 const SgpOptions& o)
    : transport_(transport),
      topology_(topology),
      options_(o),
      sgd_(numParams, o.sgd),
      numParams_(numParams),
      x_(numParams, 0.0),
      out_(static_cast<std::size_t>(transport.worldSize())),
      in_(static_cast<std::size_t>(transport.worldSize())),
      message_(kHeader + numParams * sizeof(double)),
      recvBuf_(kHeader + numParams * sizeof(double)),
      screen_(o.checkReceived, "sgp/loss_tolerant") {
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.weightFloor > 0 && o.weightFloor < 1,
                   "weight floor " << o.weightFloor << " outside (0, 1)");
  GOSSAMER_ENFORCE(
      topology.worldSize() == transport.worldSize(),
      "topology world size " << topology.worldSize() << " != transport world size " << transport.worldSize());
  for (int q = 0; q < transport.worldSize(); ++q)
    if (q != transport.rank()) others_.push_back(q);
}

LossTolerantSgp::~LossTolerantSgp() { recv_.cancel(); }

void LossTolerantSgp::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "expected " << numParams_ << " gradients, got " << grads.size());
}

void LossTolerantSgp::step(std::span<float> params, std::span<const float> grads) {
  sgd_.apply(params, grads);
  mixParameters(params);
}

void LossTolerantSgp::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  ++steps_;
  if (transport_.worldSize() == 1) return;
  // x follows the local step by its change only (x += w dz), so that with no
  // local change the numerators keep their exact sum.
  if (lastZ_.empty()) {
    lastZ_.assign(params.begin(), params.end());
    for (std::size_t i = 0; i < numParams_; ++i) x_[i] = weight_ * static_cast<double>(params[i]);
  } else {
    for (std::size_t i = 0; i < numParams_; ++i)
      x_[i] += weight_ * (static_cast<double>(params[i]) - static_cast<double>(lastZ_[i]));
  }
  const PeerSet p = topology_.peers(transport_.rank(), rounds_++);
  if (weight_ < options_.weightFloor) {  // starved: keep the mass, take in what came
    takeArrived();
    writeModel(params);
    return;
  }
  // An out-peer known to be gone gets no share: the rank keeps it, as
  // async SGP does (its edge's sums would only carry mass away for good).
  const double share = 1.0 / static_cast<double>(p.sendTo.size() + 1);
  double kept = share;
  for (int dst : p.sendTo) {
    if (transport_.peerFailure(dst)) {
      kept += share;
      continue;
    }
    Edge& e = out_[static_cast<std::size_t>(dst)];
    if (e.sigmaX.empty()) e.sigmaX.assign(numParams_, 0.0);
    ++e.seq;
    e.sigmaW += share * weight_;
    for (std::size_t i = 0; i < numParams_; ++i) e.sigmaX[i] += share * x_[i];
    if (!sendEdge(dst)) {  // it failed meanwhile: its share comes back
      e.sigmaW -= share * weight_;
      for (std::size_t i = 0; i < numParams_; ++i) e.sigmaX[i] -= share * x_[i];
      kept += share;
    }
  }
  weight_ *= kept;
  for (auto& v : x_) v *= kept;
  takeArrived();
  writeModel(params);
}

void LossTolerantSgp::writeModel(std::span<float> params) {
  for (std::size_t i = 0; i < numParams_; ++i) params[i] = lastZ_[i] = static_cast<float>(x_[i] / weight_);
}

bool LossTolerantSgp::sendEdge(int dst) {
  const Edge& e = out_[static_cast<std::size_t>(dst)];
  std::memcpy(message_.data(), &e.seq, sizeof e.seq);
  std::memcpy(message_.data() + sizeof e.seq, &e.sigmaW, sizeof(double));
  std::memcpy(message_.data() + kHeader, e.sigmaX.data(), numParams_ * sizeof(double));
  try {
    transport_.isend(dst, Tag::make(Op::kGossip, 0, 0), message_);
    return true;
  } catch (const PeerFailure&) {
    // A peer that is gone gets nothing more. What it was sent before stays
    // counted in its sums (lost with it: what it had not passed on).
    return false;
  }
}

void LossTolerantSgp::takeArrived() {
  if (!recv_.valid()) recv_ = transport_.irecv(others_, Tag::make(Op::kGossip, 0, 0), recvBuf_);
  for (;;) {
    try {
      if (!recv_.test()) return;
    } catch (const PeerFailure&) {
      return;  // every other rank has left: nothing more will arrive
    }
    const int from = recv_.peer();
    if (recv_.bytes() != recvBuf_.size())
      throw ProtocolError(from, frame_offset::kPayloadBytes,
                          "running-sum push-sum message of " + std::to_string(recv_.bytes()) +
                              " bytes, expected " + std::to_string(recvBuf_.size()));
    std::uint64_t seq;
    double sigmaW;
    std::memcpy(&seq, recvBuf_.data(), sizeof seq);
    std::memcpy(&sigmaW, recvBuf_.data() + sizeof seq, sizeof sigmaW);
    Inbound& in = in_[static_cast<std::size_t>(from)];
    // Refused sums are skipped: the next admitted ones from that peer carry
    // their mass (they are running sums).
    const std::span<const double> sums(reinterpret_cast<const double*>(recvBuf_.data() + sizeof seq),
                                       1 + numParams_);
    if (seq > in.seq && screen_.admit(from, sums)) {  // older, repeated or duplicated sums add nothing
      if (in.rhoX.empty()) in.rhoX.assign(numParams_, 0.0);
      const auto* sigmaX = reinterpret_cast<const double*>(recvBuf_.data() + kHeader);
      weight_ += sigmaW - in.rhoW;
      for (std::size_t i = 0; i < numParams_; ++i) {
        double s;
        std::memcpy(&s, sigmaX + i, sizeof s);
        x_[i] += s - in.rhoX[i];
        in.rhoX[i] = s;
      }
      in.rhoW = sigmaW;
      in.seq = seq;
    }
    recv_ = transport_.irecv(others_, Tag::make(Op::kGossip, 0, 0), recvBuf_);
  }
}

void LossTolerantSgp::flush(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  if (transport_.worldSize() == 1 || lastZ_.empty()) return;
  for (std::size_t i = 0; i < numParams_; ++i)  // a local change since the last step
    x_[i] += weight_ * (static_cast<double>(params[i]) - static_cast<double>(lastZ_[i]));
  // Every edge's latest sums, a few times over (a lost copy is made up by the
  // next), then whatever arrives within a short grace period.
  for (int k = 0; k < kFlushRepeats; ++k) {
    for (std::size_t q = 0; q < out_.size(); ++q)
      if (out_[q].seq > 0) sendEdge(static_cast<int>(q));
    takeArrived();
    sleepFor(2e-3);
  }
  // 200 ms: a peer's flush that started late on a loaded machine (its thread
  // not scheduled for tens of milliseconds) still lands within it.
  const auto deadline = Clock::now() + clockDuration(std::chrono::milliseconds(200));
  while (Clock::now() < deadline) {
    takeArrived();
    sleepFor(1e-3);
  }
  writeModel(params);
}

}  // namespace gossamer::optimizers
