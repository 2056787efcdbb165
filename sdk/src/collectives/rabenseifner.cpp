// Rabenseifner's allreduce: reduce-scatter by recursive halving, then
// allgather by recursive doubling (Thakur, Rabenseifner and Gropp,
// "Optimization of Collective Communication Operations in MPICH", IJHPCA
// 2005, Sec. 4.4; Rabenseifner, "Optimization of Collective Reduction
// Operations", ICCS 2004). With p the largest power of two <= N and
// rem = N - p, the first 2 rem ranks fold pairwise as in recursive doubling
// (each even rank hands its whole vector to the odd one above it, which adds
// it; MPICH's non-power-of-two step), leaving p ranks with new ranks 0..p-1.
// The vector is cut into p chunks (chunkRange). Reduce-scatter: for
// mask = p/2, p/4, .., 1 a rank exchanges with the rank whose new rank differs
// in that bit, sends the half of its current window of chunks that the
// partner keeps, receives the partner's copy of the half it keeps, and adds
// it: the window halves each step and ends as chunk (new rank), fully
// reduced. Allgather: for mask = 1, 2, .., p/2 partners swap their windows,
// which double. The odd folded ranks then hand the result back.
// Steps: 2 log2(p) (+2 when N is not a power of two). Bytes sent per rank:
// 2 (p-1)/p * L * sizeof(T), the ring's, in 2 log2(p) messages instead of
// 2 (N-1): MPICH and Open MPI use it between recursive doubling (small
// vectors) and the ring (large ones). Each chunk is reduced on one rank and
// copied to the others, so every rank ends with the same bits.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "table.hpp"

namespace gossamer {

using detail::chunkBegin;
using detail::combine;
using detail::expectBytes;

template <typename T>
void rabenseifnerAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                           const CollectiveOptions& options) {
  const int n = transport.worldSize(), r = transport.rank();
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));  // largest power of two <= n
  const int rem = n - p;
  const std::size_t length = data.size();
  const auto incoming = detail::scratch<T>(detail::ScratchSlot::kRecursiveDoubling, length);
  const ReduceOp partial = detail::partialOp(op);
  const int logP = std::countr_zero(static_cast<unsigned>(p));
  // Exchanges move as pieces of at most chunkBytes, each reduced (or stored)
  // as it arrives while the next ones are on the way, as the ring's do.
  // Tags: round k's piece j is segment k * maxPieces + j; rounds: fold 0,
  // reduce-scatter 1..log2(p), allgather log2(p)+1..2 log2(p), unfold
  // 2 log2(p)+1.
  const std::size_t rounds = 2 * static_cast<std::size_t>(logP) + 2;
  const std::size_t maxPieces = (std::size_t{Tag::kMaxSegment} + 1) / rounds;
  const std::size_t pieceElems =
      std::max(detail::pieceElemsFor<T>(options), (length + maxPieces - 1) / maxPieces);
  if (pieceElems > detail::maxMessageElems<T>(options))
    throw InvalidArgument("Rabenseifner allreduce of " + std::to_string(data.size_bytes()) +
                          " bytes: too large");
  auto tagOf = [&](int round, std::size_t piece) {
    return Tag::make(Op::kAllreduce, options.sequence,
                     static_cast<std::uint32_t>(static_cast<std::size_t>(round) * maxPieces + piece));
  };
  auto piecesOf = [&](std::size_t len) { return (len + pieceElems - 1) / pieceElems; };
  auto pieceOf = [&](auto span, std::size_t k) {
    const std::size_t b = k * pieceElems;
    return span.subspan(b, std::min(pieceElems, span.size() - b));
  };
  std::vector<Request> sends, recvs;
  // Sends `out` to `peer` and receives its `in.size()` elements: with
  // `reduce` into incoming and added to `in`, else straight into `in`. Both
  // sides know both sizes: an empty half (fewer elements than chunks) is not
  // sent at all.
  auto exchange = [&](int peer, int round, std::span<const T> out, std::span<T> in, bool reduce) {
    // (The reduce-scatter sends from and reduces into disjoint halves of data.)
    recvs.clear();
    sends.clear();
    const auto land = reduce ? incoming.first(in.size()) : in;
    for (std::size_t k = 0; k < piecesOf(in.size()); ++k)
      recvs.push_back(transport.irecvOf<T>(peer, tagOf(round, k), pieceOf(land, k)));
    for (std::size_t k = 0; k < piecesOf(out.size()); ++k)
      sends.push_back(transport.isendOf<T>(peer, tagOf(round, k), pieceOf(out, k)));
    for (std::size_t k = 0; k < recvs.size(); ++k) {
      const auto dst = pieceOf(in, k);
      detail::await(transport, recvs[k], options.timeoutSeconds, "Rabenseifner allreduce");
      expectBytes(transport, recvs[k], dst.size_bytes(), peer);
      if (reduce) combine(partial, dst.data(), pieceOf(land, k).data(), dst.size());
    }
    for (auto& req : sends) detail::await(transport, req, options.timeoutSeconds, "Rabenseifner allreduce");
  };
  // Global rank of new rank v.
  auto global = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  auto range = [&](int lo, int hi) {  // chunks [lo, hi) as elements
    const std::size_t b = chunkBegin(length, p, lo), e = chunkBegin(length, p, hi);
    return std::pair{b, e};
  };

  int v = -1;  // this rank's new rank (-1: folded out)
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      exchange(r + 1, 0, data, {}, false);
    } else {
      exchange(r - 1, 0, {}, data, true);
      v = r / 2;
    }
  } else {
    v = r - rem;
  }

  if (v >= 0) {
    int lo = 0, hi = p;  // this rank's window of chunks
    int round = 1;
    for (int mask = p / 2; mask >= 1; mask /= 2, ++round) {
      const int mid = lo + (hi - lo) / 2;
      const bool upper = (v & mask) != 0;
      const auto [keepB, keepE] = upper ? range(mid, hi) : range(lo, mid);
      const auto [sendB, sendE] = upper ? range(lo, mid) : range(mid, hi);
      exchange(global(v ^ mask), round, data.subspan(sendB, sendE - sendB),
               data.subspan(keepB, keepE - keepB), true);
      (upper ? lo : hi) = mid;
    }
    // This rank owns chunk v, fully reduced: an average divides it now.
    {
      const auto [b, e] = range(lo, hi);
      detail::scaleIfAverage(op, data.subspan(b, e - b), n);
    }
    for (int mask = 1; mask < p; mask *= 2, ++round) {
      const bool upper = (v & mask) != 0;
      const int width = hi - lo;
      const int plo = upper ? lo - width : hi, phi = upper ? lo : hi + width;  // the partner's window
      const auto [mineB, mineE] = range(lo, hi);
      const auto [theirB, theirE] = range(plo, phi);
      exchange(global(v ^ mask), round, data.subspan(mineB, mineE - mineB),
               data.subspan(theirB, theirE - theirB), false);
      lo = std::min(lo, plo);
      hi = std::max(hi, phi);
    }
  }

  if (r < 2 * rem) {
    if (r % 2 == 1)
      exchange(r - 1, 2 * logP + 1, data, {}, false);
    else
      exchange(r + 1, 2 * logP + 1, {}, data, false);
  }
}

