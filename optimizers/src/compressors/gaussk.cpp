// Gaussian-K sparsification with error feedback: sends about k = ceil(ratio *
// n) entries of large |g + e| picked by a threshold estimated from their mean
// and standard deviation as if they were Gaussian, instead of Top-K's
// selection over all n entries.
//
// Source: Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in
// Distributed Deep Learning" (2019), and its code (github.com/hclhkbu/
// GaussianK-SGD, compression.py, GaussianCompressor: threshold from
// scipy.stats.norm.ppf, at most 3 corrections: halve it below 2k/3
// candidates, times 1.5 above 4k/3); the Gaussian-K baseline of
// Bhattacharya et al., "O(1) Communication for Distributed SGD through
// Two-Level Gradient Averaging" (Section 4, Table 2: O(n) computation, k values
// sent).
//
// Steps of one encode (the class comment in compress.hpp has the formulas):
//   1. mu, sigma of a = g + e in one pass (double sums); refuse a non-finite g;
//   2. tau = |mu| + sigma * Phi^-1(1 - ratio / 2);
//   3. one pass writes a into e and collects the indices with |a| > tau;
//   4. while the count is outside [2k/3, 4k/3] and corrections remain: tau *=
//      0.5 (too few) or 1.5 (too many) and collect again from e; should the
//      last correction leave no candidate, the last threshold that left some
//      is taken again;
//   5. keep min(c, k) candidates (the k of largest |a| if c > k), write them in
//      Top-K's wire format padded with zero values to k slots, zero them in e.
#include <algorithm>
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

