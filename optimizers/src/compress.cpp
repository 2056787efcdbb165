// Gradient compressors: A2SGD (paper 002_924d025a547be22c.txt, Eq. 2 and
// Algorithm 1 lines 3-6), Top-K with error feedback and QSGD (the paper's
// baselines, Table 2), and the dense "none". See compress.hpp.
//
// Bytes per rank per step (the payload; the exchange multiplies it, see
// CompressedSgd): A2SGD 8 (two float32 means, for any n); Top-K 8k (uint32
// index + float32 value per kept entry); QSGD 4 per bucket + n (1 +
// bit_width(s)) / 8, padded to 4 (n/2 + 4n/512 for s = 4, bucket 512);
// dense 4n.
//
// Speed: A2SGD is memory-bound. encode reads g once and writes nothing;
// decode reads g once and writes g' once (and eps when asked). The loops are
// written for the auto-vectoriser (omp simd reductions over float lanes,
// compiled with -fopenmp-simd -fno-trapping-math; see
// optimizers/CMakeLists.txt), with four independent accumulator sets so the
// additions do not wait on each other. Large outputs are written with SSE2
// streaming stores (A2sgdOptions::streamingFloats): a plain store first reads
// the line it writes, a third memory stream that memcpy does not pay.
#include "gossamer/optimizers/compress.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gossamer/errors.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::optimizers {

namespace {

/// Throws InvalidArgument naming the first non-finite entry of `v`, if any.
void throwIfNonFinite(std::span<const float> v, const char* what) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] is " +
                            (std::isnan(v[i]) ? "NaN" : "infinite") + ": gradients must be finite");
    }
  }
}

void checkLength(std::size_t got, std::size_t want, const char* what) {
  if (got != want) {
    throw InvalidArgument(std::string(what) + ": expected " + std::to_string(want) + ", got " +
                          std::to_string(got));
  }
}

/// Sums of the non-negative entries, of the negative entries, and the number
/// of negative entries of g, in one pass. NaN and infinities make a sum
/// non-finite (NaN is not < 0, so it lands in the first sum).
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

void scaleInPlace(std::span<float> v, float factor) {
#pragma omp simd
  for (std::size_t i = 0; i < v.size(); ++i) v[i] *= factor;
}

/// splitmix64 step: the QSGD random stream.
std::uint64_t nextRandom(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  return topologies::splitmix64(state);
}

std::size_t gatheredCount(std::size_t combinedBytes, std::size_t payloadBytes) {
  if (combinedBytes == 0 || combinedBytes % payloadBytes != 0) {
    throw InvalidArgument("combined payloads: " + std::to_string(combinedBytes) +
                          " bytes is not a whole number (>= 1) of " + std::to_string(payloadBytes) +
                          "-byte payloads");
  }
  return combinedBytes / payloadBytes;
}

}  // namespace

// ---- Compressor ---------------------------------------------------------------

Compressor::Compressor(std::size_t n) : size_(n) {
  GOSSAMER_ENFORCE(n >= 1, "a compressor needs at least one element");
  GOSSAMER_ENFORCE(n <= std::numeric_limits<std::uint32_t>::max(),
                   "gradients of " << n << " elements: at most 2^32 - 1 are supported");
}

// ---- dense ----------------------------------------------------------------------

DenseCompressor::DenseCompressor(std::size_t n) : Compressor(n) {}

void DenseCompressor::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "dense encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "dense encode: payload bytes");
  std::memcpy(payload.data(), gradient.data(), payload.size());
}

void DenseCompressor::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                             std::span<float> out) {
  (void)gradient;
  checkLength(combined.size(), payloadBytes(), "dense decode: combined bytes");
  checkLength(out.size(), size(), "dense decode: output elements");
  std::memmove(out.data(), combined.data(), combined.size());
}

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

// ---- Top-K ----------------------------------------------------------------------

