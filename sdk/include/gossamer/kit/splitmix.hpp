// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014; the finaliser of Java's SplittableRandom): a
// well-mixed 64-bit hash, and the stream that steps a state by the golden
// ratio and hashes it. The seeded randomness of the topologies, QSGD and
// fault injection, the same on every platform.
#pragma once

#include <cstdint>

namespace gossamer {

/// SplitMix64's hash of `x`: all 64 bits depend on all of x's.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// The next value of the SplitMix64 stream whose state is `state` (stepped).
constexpr std::uint64_t splitmixNext(std::uint64_t& state) noexcept {
  state += 0x9E3779B97F4A7C15ULL;
  return splitmix64(state);
}

/// A uniform double in [0, 1) from the next value of the stream (its top 53 bits).
constexpr double splitmixUniform(std::uint64_t& state) noexcept {
  return static_cast<double>(splitmixNext(state) >> 11) * 0x1.0p-53;
}

}  // namespace gossamer
