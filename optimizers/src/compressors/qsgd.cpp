// QSGD (Alistarh et al., NeurIPS 2017; a baseline of Bhattacharya et al., "O(1)
// Communication for Distributed SGD through Two-Level Gradient Averaging",
// Table 2): unbiased stochastic quantisation of each bucket to s levels of its
// norm, bit-packed and gathered: 4 bytes per bucket (the norm) + n
// (1 + bit_width(s)) / 8, padded to 4 (about n/2 + 4n/512 bytes for s = 4,
// bucket 512).
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

// ---- QSGD -----------------------------------------------------------------------

QsgdCompressor::QsgdCompressor(std::size_t n, const QsgdOptions& options)
    : Compressor(n), options_(options), bits_(0), buckets_(0), payloadBytes_(0), state_(0) {
  GOSSAMER_ENFORCE(options.levels >= 1 && options.levels <= 65535,
                   "QSGD levels " << options.levels << " outside [1, 65535]");
  GOSSAMER_ENFORCE(options.bucketSize >= 1, "QSGD bucket size must be >= 1");
  bits_ = 1 + std::bit_width(static_cast<unsigned>(options.levels));
  buckets_ = n / options.bucketSize + (n % options.bucketSize != 0 ? 1 : 0);  // (no wrap for a huge bucket)
  const std::size_t codeWords = (n * static_cast<std::size_t>(bits_) + 31) / 32;
  payloadBytes_ = 4 * buckets_ + 4 * codeWords;
  state_ = splitmix64(options.seed ^ (0x51D6ull << 48) ^
                      (static_cast<std::uint64_t>(options.rank) * 0x9E3779B97F4A7C15ull));
}

void QsgdCompressor::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "QSGD encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "QSGD encode: payload bytes");
  const std::size_t n = size(), bucket = options_.bucketSize;
  const auto s = static_cast<float>(options_.levels);
  const unsigned levelBits = static_cast<unsigned>(bits_ - 1);
  std::byte* norms = payload.data();
  std::byte* words = payload.data() + 4 * buckets_;
  // Norms first, so that a NaN is reported before the random stream moves.
  for (std::size_t b = 0; b < buckets_; ++b) {
    const float* v = gradient.data() + b * bucket;
    const std::size_t m = std::min(bucket, n - b * bucket);
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (std::size_t i = 0; i < m; ++i) sq += v[i] * v[i];
    double norm = std::sqrt(static_cast<double>(sq));
    // Squares below float32's range (entries under about 1e-19) vanish from
    // a float sum: such a bucket, and one whose sum overflowed, is summed in
    // double (entries of a bucket whose float sum is 1e-20 or more lose
    // nothing that matters against it).
    if (!std::isfinite(norm) || sq < 1e-20f) {
      throwIfNonFinite(gradient.subspan(b * bucket, m), "QSGD encode: gradient bucket");
      double d = 0;
      for (std::size_t i = 0; i < m; ++i) d += static_cast<double>(v[i]) * v[i];
      norm = std::sqrt(d);
    }
    const auto normFloat = static_cast<float>(norm);
    std::memcpy(norms + 4 * b, &normFloat, 4);
    if (!std::isfinite(normFloat)) {
      throw InvalidArgument("QSGD encode: the norm of bucket " + std::to_string(b) +
                            " does not fit in a float32");
    }
  }
  std::uint64_t acc = 0;
  unsigned filled = 0;
  std::size_t word = 0;
  for (std::size_t b = 0; b < buckets_; ++b) {
    const float* v = gradient.data() + b * bucket;
    const std::size_t m = std::min(bucket, n - b * bucket);
    float norm;
    std::memcpy(&norm, norms + 4 * b, 4);
    const float scale = norm > 0.0f ? s / norm : 0.0f;
    // A norm below s / FLT_MAX (a bucket of subnormal entries) makes s / norm
    // infinite: such a bucket's levels are |v| / norm * s, in double.
    const bool tiny = !std::isfinite(scale);
    for (std::size_t i = 0; i < m; ++i) {
      const float r = tiny ? static_cast<float>(std::min(std::fabs(static_cast<double>(v[i])) /
                                                             static_cast<double>(norm) * options_.levels,
                                                         static_cast<double>(s)))
                           : std::min(std::fabs(v[i]) * scale, s);
      const float floor = std::floor(r);
      const float u = static_cast<float>(nextRandom(state_) >> 40) * 0x1p-24f;
      const auto level = static_cast<std::uint32_t>(floor) + (u < r - floor ? 1u : 0u);
      const std::uint32_t sign = (v[i] < 0.0f && level > 0) ? 1u : 0u;
      acc |= static_cast<std::uint64_t>(level | (sign << levelBits)) << filled;
      filled += static_cast<unsigned>(bits_);
      if (filled >= 32) {
        const auto w = static_cast<std::uint32_t>(acc);
        std::memcpy(words + 4 * word++, &w, 4);
        acc >>= 32;
        filled -= 32;
      }
    }
  }
  if (filled > 0) {
    const auto w = static_cast<std::uint32_t>(acc);
    std::memcpy(words + 4 * word, &w, 4);
  }
}

