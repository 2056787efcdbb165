// Recursive doubling allreduce (Thakur, Rabenseifner and Gropp, "Optimization
// of Collective Communication Operations in MPICH", IJHPCA 2005; Wang et al.,
// "A Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023) names it among the optimised
// allreduces of its related work but does not analyse it). With p the
// largest power of two <= N and rem = N - p: the first 2 rem ranks fold
// pairwise (each even rank hands its vector to the odd one above it), the p
// remaining ranks exchange whole vectors with the partner whose new rank
// differs in bit k, for k = 0 .. log2(p) - 1, and combine; the odd ranks then
// hand the result back. log2(p) + 2 steps when N is not a power of two, each
// one message of the whole vector: L * sizeof(T) bytes per step per rank (a
// vector above 1 GiB, the largest message, as consecutive blocks of at most
// 1 GiB, block b of round k under segment k * blocks + b). Both partners
// combine the lower one's vector with the higher one's, in that order, so
// both hold the same bits even where the order shows (the sign of a zero
// that max or min keeps, a NaN's payload).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "table.hpp"

namespace gossamer {

using detail::combine;
using detail::expectBytes;

template <typename T>
void recursiveDoublingAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                                const CollectiveOptions& options) {
  const int n = transport.worldSize(), r = transport.rank();
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));  // largest power of two <= n
  const int rem = n - p;
  const auto incoming = detail::scratch<T>(detail::ScratchSlot::kRecursiveDoubling, data.size());
  const std::size_t blocks = detail::messageBlocks<T>(data.size(), options);
  if (blocks * (std::bit_width(static_cast<unsigned>(n)) + 2) > Tag::kMaxSegment)
    throw InvalidArgument("recursive doubling allreduce of " + std::to_string(data.size_bytes()) +
                          " bytes: too large");
  std::uint32_t round = 0;
  auto exchange = [&](int peer, bool sendIt, bool recvIt) {
    for (std::size_t b = 0; b < blocks; ++b) {
      const auto tag =
          Tag::make(Op::kAllreduce, options.sequence, static_cast<std::uint32_t>(round * blocks + b));
      const std::span<T> in = detail::messageBlock(incoming, b, options),
                         out = detail::messageBlock(data, b, options);
      Request recv;
      if (recvIt) recv = transport.irecvOf<T>(peer, tag, in);
      if (sendIt)
        detail::await(transport, transport.isendOf<T>(peer, tag, std::span<const T>(out)),
                      options.timeoutSeconds, "recursive doubling allreduce");
      if (recvIt) {
        detail::await(transport, recv, options.timeoutSeconds, "recursive doubling allreduce");
        expectBytes(transport, recv, out.size_bytes(), peer);
      }
    }
    ++round;
  };
  // Fold: among ranks < 2 rem, each even rank hands its vector to the odd one above it.
  int newRank = -1;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      exchange(r + 1, true, false);
    } else {
      exchange(r - 1, false, true);
      combine(op, data.data(), incoming.data(), data.size());
      newRank = r / 2;
    }
  } else {
    round = 1;  // keep the round numbering of the folded ranks
    newRank = r - rem;
  }
  if (newRank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partnerNew = newRank ^ mask;
      const int partner = partnerNew < rem ? partnerNew * 2 + 1 : partnerNew + rem;
      exchange(partner, true, true);
      if (partnerNew > newRank) {
        combine(op, data.data(), incoming.data(), data.size());
      } else {  // the partner's vector first, as the partner combines it
        combine(op, incoming.data(), data.data(), data.size());
        std::copy(incoming.begin(), incoming.end(), data.begin());
      }
    }
  }
  // Unfold: the odd ranks hand the result back.
  const int lastRound = 1 + std::countr_zero(static_cast<unsigned>(p));
  round = static_cast<std::uint32_t>(lastRound);
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      exchange(r - 1, true, false);
    } else {
      exchange(r + 1, false, true);
      std::copy(incoming.begin(), incoming.end(), data.begin());
    }
  }
  detail::scaleIfAverage(op, data, n);
}

#define GOSSAMER_INSTANTIATE(T) \
  template void recursiveDoublingAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

// Fold, log2(p) exchanges among p ranks, unfold; every message the whole vector.
void recursiveDoublingRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions&) {
  const double b = static_cast<double>(bytes);
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));  // largest power of two <= n
  const int rem = n - p;
  if (rem > 0) out.push_back({1, static_cast<double>(rem), b, b});  // fold
  for (int m = 1; m < p; m <<= 1) out.push_back({1, static_cast<double>(p), b, b});
  if (rem > 0) out.push_back({1, static_cast<double>(rem), b, 0});  // unfold
}

}  // namespace

const AllreduceEntry kRecursiveDoublingEntry{
    AllreduceAlgorithm::kRecursiveDoubling,
    "recursive_doubling",
    "whole-vector exchanges with partners 2^k apart, log2(N) (+2) steps: for small vectors",
    false,
    GOSSAMER_ALLREDUCE_RUNNERS(recursiveDoublingAllreduce),
    &recursiveDoublingRounds};

}  // namespace detail

}  // namespace gossamer
