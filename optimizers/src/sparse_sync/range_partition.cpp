// Range partition of the parameter vector [0, d) into one contiguous range
// per rank, balanced by how often each feature occurs in the training data.
//
// Source: Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Section V-A ("we
// identify the unique features in a batch (D_{n,m}) and count the number of
// mini-batches in which each feature appears. We partition an array of
// parameters into as many sections as nodes, in order that the sums of the
// counts are nearly equal to each other").
//
// Steps: (1) featureCounts: counts[f] = #{(n, m) : f in D_{n,m}};
// (2) partitionRanges: one pass over the prefix sums, ending range r - 1 at
// the first feature boundary where the prefix reaches r S / N (S = total).
#include <algorithm>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

namespace {

constexpr std::size_t kMaxDimension = std::size_t{1} << 32;  // features are uint32

}  // namespace

std::vector<std::uint64_t> featureCounts(const TouchedFeatures& touched, std::size_t dimension) {
  if (dimension == 0 || dimension > kMaxDimension) {
    throw InvalidArgument("sparse sync: dimension " + std::to_string(dimension) + " outside [1, 2^32]");
  }
  checkTouched(touched, dimension);
  std::vector<std::uint64_t> counts(dimension, 0);
  for (const auto& rounds : touched)
    for (const auto& d : rounds)
      for (std::uint32_t f : d) ++counts[f];
  return counts;
}

std::vector<std::size_t> partitionRanges(const std::vector<std::uint64_t>& counts, int ranks) {
  if (ranks < 1) throw InvalidArgument("sparse sync: " + std::to_string(ranks) + " ranks, need at least 1");
  const std::size_t d = counts.size();
  if (d == 0 || d > kMaxDimension) {
    throw InvalidArgument("sparse sync: " + std::to_string(d) + " feature counts, need 1 .. 2^32");
  }
  const auto n = static_cast<std::size_t>(ranks);
  std::uint64_t total = 0;  // S
  for (std::uint64_t c : counts) {
    if (total + c < total) throw InvalidArgument("sparse sync: the feature counts' sum overflows 64 bits");
    total += c;
  }
  std::vector<std::size_t> bounds(n + 1, 0);
  bounds[n] = d;
  if (total == 0) {
    for (std::size_t r = 1; r < n; ++r) bounds[r] = r * d / n;
    return bounds;
  }
  std::uint64_t prefix = 0;  // counts[0] + ... + counts[j - 1]
  std::size_t j = 0;
  for (std::size_t r = 1; r < n; ++r) {
    // ceil(r S / N) without overflow: r < N, so (S mod N) r < N^2 < 2^64.
    const std::uint64_t target = (total / n) * r + ((total % n) * r + n - 1) / n;
    while (j < d && prefix < target) prefix += counts[j++];
    bounds[r] = j;
  }
  return bounds;
}

void checkRanges(const std::vector<std::size_t>& bounds) {
  if (bounds.size() < 2 || bounds.front() != 0) {
    throw InvalidArgument("sparse sync: range bounds need N + 1 >= 2 entries starting at 0, got " +
                          std::to_string(bounds.size()) + " entries");
  }
  for (std::size_t r = 1; r < bounds.size(); ++r) {
    if (bounds[r] < bounds[r - 1]) {
      throw InvalidArgument("sparse sync: range bound " + std::to_string(r) + " (" +
                            std::to_string(bounds[r]) + ") is below the one before it (" +
                            std::to_string(bounds[r - 1]) + ")");
    }
  }
}

int ownerOf(const std::vector<std::size_t>& bounds, std::uint32_t feature) {
  checkRanges(bounds);
  if (feature >= bounds.back()) {
    throw InvalidArgument("sparse sync: feature " + std::to_string(feature) + " outside [0, " +
                          std::to_string(bounds.back()) + ")");
  }
  // The last r with bounds[r] <= feature: its range [bounds[r], bounds[r+1]) holds it.
  const auto it = std::upper_bound(bounds.begin(), bounds.end(), std::size_t{feature});
  return static_cast<int>(it - bounds.begin()) - 1;
}

}  // namespace gossamer::optimizers::sparse_sync
