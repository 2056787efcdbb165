// The 16-bit floating-point types and their kernels (gossamer/half.hpp):
// conversions against independent references (every binary16 value, random
// and boundary float32s), the vectorised bulk kernels against the scalar
// conversions element by element (tails included), and reductions rounded once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"

using namespace gossamer;

namespace {

std::uint32_t bitsOf(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float floatOf(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// binary16 bits -> value by the definition (sign, exponent, fraction), in double.
double binary16Value(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(frac, -24);
  if (exp == 31) return frac ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + frac, exp - 25);
}

// Round-to-nearest-even by search: the finite binary16 values in order, the
// nearest one to f (ties to the even encoding), infinity beyond 65520.
std::uint16_t referenceFloat16(float f) {
  static const std::vector<std::uint16_t> positives = [] {
    std::vector<std::uint16_t> v;
    for (std::uint32_t h = 0; h < 0x7c00; ++h) v.push_back(static_cast<std::uint16_t>(h));
    return v;  // ascending in value, as in bits
  }();
  const double x = std::fabs(static_cast<double>(f));
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (x >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(positives.begin(), positives.end(), x,
                             [](std::uint16_t h, double v) { return binary16Value(h) < v; });
  if (it == positives.end()) return sign | 0x7bff;  // (65504, 65520): the largest finite value
  const std::uint16_t hi = *it;
  if (binary16Value(hi) == x || it == positives.begin()) return sign | hi;
  const std::uint16_t lo = *(it - 1);
  const double dlo = x - binary16Value(lo), dhi = binary16Value(hi) - x;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// Round-to-nearest-even to bfloat16 by comparing the two neighbours in double.
std::uint16_t referenceBfloat16(float f) {
  const std::uint32_t u = bitsOf(f);
  const auto lo = static_cast<std::uint16_t>(u >> 16);
  const auto hi = static_cast<std::uint16_t>(lo + 1);
  const double x = f, vlo = floatOf(std::uint32_t{lo} << 16);
  double vhi = floatOf(std::uint32_t{hi} << 16);
  if (std::isinf(vhi))
    vhi = std::copysign(std::ldexp(1.0, 128), x);  // overflow: as if the next exponent existed
  if ((u & 0xffff) == 0) return lo;
  const double dlo = std::fabs(x - vlo), dhi = std::fabs(vhi - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// Random float32s over the whole range, with the binary16 boundaries, ties and
// subnormals over-represented.
std::vector<float> sampleFloats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          1e-8f,
                          2.98023224e-8f /* 2^-25 */,
                          2.9802326e-8f,
                          5.96046448e-8f /* 2^-24 */,
                          6.10351562e-5f /* 2^-14 */,
                          6.09755516e-5f,
                          3.0e38f,
                          -3.4e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min()};
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  while (v.size() < n) {
    switch (rng() % 4) {
      case 0:
        v.push_back(floatOf(static_cast<std::uint32_t>(rng()) & 0xff7fffffu));
        break;  // finite
      case 1:
        v.push_back(std::ldexp(unit(rng), static_cast<int>(rng() % 46) - 30));
        break;   // binary16's range
      case 2: {  // an exact tie between two binary16 or bfloat16 neighbours
        const float h = toFloat(float16{static_cast<std::uint16_t>(rng() % 0x7bff)});
        v.push_back(floatOf(bitsOf(h) + (rng() % 2 ? 0x1000u : 0x8000u)));
        break;
      }
      default:
        v.push_back(unit(rng));
        break;
    }
  }
  return v;
}

}  // namespace

TEST_CASE("half: every binary16 value converts to float32 exactly and back to the same bits", "[half]") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float16 x{static_cast<std::uint16_t>(h)};
    const float f = toFloat(x);
    const double want = binary16Value(x.bits);
    INFO("bits " << h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(toFloat(toFloat16(f))));
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
      REQUIRE(toFloat16(f).bits == x.bits);
    }
  }
}

TEST_CASE("half: every binary16 NaN widens quiet with its payload, the same bits on every path", "[half]") {
  // F16C and NEON set the quiet bit of a signalling NaN; the scalar path
  // (a vector's tail) must too, or a NaN's bits depend on its position.
  INFO("kernels: " << half::kernelName());
  std::vector<float16> all(0x10000);
  for (std::uint32_t h = 0; h <= 0xffff; ++h) all[h] = float16{static_cast<std::uint16_t>(h)};
  std::vector<float> wide(all.size());
  convert(std::span<const float16>(all), std::span<float>(wide));
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    INFO("bits " << h);
    REQUIRE(bitsOf(wide[h]) == bitsOf(toFloat(all[h])));
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {
      REQUIRE((bitsOf(wide[h]) & 0x00400000u) != 0);                // quiet
      REQUIRE(((bitsOf(wide[h]) >> 13) & 0x1ffu) == (h & 0x1ffu));  // the payload below the quiet bit
    }
  }
}

