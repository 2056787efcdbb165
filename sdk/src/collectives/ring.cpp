// Ring allreduce and binomial broadcast.
//
// Ring allreduce (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023),
// Eq. 2): with N ranks the vector is cut into N chunks. Reduce-scatter: at step
// s (0..N-2) rank r sends chunk (r - s) mod N to r+1 and adds the chunk
// (r - s - 1) mod N received from r-1; afterwards rank r holds the full
// reduction of chunk (r + 1) mod N. Allgather: at step s rank r forwards chunk
// (r + 1 - s) mod N and stores chunk (r - s) mod N. Bytes sent per rank: 2
// (N-1)/N * L * sizeof(T); 2 (N-1) steps. The receive is posted before the
// send, so each step overlaps both directions.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "table.hpp"

namespace gossamer {

std::pair<std::size_t, std::size_t> chunkRange(std::size_t length, int n, int i) {
  GOSSAMER_ENFORCE(n >= 1 && i >= 0 && i < n, "chunk " << i << " of " << n);
  return {detail::chunkBegin(length, n, i), detail::chunkBegin(length, n, i + 1)};
}

namespace {

using detail::chunkBegin;
using detail::combine;
using detail::expectBytes;
using detail::mod;

// The ring's two phases over N ranks, on a vector cut into N chunks, each
// moving as pieces of at most chunkBytes. `shift` renames the chunks: with
// shift h the reduce-scatter starts by sending chunk r+h and leaves rank r
// holding the reduced chunk r+1+h; the allgather starts from that chunk.
// Tags: reduce-scatter steps use segments [0, N-1) x pieces, allgather steps
// [N-1, 2N-2) x pieces, so both phases of one call may share a sequence.
template <typename T>
class Ring {
 public:
  Ring(Transport& t, std::span<T> data, ReduceOp op, const CollectiveOptions& o, int shift)
      : t_(t), data_(data), op_(op), o_(o), n_(t.worldSize()), r_(t.rank()), shift_(shift) {
    right_ = mod(r_ + 1, n_);
    left_ = mod(r_ - 1, n_);
    maxChunk_ = chunkBegin(data.size(), n_, 1);  // chunk 0 is a longest one
    const std::size_t steps = 2 * static_cast<std::size_t>(n_ - 1);
    if (steps > std::size_t{Tag::kMaxSegment} + 1)
      throw InvalidArgument("the ring allreduce takes at most " +
                            std::to_string((Tag::kMaxSegment + 1) / 2 + 1) + " ranks, not " +
                            std::to_string(n_));
    pieceElems_ = detail::pieceElemsFor<T>(o);
    piecesPerChunk_ = std::max<std::size_t>(1, (maxChunk_ + pieceElems_ - 1) / pieceElems_);
    const std::size_t maxPieces = (std::size_t{Tag::kMaxSegment} + 1) / std::max<std::size_t>(steps, 1);
    if (piecesPerChunk_ > maxPieces) {
      piecesPerChunk_ = maxPieces;
      pieceElems_ = (maxChunk_ + piecesPerChunk_ - 1) / piecesPerChunk_;
      if (pieceElems_ > detail::maxMessageElems<T>(o))
        throw InvalidArgument("ring allreduce of " + std::to_string(data.size_bytes()) + " bytes over " +
                              std::to_string(n_) + " ranks: too large");
    }
  }

  std::span<T> chunk(int i) const {
    const int c = mod(i + shift_, n_);
    const std::size_t b = chunkBegin(data_.size(), n_, c), e = chunkBegin(data_.size(), n_, c + 1);
    return data_.subspan(b, e - b);
  }

