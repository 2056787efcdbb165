// A2SGD, two-level gradient averaging (Bhattacharya et al., "O(1) Communication
// for Distributed SGD through Two-Level Gradient Averaging", Eq. 2 and
// Algorithm 1 lines 3-6): each rank sends the two means of its gradient,
// mu+ over the non-negative entries and mu- over the magnitudes of the
// negative ones (8 bytes per step for any n, averaged over the ranks), and
// decodes g' = g + pos(g) (mu+bar - mu+) - neg(g) (mu-bar - mu-), which keeps
// the local error eps = g - enc(g) (see A2sgdCompressor).
//
// Speed: memory-bound. encode reads g once and writes nothing; decode reads g
// once and writes g' once (and eps when asked). The loops are written for the
// auto-vectoriser (omp simd reductions over float lanes, compiled with
// -fopenmp-simd -fno-trapping-math; see optimizers/CMakeLists.txt), with four
// independent accumulator sets so the additions do not wait on each other.
// Large outputs are written with SSE2 streaming stores
// (A2sgdOptions::streamingFloats): a plain store first reads the line it
// writes, a third memory stream that memcpy does not pay.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

namespace {

struct SignSums {
  double positive = 0;
  double negative = 0;
  std::size_t negatives = 0;
};

SignSums signSums(const float* g, std::size_t n) {
  // Blocks of 4096 elements in four interleaved quarters: 12 float lanes
  // sums per block (exact for the counts: <= 1024 per lane), then summed in
  // double, so the error does not grow with n.
  constexpr std::size_t kBlock = 4096, kQuarter = kBlock / 4;
  SignSums s;
  double negatives = 0;
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const float* x = g + i;
    float p0 = 0, p1 = 0, p2 = 0, p3 = 0, m0 = 0, m1 = 0, m2 = 0, m3 = 0, c0 = 0, c1 = 0, c2 = 0, c3 = 0;
#pragma omp simd reduction(+ : p0, p1, p2, p3, m0, m1, m2, m3, c0, c1, c2, c3)
    for (std::size_t k = 0; k < kQuarter; ++k) {
      const float v0 = x[k], v1 = x[k + kQuarter], v2 = x[k + 2 * kQuarter], v3 = x[k + 3 * kQuarter];
      p0 += v0 < 0.0f ? 0.0f : v0;
      p1 += v1 < 0.0f ? 0.0f : v1;
      p2 += v2 < 0.0f ? 0.0f : v2;
      p3 += v3 < 0.0f ? 0.0f : v3;
      m0 += v0 < 0.0f ? v0 : 0.0f;
      m1 += v1 < 0.0f ? v1 : 0.0f;
      m2 += v2 < 0.0f ? v2 : 0.0f;
      m3 += v3 < 0.0f ? v3 : 0.0f;
      c0 += v0 < 0.0f ? 1.0f : 0.0f;
      c1 += v1 < 0.0f ? 1.0f : 0.0f;
      c2 += v2 < 0.0f ? 1.0f : 0.0f;
      c3 += v3 < 0.0f ? 1.0f : 0.0f;
    }
    s.positive += (static_cast<double>(p0) + p1) + (static_cast<double>(p2) + p3);
    s.negative += (static_cast<double>(m0) + m1) + (static_cast<double>(m2) + m3);
    negatives += (static_cast<double>(c0) + c1) + (static_cast<double>(c2) + c3);
  }
  for (; i < n; ++i) {
    const float v = g[i];
    if (v < 0.0f) {
      s.negative += v;
      negatives += 1;
    } else {
      s.positive += v;
    }
  }
  s.negatives = static_cast<std::size_t>(negatives);
  return s;
}

/// out_i = g_i + (g_i < 0 ? -dn : dp): the A2SGD rebuild as a shift of g.
void shiftBySign(const float* __restrict g, float* __restrict out, std::size_t n, float dp, float dn) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = g[i] + (g[i] < 0.0f ? -dn : dp);
}

