// Checks and small kernels the compressors share.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/topologies/topologies.hpp"

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

/// Sums of the non-negative entries, of the negative entries, and the number
/// of negative entries of g, in one pass. NaN and infinities make a sum

inline void scaleInPlace(std::span<float> v, float factor) {
#pragma omp simd
  for (std::size_t i = 0; i < v.size(); ++i) v[i] *= factor;
}

/// splitmix64 step: the QSGD random stream.
inline std::uint64_t nextRandom(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  return topologies::splitmix64(state);
}

inline std::size_t gatheredCount(std::size_t combinedBytes, std::size_t payloadBytes) {
  if (combinedBytes == 0 || combinedBytes % payloadBytes != 0) {
    throw InvalidArgument("combined payloads: " + std::to_string(combinedBytes) +
                          " bytes is not a whole number (>= 1) of " + std::to_string(payloadBytes) +
                          "-byte payloads");
  }
  return combinedBytes / payloadBytes;
}

}  // namespace gossamer::optimizers::detail
