// Hierarchical gossip with leader groups (paper 004_659e3573d5645e2e.txt,
// Sec. 3.3): intra-group reduce of the gradients to the leader, gossip among
// the leaders (Crossover-SGD or SGP), broadcast of the leader's model.
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/sub_transport.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

namespace {
constexpr std::uint8_t kGroupContext = 1, kLeaderContext = 2;
}

Hierarchical::Hierarchical(Transport& transport, std::vector<std::vector<int>> groups,
                           const std::string& interAlgorithm, std::unique_ptr<Topology> leaderTopology,
                           const std::vector<std::size_t>& tensorSizes, const CrossoverOptions& options)
    : timeout_(options.timeoutSeconds),
      groups_(topologies::makeGroups(transport.worldSize(), 1, std::move(groups))),
      leaderTopology_(std::move(leaderTopology)) {
  GOSSAMER_ENFORCE(interAlgorithm == "crossover_sgd" || interAlgorithm == "sgp",
                   "inter-group algorithm must be crossover_sgd or sgp, got '" << interAlgorithm << "'");
  GOSSAMER_ENFORCE(leaderTopology_ && leaderTopology_->worldSize() == static_cast<int>(groups_.size()),
                   "the leader topology must span the " << groups_.size() << " leaders");
  std::size_t numParams = 0;
  for (auto t : tensorSizes) numParams += t;
  grad_.resize(numParams);
  std::vector<int> leaders;
  for (const auto& g : groups_) {
    leaders.push_back(g.front());
    if (std::find(g.begin(), g.end(), transport.rank()) != g.end())
      group_ = std::make_unique<SubTransport>(transport, g, kGroupContext);
  }
  groupComm_ = std::make_unique<Communicator>(*group_, timeout_);
  if (group_->rank() == 0) {
    leaders_ = std::make_unique<SubTransport>(transport, leaders, kLeaderContext);
    if (interAlgorithm == "sgp")
      inter_ = std::make_unique<Sgp>(*leaders_, *leaderTopology_, numParams,
                                     SgpOptions{options.sgd, options.timeoutSeconds, options.mode});
    else
      inter_ = std::make_unique<CrossoverSgd>(*leaders_, *leaderTopology_, tensorSizes, options);
  }
}

Hierarchical::~Hierarchical() = default;

void Hierarchical::step(std::span<float> params, std::span<const float> grads) {
  GOSSAMER_ENFORCE(params.size() == grad_.size() && grads.size() == grad_.size(),
                   "expected " << grad_.size() << " parameters and gradients");
  std::copy(grads.begin(), grads.end(), grad_.begin());
  groupComm_->reduce(grad_, 0, ReduceOp::kAverage);
  if (inter_) inter_->step(params, grad_);
  groupComm_->broadcast(params, 0);
  ++steps_;
}

void Hierarchical::flush(std::span<float> params) {
  if (inter_) inter_->flush(params);
  groupComm_->broadcast(params, 0);
}

}  // namespace gossamer::optimizers
