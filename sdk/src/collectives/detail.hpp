// Helpers shared by the collectives' implementation files (not installed).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/kit/context_local.hpp"
#include "gossamer/kit/detail/collective_wait.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/kit/wire.hpp"

namespace gossamer::detail {

/// Contexts of the SubTransport views the algorithms build inside one call
/// on a top-level transport (0x80-0xFF; Communicator::split hands out
/// 0x10-0x7F). Listed together so no two roles share a byte; HiPS uses
/// kCtxHipsFirst .. 0xFF, one per stage and stream.
enum ViewContext : std::uint8_t {
  kCtxTorusRow = 0x81,
  kCtxTorusCol = 0x82,
  kCtxGroup = 0x83,
  kCtxLeaders = 0x84,
  kCtxTgaGroup = 0x85,
  kCtxTgaRow = 0x86,
  kCtxTgaCol = 0x87,
  kCtxHipsFirst = 0x90,
};

/// Contexts from here up are views an algorithm builds inside one collective
/// (ViewContext), not communicators of their own: their collective's group
/// is the whole parent (collectiveGroup).
inline constexpr std::uint8_t kCtxInternalFirst = 0x81;  // (0x80 is the application's: SubTransport)
static_assert(kCtxTorusRow >= kCtxInternalFirst && kCtxHipsFirst >= kCtxInternalFirst);

/// a mod n in [0, n), for negative a too.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

/// First element of chunk i when `length` elements are cut into n chunks:
/// chunk i has length/n elements, plus one for the first length % n chunks.
inline std::size_t chunkBegin(std::size_t length, int n, int i) {
  const auto un = static_cast<std::size_t>(n), ui = static_cast<std::size_t>(i);
  return ui * (length / un) + std::min(ui, length % un);
}

/// Most elements of T that one message of a collective carries:
/// options.maxMessageBytes, at most kMaxPayloadBytes (a frame's largest
/// payload, 1 GiB), at least one element.
template <typename T>
std::size_t maxMessageElems(const CollectiveOptions& o) {
  return std::max<std::size_t>(1, std::min<std::size_t>(o.maxMessageBytes, kMaxPayloadBytes) / sizeof(T));
}

/// Elements of T per pipelined piece: options.chunkBytes, at least one
/// element and at most maxMessageElems (so that piece counts never wrap, and
/// no piece is a message too large to send).
template <typename T>
std::size_t pieceElemsFor(const CollectiveOptions& o) {
  return std::clamp<std::size_t>(o.chunkBytes / sizeof(T), 1, maxMessageElems<T>(o));
}

/// How many messages of at most maxMessageElems elements carry `n` elements:
/// at least 1 (an empty vector is one empty message).
template <typename T>
std::size_t messageBlocks(std::size_t n, const CollectiveOptions& o) {
  const std::size_t most = maxMessageElems<T>(o);
  return std::max<std::size_t>(1, n / most + (n % most != 0));
}

/// Block `b` of `data` cut as messageBlocks does.
template <typename T>
std::span<T> messageBlock(std::span<T> data, std::size_t b, const CollectiveOptions& o) {
  const std::size_t most = maxMessageElems<std::remove_const_t<T>>(o);
  const std::size_t begin = std::min(data.size(), b * most);
  return data.subspan(begin, std::min(most, data.size() - begin));
}

/// @throws ProtocolError naming `peer` (a rank of `transport`, named by its
/// rank in the job when `transport` is a SubTransport view) if request `r`
/// received other than `expected` bytes (ranks passing different lengths).
inline void expectBytes(const Transport& transport, const Request& r, std::size_t expected, int peer) {
  if (r.bytes() != expected)
    throw ProtocolError(dynamic_cast<const SubTransport*>(&transport) != nullptr
                            ? static_cast<const SubTransport&>(transport).globalRank(peer)
                            : peer,
                        frame_offset::kPayloadBytes,
                        "collective chunk of " + std::to_string(r.bytes()) + " bytes, expected " +
                            std::to_string(expected) + " (do all ranks pass the same length?)");
}

/// The grid algorithms build SubTransport views of their transport, and views
/// do not nest: on a view, fail before any message instead of at the first one.
/// @throws InvalidArgument naming `algorithm`.
inline void requireTopLevel(Transport& transport, const char* algorithm) {
  GOSSAMER_ENFORCE(dynamic_cast<SubTransport*>(&transport) == nullptr,
                   algorithm << " needs a top-level transport (its sub-transports cannot be nested)");
}

/// The largest divisor of n that is at most sqrt(n): rows of a near-square grid.
inline int squarestDivisor(int n) {
  int best = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) best = d;
  return best;
}

/// chooseAllreduce, restricted to the ring and recursive doubling unless
/// `viewsAllowed` (the others build SubTransport views, which cannot nest).
AllreduceAlgorithm chooseAllreduce(std::size_t bytes, int worldSize, const CollectiveOptions& options,
                                   bool viewsAllowed);

/// Dissemination barrier: ceil(log2 N) rounds of one-byte messages under
/// Tag::make(op, sequence, round); every wait bounded by timeoutSeconds.
/// @throws TimeoutError, PeerFailure from the transport.
void disseminationBarrier(Transport& t, Op op, std::uint64_t sequence, double timeoutSeconds);

