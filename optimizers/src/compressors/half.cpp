// 16-bit gradients with error feedback (compression.kind bf16 / fp16): the
// gradient plus the last step's rounding error, rounded to bfloat16 or IEEE
// binary16 (nearest even), averaged over the ranks by a 16-bit allreduce
// (CompressedSgd, PayloadCombine::kAverage with payloadType() 16-bit), and
// the new rounding error kept for the next step, the memory of Stich et al.,
// "Sparsified SGD with memory" (NeurIPS 2018), Algorithm 1, applied to
// rounding instead of sparsification.
//
// Wire, per rank per step: the ring allreduce of n 16-bit elements (2n bytes
// rounded up to 4), 2(N-1)/N of it sent: half of dense AllReduce-SGD's.
// With a gossip optimizer (Crossover-SGD, SGP) the same kinds send its model
// exchanges in 16 bits instead (setExchangeType: crossover_sgd.cpp, sgp.cpp).
// The conversions are gossamer/half.hpp's vectorised kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/optimizers/compress.hpp"
#include "gossamer/registry.hpp"
#include "kernels.hpp"
#include "wrap.hpp"

namespace gossamer::optimizers {

using namespace detail;

template <typename H>
HalfCompressor<H>::HalfCompressor(std::size_t n) : Compressor(n) {
  residual_.assign(n, 0.0f);
}

template <typename H>
std::string HalfCompressor<H>::name() const {
  return std::is_same_v<H, bfloat16> ? "bf16" : "fp16";
}

template <typename H>
void HalfCompressor<H>::encode(std::span<const float> gradient, std::span<std::byte> payload) {
  checkLength(gradient.size(), size(), "16-bit encode: gradient elements");
  checkLength(payload.size(), payloadBytes(), "16-bit encode: payload bytes");
  checkAligned<H>(payload.data(), "16-bit encode: payload");
  const std::size_t n = size();
  float* e = residual_.data();
  const float* g = gradient.data();
  // Checked before the residual changes: a refused gradient leaves it whole.
  float probe = 0.0f, peak = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = g[i] + e[i];
    probe += a * 0.0f;
    peak = std::max(peak, std::fabs(a));
  }
  if (!(probe == 0.0f)) {
    throwIfNonFinite(gradient, "16-bit encode: gradient");
    throw InvalidArgument("16-bit encode: gradient + residual overflows float32");
  }
  for (std::size_t i = 0; i < n; ++i) e[i] += g[i];  // a = g + e, kept until its rounding is known
  auto* out = reinterpret_cast<H*>(payload.data());
  // An entry beyond H's largest finite value (65504 for binary16) is sent
  // as that value, not as infinity: the rest stays in the residual and
  // goes out in later steps, as a rounding error does.
  const float largest = std::is_same_v<H, float16> ? 65504.0f : 3.38953139e38f;
  if (peak <= largest) {
    convert(std::span<const float>(residual_), std::span<H>(out, n));
  } else {
    std::vector<float> clamped(residual_);
    for (float& a : clamped) a = std::clamp(a, -largest, largest);
    convert(std::span<const float>(clamped), std::span<H>(out, n));
  }
  if (payloadBytes() / sizeof(H) > n) out[n] = H{};  // the padding element of an odd n
  for (std::size_t i = 0; i < n; ++i) e[i] -= toFloat(out[i]);
}

template <typename H>
void HalfCompressor<H>::decode(std::span<const std::byte> combined, std::span<const float> gradient,
                               std::span<float> out) {
  (void)gradient;
  checkLength(combined.size(), payloadBytes(), "16-bit decode: combined bytes");
  checkLength(out.size(), size(), "16-bit decode: output elements");
  checkAligned<H>(combined.data(), "16-bit decode: combined payload");
  convert(std::span<const H>(reinterpret_cast<const H*>(combined.data()), size()), out);
  // The 16-bit allreduce adds in H: ranks' values that are each finite can
  // sum beyond H's range (fp16: 65504) and arrive as infinity.
  float probe = 0.0f;
  for (const float v : out) probe += v * 0.0f;
  if (!(probe == 0.0f)) {
    std::size_t i = 0;
    while (i < out.size() && std::isfinite(out[i])) ++i;
    throw Error(name() + " decode: the average at element " + std::to_string(i) + " is " +
                std::to_string(out[i < out.size() ? i : 0]) + ": the ranks' values summed beyond " + name() +
                "'s range" + (std::is_same_v<H, float16> ? " (65504; bf16 has float32's range)" : ""));
  }
}

template class HalfCompressor<bfloat16>;
template class HalfCompressor<float16>;

namespace {

/// compression.kind bf16 / fp16: a gossip optimizer that can send its model
/// in 16 bits (Crossover-SGD, SGP: setExchangeType) does, with no
/// compressor around it; an optimizer without a model exchange
/// (AllReduce-SGD) gets its gradients rounded with error feedback
/// (HalfCompressor under CompressedSgd); any other is refused.
template <typename H>
CompressorFactory halfFactory(const std::string& kind) {
  auto compressGradients =
      compressedSgdFactory([](const OptimizerContext&, std::size_t n) -> std::unique_ptr<Compressor> {
        return std::make_unique<HalfCompressor<H>>(n);
      });
  return [kind, compressGradients](
             const OptimizerContext& ctx,
             std::unique_ptr<DistributedOptimizer> inner) -> std::unique_ptr<DistributedOptimizer> {
    if (!inner) return compressGradients(ctx, std::move(inner));
    if (inner->setExchangeType(DTypeOf<H>::value)) return inner;
    if (!inner->modelExchange()) return compressGradients(ctx, std::move(inner));
    throw InvalidArgument("compression.kind '" + kind + "': algorithm '" + inner->name() +
                          "' cannot send its model in 16 bits (allreduce_sgd rounds its gradients; "
                          "crossover_sgd and sgp in mode sync send 16-bit models)");
  };
}

}  // namespace

void registerHalfCompressors(Registry& registry) {
  // Under a gossip optimizer the 16-bit models are its own exchange, which
  // it saves; only AllReduce-SGD's rounded gradients are CompressedSgd's.
  registerCompressorFactory(registry, "bf16", halfFactory<bfloat16>("bf16"),
                            KeySet().rule(refuseCheckpoints("bf16", true)));
  registerCompressorFactory(registry, "fp16", halfFactory<float16>("fp16"),
                            KeySet().rule(refuseCheckpoints("fp16", true)));
}

}  // namespace gossamer::optimizers
