// Conversion and reduction kernels of the 16-bit floating-point types
// (gossamer/half.hpp): IEEE 754 binary16 and bfloat16 to and from float32,
// and the element-wise sum, max, min, product and scaling the collectives
// reduce with.
//
// Every operation converts to float32, computes there and rounds once to
// nearest, ties to even. Three implementations give the same bits: F16C +
// AVX2 on x86-64 (8 elements per instruction; `vcvtph2ps`/`vcvtps2ph` for
// binary16), chosen once at run time from CPUID; NEON on AArch64 (4 elements;
// `fcvtl`/`fcvtn`, part of every ARMv8-A CPU, so always used); and a portable
// scalar path for other CPUs. bfloat16 is shifts and the integer rounding
// below on every path. (For NaNs "the same bits" holds for conversions: a
// NaN widens quiet with its payload everywhere. Which operand's sign and
// payload a NaN result of an operation with two NaN operands carries is the
// CPU's choice, as in float32 arithmetic.)
//
// Rounding float32 to bfloat16 (ties to even) is integer arithmetic on the
// bits: add 0x7FFF plus the lowest kept bit, then drop the low 16 bits (a
// carry into the exponent is the correct result, up to infinity); NaNs are
// kept quiet instead. Rounding to binary16 rebiases the exponent and rounds
// the same way, with a shift for results below the normal range.
#include "gossamer/half.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "gossamer/errors.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define GOSSAMER_HALF_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define GOSSAMER_HALF_NEON 1
#endif

namespace gossamer {

float toFloat(float16 x) {
  const std::uint32_t h = x.bits;
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float32.
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, sizeof u);
    u |= sign;
  } else if (exp == 0x1f) {
    // Infinity, or a NaN with its payload and the quiet bit set (as F16C's
    // vcvtph2ps and NEON's fcvtl do: a signalling NaN comes out quiet).
    u = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float16 toFloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u)  // NaN: quiet, upper payload bits kept (as vcvtps2ph)
    return float16{static_cast<std::uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu))};
  if (u >= 0x38800000u) {  // at least 2^-14: normal in binary16, or overflow
    std::uint32_t r = u - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    r >>= 13;
    return float16{static_cast<std::uint16_t>(sign | std::min<std::uint32_t>(r, 0x7c00u))};
  }
  if (u <= 0x33000000u) return float16{sign};  // at most 2^-25: rounds to zero (a tie goes to even 0)
  // Subnormal result: the 24-bit significand shifted right by 126 - exponent (14..24).
  const std::uint32_t m = (u & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - (u >> 23);
  std::uint32_t r = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (r & 1u))) ++r;
  return float16{static_cast<std::uint16_t>(sign | r)};
}

