// 16-bit model exchanges of the gossip optimizers (setExchangeType): the
// float32 values of a model or segment rounded to bfloat16 or IEEE binary16
// (nearest even, gossamer/half.hpp's vectorised kernels) for the wire, and
// back. Private to optimizers/src.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::optimizers::detail {

/// True for the 16-bit exchange types.
inline bool isWire16(DType wire) { return wire == DType::kBfloat16 || wire == DType::kFloat16; }

/// Checks an exchange type for setExchangeType.
/// @throws InvalidArgument unless float32, float16 or bfloat16.
inline void checkExchangeType(DType wire) {
  if (wire != DType::kFloat32 && !isWire16(wire))
    throw InvalidArgument(std::string("model exchange type ") + dtypeName(wire) +
                          ": float32, float16 or bfloat16 only");
}

/// Rounds `in` to `wire` (16-bit) into out[0, in.size()). A finite value
/// beyond the type's largest finite one (65504 for binary16) is sent as
/// that value, never as infinity (which the receivers refuse, and which the
/// sender's own correction term would take into its model); NaN and
/// infinity stay what they are.
inline void encode16(DType wire, std::span<const float> in, std::uint16_t* out) {
  std::uint16_t infinity = 0, largest = 0;
  if (wire == DType::kBfloat16) {
    convert(in, std::span<bfloat16>(reinterpret_cast<bfloat16*>(out), in.size()));
    infinity = 0x7F80;
    largest = 0x7F7F;
  } else {
    convert(in, std::span<float16>(reinterpret_cast<float16*>(out), in.size()));
    infinity = 0x7C00;
    largest = 0x7BFF;
  }
  for (std::size_t i = 0; i < in.size(); ++i)
    if ((out[i] & 0x7FFF) == infinity && std::isfinite(in[i]))
      out[i] = static_cast<std::uint16_t>((out[i] & 0x8000) | largest);
}

/// The float32 values of in[0, out.size()) of type `wire` (exact).
inline void decode16(DType wire, const std::uint16_t* in, std::span<float> out) {
  if (wire == DType::kBfloat16)
    convert(std::span<const bfloat16>(reinterpret_cast<const bfloat16*>(in), out.size()), out);
  else
    convert(std::span<const float16>(reinterpret_cast<const float16*>(in), out.size()), out);
}

/// Sends n 16-bit elements of type `wire` (the frame names the dtype).
inline Request isend16(Transport& t, int dst, const Tag& tag, DType wire, const std::uint16_t* data,
                       std::size_t n) {
  return t.isend(dst, tag, std::as_bytes(std::span<const std::uint16_t>(data, n)), wire);
}

}  // namespace gossamer::optimizers::detail
