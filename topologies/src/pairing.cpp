// Random perfect matchings of the ranks, one per round: who exchanges with
// whom in a pairwise gossip (DiLoCo's gossip outer step). Pure: every rank
// computes the same matching from (world size, seed, round), so the two
// sides of a pair agree without a message.
#include <algorithm>
#include <numeric>
#include <random>

#include "gossamer/errors.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::topologies {

std::vector<int> randomPairing(int worldSize, std::uint64_t seed, std::uint64_t round) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  std::vector<int> order(static_cast<std::size_t>(worldSize));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 g(splitmix64(seed ^ splitmix64(round ^ 0xD11C0ull)));
  // Fisher-Yates with j = floor(u * (i + 1)) from the generator's top 53
  // bits, so the shuffle is the same on every platform (std::shuffle's is not).
  for (std::size_t i = order.size(); i-- > 1;) {
    const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
    const auto j = std::min(i, static_cast<std::size_t>(u * static_cast<double>(i + 1)));
    std::swap(order[i], order[j]);
  }
  std::vector<int> partner(order.size());
  for (std::size_t k = 0; k + 1 < order.size(); k += 2) {
    partner[static_cast<std::size_t>(order[k])] = order[k + 1];
    partner[static_cast<std::size_t>(order[k + 1])] = order[k];
  }
  if (order.size() % 2 == 1) partner[static_cast<std::size_t>(order.back())] = order.back();
  return partner;
}

}  // namespace gossamer::topologies