namespace {

// The portable kernels: one element at a time through float32.
template <typename H>
float widen(H x) {
  return toFloat(x);
}
template <typename H>
H narrow(float f);
template <>
float16 narrow<float16>(float f) {
  return toFloat16(f);
}
template <>
bfloat16 narrow<bfloat16>(float f) {
  return toBfloat16(f);
}

// The element-wise reductions in float32; max and min return a NaN (a + b)
// when either side is one.
float addOf(float a, float b) { return a + b; }
float mulOf(float a, float b) { return a * b; }
float maxOf(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? a + b : std::max(a, b); }
float minOf(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? a + b : std::min(a, b); }

// dst[i] = round(Op(dst[i], src[i])), one element at a time.
template <typename H, float (*Op)(float, float)>
void zipPortable(H* dst, const H* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = narrow<H>(Op(widen(dst[i]), widen(src[i])));
}
template <typename H>
void scalePortable(H* x, float s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = narrow<H>(widen(x[i]) * s);
}
template <typename H>
void toFloatPortable(const H* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = widen(in[i]);
}
template <typename H>
void fromFloatPortable(const float* in, H* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = narrow<H>(in[i]);
}

#ifdef GOSSAMER_HALF_X86
#define GOSSAMER_HALF_TARGET __attribute__((target("avx2,f16c")))

// The float32 lanes of one vector register, and the operations the kernels
// below need; max and min make the portable kernels' choices (see maxOf).
struct Simd {
  using V = __m256;
  static constexpr std::size_t kWidth = 8;
  GOSSAMER_HALF_TARGET static V loadFloats(const float* p) { return _mm256_loadu_ps(p); }
  GOSSAMER_HALF_TARGET static void storeFloats(float* p, V v) { _mm256_storeu_ps(p, v); }
  GOSSAMER_HALF_TARGET static V splat(float s) { return _mm256_set1_ps(s); }
  GOSSAMER_HALF_TARGET static V add(V a, V b) { return _mm256_add_ps(a, b); }
  GOSSAMER_HALF_TARGET static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  // max_ps(b, a) is b > a ? b : a, std::max(a, b)'s choice when they are
  // equal (-0, +0); a NaN on either side gives a + b.
  GOSSAMER_HALF_TARGET static V max(V a, V b) {
    return _mm256_blendv_ps(_mm256_max_ps(b, a), _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  // min_ps(b, a) is b < a ? b : a, std::min(a, b)'s choice when they are equal.
  GOSSAMER_HALF_TARGET static V min(V a, V b) {
    return _mm256_blendv_ps(_mm256_min_ps(b, a), _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
};

// kWidth elements of H to float32 and back; the rounding matches narrow<H>.
struct F16Lanes {
  GOSSAMER_HALF_TARGET static __m256 load(const float16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  GOSSAMER_HALF_TARGET static void store(float16* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

struct Bf16Lanes {
  GOSSAMER_HALF_TARGET static __m256 load(const bfloat16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  GOSSAMER_HALF_TARGET static void store(bfloat16* p, __m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    // 8 x 32-bit values < 2^16 -> 8 x 16-bit, in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

// AVX2 (which implies the OS saves the AVX state) and F16C (CPUID leaf 1,
// ECX bit 29; clang's __builtin_cpu_supports does not know "f16c").
bool vectorKernels() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return yes;
}
constexpr const char* kVectorKernels = "f16c+avx2";
#endif

#ifdef GOSSAMER_HALF_NEON
#define GOSSAMER_HALF_TARGET

struct Simd {
  using V = float32x4_t;
  static constexpr std::size_t kWidth = 4;
  static V loadFloats(const float* p) { return vld1q_f32(p); }
  static void storeFloats(float* p, V v) { vst1q_f32(p, v); }
  static V splat(float s) { return vdupq_n_f32(s); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  // b where takeB, else a; a + b where either is a NaN. Compare-and-select
  // rather than fmax/fmin, which order -0 below +0 where maxOf keeps a.
  static V pick(uint32x4_t takeB, V a, V b) {
    const uint32x4_t ordered = vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b));
    return vbslq_f32(ordered, vbslq_f32(takeB, b, a), vaddq_f32(a, b));
  }
  static V max(V a, V b) { return pick(vcgtq_f32(b, a), a, b); }
  static V min(V a, V b) { return pick(vcltq_f32(b, a), a, b); }
};

// fcvtl/fcvtn round to nearest even under Linux's default FPCR (no flush to
// zero), as narrow<float16> does, and keep a NaN's upper payload bits quiet.
struct F16Lanes {
  static float32x4_t load(const float16* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p))));
  }
  static void store(float16* p, float32x4_t v) {
    vst1_u16(reinterpret_cast<std::uint16_t*>(p), vreinterpret_u16_f16(vcvt_f16_f32(v)));
  }
};

struct Bf16Lanes {
  static float32x4_t load(const bfloat16* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)), 16));
  }
  static void store(bfloat16* p, float32x4_t v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), lsb)), 16);
    const uint32x4_t quiet = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    vst1_u16(reinterpret_cast<std::uint16_t*>(p), vmovn_u32(vbslq_u32(vceqq_f32(v, v), r, quiet)));
  }
};

// Advanced SIMD and its half-precision conversions are part of ARMv8-A.
bool vectorKernels() { return true; }
constexpr const char* kVectorKernels = "neon";
#endif

#ifdef GOSSAMER_HALF_TARGET
template <typename H>
struct LanesOf;
template <>
struct LanesOf<float16> {
  using type = F16Lanes;
};
template <>
struct LanesOf<bfloat16> {
  using type = Bf16Lanes;
};

// Whole vectors of Simd::kWidth elements, then the portable kernel for the
// rest: dst[i] = round(VectorOp(dst[i], src[i])), ScalarOp on the tail.
template <typename H, Simd::V (*VectorOp)(Simd::V, Simd::V), float (*ScalarOp)(float, float)>
GOSSAMER_HALF_TARGET void zipVector(H* dst, const H* src, std::size_t n) {
  using L = typename LanesOf<H>::type;
  std::size_t i = 0;
  for (; i + Simd::kWidth <= n; i += Simd::kWidth)
    L::store(dst + i, VectorOp(L::load(dst + i), L::load(src + i)));
  zipPortable<H, ScalarOp>(dst + i, src + i, n - i);
}
template <typename H>
GOSSAMER_HALF_TARGET void scaleVector(H* x, float s, std::size_t n) {
  using L = typename LanesOf<H>::type;
  const Simd::V k = Simd::splat(s);
  std::size_t i = 0;
  for (; i + Simd::kWidth <= n; i += Simd::kWidth) L::store(x + i, Simd::mul(L::load(x + i), k));
  scalePortable(x + i, s, n - i);
}
template <typename H>
GOSSAMER_HALF_TARGET void toFloatVector(const H* in, float* out, std::size_t n) {
  using L = typename LanesOf<H>::type;
  std::size_t i = 0;
  for (; i + Simd::kWidth <= n; i += Simd::kWidth) Simd::storeFloats(out + i, L::load(in + i));
  toFloatPortable(in + i, out + i, n - i);
}
template <typename H>
GOSSAMER_HALF_TARGET void fromFloatVector(const float* in, H* out, std::size_t n) {
  using L = typename LanesOf<H>::type;
  std::size_t i = 0;
  for (; i + Simd::kWidth <= n; i += Simd::kWidth) L::store(out + i, Simd::loadFloats(in + i));
  fromFloatPortable(in + i, out + i, n - i);
}

