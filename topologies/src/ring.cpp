// The undirected ring: each rank averages itself with its two neighbours,
// weight 1/3 each (1/2 each for two ranks). Per step each rank sends its
// model to both neighbours: 2 * 4P bytes for P float32 parameters. Static;
// doubly stochastic. Registered as topology "ring" (no keys).
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

Ring::Ring(int worldSize) : n_(worldSize) { GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize); }

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
  p.selfWeight = 1.0 / 3;
  p.recvWeights = {1.0 / 3, 1.0 / 3};
  return p;
}

void registerRing(Registry& registry) {
  registry.addTopology("ring", [](const Config& c) { return std::make_unique<Ring>(c.worldSize()); });
}

}  // namespace gossamer::topologies
