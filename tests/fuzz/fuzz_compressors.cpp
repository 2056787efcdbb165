// Feeds gathered compressed gradients, as a rank receives them from its
// peers, to the decoders of the Top-K, Gaussian-K and QSGD compressors. The
// first 6 bytes choose the compressor and its shape: byte 0 bit 0 a sparse
// compressor (bit 2: Gaussian-K, else Top-K) or QSGD, bit 1 whether the
// payloads are cut to a whole number of them; byte 1 the gradient length n
// (1..128); bytes 2-3 the QSGD levels (1..65535) or the sparse ratio; byte 4
// the QSGD bucket size (1..64). The rest is the
// payloads. Checks: only InvalidArgument (a length that is not a whole
// number of payloads) and ProtocolError (naming a payload's rank and a byte
// offset within one payload) escape; the payloads carry finite values only
// (Top-K values, QSGD bucket norms); a decoded gradient has no NaN, and each
// entry is at most the largest of those magnitudes times their number.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kShapeBytes) return 0;
  const bool sparse = (data[0] & 1) != 0, whole = (data[0] & 2) != 0, gaussk = (data[0] & 4) != 0;
  const std::size_t n = 1 + data[1] % 128;
  const unsigned shape = data[2] | (unsigned{data[3]} << 8);
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