#if defined(__SSE2__)
/// Same as shiftBySign with non-temporal stores: for outputs much larger than
/// the caches the stores skip the read-for-ownership of `out`'s lines (a
/// third memory stream) and do not evict `g`. SSE2 is part of x86-64.
void shiftBySignStreaming(const float* g, float* out, std::size_t n, float dp, float dn) {
  std::size_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 15) != 0; ++i) {
    out[i] = g[i] + (g[i] < 0.0f ? -dn : dp);
  }
  const __m128 zero = _mm_setzero_ps(), up = _mm_set1_ps(dp), down = _mm_set1_ps(-dn);
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(g + i), b = _mm_loadu_ps(g + i + 4);
    const __m128 na = _mm_cmplt_ps(a, zero), nb = _mm_cmplt_ps(b, zero);
    _mm_stream_ps(out + i, _mm_add_ps(a, _mm_or_ps(_mm_and_ps(na, down), _mm_andnot_ps(na, up))));
    _mm_stream_ps(out + i + 4, _mm_add_ps(b, _mm_or_ps(_mm_and_ps(nb, down), _mm_andnot_ps(nb, up))));
  }
  for (; i < n; ++i) out[i] = g[i] + (g[i] < 0.0f ? -dn : dp);
  _mm_sfence();  // order the streaming stores before whatever reads `out` next
}
#endif

void shiftBySignInPlace(float* g, std::size_t n, float dp, float dn) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) g[i] += g[i] < 0.0f ? -dn : dp;
}

/// Same, and also err_i = g_i - enc(g)_i = g_i - (g_i < 0 ? -mn : mp).
void shiftBySignKeepError(const float* g, float* out, float* __restrict err, std::size_t n, float dp,
                          float dn, float mp, float mn) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = g[i];
    const bool negative = v < 0.0f;
    err[i] = v - (negative ? -mn : mp);
    out[i] = v + (negative ? -dn : dp);
  }
}

}  // namespace

// ---- A2SGD ----------------------------------------------------------------------

A2sgdCompressor::A2sgdCompressor(std::size_t n, const A2sgdOptions& options)
    : Compressor(n), options_(options), error_(options.keepError ? n : 0) {}

void A2sgdCompressor::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "A2SGD encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "A2SGD encode: payload bytes");
  SignSums s = signSums(gradient.data(), gradient.size());
  if (!std::isfinite(s.positive) || !std::isfinite(s.negative)) {
    throwIfNonFinite(gradient, "A2SGD encode: gradient");
    // Every entry is finite but a float lane overflowed: sum again in double.
    s = SignSums{};
    for (float v : gradient) {
      if (v < 0.0f) {
        s.negative += v;
        ++s.negatives;
      } else {
        s.positive += v;
      }
    }
  }
  countPositive_ = size() - s.negatives;
  meanPositive_ =
      countPositive_ ? static_cast<float>(s.positive / static_cast<double>(countPositive_)) : 0.0f;
  meanNegative_ = s.negatives ? static_cast<float>(-s.negative / static_cast<double>(s.negatives)) : 0.0f;
  const float means[2] = {meanPositive_, meanNegative_};
  std::memcpy(payload.data(), means, sizeof(means));
  encoded_ = true;
}

