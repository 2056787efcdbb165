// The Compressor base, the sparse compressors' base (SparseCompressor: the
// Top-K wire format's decode and the residual), the dense "compressor" (no
// compression, 4n bytes), and makeCompressor, which builds a compressor from CompressionOptions for
// code that runs one without a registry (benchmarks, tests).
#include <algorithm>
#include <bit>
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

// ---- Compressor ---------------------------------------------------------------

Compressor::Compressor(std::size_t n) : size_(n) {
  GOSSAMER_ENFORCE(n >= 1, "a compressor needs at least one element");
  GOSSAMER_ENFORCE(n <= std::numeric_limits<std::uint32_t>::max(),
                   "gradients of " << n << " elements: at most 2^32 - 1 are supported");
}

// ---- SparseCompressor ------------------------------------------------------------

SparseCompressor::SparseCompressor(std::size_t n, double ratio, const char* label)
    : Compressor(n), k_(sparseCount(ratio, n, label)), label_(label) {
  residual_.assign(n, 0.0f);
}

void SparseCompressor::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                              std::span<float> out) {
  (void)gradient;
  checkLength(out.size(), size(), (std::string(label_) + " decode: output elements").c_str());
  decodeSparse(combined, k_, out, label_);
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

// ---- factory --------------------------------------------------------------------

std::unique_ptr<Compressor> makeCompressor(const CompressionOptions& o, std::size_t n) {
  if (o.kind == "none") return std::make_unique<DenseCompressor>(n);
  if (o.kind == "a2sgd") return std::make_unique<A2sgdCompressor>(n, o.a2sgd);
  if (o.kind == "topk") return std::make_unique<TopKCompressor>(n, o.topkRatio);
  if (o.kind == "gaussk") return std::make_unique<GaussianKCompressor>(n, o.gaussk);
  if (o.kind == "qsgd") return std::make_unique<QsgdCompressor>(n, o.qsgd);
  throw InvalidArgument("unknown compressor '" + o.kind + "' (none, a2sgd, topk, gaussk, qsgd)");
}

}  // namespace gossamer::optimizers
