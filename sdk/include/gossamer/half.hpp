// 16-bit floating point: IEEE 754 binary16 (torch.float16) and bfloat16
// (torch.bfloat16), as element types of the collectives and the gossip
// exchanges, and the conversion and reduction kernels behind them.
//
// Both are stored as their 16 raw bits, 2 bytes per element in memory and on
// the wire, bit for bit what torch stores for the same dtype. Arithmetic never
// happens in 16 bits: a reduction converts both operands to float32, combines
// them there and rounds the result once, to nearest with ties to even (the
// rounding torch's `.to(torch.bfloat16)` / `.half()` use). A collective hop
// therefore rounds once; see docs/collectives.md ("16-bit vectors") for the
// error bound this gives each algorithm.
//
// The bulk kernels are vectorised: F16C (8 binary16 at a time) and AVX2 (8
// bfloat16 at a time) where the CPU has them, chosen once at run time; a
// portable scalar path elsewhere gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace gossamer {

/// IEEE 754 binary16: 1 sign bit, 5 exponent bits, 10 fraction bits
/// (torch.float16). Largest finite value 65504; below 6.1e-5 subnormal.
struct float16 {
  std::uint16_t bits = 0;  ///< The raw binary16 encoding.
  friend bool operator==(float16, float16) = default;
};

/// bfloat16: the upper 16 bits of a float32 (1 sign, 8 exponent, 7 fraction
/// bits; torch.bfloat16). The range of float32 with 8 bits of precision.
struct bfloat16 {
  std::uint16_t bits = 0;  ///< The raw bfloat16 encoding.
  friend bool operator==(bfloat16, bfloat16) = default;
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2, "16-bit types are 2 bytes");

/// Unit roundoff of a 16-bit type: the largest relative error of one rounding
/// to nearest (2^-11 for binary16, 2^-8 for bfloat16), for normal results.
template <typename T>
inline constexpr double kUnitRoundoff = 0.0;
template <>
inline constexpr double kUnitRoundoff<float16> = 1.0 / 2048.0;
template <>
inline constexpr double kUnitRoundoff<bfloat16> = 1.0 / 256.0;

/// True for float16 and bfloat16.
template <typename T>
inline constexpr bool kIsHalf = false;
template <>
inline constexpr bool kIsHalf<float16> = true;
template <>
inline constexpr bool kIsHalf<bfloat16> = true;

/// The float32 value of `x` (exact: every bfloat16 is a float32).
inline float toFloat(bfloat16 x) {
  const std::uint32_t u = std::uint32_t{x.bits} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// `f` rounded to the nearest bfloat16, ties to even; a NaN stays a (quiet)
/// NaN with its sign, infinities stay infinite, overflow rounds to infinity.
inline bfloat16 toBfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<std::uint16_t>(u >> 16)};
}

/// The float32 value of `x` (exact: every binary16, subnormals included, is a float32).
float toFloat(float16 x);

/// `f` rounded to the nearest binary16, ties to even, subnormals included;
/// at or beyond 65520 in magnitude it rounds to infinity; a NaN stays a quiet NaN.
float16 toFloat16(float f);

/// out[i] = in[i] converted to float32 (exact). @throws InvalidArgument if the
/// lengths differ.
void convert(std::span<const float16> in, std::span<float> out);
void convert(std::span<const bfloat16> in, std::span<float> out);
/// out[i] = in[i] rounded to nearest, ties to even. @throws InvalidArgument if
/// the lengths differ.
void convert(std::span<const float> in, std::span<float16> out);
void convert(std::span<const float> in, std::span<bfloat16> out);

namespace half {

/// dst[i] = round(float(dst[i]) + float(src[i])) over n elements: the sum in
/// float32, rounded once. dst and src may be the same array, not overlap otherwise.
void add(float16* dst, const float16* src, std::size_t n);
void add(bfloat16* dst, const bfloat16* src, std::size_t n);
/// dst[i] = the larger of dst[i] and src[i] (NaN if either is NaN).
void max(float16* dst, const float16* src, std::size_t n);
void max(bfloat16* dst, const bfloat16* src, std::size_t n);
/// dst[i] = the smaller of dst[i] and src[i] (NaN if either is NaN).
void min(float16* dst, const float16* src, std::size_t n);
void min(bfloat16* dst, const bfloat16* src, std::size_t n);
/// dst[i] = round(float(dst[i]) * float(src[i])): the product in float32, rounded once.
void mul(float16* dst, const float16* src, std::size_t n);
void mul(bfloat16* dst, const bfloat16* src, std::size_t n);
/// x[i] = round(float(x[i]) * s) over n elements.
void scale(float16* x, float s, std::size_t n);
void scale(bfloat16* x, float s, std::size_t n);
/// The kernels in use: "f16c+avx2" (x86-64 with F16C and AVX2), "neon" (AArch64) or
/// "portable" (for logs and benchmarks).
const char* kernelName();

}  // namespace half

}  // namespace gossamer
