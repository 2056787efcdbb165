// Crossover-SGD: overlapped segment-wise gossip over the fair roulette topology.
// Paper 004_659e3573d5645e2e.txt, Algorithm 1 (segments, all sends and
// receives in flight at once, then averaging) and Algorithm 2 (topology).
//
// Per exchange each rank sends every segment once (4P bytes in all) and
// receives one message per segment per in-neighbour. Receives are posted for
// all segments before any send so no message waits in the unexpected queue
// when avoidable.
#include <Eigen/Core>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

CrossoverSgd::CrossoverSgd(Transport& transport, const Topology& topology,
                           const std::vector<std::size_t>& tensorSizes, const CrossoverOptions& o)
    : transport_(transport),
      topology_(topology),
      options_(o),
      sgd_(
          [&] {
            std::size_t p = 0;
            for (auto t : tensorSizes) p += t;
            return p;
          }(),
          o.sgd),
      numParams_(0) {
  GOSSAMER_ENFORCE(o.segments >= 1 && o.segments <= static_cast<int>(Tag::kMaxSegment) + 1,
                   "segments " << o.segments);
  GOSSAMER_ENFORCE(o.interval >= 1, "interval " << o.interval);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(
      topology.worldSize() == transport.worldSize(),
      "topology world size " << topology.worldSize() << " != transport world size " << transport.worldSize());
  for (auto t : tensorSizes) numParams_ += t;
  segments_ = topologies::segmentsAlongTensors(tensorSizes, o.segments);
}

void CrossoverSgd::step(std::span<float> params, std::span<const float> grads) {
  sgd_.apply(params, grads);
  ++steps_;
  if (steps_ % static_cast<std::uint64_t>(options_.interval) == 0) exchange(params, rounds_++);
}

void CrossoverSgd::exchange(std::span<float> params, std::uint64_t round) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "expected " << numParams_ << " parameters, got " << params.size());
  if (transport_.worldSize() == 1) return;
  const int rank = transport_.rank();
  const std::size_t numSeg = segments_.size();
  std::vector<PeerSet> peerSets(numSeg);
  std::size_t need = 0;
  for (std::size_t s = 0; s < numSeg; ++s) {
    peerSets[s] = topology_.peers(rank, round, static_cast<int>(s));
    need += peerSets[s].recvFrom.size() * (segments_[s].second - segments_[s].first);
  }
  if (recvBuffer_.size() < need) recvBuffer_.resize(need);

  std::vector<Request> recvs, sends;
  std::vector<std::size_t> recvOffset;  // per receive, offset into recvBuffer_
  std::size_t off = 0;
  for (std::size_t s = 0; s < numSeg; ++s) {
    const auto [b, e] = segments_[s];
    const auto tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, static_cast<std::uint32_t>(s));
    for (int src : peerSets[s].recvFrom) {
      recvs.push_back(transport_.irecvOf<float>(src, tag, std::span<float>(recvBuffer_.data() + off, e - b)));
      recvOffset.push_back(off);
      off += e - b;
    }
  }
  for (std::size_t s = 0; s < numSeg; ++s) {
    const auto [b, e] = segments_[s];
    const auto tag = Tag::make(Op::kGossip, round & Tag::kMaxStep, static_cast<std::uint32_t>(s));
    for (int dst : peerSets[s].sendTo)
      sends.push_back(transport_.isendOf<float>(dst, tag, std::span<const float>(params.data() + b, e - b)));
  }
  // Mix each segment as soon as all of its receives are in.
  std::size_t r = 0;
  for (std::size_t s = 0; s < numSeg; ++s) {
    const auto [b, e] = segments_[s];
    const auto len = static_cast<Eigen::Index>(e - b);
    Eigen::Map<Eigen::VectorXf> x(params.data() + b, len);
    x *= static_cast<float>(peerSets[s].selfWeight);
    for (std::size_t k = 0; k < peerSets[s].recvFrom.size(); ++k, ++r) {
      recvs[r].wait(options_.timeoutSeconds);
      if (recvs[r].bytes() != (e - b) * sizeof(float))
        throw ProtocolError(peerSets[s].recvFrom[k], frame_offset::kPayloadBytes,
                            "gossip segment of " + std::to_string(recvs[r].bytes()) + " bytes, expected " +
                                std::to_string((e - b) * sizeof(float)));
      Eigen::Map<const Eigen::VectorXf> in(recvBuffer_.data() + recvOffset[r], len);
      x += static_cast<float>(peerSets[s].recvWeights[k]) * in;
    }
  }
  waitAll(sends, options_.timeoutSeconds);
}

}  // namespace gossamer::optimizers
