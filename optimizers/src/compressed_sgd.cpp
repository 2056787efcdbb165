// CompressedSgd: SGD steps with compressed gradient exchanges (A2SGD, Top-K,
// QSGD, dense), Bhattacharya et al., "O(1) Communication for Distributed SGD
// through Two-Level Gradient Averaging", Algorithm 1: encode (lines
// 3-4), exchange the payloads (line 5), rebuild (line 6), step (line 7), and
// synchronise the models after the last step (lines 9-10). See compress.hpp.
//
// Wire, per rank per step:
//   kAverage + allreduce  the communicator's allreduce of payloadBytes / 4
//                         floats (A2SGD: 2 floats; kAuto runs recursive
//                         doubling, 8 bytes per round, ceil(log2 N) rounds),
//                         or of payloadBytes / 2 16-bit elements for a
//                         16-bit payloadType (bf16, fp16).
//   kAverage + gossip     push-sum: one message of payloadBytes + 4 bytes
//                         ([s shares..., w share], float32) per out-peer per
//                         round; tag (kGossip, exchange number) on the view.
//   kGather               ring allgather of the N payloads on the view:
//                         (N-1) payloadBytes sent.
// The view is a SubTransport of all ranks with its own context, so none of
// this can be mistaken for the communicator's collectives or for a gossip
// optimizer's messages on the same transport.
//
// Why the models drift: A2SGD's rebuilt gradient is this rank's own gradient
// shifted by the change of the two means (g + pos (mu+bar - mu+) - neg
// (mu-bar - mu-)), so different ranks step differently; with gossiped means
// even the shift differs. The periodic and final synchronisations bound that.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gossamer/errors.hpp"
#include "gossamer/kit/detail/collective_wait.hpp"
#include "gossamer/optimizers/compress.hpp"

namespace gossamer::optimizers {

namespace {

constexpr std::uint64_t kViewSteps = (std::uint64_t{1} << 32) - 1;  // SubTransport step range

}  // namespace

CompressedSgd::CompressedSgd(Communicator& communicator, const Topology* topology,
                             std::unique_ptr<Compressor> compressor, ModelAverager averager,
                             const CompressedSgdOptions& options)
    : comm_(communicator),
      topology_(topology),
      compressor_(std::move(compressor)),
      averager_(std::move(averager)),
      options_(options),
      sgd_(compressor_ ? compressor_->size() : 0, options.sgd),
      exchange_(communicator.split(0, communicator.rank())) {
  GOSSAMER_ENFORCE(compressor_ != nullptr, "CompressedSgd needs a compressor");
  GOSSAMER_ENFORCE(options.gossipRounds >= 1, "gossip rounds " << options.gossipRounds << " < 1");
  GOSSAMER_ENFORCE(options.timeoutSeconds > 0, "timeout " << options.timeoutSeconds);
  const int n = communicator.worldSize();
  const std::size_t payloadFloats = compressor_->payloadBytes() / sizeof(float);
  GOSSAMER_ENFORCE(payloadFloats * sizeof(float) == compressor_->payloadBytes(),
                   "payload of " << compressor_->payloadBytes() << " bytes is not a whole number of floats");
  if (options.means == MeansExchange::kGossip) {
    GOSSAMER_ENFORCE(compressor_->combine() == PayloadCombine::kAverage,
                     "gossiped means need a compressor whose payloads are averaged (a2sgd, none), not '"
                         << compressor_->name() << "'");
    GOSSAMER_ENFORCE(compressor_->payloadType() == DType::kFloat32,
                     "gossiped means average float32 payloads; '"
                         << compressor_->name()
                         << "' sends 16-bit ones: use compression.means "
                            "allreduce");
    GOSSAMER_ENFORCE(topology_ != nullptr, "gossiped means need a topology");
    GOSSAMER_ENFORCE(topology_->worldSize() == n,
                     "topology world size " << topology_->worldSize() << " != " << n);
    pushSum_.assign(payloadFloats + 1, 0.0f);
    pushSumIn_.assign(static_cast<std::size_t>(std::max(n - 1, 1)) * (payloadFloats + 1), 0.0f);
    requests_.reserve(static_cast<std::size_t>(2 * n));
  }
  if (options.sync == ModelSync::kGossip && drifts()) {
    GOSSAMER_ENFORCE(static_cast<bool>(averager_), "gossip model synchronisation needs a ModelAverager");
  }
  payload_.assign(payloadFloats, 0.0f);
  if (compressor_->combine() == PayloadCombine::kGather) {
    gathered_.assign(payloadFloats * static_cast<std::size_t>(n), 0.0f);
  }
  gradient_.assign(compressor_->size(), 0.0f);
}

std::string CompressedSgd::name() const { return "compressed_sgd/" + compressor_->name(); }

bool CompressedSgd::drifts() const {
  return !compressor_->identicalDecode() || options_.means == MeansExchange::kGossip;
}

void CompressedSgd::step(std::span<float> params, std::span<const float> grads) {
  const std::size_t n = compressor_->size();
  GOSSAMER_ENFORCE(params.size() == n && grads.size() == n, "expected "
                                                                << n << " parameters and gradients, got "
                                                                << params.size() << " and " << grads.size());
  exchangeGradient(grads);
  sgd_.apply(params, gradient_);
  mixParameters(params);
}

void CompressedSgd::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == compressor_->size(),
                   "expected " << compressor_->size() << " gradients, got " << grads.size());
  exchangeGradient(grads);
  std::copy(gradient_.begin(), gradient_.end(), grads.begin());
}

