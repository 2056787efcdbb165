// Top-K sparsification with error feedback (Stich et al., "Sparsified SGD with
// memory"; a baseline of Bhattacharya et al., "O(1) Communication for
// Distributed SGD through Two-Level Gradient Averaging", Table 2): each rank
// sends its k = ceil(ratio * n) largest-magnitude entries of g + residual
// (k uint32 indices then k float32 values: 8k bytes per step, gathered) and
// keeps the rest as the residual for the next step.
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/compress.hpp"
#include "gossamer/registry.hpp"
#include "kernels.hpp"
#include "wrap.hpp"

namespace gossamer::optimizers {

using namespace detail;

// ---- Top-K ----------------------------------------------------------------------

TopKCompressor::TopKCompressor(std::size_t n, double ratio) : SparseCompressor(n, ratio, "Top-K") {
  magnitude_.assign(n, 0.0f);
}

void TopKCompressor::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "Top-K encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "Top-K encode: payload bytes");
  const std::size_t n = size();
  const float* g = gradient.data();
  float* e = residual_.data();
  float* mag = magnitude_.data();
  // Pass 1: |g + e| into the scratch; any non-finite entry makes `probe` NaN.
  float probe = 0.0f;
#pragma omp simd reduction(+ : probe)
  for (std::size_t i = 0; i < n; ++i) {
    const float a = g[i] + e[i];
    mag[i] = std::fabs(a);
    probe += a * 0.0f;
  }
  if (!(probe == 0.0f)) {
    // A finite gradient whose sum with the residual overflows: nothing is
    // changed yet (pass 2 writes the residual), and nothing infinite is sent.
    throwIfNonFinite(gradient, "Top-K encode: gradient");
    throw InvalidArgument("Top-K encode: gradient + residual overflows float32");
  }
  // The k-th largest magnitude.
  const auto kth = static_cast<std::ptrdiff_t>(n - k_);
  std::nth_element(magnitude_.begin(), magnitude_.begin() + kth, magnitude_.end());
  const float threshold = magnitude_[static_cast<std::size_t>(kth)];
  // Above the k-th position every magnitude is >= threshold: those strictly
  // above are sent for sure, the rest of the k are ties (lowest index first).
  std::size_t above = 0;
  for (std::size_t i = static_cast<std::size_t>(kth) + 1; i < n; ++i) above += mag[i] > threshold ? 1 : 0;
  std::size_t ties = k_ - above;
  // Pass 2: e = g + e, with the selected entries sent and zeroed.
  std::size_t taken = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = g[i] + e[i];
    const float m = std::fabs(a);
    if (m > threshold || (m == threshold && ties > 0)) {
      if (!(m > threshold)) --ties;
      putSparse(payload, k_, taken++, static_cast<std::uint32_t>(i), a);
      e[i] = 0.0f;
    } else {
      e[i] = a;
    }
  }
  GOSSAMER_ENFORCE(taken == k_, "Top-K selected " << taken << " entries, expected " << k_);
}

void registerTopK(Registry& registry) {
  const double defaultRatio = CompressionOptions{}.topkRatio;
  registerCompressor(
      registry, "topk",
      [](const OptimizerContext& ctx, std::size_t n) -> std::unique_ptr<Compressor> {
        return std::make_unique<TopKCompressor>(n, ctx.config.get<double>("compression.topk_ratio"));
      },
      KeySet()
          .real("topk_ratio", defaultRatio, {0.0, false, 1.0, true},
                "fraction of the entries sent per step (k = ceil(ratio * P))")
          .rule(needsAllReduceSgd("topk")));
}

}  // namespace gossamer::optimizers
