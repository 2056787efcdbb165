// Helpers shared by the collectives' implementation files (not installed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "gossamer/collectives.hpp"

namespace gossamer::detail {

/// The largest divisor of n that is at most sqrt(n): rows of a near-square grid.
inline int squarestDivisor(int n) {
  int best = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) best = d;
  return best;
}

/// chooseAllreduce, restricted to the ring and recursive doubling unless
/// `viewsAllowed` (the others build SubTransport views, which cannot nest).
AllreduceAlgorithm chooseAllreduce(std::size_t bytes, int worldSize, const CollectiveOptions& options,
                                   bool viewsAllowed);

/// dst op= src over n elements (kAverage sums; see scaleIfAverage).
template <typename T>
void combine(ReduceOp op, T* dst, const T* src, std::size_t n) {
  if (op == ReduceOp::kMax) {
    for (std::size_t k = 0; k < n; ++k) dst[k] = std::max(dst[k], src[k]);
  } else {
    for (std::size_t k = 0; k < n; ++k) dst[k] += src[k];
  }
}

/// The op partial results are combined with: an average sums first.
inline ReduceOp partialOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

/// Divides by the world size n when op is kAverage.
template <typename T>
void scaleIfAverage(ReduceOp op, std::span<T> data, int n) {
  if (op != ReduceOp::kAverage) return;
  const T scale = T(1) / static_cast<T>(n);
  for (auto& v : data) v *= scale;
}

}  // namespace gossamer::detail
