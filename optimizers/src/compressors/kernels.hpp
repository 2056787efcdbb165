// Checks and small kernels the compressors share.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/kit/splitmix.hpp"

namespace gossamer::optimizers::detail {

/// Throws InvalidArgument naming the first non-finite entry of `v`, if any.
inline void throwIfNonFinite(std::span<const float> v, const char* what) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] is " +
                            (std::isnan(v[i]) ? "NaN" : "infinite") + ": gradients must be finite");
    }
  }
}

inline void checkLength(std::size_t got, std::size_t want, const char* what) {
  if (got != want) {
    throw InvalidArgument(std::string(what) + ": expected " + std::to_string(want) + ", got " +
                          std::to_string(got));
  }
}

/// Throws InvalidArgument unless `p` is aligned for T: a payload read or
/// written in place as T's (the 16-bit compressors') must be.
template <typename T>
void checkAligned(const void* p, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0)
    throw InvalidArgument(std::string(what) + ": the buffer is not aligned to " + std::to_string(alignof(T)) +
                          " bytes");
}

/// splitmix64 step: the QSGD random stream.
inline std::uint64_t nextRandom(std::uint64_t& state) { return splitmixNext(state); }

inline std::size_t gatheredCount(std::size_t combinedBytes, std::size_t payloadBytes) {
  if (combinedBytes == 0 || combinedBytes % payloadBytes != 0) {
    throw InvalidArgument("combined payloads: " + std::to_string(combinedBytes) +
                          " bytes is not a whole number (>= 1) of " + std::to_string(payloadBytes) +
                          "-byte payloads");
  }
  return combinedBytes / payloadBytes;
}

/// Entries a sparsifier (Top-K, Gaussian-K) sends per step for a ratio of
/// n elements: k = clamp(ceil(ratio * n), 1, n).
/// @throws InvalidArgument unless 0 < ratio <= 1 (`who` names the compressor).
inline std::size_t sparseCount(double ratio, std::size_t n, const char* who) {
  GOSSAMER_ENFORCE(ratio > 0 && ratio <= 1, who << " ratio " << ratio << " outside (0, 1]");
  // ratio * n carries the rounding of ratio's decimal (0.07 * 100 is
  // 7.000000000000001): a product within a few units in the last place of
  // a whole number is that number, so that k is the ceiling of the decimal
  // product.
  const double exact = ratio * static_cast<double>(n);
  const double nearest = std::round(exact);
  const double k = std::abs(exact - nearest) <= 4 * DBL_EPSILON * nearest ? nearest : std::ceil(exact);
  return std::clamp<std::size_t>(static_cast<std::size_t>(k), 1, n);
}

/// Writes entry j of a sparse payload (the Top-K wire format: k uint32
/// indices, then k float32 values; 8k bytes).
inline void putSparse(std::span<std::byte> payload, std::size_t k, std::size_t j, std::uint32_t index,
                      float value) {
  std::memcpy(payload.data() + 4 * j, &index, 4);
  std::memcpy(payload.data() + 4 * (k + j), &value, 4);
}

/// Decodes gathered sparse payloads (the Top-K wire format, see putSparse;
/// `combined` is a whole number >= 1 of 8k-byte payloads in rank order) into
/// `out` (n floats): the average of the sparse vectors, each value divided
/// by their number before it is added (no partial sum leaves float32's
/// range where the average fits it), in rank order so that every rank gets
/// bitwise the same result.
/// @throws InvalidArgument if `combined` is not a whole number of payloads;
///         ProtocolError (peer = the payload's rank, offset within it) for
///         an index outside [0, n) or not above the one before it, or a
///         value that is not finite (the encoders send finite values only).
///         `who` names the compressor in the messages.
inline void decodeSparse(std::span<const std::byte> combined, std::size_t k, std::span<float> out,
                         const char* who) {
  const std::size_t n = out.size(), bytes = 8 * k;
  const std::size_t count = gatheredCount(combined.size(), bytes);
  const auto ranks = static_cast<float>(count);
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t r = 0; r < count; ++r) {
    const std::byte* p = combined.data() + r * bytes;
    for (std::size_t j = 0; j < k; ++j) {
      std::uint32_t index, previous = 0;
      float value;
      std::memcpy(&index, p + 4 * j, 4);
      std::memcpy(&value, p + 4 * (k + j), 4);
      if (j > 0) std::memcpy(&previous, p + 4 * (j - 1), 4);
      if (index >= n || (j > 0 && index <= previous)) {
        throw ProtocolError(static_cast<int>(r), 4 * j,
                            std::string(who) + " payload: index " + std::to_string(index) + " outside [0, " +
                                std::to_string(n) + ") or not above the one before it");
      }
      if (!std::isfinite(value)) {
        throw ProtocolError(static_cast<int>(r), 4 * (k + j),
                            std::string(who) + " payload: value " + std::to_string(value) + " at index " +
                                std::to_string(index) + " is not finite");
      }
      out[index] += value / ranks;  // (one rounding, not contracted into an FMA)
    }
  }
}

}  // namespace gossamer::optimizers::detail
