// SGP's time-varying directed exponential graph (Assran et al., ICML 2019,
// Sec. 3 / App. A; the SGP baseline of Yeo et al., "Crossover-SGD: A
// gossip-based communication in distributed deep learning for alleviating large
// mini-batch problem and enhancing scalability"): at step k rank i pushes to
// i + 2^(k mod m) (or two such peers), 4P + 4 bytes (model and push-sum weight)
// per out-peer. Registered as "directed_exponential" with key `peers_per_step`.
#include "gossamer/topologies/topologies.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "common.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::topologies {

using namespace detail;

DirectedExponential::DirectedExponential(int worldSize, int peersPerStep)
    : n_(worldSize), peersPerStep_(peersPerStep) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  GOSSAMER_ENFORCE(peersPerStep == 1 || peersPerStep == 2,
                   "peers per step must be 1 or 2, got " << peersPerStep);
  for (long o = 1; o < n_; o *= 2) offsets_.push_back(static_cast<int>(o));
}

std::vector<int> DirectedExponential::offsetsAt(std::uint64_t step) const {
  if (offsets_.empty()) return {};
  const auto m = offsets_.size();
  if (peersPerStep_ == 1) return {offsets_[step % m]};
  const int a = offsets_[(2 * step) % m], b = offsets_[(2 * step + 1) % m];
  return a == b ? std::vector<int>{a} : std::vector<int>{a, b};
}

PeerSet DirectedExponential::peers(int rank, std::uint64_t step, int) const {
  checkRank(rank, n_);
  PeerSet p;
  const auto offs = offsetsAt(step);
  const double w = 1.0 / static_cast<double>(offs.size() + 1);
  p.selfWeight = w;
  for (int o : offs) {
    p.sendTo.push_back((rank + o) % n_);
    p.recvFrom.push_back(((rank - o) % n_ + n_) % n_);
    p.recvWeights.push_back(w);
  }
  return p;
}

void registerDirectedExponential(Registry& registry) {
  registry.addTopology(
      "directed_exponential",
      [](const Config& c) {
        return std::make_unique<DirectedExponential>(c.worldSize(), c.get<int>("topology.peers_per_step"));
      },
      KeySet().integer("peers_per_step", 1, 1, 2,
                       "out-peers per step (also the SGP leaders' graph of hierarchical)"));
}

}  // namespace gossamer::topologies