  // Double-buffered: step s+1's receives are posted before step s is reduced,
  // and each reduced piece is forwarded at once (the chunk reduced at step s
  // is the one sent at step s+1). For kAverage the last step also divides the
  // chunk this rank ends up owning by N, piece by piece while it is in cache.
  void reduceScatter() {
    std::span<T> buffers[2] = {detail::scratch<T>(detail::ScratchSlot::kRing0, maxChunk_),
                               detail::scratch<T>(detail::ScratchSlot::kRing1, maxChunk_)};
    std::vector<Request> recvs[2];
    auto post = [&](int s) {
      auto& rs = recvs[s % 2];
      rs.clear();
      const auto in = chunk(r_ - s - 1);
      std::span<T> buf(buffers[s % 2].data(), in.size());
      for (std::size_t k = 0; k < pieces(in.size()); ++k)
        rs.push_back(
            t_.irecvView(left_, tag(static_cast<std::size_t>(s), k), std::as_writable_bytes(piece(buf, k))));
    };
    post(0);
    sendChunk(chunk(r_), 0);
    for (int s = 0; s < n_ - 1; ++s) {
      if (s + 1 < n_ - 1) post(s + 1);
      const auto in = chunk(r_ - s - 1);
      std::span<T> buf(buffers[s % 2].data(), in.size());
      for (std::size_t k = 0; k < pieces(in.size()); ++k) {
        auto& req = recvs[s % 2][k];
        detail::await(t_, req, o_.timeoutSeconds, "a ring collective");
        auto dst = piece(in, k);
        expectBytes(t_, req, dst.size_bytes(), left_);
        // If the transport takes the reduced piece's checksum, each block is
        // summed right after it is reduced, while it is in L1, rather than the
        // transport reading the piece again later.
        const bool forwarded = s + 1 < n_ - 1;  // else the chunk the allgather starts with
        const bool summed =
            (forwarded || allgatherFollows_) && dst.size_bytes() >= t_.checksumReuseMinBytes();
        Crc32c crc;
        // The transport's own copy of the piece, if it handed that over, else `buf`.
        const auto bufPiece = piece(buf, k);
        const auto got = req.received(std::as_bytes(bufPiece));
        const T* src = bufPiece.data();
        if (got.data() != static_cast<const void*>(bufPiece.data())) {
          if (reinterpret_cast<std::uintptr_t>(got.data()) % alignof(T) == 0)
            src = reinterpret_cast<const T*>(got.data());
          else
            std::memcpy(bufPiece.data(), got.data(), got.size());
        }
        for (std::size_t b = 0; b < dst.size(); b += kBlockElems) {
          const auto block = dst.subspan(b, std::min(kBlockElems, dst.size() - b));
          combine(op_, block.data(), src + b, block.size());
          if (s == n_ - 2) detail::scaleIfAverage(op_, block, n_);  // the chunk this rank now owns is final
          if (summed) crc.update(std::as_bytes(block));
        }
        std::optional<std::uint32_t> sum;
        if (summed) sum = crc.value();
        if (forwarded)
          send(dst, static_cast<std::size_t>(s) + 1, k, sum);
        else if (allgatherFollows_)
          reducedSums_.push_back(sum);
        req = Request();  // gives a handed-over buffer back at once
      }
    }
    detail::awaitAll(t_, sends_, o_.timeoutSeconds, "a ring collective");
    sends_.clear();
  }

  // Every receive lands in its final place, so all are posted at once; each
  // piece is forwarded as soon as it arrives.
  void allgather() {
    const auto base = static_cast<std::size_t>(n_ - 1);
    std::vector<std::vector<Request>> gather(static_cast<std::size_t>(n_ - 1));
    for (int s = 0; s < n_ - 1; ++s) {
      const auto in = chunk(r_ - s);
      for (std::size_t k = 0; k < pieces(in.size()); ++k)
        gather[static_cast<std::size_t>(s)].push_back(
            t_.irecvOf<T>(left_, tag(base + static_cast<std::size_t>(s), k), piece(in, k)));
    }
    {
      const auto own = chunk(r_ + 1);
      const bool known = reducedSums_.size() == pieces(own.size());  // after reduceScatter() on this object
      for (std::size_t k = 0; k < pieces(own.size()); ++k)
        send(piece(own, k), base, k, known ? reducedSums_[k] : std::nullopt);
      reducedSums_.clear();
    }
    for (int s = 0; s < n_ - 1; ++s) {
      const auto in = chunk(r_ - s);
      for (std::size_t k = 0; k < pieces(in.size()); ++k) {
        auto& req = gather[static_cast<std::size_t>(s)][k];
        detail::await(t_, req, o_.timeoutSeconds, "a ring collective");
        auto got = piece(in, k);
        expectBytes(t_, req, got.size_bytes(), left_);
        // Forwarded as received: the transport's verified checksum goes along.
        if (s + 1 < n_ - 1) send(got, base + static_cast<std::size_t>(s) + 1, k, req.payloadChecksum());
      }
    }
    detail::awaitAll(t_, sends_, o_.timeoutSeconds, "a ring collective");
    sends_.clear();
  }

