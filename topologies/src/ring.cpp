// The undirected ring: each rank averages itself with its two neighbours,
// weight s on itself and (1 - s) / 2 on each (s = topology.self_weight, 1/3
// by default: equal weights; 1/2 each for two ranks). Per step each rank
// sends its model to both neighbours: 2 * 4P bytes for P float32 parameters.
// Static; symmetric and doubly stochastic. Registered as topology "ring" with
// the key self_weight.
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

Ring::Ring(int worldSize, double selfWeight) : n_(worldSize), selfWeight_(selfWeight) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  GOSSAMER_ENFORCE(selfWeight > 0 && selfWeight < 1, "ring self weight " << selfWeight << " outside (0, 1)");
}

PeerSet Ring::peers(int rank, std::uint64_t, int) const {
  checkRank(rank, n_);
  PeerSet p;
  if (n_ == 1) return p;
  const int left = (rank + n_ - 1) % n_, right = (rank + 1) % n_;
  if (n_ == 2) {
    p.sendTo = {right};
    p.recvFrom = {left};
    p.selfWeight = 0.5;
    p.recvWeights = {0.5};
    return p;
  }
  p.sendTo = {left, right};
  p.recvFrom = {left, right};
  p.selfWeight = selfWeight_;
  p.recvWeights = {(1 - selfWeight_) / 2, (1 - selfWeight_) / 2};
  return p;
}

void registerRing(Registry& registry) {
  registry.addTopology(
      "ring",
      [](const Config& c) {
        return std::make_unique<Ring>(c.worldSize(), c.get<double>("topology.self_weight"));
      },
      KeySet()
          .real("self_weight", 1.0 / 3, {0.0, false, 1.0, false},
                "ring: the weight each rank keeps on its own model, (1 - self_weight) / 2 going to each "
                "neighbour's (1/3: equal weights; 1/2 keeps every eigenvalue >= 0, as d2 needs on an even "
                "ring)")
          .onlyWhenSelected());
}

}  // namespace gossamer::topologies