void A2sgdCompressor::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                             std::span<float> out) {
  GOSSAMER_ENFORCE(encoded_, "A2SGD decode before encode");
  checkLength(combined.size(), payloadBytes(), "A2SGD decode: combined bytes");
  checkLength(gradient.size(), size(), "A2SGD decode: gradient elements");
  checkLength(out.size(), size(), "A2SGD decode: output elements");
  float global[2];
  std::memcpy(global, combined.data(), sizeof(global));
  // Each is an average of means >= 0: anything else came from a corrupt
  // rank or overflowed, and would fill every entry of g' with it.
  for (std::size_t i = 0; i < 2; ++i)
    if (!(std::isfinite(global[i]) && global[i] >= 0.0f))
      throw ProtocolError(-1, 4 * i,
                          std::string("A2SGD decode: the ranks' average ") + (i == 0 ? "mu+" : "mu-") + " " +
                              std::to_string(global[i]) +
                              " is not finite and >= 0 (a rank sent a corrupt mean, or the sum overflowed)");
  // g' = eps + pos mu+bar - neg mu-bar = g + pos (mu+bar - mu+) - neg (mu-bar - mu-).
  const float dp = global[0] - meanPositive_, dn = global[1] - meanNegative_;
  if (options_.keepError) {
    shiftBySignKeepError(gradient.data(), out.data(), error_.data(), size(), dp, dn, meanPositive_,
                         meanNegative_);
  } else if (out.data() == gradient.data()) {
    shiftBySignInPlace(out.data(), size(), dp, dn);
  } else {
    const auto* g = reinterpret_cast<const std::byte*>(gradient.data());
    const auto* o = reinterpret_cast<const std::byte*>(out.data());
    GOSSAMER_ENFORCE(o + size() * sizeof(float) <= g || g + size() * sizeof(float) <= o,
                     "A2SGD decode: out overlaps gradient without being the same memory");
#if defined(__SSE2__)
    if (size() >= options_.streamingFloats) {
      shiftBySignStreaming(gradient.data(), out.data(), size(), dp, dn);
      return;
    }
#endif
    shiftBySign(gradient.data(), out.data(), size(), dp, dn);
  }
}

std::span<const float> A2sgdCompressor::error() const { return error_; }

namespace {
/// A2SGD needs an optimizer whose exchange is an allreduce or a model gossip.
/// (Listed, so that an optimizer added later is refused until it is made to fit.)
std::optional<ConfigIssue> checkOptimizer(const Config& c) {
  const std::string& name = c.get<std::string>("algorithm.name");
  if (c.get<std::string>("compression.kind") != "a2sgd" || name == "allreduce_sgd" ||
      name == "crossover_sgd" || name == "sgp")
    return std::nullopt;
  return ConfigIssue{
      "compression.kind",
      "'a2sgd' runs under algorithm.name 'allreduce_sgd', 'crossover_sgd' or 'sgp', not '" + name + "'"};
}

/// compression.sync gossip runs the gossip optimizer's exchange.
std::optional<ConfigIssue> checkGossipSync(const Config& c) {
  if (c.get<std::string>("compression.kind") != "a2sgd" || c.get<std::string>("compression.sync") != "gossip")
    return std::nullopt;
  if (c.get<std::string>("algorithm.name") == "crossover_sgd" ||
      c.get<std::string>("algorithm.name") == "sgp")
    return std::nullopt;
  return ConfigIssue{"compression.sync",
                     "'gossip' synchronises the models with one exchange of algorithm.name, which must be "
                     "'crossover_sgd' or 'sgp', got '" +
                         c.get<std::string>("algorithm.name") + "'"};
}
}  // namespace

void registerA2sgd(Registry& registry) {
  const std::vector<std::string> where{"auto", "allreduce", "gossip"};
  const CompressedSgdOptions d;
  registerCompressor(
      registry, "a2sgd",
      [](const OptimizerContext& ctx, std::size_t n) -> std::unique_ptr<Compressor> {
        A2sgdOptions o;
        o.keepError = ctx.config.get<bool>("compression.keep_error");
        return std::make_unique<A2sgdCompressor>(n, o);
      },
      KeySet()
          .text("means", "auto", where,
                "where the two means are averaged: over all ranks (allreduce), push-sum among the topology's "
                "peers (gossip), or auto (gossip under a gossip optimizer, else allreduce)")
          .integer("gossip_rounds", d.gossipRounds, 1, 64, "gossiped means: push-sum rounds per step")
          .text(
              "sync", "auto", where,
              "how drifting models are synchronised: allreduce average, one exchange of the gossip optimizer "
              "(gossip: crossover_sgd or sgp), or auto")
          .integer("sync_period", 0, 0, INT_MAX, "steps between model syncs (0 = only the final one)")
          .boolean("final_sync", d.finalSync, "synchronise after the last step (Algorithm 1, lines 9-10)")
          .boolean("keep_error", A2sgdOptions{}.keepError, "also store the error vector g - enc(g) each step")
          .onlyWhenSelected()
          .rule(checkOptimizer)
          .rule(checkGossipSync));
}

}  // namespace gossamer::optimizers
