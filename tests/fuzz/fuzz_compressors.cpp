// Feeds compressed gradients, as a rank receives them from its peers, to the
// compressors' decoders. The first 6 bytes choose the compressor and its
// shape: byte 0 bit 0 a sparse compressor (bit 2: Gaussian-K, else Top-K),
// else bits 2-3 pick QSGD (0), A2SGD (1), bf16 (2) or fp16 (3); bit 1
// whether the payloads are cut to a whole number of them (one, for the
// averaged kinds); byte 1 the gradient length n (1..128); bytes 2-3 the
// QSGD levels (1..65535) or the sparse ratio or A2SGD's local gradient;
// byte 4 the QSGD bucket size (1..64) or A2SGD's keep_error (bit 0) and
// streaming stores (bit 1). The rest is the payloads.
//
// Gathered kinds (Top-K, Gaussian-K, QSGD): only InvalidArgument (a length
// that is not a whole number of payloads) and ProtocolError (naming a
// payload's rank and a byte offset within one payload) escape; the payloads
// carry finite values only (Top-K values, QSGD bucket norms); a decoded
// gradient has no NaN, and each entry is at most the largest of those
// magnitudes times their number. Averaged kinds: A2SGD refuses (offset 0 or
// 4) exactly the averages that are not finite and >= 0, and otherwise moves
// each entry by at most the larger average plus the local mean; bf16 and
// fp16 refuse (Error) exactly a payload holding an infinity or NaN, and
// otherwise decode each element to the float it encodes, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/optimizers/compress.hpp"