TopKCompressor::TopKCompressor(std::size_t n, double ratio) : Compressor(n), k_(0) {
  GOSSAMER_ENFORCE(ratio > 0 && ratio <= 1, "Top-K ratio " << ratio << " outside (0, 1]");
  k_ = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
  residual_.assign(n, 0.0f);
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
  if (!(probe == 0.0f)) throwIfNonFinite(gradient, "Top-K encode: gradient");
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
  std::byte* indices = payload.data();
  std::byte* values = payload.data() + 4 * k_;
  std::size_t taken = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = g[i] + e[i];
    const float m = std::fabs(a);
    if (m > threshold || (m == threshold && ties > 0)) {
      if (!(m > threshold)) --ties;
      const auto index = static_cast<std::uint32_t>(i);
      std::memcpy(indices + 4 * taken, &index, 4);
      std::memcpy(values + 4 * taken, &a, 4);
      ++taken;
      e[i] = 0.0f;
    } else {
      e[i] = a;
    }
  }
  GOSSAMER_ENFORCE(taken == k_, "Top-K selected " << taken << " entries, expected " << k_);
}

void TopKCompressor::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                            std::span<float> out) {
  (void)gradient;
  checkLength(out.size(), size(), "Top-K decode: output elements");
  const std::size_t count = gatheredCount(combined.size(), payloadBytes());
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t r = 0; r < count; ++r) {
    const std::byte* p = combined.data() + r * payloadBytes();
    for (std::size_t j = 0; j < k_; ++j) {
      std::uint32_t index;
      float value;
      std::memcpy(&index, p + 4 * j, 4);
      std::memcpy(&value, p + 4 * (k_ + j), 4);
      if (index >= size()) {
        throw ProtocolError(
            static_cast<int>(r), 4 * j,
            "Top-K payload: index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      }
      out[index] += value;
    }
  }
  if (count > 1) scaleInPlace(out, 1.0f / static_cast<float>(count));
}

// ---- QSGD -----------------------------------------------------------------------

QsgdCompressor::QsgdCompressor(std::size_t n, const QsgdOptions& options)
    : Compressor(n), options_(options), bits_(0), buckets_(0), payloadBytes_(0), state_(0) {
  GOSSAMER_ENFORCE(options.levels >= 1 && options.levels <= 65535,
                   "QSGD levels " << options.levels << " outside [1, 65535]");
  GOSSAMER_ENFORCE(options.bucketSize >= 1, "QSGD bucket size must be >= 1");
  bits_ = 1 + std::bit_width(static_cast<unsigned>(options.levels));
  buckets_ = (n + options.bucketSize - 1) / options.bucketSize;
  const std::size_t codeWords = (n * static_cast<std::size_t>(bits_) + 31) / 32;
  payloadBytes_ = 4 * buckets_ + 4 * codeWords;
  state_ = topologies::splitmix64(options.seed ^ (0x51D6ull << 48) ^
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
    if (!std::isfinite(norm)) {
      throwIfNonFinite(gradient.subspan(b * bucket, m), "QSGD encode: gradient bucket");
      double d = 0;  // finite entries whose float sum of squares overflowed
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
    for (std::size_t i = 0; i < m; ++i) {
      const float r = std::min(std::fabs(v[i]) * scale, s);
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
      const float unit = norm / static_cast<float>(options_.levels);
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
  if (count > 1) scaleInPlace(out, 1.0f / static_cast<float>(count));
}

// ---- factory --------------------------------------------------------------------

std::unique_ptr<Compressor> makeCompressor(const CompressionOptions& o, std::size_t n) {
  if (o.kind == "none") return std::make_unique<DenseCompressor>(n);
  if (o.kind == "a2sgd") return std::make_unique<A2sgdCompressor>(n, o.a2sgd);
  if (o.kind == "topk") return std::make_unique<TopKCompressor>(n, o.topkRatio);
  if (o.kind == "qsgd") return std::make_unique<QsgdCompressor>(n, o.qsgd);
  throw InvalidArgument("unknown compressor '" + o.kind + "' (none, a2sgd, topk, qsgd)");
}

}  // namespace gossamer::optimizers