void QsgdCompressor::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                            std::span<float> out) {
  (void)gradient;
  checkLength(out.size(), size(), "QSGD decode: output elements");
  const std::size_t count = gatheredCount(combined.size(), payloadBytes());
  const std::size_t n = size(), bucket = options_.bucketSize;
  const unsigned levelBits = static_cast<unsigned>(bits_ - 1);
  const std::uint64_t levelMask = (std::uint64_t{1} << levelBits) - 1;
  const auto levels = static_cast<std::uint64_t>(options_.levels);
  // Each rank's values are divided by the number of ranks as they are
  // added: no partial sum leaves float32's range where the average fits it.
  const double share = 1.0 / static_cast<double>(count);
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t r = 0; r < count; ++r) {
    const std::byte* p = combined.data() + r * payloadBytes();
    const std::byte* words = p + 4 * buckets_;
    std::uint64_t acc = 0;
    unsigned available = 0;
    std::size_t word = 0;
    for (std::size_t b = 0; b < buckets_; ++b) {
      float norm;
      std::memcpy(&norm, p + 4 * b, 4);
      if (!std::isfinite(norm) || norm < 0.0f) {
        throw ProtocolError(static_cast<int>(r), 4 * b,
                            "QSGD payload: bucket norm " + std::to_string(norm) + " is not finite and >= 0");
      }
      const auto unit = static_cast<float>(static_cast<double>(norm) / static_cast<double>(levels) * share);
      const std::size_t m = std::min(bucket, n - b * bucket);
      float* o = out.data() + b * bucket;
      for (std::size_t i = 0; i < m; ++i) {
        if (available < static_cast<unsigned>(bits_)) {
          std::uint32_t w;
          std::memcpy(&w, words + 4 * word++, 4);
          acc |= static_cast<std::uint64_t>(w) << available;
          available += 32;
        }
        const std::uint64_t level = acc & levelMask;
        const bool negative = ((acc >> levelBits) & 1u) != 0;
        acc >>= bits_;
        available -= static_cast<unsigned>(bits_);
        if (level > levels) {
          throw ProtocolError(
              static_cast<int>(r), 4 * buckets_ + 4 * (word - 1),
              "QSGD payload: level " + std::to_string(level) + " above s = " + std::to_string(levels));
        }
        const float value = static_cast<float>(level) * unit;
        o[i] += negative ? -value : value;
      }
    }
  }
}

void registerQsgd(Registry& registry) {
  const QsgdOptions d;
  registerCompressor(
      registry, "qsgd",
      [](const OptimizerContext& ctx, std::size_t n) -> std::unique_ptr<Compressor> {
        QsgdOptions o;
        o.levels = ctx.config.get<int>("compression.qsgd_levels");
        o.bucketSize = static_cast<std::size_t>(ctx.config.get<int>("compression.qsgd_bucket_size"));
        o.seed = ctx.config.seed();
        o.rank = ctx.transport.rank();
        return std::make_unique<QsgdCompressor>(n, o);
      },
      KeySet()
          .integer("qsgd_levels", d.levels, 1, 65535, "quantisation levels s")
          .integer("qsgd_bucket_size", static_cast<int>(d.bucketSize), 1, INT_MAX,
                   "elements per bucket, each with its own norm")
          .rule(needsAllReduceSgd("qsgd")));
}

}  // namespace gossamer::optimizers
