// Key omission for the per-round alltoallv: each rank's touched features of
// each round, split by the owners' ranges, are exchanged once before
// training; every round then carries values only, in that key order.
//
// Source: Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Section V-B ("The
// array of keys is split on the basis of the range defined before, and all
// pieces of the split arrays are sent to all nodes once at the beginning of the
// training ... the nodes exchange only the vector of values every after batch
// computation").
//
// Steps, for each round m and rank src: D_{src,m} is sorted and the ranges are
// contiguous, so dst's piece is D_{src,m} between lower_bound(bounds[dst]) and
// lower_bound(bounds[dst + 1]); its length is the alltoallv count (src, dst).
#include <algorithm>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

KeyOmissionPlan planKeyOmission(const TouchedFeatures& touched, const std::vector<std::size_t>& bounds) {
  checkRanges(bounds);
  if (bounds.size() != touched.size() + 1) {
    throw InvalidArgument("sparse sync: " + std::to_string(bounds.size()) + " range bounds for " +
                          std::to_string(touched.size()) + " ranks, need ranks + 1");
  }
  const std::size_t rounds = checkTouched(touched, bounds.back());
  const std::size_t n = touched.size();
  KeyOmissionPlan plan;
  plan.keys.assign(rounds, std::vector<std::vector<std::vector<std::uint32_t>>>(
                               n, std::vector<std::vector<std::uint32_t>>(n)));
  plan.counts.assign(rounds, std::vector<std::vector<std::size_t>>(n, std::vector<std::size_t>(n, 0)));
  for (std::size_t m = 0; m < rounds; ++m) {
    for (std::size_t src = 0; src < n; ++src) {
      const auto& d = touched[src][m];
      auto from = d.begin();
      for (std::size_t dst = 0; dst < n; ++dst) {
        const auto to = std::lower_bound(from, d.end(), bounds[dst + 1],
                                         [](std::uint32_t f, std::size_t b) { return f < b; });
        plan.keys[m][src][dst].assign(from, to);
        plan.counts[m][src][dst] = static_cast<std::size_t>(to - from);
        if (src != dst) plan.keyElements += plan.counts[m][src][dst];
        from = to;
      }
    }
  }
  return plan;
}

}  // namespace gossamer::optimizers::sparse_sync