TEST_CASE("half: float32 rounds to the nearest binary16 and bfloat16, ties to even", "[half]") {
  for (float f : sampleFloats(200000, 7)) {
    INFO("float bits " << bitsOf(f) << " = " << f);
    REQUIRE(toFloat16(f).bits == referenceFloat16(f));
    REQUIRE(toBfloat16(f).bits == referenceBfloat16(f));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(toFloat(toFloat16(nan))));
  CHECK(std::isnan(toFloat(toBfloat16(nan))));
  CHECK(std::isnan(toFloat(toBfloat16(floatOf(0x7f800001u)))));  // a signalling NaN stays a NaN, not infinity
  CHECK(toBfloat16(3.4e38f).bits == 0x7f80);                     // overflow rounds to infinity
  CHECK(kUnitRoundoff<bfloat16> == 1.0 / 256);
  CHECK(kUnitRoundoff<float16> == 1.0 / 2048);
}

TEST_CASE("half: the bulk kernels give the scalar conversions' bits at every length", "[half]") {
  INFO("kernels: " << half::kernelName());
  const auto floats = sampleFloats(4099, 11);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                        std::size_t{31}, std::size_t{4099}}) {
    std::span<const float> in(floats.data(), n);
    std::vector<float16> h(n);
    std::vector<bfloat16> b(n);
    convert(in, std::span<float16>(h));
    convert(in, std::span<bfloat16>(b));
    std::vector<float> back16(n), back32(n);
    convert(std::span<const float16>(h), std::span<float>(back16));
    convert(std::span<const bfloat16>(b), std::span<float>(back32));
    for (std::size_t i = 0; i < n; ++i) {
      INFO("n " << n << " i " << i << " value " << in[i]);
      REQUIRE(h[i].bits == toFloat16(in[i]).bits);
      REQUIRE(b[i].bits == toBfloat16(in[i]).bits);
      REQUIRE(bitsOf(back16[i]) == bitsOf(toFloat(h[i])));
      REQUIRE(bitsOf(back32[i]) == bitsOf(toFloat(b[i])));
    }
  }
  std::vector<float> three(3);
  std::vector<float16> two(2);
  CHECK_THROWS_AS(convert(std::span<const float>(three), std::span<float16>(two)), InvalidArgument);
}

TEMPLATE_TEST_CASE("half: sum, max, min, product and scale are computed in float32 and rounded once",
                   "[half]", float16, bfloat16) {
  const auto narrow = [](float f) {
    if constexpr (std::is_same_v<TestType, float16>)
      return toFloat16(f);
    else
      return toBfloat16(f);
  };
  const auto a = sampleFloats(1003, 3), b = sampleFloats(1003, 5);
  for (std::size_t n : {std::size_t{5}, std::size_t{16}, std::size_t{1003}}) {
    std::vector<TestType> x(n), y(n), sum(n), mx(n), mn(n), prod(n), sc(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = narrow(a[i]);
      y[i] = narrow(b[i]);
    }
    sum = x;
    mx = x;
    mn = x;
    prod = x;
    sc = x;
    half::add(sum.data(), y.data(), n);
    half::max(mx.data(), y.data(), n);
    half::min(mn.data(), y.data(), n);
    half::mul(prod.data(), y.data(), n);
    half::scale(sc.data(), 0.125f, n);
    for (std::size_t i = 0; i < n; ++i) {
      const float fx = toFloat(x[i]), fy = toFloat(y[i]);
      INFO("n " << n << " i " << i << ": " << fx << ", " << fy);
      REQUIRE(sum[i].bits == narrow(fx + fy).bits);
      if (std::isnan(fx) || std::isnan(fy)) {
        REQUIRE(std::isnan(toFloat(mx[i])));
        REQUIRE(std::isnan(toFloat(mn[i])));
      } else {
        REQUIRE(mx[i].bits == narrow(std::max(fx, fy)).bits);
        REQUIRE(mn[i].bits == narrow(std::min(fx, fy)).bits);
      }
      REQUIRE(prod[i].bits == narrow(fx * fy).bits);
      REQUIRE(sc[i].bits == narrow(fx * 0.125f).bits);
    }
  }
}
