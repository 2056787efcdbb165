// The random topology without fair selection that Yeo et al. compare with in
// "Crossover-SGD: A gossip-based communication in distributed deep learning for
// alleviating large mini-batch problem and enhancing scalability" (Sec. 3.2,
// Theorem 3.3): each rank draws its destination independently, so some receive
// several segments and others none. For the mixing analysis only; not
// registered.
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

UnfairRoulette::UnfairRoulette(int worldSize, std::uint64_t seed,
                               std::vector<std::vector<double>> probabilities)
    : roulette_(worldSize, seed, std::move(probabilities)) {}

PeerSet UnfairRoulette::peers(int rank, std::uint64_t step, int segment) const {
  const int n = roulette_.worldSize();
  checkRank(rank, n);
  const auto dest = roulette_.destinationsWithoutFairness(step, segment);
  PeerSet p;
  p.sendTo = {dest[static_cast<std::size_t>(rank)]};
  for (int j = 0; j < n; ++j)
    if (dest[static_cast<std::size_t>(j)] == rank) p.recvFrom.push_back(j);
  const double w = 1.0 / static_cast<double>(p.recvFrom.size() + 1);
  p.selfWeight = w;
  p.recvWeights.assign(p.recvFrom.size(), w);
  return p;
}

}  // namespace gossamer::topologies