void CompressedSgd::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == compressor_->size(),
                   "expected " << compressor_->size() << " parameters, got " << params.size());
  ++steps_;
  if (!drifts()) return;
  const bool periodic = options_.syncPeriod > 0 && steps_ % options_.syncPeriod == 0;
  const bool last = options_.finalSync && totalSteps_ > 0 && steps_ == totalSteps_;
  if (periodic || last) synchronize(params);
}

void CompressedSgd::exchangeGradient(std::span<const float> grads) {
  Transport& transport = comm_.transport();
  const std::uint64_t before = transport.stats().bytesSent;
  compressor_->encode(grads, std::as_writable_bytes(std::span<float>(payload_)));
  if (compressor_->combine() == PayloadCombine::kAverage) {
    if (options_.means == MeansExchange::kGossip) {
      gossipAverage(payload_);
    } else if (compressor_->payloadType() == DType::kBfloat16) {
      comm_.allreduce(halfPayload<bfloat16>(), ReduceOp::kAverage);
    } else if (compressor_->payloadType() == DType::kFloat16) {
      comm_.allreduce(halfPayload<float16>(), ReduceOp::kAverage);
    } else {
      comm_.allreduce(std::span<float>(payload_), ReduceOp::kAverage);
    }
    compressor_->decode(std::as_bytes(std::span<const float>(payload_)), grads, gradient_);
  } else {
    // The payloads travel as raw 32-bit patterns in float storage (Top-K's
    // indices too): the allgather only copies bytes, it never computes on them.
    const auto chunk = static_cast<std::ptrdiff_t>(payload_.size());
    std::copy(payload_.begin(), payload_.end(), gathered_.begin() + chunk * exchange_->transport().rank());
    CollectiveOptions o(exchanges_++ & kViewSteps, options_.timeoutSeconds, AllreduceAlgorithm::kRing);
    ringAllgather(exchange_->transport(), std::span<float>(gathered_), o);
    compressor_->decode(std::as_bytes(std::span<const float>(gathered_)), grads, gradient_);
  }
  stats_.exchangeBytes += transport.stats().bytesSent - before;
}

void CompressedSgd::synchronize(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == compressor_->size(),
                   "expected " << compressor_->size() << " parameters, got " << params.size());
  Transport& transport = comm_.transport();
  const std::uint64_t before = transport.stats().bytesSent;
  if (options_.sync == ModelSync::kAllreduce) {
    comm_.allreduce(params, ReduceOp::kAverage);
  } else {
    GOSSAMER_ENFORCE(static_cast<bool>(averager_), "gossip model synchronisation needs a ModelAverager");
    averager_(params, stats_.syncs);
  }
  ++stats_.syncs;
  stats_.syncBytes += transport.stats().bytesSent - before;
}

// Push-sum over the topology's peers: (s, w) starts at (values, 1); each round
// keeps the share 1/(d+1) and pushes the same share to each of the d
// out-peers, then adds the shares received. values <- s / w at the end.
void CompressedSgd::gossipAverage(std::span<float> values) {
  const int n = exchange_->transport().worldSize();
  if (n == 1) return;
  const std::size_t m = values.size();
  std::copy(values.begin(), values.end(), pushSum_.begin());
  pushSum_[m] = 1.0f;
  const auto messageBytes = static_cast<std::size_t>((m + 1) * sizeof(float));
  const auto rounds = static_cast<std::uint64_t>(options_.gossipRounds);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const PeerSet p = topology_->peers(exchange_->transport().rank(), steps_ * rounds + r);
    GOSSAMER_ENFORCE(p.recvFrom.size() <= static_cast<std::size_t>(n - 1),
                     "topology names " << p.recvFrom.size() << " in-peers");
    const Tag tag = Tag::make(Op::kGossip, exchanges_++ & kViewSteps, 0);
    requests_.clear();
    for (std::size_t k = 0; k < p.recvFrom.size(); ++k) {
      requests_.push_back(exchange_->transport().irecvOf<float>(
          p.recvFrom[k], tag, std::span<float>(pushSumIn_).subspan(k * (m + 1), m + 1)));
    }
    const float share = 1.0f / static_cast<float>(p.sendTo.size() + 1);
    for (auto& v : pushSum_) v *= share;
    for (int dst : p.sendTo) {
      requests_.push_back(exchange_->transport().isendOf<float>(dst, tag, std::span<const float>(pushSum_)));
    }
    // (A collective's wait: a rank whose in-peer is held up by a dead rank
    // learns of it within 50 ms, not at the timeout.)
    gossamer::detail::awaitAll(exchange_->transport(), requests_, options_.timeoutSeconds,
                               "compressed SGD's push-sum gossip");
    for (std::size_t k = 0; k < p.recvFrom.size(); ++k) {
      if (requests_[k].bytes() != messageBytes) {
        throw ProtocolError(p.recvFrom[k], frame_offset::kPayloadBytes,
                            "push-sum message of " + std::to_string(requests_[k].bytes()) +
                                " bytes, expected " + std::to_string(messageBytes));
      }
      const float* in = pushSumIn_.data() + k * (m + 1);
      for (std::size_t j = 0; j <= m; ++j) {
        if (!std::isfinite(in[j]))  // one corrupt peer would poison every rank's average
          throw ProtocolError(p.recvFrom[k], kFrameHeaderBytes + 4 * j,
                              "push-sum message value " + std::to_string(in[j]) + " is not finite");
        pushSum_[j] += in[j];
      }
    }
  }
  const float w = pushSum_[m];
  if (!(std::isfinite(w) && w > 0.0f))
    throw ProtocolError(-1, 0, "push-sum weight " + std::to_string(w) + " is not finite and positive");
  for (std::size_t j = 0; j < m; ++j) values[j] = pushSum_[j] / w;
}

}  // namespace gossamer::optimizers