#define GOSSAMER_HALF_DISPATCH(vector_call, portable_call) \
  do {                                                     \
    if (vectorKernels())                                   \
      vector_call;                                         \
    else                                                   \
      portable_call;                                       \
  } while (0)
#else
#define GOSSAMER_HALF_DISPATCH(vector_call, portable_call) portable_call
#endif

void requireSameLength(std::size_t in, std::size_t out) {
  GOSSAMER_ENFORCE(in == out, "convert: input has " << in << " elements, output " << out);
}

}  // namespace

void convert(std::span<const float16> in, std::span<float> out) {
  requireSameLength(in.size(), out.size());
  GOSSAMER_HALF_DISPATCH(toFloatVector(in.data(), out.data(), in.size()),
                         toFloatPortable(in.data(), out.data(), in.size()));
}
void convert(std::span<const bfloat16> in, std::span<float> out) {
  requireSameLength(in.size(), out.size());
  GOSSAMER_HALF_DISPATCH(toFloatVector(in.data(), out.data(), in.size()),
                         toFloatPortable(in.data(), out.data(), in.size()));
}
void convert(std::span<const float> in, std::span<float16> out) {
  requireSameLength(in.size(), out.size());
  GOSSAMER_HALF_DISPATCH(fromFloatVector(in.data(), out.data(), in.size()),
                         fromFloatPortable(in.data(), out.data(), in.size()));
}
void convert(std::span<const float> in, std::span<bfloat16> out) {
  requireSameLength(in.size(), out.size());
  GOSSAMER_HALF_DISPATCH(fromFloatVector(in.data(), out.data(), in.size()),
                         fromFloatPortable(in.data(), out.data(), in.size()));
}

namespace half {

void add(float16* dst, const float16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<float16, Simd::add, addOf>(dst, src, n)),
                         (zipPortable<float16, addOf>(dst, src, n)));
}
void add(bfloat16* dst, const bfloat16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<bfloat16, Simd::add, addOf>(dst, src, n)),
                         (zipPortable<bfloat16, addOf>(dst, src, n)));
}
void max(float16* dst, const float16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<float16, Simd::max, maxOf>(dst, src, n)),
                         (zipPortable<float16, maxOf>(dst, src, n)));
}
void max(bfloat16* dst, const bfloat16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<bfloat16, Simd::max, maxOf>(dst, src, n)),
                         (zipPortable<bfloat16, maxOf>(dst, src, n)));
}
void min(float16* dst, const float16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<float16, Simd::min, minOf>(dst, src, n)),
                         (zipPortable<float16, minOf>(dst, src, n)));
}
void min(bfloat16* dst, const bfloat16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<bfloat16, Simd::min, minOf>(dst, src, n)),
                         (zipPortable<bfloat16, minOf>(dst, src, n)));
}
void mul(float16* dst, const float16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<float16, Simd::mul, mulOf>(dst, src, n)),
                         (zipPortable<float16, mulOf>(dst, src, n)));
}
void mul(bfloat16* dst, const bfloat16* src, std::size_t n) {
  GOSSAMER_HALF_DISPATCH((zipVector<bfloat16, Simd::mul, mulOf>(dst, src, n)),
                         (zipPortable<bfloat16, mulOf>(dst, src, n)));
}
void scale(float16* x, float s, std::size_t n) {
  GOSSAMER_HALF_DISPATCH(scaleVector(x, s, n), scalePortable(x, s, n));
}
void scale(bfloat16* x, float s, std::size_t n) {
  GOSSAMER_HALF_DISPATCH(scaleVector(x, s, n), scalePortable(x, s, n));
}

const char* kernelName() {
#ifdef GOSSAMER_HALF_TARGET
  if (vectorKernels()) return kVectorKernels;
#endif
  return "portable";
}

}  // namespace half

}  // namespace gossamer
