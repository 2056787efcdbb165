// Helpers the topologies share: rank checks and seeded draws.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "gossamer/errors.hpp"

namespace gossamer::topologies::detail {

inline double uniform01(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

// Index drawn with probability proportional to weights[k] (sum > 0).
inline int drawWeighted(std::mt19937_64& g, const std::vector<double>& weights, double sum) {
  double u = uniform01(g) * sum;
  int last = -1;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    if (weights[k] <= 0) continue;
    last = static_cast<int>(k);
    if (u < weights[k]) return last;
    u -= weights[k];
  }
  return last;  // rounding: the last positive entry
}

inline void checkRank(int rank, int n) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < n, "rank " << rank << " outside world size " << n);
}

}  // namespace gossamer::topologies::detail