/// Applies X to the floating element types: float32, float64, binary16 and
/// bfloat16 (gossamer/half.hpp), those Communicator's methods take.
#define GOSSAMER_FLOAT_TYPES(X) X(float) X(double) X(::gossamer::float16) X(::gossamer::bfloat16)
/// Applies X to every element type the collective templates are instantiated
/// for: the floating ones and int32, int64. Each algorithm's file
/// instantiates its templates with it.
#define GOSSAMER_COLLECTIVE_TYPES(X) GOSSAMER_FLOAT_TYPES(X) X(std::int32_t) X(std::int64_t)

/// dst op= src over n elements (kAverage sums; see scaleIfAverage). 16-bit
/// elements are combined in float32 and rounded once (half::add, max, min,
/// mul). Integers wrap around on overflow (two's complement, as torch's do).
template <typename T>
void combine(ReduceOp op, T* dst, const T* src, std::size_t n) {
  if constexpr (kIsHalf<T>) {
    switch (op) {
      case ReduceOp::kMax:
        half::max(dst, src, n);
        return;
      case ReduceOp::kMin:
        half::min(dst, src, n);
        return;
      case ReduceOp::kProduct:
        half::mul(dst, src, n);
        return;
      default:
        half::add(dst, src, n);
        return;
    }
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap-around sums and products, without signed overflow
    switch (op) {
      case ReduceOp::kMax:
        for (std::size_t k = 0; k < n; ++k) dst[k] = std::max(dst[k], src[k]);
        return;
      case ReduceOp::kMin:
        for (std::size_t k = 0; k < n; ++k) dst[k] = std::min(dst[k], src[k]);
        return;
      case ReduceOp::kProduct:
        for (std::size_t k = 0; k < n; ++k)
          dst[k] = static_cast<T>(static_cast<U>(dst[k]) * static_cast<U>(src[k]));
        return;
      default:
        for (std::size_t k = 0; k < n; ++k)
          dst[k] = static_cast<T>(static_cast<U>(dst[k]) + static_cast<U>(src[k]));
        return;
    }
  } else {
    // NaN wins in max and min, as in torch (std::max and std::min would keep dst's value).
    switch (op) {
      case ReduceOp::kMax:
        for (std::size_t k = 0; k < n; ++k) dst[k] = src[k] != src[k] || src[k] > dst[k] ? src[k] : dst[k];
        return;
      case ReduceOp::kMin:
        for (std::size_t k = 0; k < n; ++k) dst[k] = src[k] != src[k] || src[k] < dst[k] ? src[k] : dst[k];
        return;
      case ReduceOp::kProduct:
        for (std::size_t k = 0; k < n; ++k) dst[k] *= src[k];
        return;
      default:
        for (std::size_t k = 0; k < n; ++k) dst[k] += src[k];
        return;
    }
  }
}

/// Receive scratch of at least n elements that lives on this thread of
/// execution across calls (grow-only; contextLocal(): the OS thread's, or a
/// simulated rank's), so a large collective does not allocate and
/// page-fault fresh memory on every call. Slots keep simultaneously used
/// buffers apart: 0-1 ring reduce-scatter, 2 recursive doubling, 3 reduce. A
/// collective must not call another one that uses the same slot while it
/// holds its span. T is trivially copyable; the bytes come from operator new,
/// aligned for every element type the collectives take.
enum class ScratchSlot { kRing0 = 0, kRing1 = 1, kRecursiveDoubling = 2, kReduce = 3 };
template <typename T>
std::span<T> scratch(ScratchSlot slot, std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  auto& v = contextLocal().scratch[static_cast<std::size_t>(slot)];
  if (v.size() < n * sizeof(T)) v.resize(n * sizeof(T));
  return std::span<T>(reinterpret_cast<T*>(v.data()), n);
}

/// The op partial results are combined with: an average sums first.
inline ReduceOp partialOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

/// Divides by the world size n when op is kAverage (16-bit elements: times
/// the float32 1/n, rounded once; integers: the quotient, truncated toward 0).
template <typename T>
void scaleIfAverage(ReduceOp op, std::span<T> data, int n) {
  if (op != ReduceOp::kAverage) return;
  if constexpr (kIsHalf<T>) {
    half::scale(data.data(), 1.0f / static_cast<float>(n), data.size());
  } else if constexpr (std::is_integral_v<T>) {
    for (auto& v : data) v = static_cast<T>(v / static_cast<T>(n));
  } else {
    const T scale = T(1) / static_cast<T>(n);
    for (auto& v : data) v *= scale;
  }
}

/// A 16-bit kAverage over n ranks: scales `data` by 1/n (the float32 1/n,
/// rounded once) and returns kSum, NCCL's premultiplied sum, so that the sum
/// overflows binary16 only where the average itself would (summed first, n
/// values of 65504/n overflowed). Every other op and type: returns op, and
/// `data` is left alone. Each public algorithm applies it on entry (after its
/// argument checks); once applied the op is kSum, so nested calls do not
/// scale twice.
template <typename T>
ReduceOp premultipliedAverage(std::span<T> data, ReduceOp op, int n) {
  if constexpr (kIsHalf<T>) {
    if (op == ReduceOp::kAverage && n > 1) {
      half::scale(data.data(), 1.0f / static_cast<float>(n), data.size());
      return ReduceOp::kSum;
    }
  }
  return op;
}

}  // namespace gossamer::detail