 private:
  Tag tag(std::size_t step, std::size_t piece) const {
    return Tag::make(Op::kAllreduce, o_.sequence, static_cast<std::uint32_t>(step * piecesPerChunk_ + piece));
  }
  std::size_t pieces(std::size_t elems) const { return (elems + pieceElems_ - 1) / pieceElems_; }
  std::span<T> piece(std::span<T> c, std::size_t k) const {
    const std::size_t b = k * pieceElems_;
    return c.subspan(b, std::min(pieceElems_, c.size() - b));
  }
  void send(std::span<T> p, std::size_t step, std::size_t k, std::optional<std::uint32_t> sum = {}) {
    // Zero-copy: pieces stay untouched until the waitAll that ends each phase.
    sends_.push_back(t_.isendBorrowedOf<T>(right_, tag(step, k), std::span<const T>(p), sum));
  }
  void sendChunk(std::span<T> c, std::size_t step) {
    for (std::size_t k = 0; k < pieces(c.size()); ++k) send(piece(c, k), step, k);
  }

  static constexpr std::size_t kBlockElems = (std::size_t{16} << 10) / sizeof(T);  // 16 KiB: stays in L1

  Transport& t_;
  std::span<T> data_;
  ReduceOp op_;
  const CollectiveOptions& o_;
  int n_, r_, shift_, right_ = 0, left_ = 0;
  std::size_t maxChunk_ = 0, pieceElems_ = 1, piecesPerChunk_ = 1;
  std::vector<Request> sends_;
  std::vector<std::optional<std::uint32_t>> reducedSums_;  // CRC-32C of the reduced chunk's pieces
  bool allgatherFollows_ = false;  // this object's allgather() comes next, on the chunk as reduced

 public:
  /// ringAllreduce: the allgather follows on this object with the reduced
  /// chunk unchanged, so the last step's checksums are kept for it.
  void keepSumsForAllgather() { allgatherFollows_ = true; }
};

}  // namespace

template <typename T>
void ringAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  if (transport.worldSize() == 1 || data.empty()) return;  // empty on every rank: nothing to exchange
  op = detail::premultipliedAverage(data, op, transport.worldSize());
  Ring<T> ring(transport, data, op, options, 0);
  ring.keepSumsForAllgather();
  ring.reduceScatter();  // leaves chunk r+1 reduced (and averaged, for kAverage)
  ring.allgather();
}

template <typename T>
std::span<T> ringReduceScatter(Transport& transport, std::span<T> data, ReduceOp op,
                               const CollectiveOptions& options) {
  const int n = transport.worldSize(), r = transport.rank();
  const auto [b, e] = chunkRange(data.size(), n, r);
  if (n > 1 && !data.empty()) {
    op = detail::premultipliedAverage(data, op, n);
    Ring<T>(transport, data, op, options, -1).reduceScatter();  // averages too
  }
  return data.subspan(b, e - b);
}

template <typename T>
void ringAllgather(Transport& transport, std::span<T> data, const CollectiveOptions& options) {
  if (transport.worldSize() == 1 || data.empty()) return;
  Ring<T>(transport, data, ReduceOp::kSum, options, -1).allgather();
}

namespace detail {

namespace {

void ringRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  addRing(out, modelElements(bytes), n, 1, true, true, o);
}

}  // namespace

const AllreduceEntry kRingEntry{AllreduceAlgorithm::kRing,
                                "ring",
                                "pipelined ring: reduce-scatter then allgather, 2(N-1) steps",
                                false,
                                GOSSAMER_ALLREDUCE_RUNNERS(ringAllreduce),
                                &ringRounds};

}  // namespace detail

#define GOSSAMER_INSTANTIATE(T)                                                                             \
  template std::span<T> ringReduceScatter<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&); \
  template void ringAllgather<T>(Transport&, std::span<T>, const CollectiveOptions&);                       \
  template void ringAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE
// Raw bytes, for elements of any other type (moved, never combined).
template void ringAllgather<std::byte>(Transport&, std::span<std::byte>, const CollectiveOptions&);

}  // namespace gossamer
