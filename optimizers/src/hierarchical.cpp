// Hierarchical gossip with leader groups (Yeo et al., "Crossover-SGD: A
// gossip-based communication in distributed deep learning for alleviating large
// mini-batch problem and enhancing scalability", Sec. 3.3): intra-group reduce
// of the gradients to the leader, gossip among the leaders (Crossover-SGD or
// SGP), broadcast of the leader's model. Groups of unequal sizes weight the
// group's gradient by its size (its sum times L / N): see optimizers.hpp.
#include <algorithm>

#include "gossamer/errors.hpp"
#include "gossamer/kit/context_local.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

Hierarchical::Hierarchical(Transport& transport, std::vector<std::vector<int>> groups,
                           const std::string& interAlgorithm, std::unique_ptr<Topology> leaderTopology,
                           const std::vector<std::size_t>& tensorSizes, const CrossoverOptions& options)
    : transport_(transport),
      timeout_(options.timeoutSeconds),
      groups_(topologies::makeGroups(transport.worldSize(), 1, std::move(groups))),
      leaderTopology_(std::move(leaderTopology)) {
  GOSSAMER_ENFORCE(interAlgorithm == "crossover_sgd" || interAlgorithm == "sgp",
                   "inter-group algorithm must be crossover_sgd or sgp, got '" << interAlgorithm << "'");
  GOSSAMER_ENFORCE(leaderTopology_ && leaderTopology_->worldSize() == static_cast<int>(groups_.size()),
                   "the leader topology must span the " << groups_.size() << " leaders");
  std::size_t numParams = 0;
  for (auto t : tensorSizes) numParams += t;
  grad_.resize(numParams);
  const bool equal = std::all_of(groups_.begin(), groups_.end(),
                                 [&](const std::vector<int>& g) { return g.size() == groups_[0].size(); });
  if (!equal)
    sumScale_ =
        static_cast<float>(static_cast<double>(groups_.size()) / static_cast<double>(transport.worldSize()));
  // The group and the leaders are split communicators: their contexts are
  // handed out by the split, apart from every other user of the transport.
  // Within a group the ranks keep the group's order (its first is the
  // leader); the leaders keep the groups' order (the leader topology's).
  int group = -1, position = 0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const auto& g = groups_[i];
    const auto it = std::find(g.begin(), g.end(), transport.rank());
    if (it == g.end()) continue;
    group = static_cast<int>(i);
    position = static_cast<int>(it - g.begin());
  }
  GOSSAMER_ENFORCE(group >= 0, "rank " << transport.rank() << " is in no group");
  Communicator all(transport, timeout_);
  groupComm_ = all.split(group, position);
  leaderComm_ = all.split(position == 0 ? 0 : Communicator::kUndefinedColor, group);
  if (leaderComm_) {
    Transport& leaders = leaderComm_->transport();
    if (interAlgorithm == "sgp") {
      SgpOptions so;  // the leaders' SGP: every setting the two share, the agreement's collectives too
      so.sgd = options.sgd;
      so.timeoutSeconds = options.timeoutSeconds;
      so.mode = options.mode;
      so.weightFloor = options.weightFloor;
      so.asyncWaitSeconds = options.asyncWaitSeconds;
      so.flushWaitSeconds = options.flushWaitSeconds;
      so.agreement = options.agreement;
      so.checkReceived = options.checkReceived;
      inter_ = std::make_unique<Sgp>(leaders, *leaderTopology_, numParams, so);
    } else {
      inter_ = std::make_unique<CrossoverSgd>(leaders, *leaderTopology_, tensorSizes, options);
    }
  }
}

Hierarchical::~Hierarchical() = default;

void Hierarchical::step(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(params.size() == grad_.size() && grads.size() == grad_.size(),
                   "expected " << grad_.size() << " parameters and gradients");
  std::copy(grads.begin(), grads.end(), grad_.begin());
  {
    const FailureScope job(transport_);
    groupComm_->reduce(grad_, 0, sumScale_ == 0.0f ? ReduceOp::kAverage : ReduceOp::kSum);
  }
  if (sumScale_ != 0.0f && inter_)
    for (float& g : grad_) g *= sumScale_;
  if (inter_) {
    const FailureScope job(transport_);  // (see broadcastFromLeader)
    inter_->step(params, grad_);
  }
  broadcastFromLeader(params);
  ++steps_;
}

void Hierarchical::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == grad_.size(),
                   "expected " << grad_.size() << " gradients, got " << grads.size());
  groupComm_->allreduce(grads, sumScale_ == 0.0f ? ReduceOp::kAverage : ReduceOp::kSum);
  if (sumScale_ != 0.0f)
    for (float& g : grads) g *= sumScale_;
}

void Hierarchical::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == grad_.size(),
                   "expected " << grad_.size() << " parameters, got " << params.size());
  if (inter_) {
    const FailureScope job(transport_);
    inter_->mixParameters(params);
  }
  broadcastFromLeader(params);
  ++steps_;
}

void Hierarchical::flush(std::span<float> params) {
  if (inter_) {
    const FailureScope job(transport_);
    inter_->flush(params);
  }
  broadcastFromLeader(params);
}

// A leader whose gossip failed (a dead leader elsewhere, or a dead member of
// another group that held its leader up) never broadcasts: its members wait
// for it, and their group's ranks are alive. So the group's collectives end
// with PeerFailure once any rank of the job has failed (FailureScope), not at
// the timeout. The leaders' gossip runs under the same scope: a leader
// whose in-peer leader never sends, held up by a dead member of its own
// group, learns of that member's failure there (the gossip's waits in sync
// and overlap modes, and the async flush's agreement, are a collective's).
void Hierarchical::broadcastFromLeader(std::span<float> params) {
  const FailureScope job(transport_);
  groupComm_->broadcast(params, 0);
}

void Hierarchical::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  if (inter_) inter_->saveState(out, prefix + "leaders.");
}

void Hierarchical::loadState(const Checkpoint& in, const std::string& prefix) {
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
  if (inter_) inter_->loadState(in, prefix + "leaders.");
}

}  // namespace gossamer::optimizers