namespace {

using namespace gossamer;
using namespace gossamer::optimizers;

constexpr std::size_t kShapeBytes = 6;

float floatAt(std::span<const std::byte> b, std::size_t off) {
  float v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

// The float the 16-bit element `h` encodes (bf16: float32's top half; fp16:
// IEEE binary16), for a finite one.
float reference16(std::uint16_t h, bool brain) {
  if (brain) {
    const std::uint32_t bits = std::uint32_t{h} << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return static_cast<float>((h & 0x8000) != 0 ? -magnitude : magnitude);
}

// A2SGD: its decoder takes the ranks' average of the two means (8 bytes).
void a2sgd(const std::uint8_t* data, std::span<const std::byte> combined, std::size_t n) {
  A2sgdOptions o;
  o.keepError = (data[4] & 1) != 0;
  o.streamingFloats = (data[4] & 2) != 0 ? 1 : o.streamingFloats;
  A2sgdCompressor c(n, o);
  std::vector<float> gradient(n), out(n, 1.0f);
  for (std::size_t i = 0; i < n; ++i)  // in [-2, 2], both signs
    gradient[i] = static_cast<float>(static_cast<int>((i * 37 + data[2] + data[3] * 7u) % 17) - 8) * 0.25f;
  std::vector<std::byte> own(c.payloadBytes());
  c.encode(gradient, own);
  float averages[2] = {0, 0};
  try {
    c.decode(combined, gradient, out);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(combined.size() == 8 && e.peer() == -1 && (e.offset() == 0 || e.offset() == 4));
    std::memcpy(averages, combined.data(), 8);
    const float bad = averages[e.offset() / 4];
    FUZZ_CHECK(!(std::isfinite(bad) && bad >= 0.0f));
    return;
  } catch (const InvalidArgument&) {
    FUZZ_CHECK(combined.size() != 8);
    return;
  }
  std::memcpy(averages, combined.data(), 8);
  FUZZ_CHECK(std::isfinite(averages[0]) && averages[0] >= 0.0f && std::isfinite(averages[1]) &&
             averages[1] >= 0.0f);
  // Shift = average - this rank's mean, and each mean is at most 2.
  const double bound = std::max(averages[0], averages[1]) * 1.0001 + 2.0 + 1e-6;
  for (std::size_t i = 0; i < n; ++i) {
    FUZZ_CHECK(std::isfinite(out[i]));
    FUZZ_CHECK(std::fabs(static_cast<double>(out[i]) - gradient[i]) <= bound);
  }
}

// bf16 and fp16: the average arrives as n 16-bit elements, padded to 4 bytes.
template <typename H>
void halfKind(std::span<const std::byte> combined, std::size_t n) {
  constexpr bool brain = std::is_same_v<H, bfloat16>;
  HalfCompressor<H> c(n);
  std::vector<std::uint16_t> aligned((combined.size() + 1) / 2);  // the 2-byte alignment a receive gives
  if (!combined.empty()) std::memcpy(aligned.data(), combined.data(), combined.size());
  const auto bytes = std::as_bytes(std::span<const std::uint16_t>(aligned)).first(combined.size());
  std::vector<float> gradient(n, 0.0f), out(n, 1.0f);
  bool special = false;  // an infinity or NaN among the n elements
  if (combined.size() == c.payloadBytes())
    for (std::size_t i = 0; i < n; ++i)
      special = special || (brain ? (aligned[i] & 0x7f80) == 0x7f80 : (aligned[i] & 0x7c00) == 0x7c00);
  try {
    c.decode(bytes, gradient, out);
  } catch (const InvalidArgument&) {
    FUZZ_CHECK(combined.size() != c.payloadBytes());
    return;
  } catch (const Error&) {
    FUZZ_CHECK(special);
    return;
  }
  FUZZ_CHECK(!special);
  for (std::size_t i = 0; i < n; ++i) {
    const float want = reference16(aligned[i], brain);
    FUZZ_CHECK(std::memcmp(&out[i], &want, 4) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kShapeBytes) return 0;
  const bool sparse = (data[0] & 1) != 0, whole = (data[0] & 2) != 0, gaussk = (data[0] & 4) != 0;
  const std::size_t n = 1 + data[1] % 128;
  const unsigned shape = data[2] | (unsigned{data[3]} << 8);
  if (const int averaged = (data[0] >> 2) & 3; !sparse && averaged != 0) {
    auto combined = fuzz::bytesOf(data + kShapeBytes, size - kShapeBytes);
    const std::size_t payload = averaged == 1 ? 8 : (n + 1) / 2 * 4;
    if (whole) combined = combined.first(std::min(combined.size(), payload));
    if (averaged == 1) a2sgd(data, combined, n);
    if (averaged == 2) halfKind<bfloat16>(combined, n);
    if (averaged == 3) halfKind<float16>(combined, n);
    return 0;
  }
  std::unique_ptr<Compressor> c;
  std::size_t valuesAt = 0, valueStride = 0, values = 0;  // where the magnitudes are in one payload
  const double ratio = (1.0 + shape % 256) / 256.0;
  if (sparse && gaussk) {
    auto g = std::make_unique<GaussianKCompressor>(n, GaussianKOptions{ratio, 3});
    valuesAt = 4 * g->k();
    values = g->k();
    c = std::move(g);
  } else if (sparse) {
    auto t = std::make_unique<TopKCompressor>(n, ratio);
    valuesAt = 4 * t->k();
    values = t->k();
    c = std::move(t);
  } else {
    QsgdOptions o;
    o.levels = 1 + static_cast<int>(shape % 65535);
    o.bucketSize = 1 + data[4] % 64;
    auto q = std::make_unique<QsgdCompressor>(n, o);
    values = q->buckets();
    c = std::move(q);
  }
  valueStride = 4;
  auto combined = fuzz::bytesOf(data + kShapeBytes, size - kShapeBytes);
  const std::size_t payload = c->payloadBytes();
  if (whole) combined = combined.first(combined.size() / payload * payload);
  std::vector<float> out(n, 1.0f), gradient(n, 0.0f);
  try {
    c->decode(combined, gradient, out);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() >= 0 && static_cast<std::size_t>(e.peer()) < combined.size() / payload);
    FUZZ_CHECK(e.offset() < payload);
    return 0;
  } catch (const InvalidArgument&) {
    FUZZ_CHECK(combined.empty() || combined.size() % payload != 0);
    return 0;
  }
  const std::size_t count = combined.size() / payload;
  double largest = 0;
  for (std::size_t r = 0; r < count; ++r)
    for (std::size_t j = 0; j < values; ++j) {
      const float v = floatAt(combined, r * payload + valuesAt + valueStride * j);
      FUZZ_CHECK(std::isfinite(v));
      largest = std::max(largest, std::fabs(static_cast<double>(v)));
    }
  for (float v : out) {
    FUZZ_CHECK(!std::isnan(v));
    // (1e-30: QSGD's norm / levels rounds a subnormal norm up, by up to half its last place)
    FUZZ_CHECK(std::isinf(v) ||
               std::fabs(static_cast<double>(v)) <= largest * static_cast<double>(count) * 1.01 + 1e-30);
  }
  return 0;
}