#define GOSSAMER_INSTANTIATE(T) \
  template void rabenseifnerAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

// Fold; log2(p) halving exchanges of p/2, p/4, .., 1 chunks of about B/p
// (each reduced); the same sizes back up in the allgather; unfold. Chunks are
// counted in model elements as the ring's are (schedule.hpp), and each
// exchange moves as pieces of at most chunkBytes.
void rabenseifnerRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  const double b = static_cast<double>(bytes);
  const double piece = std::max(1.0, static_cast<double>(o.chunkBytes));
  const auto hops = [&](double x) { return std::max(1.0, std::ceil(x / piece)); };
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));  // largest power of two <= n
  const int rem = n - p;
  const double chunk = std::ceil(modelElements(bytes) / p) * kModelElementBytes;
  if (rem > 0) out.push_back({hops(b), static_cast<double>(rem), b, b});  // fold
  for (int m = p / 2; m >= 1; m /= 2)
    out.push_back({hops(m * chunk), static_cast<double>(p), m * chunk, m * chunk});
  for (int m = 1; m < p; m *= 2) out.push_back({hops(m * chunk), static_cast<double>(p), m * chunk, 0});
  if (rem > 0) out.push_back({hops(b), static_cast<double>(rem), b, 0});  // unfold
}

}  // namespace

const AllreduceEntry kRabenseifnerEntry{
    AllreduceAlgorithm::kRabenseifner,
    "rabenseifner",
    "reduce-scatter by recursive halving, allgather by recursive doubling: the ring's bytes in 2 log2(N) "
    "(+2) steps, for mid-sized vectors",
    false,
    GOSSAMER_ALLREDUCE_RUNNERS(rabenseifnerAllreduce),
    &rabenseifnerRounds};

}  // namespace detail

}  // namespace gossamer