namespace {

constexpr int kMaxAdjustments = 16;

/// z with P(X > z) = tail for X ~ N(0, 1), i.e. Phi^-1(1 - tail), for tail in
/// (0, 0.5]: bisection on the upper tail 0.5 erfc(z / sqrt 2), which falls
/// from 0.5 at z = 0 to below 1e-300 at z = 40 (200 halvings: exact to a
/// double's last bits).
double upperTailQuantile(double tail) {
  double lo = 0.0, hi = 40.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > tail)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

GaussianKCompressor::GaussianKCompressor(std::size_t n, const GaussianKOptions& options)
    : SparseCompressor(n, options.ratio, "Gaussian-K"), options_(options), z_(0) {
  GOSSAMER_ENFORCE(
      options.adjustments >= 0 && options.adjustments <= kMaxAdjustments,
      "Gaussian-K adjustments " << options.adjustments << " outside [0, " << kMaxAdjustments << "]");
  z_ = upperTailQuantile(options.ratio / 2);
  indices_.assign(n, 0);
}

// Collects the indices i with |a_i| > tau into indices_ (ascending) and
// returns their number. fromGradient: a = g + e, also written into e (the
// first collection); else a = e (e holds a already).
std::size_t GaussianKCompressor::collect(float tau, bool fromGradient, std::span<const float> gradient) {
  const std::size_t n = size();
  float* e = residual_.data();
  std::uint32_t* out = indices_.data();
  std::size_t c = 0;
  if (fromGradient) {
    const float* g = gradient.data();
    for (std::size_t i = 0; i < n; ++i) {
      const float a = g[i] + e[i];
      e[i] = a;
      if (std::fabs(a) > tau) out[c++] = static_cast<std::uint32_t>(i);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i)
      if (std::fabs(e[i]) > tau) out[c++] = static_cast<std::uint32_t>(i);
  }
  return c;
}

void GaussianKCompressor::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "Gaussian-K encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "Gaussian-K encode: payload bytes");
  const std::size_t n = size();
  const float* g = gradient.data();
  const float* e = residual_.data();
  // Step 1: mean and population variance of a = g + e. The residual is
  // finite, so a non-finite sum means a non-finite gradient entry.
  double sum = 0, squares = 0;
#pragma omp simd reduction(+ : sum, squares)
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = static_cast<double>(g[i] + e[i]);  // float, as it is sent
    sum += a;
    squares += a * a;
  }
  if (!std::isfinite(sum) || !std::isfinite(squares)) {
    throwIfNonFinite(gradient, "Gaussian-K encode: gradient");
    throw InvalidArgument("Gaussian-K encode: gradient + residual overflows float32");
  }
  const double mean = sum / static_cast<double>(n);
  const double sigma = std::sqrt(std::max(0.0, squares / static_cast<double>(n) - mean * mean));
  // Steps 2-4: the threshold, corrected while the count is far from k.
  // (Clamped: mean + sigma z of entries near FLT_MAX can exceed float32,
  // and an infinite threshold would select nothing, not even the largest.)
  constexpr double kLargest = std::numeric_limits<float>::max();
  auto tau = static_cast<float>(std::min(std::fabs(mean) + sigma * z_, kLargest));
  std::size_t c = collect(tau, true, gradient);
  float lastWithCandidates = c > 0 ? tau : -1.0f;  // the last threshold some entry passed
  int made = 0;
  for (; made < options_.adjustments; ++made) {
    if (3 * c < 2 * k_) {
      if (tau == 0.0f) break;  // nothing left to lower: fewer than 2k/3 non-zero entries
      tau *= 0.5f;
    } else if (3 * c > 4 * k_) {
      tau = static_cast<float>(std::min(tau * 1.5, kLargest));
    } else {
      break;
    }
    c = collect(tau, false, gradient);
    if (c > 0) lastWithCandidates = tau;
  }
  // Corrections that overshot to no candidate at all (entries of one
  // magnitude: halving passes them all, x1.5 none) would send nothing, step
  // after step, while the residual grows: the last threshold some entry
  // passed is taken instead, and its k largest are sent.
  if (c == 0 && lastWithCandidates >= 0.0f) {
    tau = lastWithCandidates;
    c = collect(tau, false, gradient);
  }
  candidates_ = c;
  threshold_ = tau;
  adjustmentsMade_ = made;
  // Step 5: more candidates than slots: the k of largest |a|, ascending.
  float* a = residual_.data();
  std::uint32_t* chosen = indices_.data();
  if (c > k_) {
    const auto larger = [a](std::uint32_t x, std::uint32_t y) {
      const float mx = std::fabs(a[x]), my = std::fabs(a[y]);
      return mx > my || (mx == my && x < y);
    };
    std::nth_element(chosen, chosen + k_ - 1, chosen + c, larger);
    std::sort(chosen, chosen + k_);
  }
  selected_ = std::min(c, k_);
  // Merge the selected indices with padding slots (value 0) at the lowest
  // indices not selected, so that the k indices ascend.
  std::size_t next = 0, j = 0, pads = k_ - selected_;
  for (std::size_t slot = 0; slot < k_; ++slot) {
    if (j < selected_ && (pads == 0 || chosen[j] <= next)) {
      const std::uint32_t i = chosen[j++];
      if (i == next) ++next;
      putSparse(payload, k_, slot, i, a[i]);
      a[i] = 0.0f;
    } else {
      putSparse(payload, k_, slot, static_cast<std::uint32_t>(next++), 0.0f);
      --pads;
    }
  }
}

void registerGaussianK(Registry& registry) {
  const GaussianKOptions d;
  registerCompressor(
      registry, "gaussk",
      [](const OptimizerContext& ctx, std::size_t n) -> std::unique_ptr<Compressor> {
        GaussianKOptions o;
        o.ratio = ctx.config.get<double>("compression.gaussk_ratio");
        o.adjustments = ctx.config.get<int>("compression.gaussk_adjustments");
        return std::make_unique<GaussianKCompressor>(n, o);
      },
      KeySet()
          .real("gaussk_ratio", d.ratio, {0.0, false, 1.0, true},
                "Gaussian-K: fraction of the entries sent per step (k = ceil(ratio * P) payload slots)")
          .integer("gaussk_adjustments", d.adjustments, 0, kMaxAdjustments,
                   "Gaussian-K: threshold corrections per step at most (halve below 2k/3 candidates, x1.5 "
                   "above 4k/3)")
          .rule(needsAllReduceSgd("gaussk")));
}

}  // namespace gossamer::optimizers
