// Ring allreduce and binomial broadcast.
//
// Ring allreduce (paper 000_a4345579c41fcb1d.txt, Eq. 2): with N ranks the
// vector is cut into N chunks. Reduce-scatter: at step s (0..N-2) rank r sends
// chunk (r - s) mod N to r+1 and adds the chunk (r - s - 1) mod N received from
// r-1; afterwards rank r holds the full reduction of chunk (r + 1) mod N.
// Allgather: at step s rank r forwards chunk (r + 1 - s) mod N and stores chunk
// (r - s) mod N. Bytes sent per rank: 2 (N-1)/N * L * sizeof(T); 2 (N-1) steps.
// The receive is posted before the send, so each step overlaps both directions.
#include "gossamer/collectives.hpp"

#include <algorithm>
#include <bit>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives_detail.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/hips.hpp"
#include "gossamer/sub_transport.hpp"

namespace gossamer {

namespace {

// Chunk i has length/n elements, plus one for the first length % n chunks.
std::size_t chunkBegin(std::size_t length, int n, int i) {
  const auto un = static_cast<std::size_t>(n), ui = static_cast<std::size_t>(i);
  return ui * (length / un) + std::min(ui, length % un);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

std::pair<std::size_t, std::size_t> chunkRange(std::size_t length, int n, int i) {
  GOSSAMER_ENFORCE(n >= 1 && i >= 0 && i < n, "chunk " << i << " of " << n);
  return {chunkBegin(length, n, i), chunkBegin(length, n, i + 1)};
}

namespace {

template <typename T>
void expectBytes(const Request& r, std::size_t expected, int peer) {
  if (r.bytes() != expected)
    throw ProtocolError(peer, frame_offset::kPayloadBytes,
                        "collective chunk of " + std::to_string(r.bytes()) + " bytes, expected " +
                            std::to_string(expected) + " (do all ranks pass the same length?)");
}

}  // namespace

using detail::combine;

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
    pieceElems_ = std::max<std::size_t>(1, o.chunkBytes / sizeof(T));
    piecesPerChunk_ = std::max<std::size_t>(1, (maxChunk_ + pieceElems_ - 1) / pieceElems_);
    const std::size_t maxPieces = (std::size_t{Tag::kMaxSegment} + 1) / std::max<std::size_t>(steps, 1);
    if (piecesPerChunk_ > maxPieces) {
      piecesPerChunk_ = maxPieces;
      pieceElems_ = (maxChunk_ + piecesPerChunk_ - 1) / piecesPerChunk_;
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
        req.wait(o_.timeoutSeconds);
        auto dst = piece(in, k);
        expectBytes<T>(req, dst.size_bytes(), left_);
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
    waitAll(sends_, o_.timeoutSeconds);
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
        req.wait(o_.timeoutSeconds);
        auto got = piece(in, k);
        expectBytes<T>(req, got.size_bytes(), left_);
        // Forwarded as received: the transport's verified checksum goes along.
        if (s + 1 < n_ - 1) send(got, base + static_cast<std::size_t>(s) + 1, k, req.payloadChecksum());
      }
    }
    waitAll(sends_, o_.timeoutSeconds);
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

template <typename T>
void ringAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  if (transport.worldSize() == 1 || data.empty()) return;  // empty on every rank: nothing to exchange
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
  if (n > 1 && !data.empty()) Ring<T>(transport, data, op, options, -1).reduceScatter();  // averages too
  return data.subspan(b, e - b);
}

template <typename T>
void ringAllgather(Transport& transport, std::span<T> data, const CollectiveOptions& options) {
  if (transport.worldSize() == 1 || data.empty()) return;
  Ring<T>(transport, data, ReduceOp::kSum, options, -1).allgather();
}

template <typename T>
void recursiveDoublingAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                                const CollectiveOptions& options) {
  const int n = transport.worldSize(), r = transport.rank();
  if (n == 1 || data.empty()) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  const auto incoming = detail::scratch<T>(detail::ScratchSlot::kRecursiveDoubling, data.size());
  std::uint32_t round = 0;
  auto exchange = [&](int peer, bool sendIt, bool recvIt) {
    const auto tag = Tag::make(Op::kAllreduce, options.sequence, round++);
    Request recv;
    if (recvIt) recv = transport.irecvOf<T>(peer, tag, incoming);
    if (sendIt) transport.isendOf<T>(peer, tag, std::span<const T>(data)).wait(options.timeoutSeconds);
    if (recvIt) {
      recv.wait(options.timeoutSeconds);
      expectBytes<T>(recv, data.size_bytes(), peer);
    }
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
      // a + b == b + a in IEEE arithmetic: both partners get the same bits.
      combine(op, data.data(), incoming.data(), data.size());
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

template <typename T>
void allreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  auto algorithm = options.algorithm;
  if (algorithm == AllreduceAlgorithm::kAuto)
    algorithm = detail::chooseAllreduce(data.size_bytes(), transport.worldSize(), options,
                                        dynamic_cast<SubTransport*>(&transport) == nullptr);
  switch (algorithm) {
    case AllreduceAlgorithm::kRecursiveDoubling:
      return recursiveDoublingAllreduce(transport, data, op, options);
    case AllreduceAlgorithm::kTorus2d:
      return torus2dAllreduce(transport, data, op, options);
    case AllreduceAlgorithm::kHierarchical:
      return hierarchicalAllreduce(transport, data, op, options);
    case AllreduceAlgorithm::kTga2d:
      return tga2dAllreduce(transport, data, op, options);
    case AllreduceAlgorithm::kHips:
      return hipsAllreduce(transport, data, op, options, HipsOptions{});
    case AllreduceAlgorithm::kAuto:
    case AllreduceAlgorithm::kRing:
      return ringAllreduce(transport, data, op, options);
  }
}

template <typename T>
void allreduce(Transport& transport, std::span<const T> in, std::span<T> out, ReduceOp op,
               const CollectiveOptions& options) {
  GOSSAMER_ENFORCE(in.size() == out.size(),
                   "allreduce: input has " << in.size() << " elements, output " << out.size());
  if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
  allreduce(transport, out, op, options);
}

AllreduceAlgorithm parseAllreduceAlgorithm(const std::string& name) {
  if (name == "auto") return AllreduceAlgorithm::kAuto;
  if (name == "ring") return AllreduceAlgorithm::kRing;
  if (name == "recursive_doubling") return AllreduceAlgorithm::kRecursiveDoubling;
  if (name == "torus2d") return AllreduceAlgorithm::kTorus2d;
  if (name == "hierarchical") return AllreduceAlgorithm::kHierarchical;
  if (name == "tga2d") return AllreduceAlgorithm::kTga2d;
  if (name == "hips") return AllreduceAlgorithm::kHips;
  throw InvalidArgument("unknown allreduce algorithm '" + name +
                        "' (auto, ring, recursive_doubling, torus2d, hierarchical, tga2d, hips)");
}

const char* toString(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kAuto:
      return "auto";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case AllreduceAlgorithm::kTorus2d:
      return "torus2d";
    case AllreduceAlgorithm::kHierarchical:
      return "hierarchical";
    case AllreduceAlgorithm::kTga2d:
      return "tga2d";
    case AllreduceAlgorithm::kHips:
      return "hips";
  }
  return "unknown";
}

template <typename T>
void alltoallv(Transport& transport, std::span<const T> send, std::span<const std::size_t> sendCounts,
               std::span<T> recv, std::span<const std::size_t> recvCounts, const CollectiveOptions& options) {
  const int n = transport.worldSize(), r = transport.rank();
  GOSSAMER_ENFORCE(static_cast<int>(sendCounts.size()) == n && static_cast<int>(recvCounts.size()) == n,
                   "alltoallv needs " << n << " send and receive counts");
  std::size_t sendTotal = 0, recvTotal = 0;
  for (int j = 0; j < n; ++j) {
    sendTotal += sendCounts[static_cast<std::size_t>(j)];
    recvTotal += recvCounts[static_cast<std::size_t>(j)];
  }
  GOSSAMER_ENFORCE(sendTotal == send.size() && recvTotal == recv.size(),
                   "alltoallv counts add up to " << sendTotal << " / " << recvTotal
                                                 << " elements, buffers hold " << send.size() << " / "
                                                 << recv.size());
  const auto tag = Tag::make(Op::kAllreduce, options.sequence, 0);
  std::vector<Request> recvs, sends;
  std::vector<int> from;
  std::size_t off = 0;
  for (int j = 0; j < n; ++j) {
    const std::size_t c = recvCounts[static_cast<std::size_t>(j)];
    if (j == r || c == 0) {
      off += c;
      continue;
    }
    recvs.push_back(transport.irecvOf<T>(j, tag, recv.subspan(off, c)));
    from.push_back(j);
    off += c;
  }
  std::size_t sendOff = 0, selfOff = 0;
  for (int j = 0; j < r; ++j) selfOff += recvCounts[static_cast<std::size_t>(j)];
  for (int j = 0; j < n; ++j) {
    const std::size_t c = sendCounts[static_cast<std::size_t>(j)];
    if (j == r) {
      GOSSAMER_ENFORCE(c == recvCounts[static_cast<std::size_t>(r)],
                       "alltoallv: " << c << " elements to itself but "
                                     << recvCounts[static_cast<std::size_t>(r)] << " expected from itself");
      std::copy_n(send.begin() + static_cast<std::ptrdiff_t>(sendOff), c,
                  recv.begin() + static_cast<std::ptrdiff_t>(selfOff));
    } else if (c > 0) {
      sends.push_back(transport.isendOf<T>(j, tag, send.subspan(sendOff, c)));
    }
    sendOff += c;
  }
  off = 0;
  std::size_t k = 0;
  for (int j = 0; j < n; ++j) {
    const std::size_t c = recvCounts[static_cast<std::size_t>(j)];
    if (j != r && c > 0) {
      recvs[k].wait(options.timeoutSeconds);
      expectBytes<T>(recvs[k], c * sizeof(T), from[k]);
      ++k;
    }
    off += c;
  }
  waitAll(sends, options.timeoutSeconds);
}

template <typename T>
void broadcast(Transport& transport, std::span<T> data, int root, const CollectiveOptions& options) {
  const int n = transport.worldSize();
  GOSSAMER_ENFORCE(root >= 0 && root < n, "broadcast root " << root << " outside world size " << n);
  if (n == 1) return;
  const int vr = mod(transport.rank() - root, n);
  const auto tag = Tag::make(Op::kBroadcast, options.sequence, 0);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      const int parent = mod(vr - mask + root, n);
      Request recv = transport.irecvOf<T>(parent, tag, data);
      recv.wait(options.timeoutSeconds);
      expectBytes<T>(recv, data.size_bytes(), parent);
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  std::vector<Request> sends;
  while (mask > 0) {
    if (vr + mask < n)
      sends.push_back(transport.isendOf<T>(mod(vr + mask + root, n), tag, std::span<const T>(data)));
    mask >>= 1;
  }
  waitAll(sends, options.timeoutSeconds);
}

template <typename T>
void reduce(Transport& transport, std::span<T> data, int root, ReduceOp op,
            const CollectiveOptions& options) {
  const int n = transport.worldSize();
  GOSSAMER_ENFORCE(root >= 0 && root < n, "reduce root " << root << " outside world size " << n);
  if (n > 1) {
    const int vr = mod(transport.rank() - root, n);
    const auto tag =
        Tag::make(Op::kAllreduce, options.sequence, Tag::kMaxSegment);  // apart from ring substeps
    const auto incoming = detail::scratch<T>(detail::ScratchSlot::kReduce, data.size());
    for (int mask = 1; mask < n; mask <<= 1) {
      if (vr & mask) {  // send the partial sum to the parent and stop
        transport.isendOf<T>(mod(vr - mask + root, n), tag, std::span<const T>(data))
            .wait(options.timeoutSeconds);
        break;
      }
      if (vr + mask < n) {
        const int child = mod(vr + mask + root, n);
        Request recv = transport.irecvOf<T>(child, tag, std::span<T>(incoming));
        recv.wait(options.timeoutSeconds);
        expectBytes<T>(recv, data.size_bytes(), child);
        combine(op, data.data(), incoming.data(), data.size());
      }
    }
  }
  if (transport.rank() == root) detail::scaleIfAverage(op, data, n);
}

template void alltoallv<float>(Transport&, std::span<const float>, std::span<const std::size_t>,
                               std::span<float>, std::span<const std::size_t>, const CollectiveOptions&);
template void alltoallv<double>(Transport&, std::span<const double>, std::span<const std::size_t>,
                                std::span<double>, std::span<const std::size_t>, const CollectiveOptions&);
template void alltoallv<std::int64_t>(Transport&, std::span<const std::int64_t>, std::span<const std::size_t>,
                                      std::span<std::int64_t>, std::span<const std::size_t>,
                                      const CollectiveOptions&);
template void reduce<float>(Transport&, std::span<float>, int, ReduceOp, const CollectiveOptions&);
template void reduce<double>(Transport&, std::span<double>, int, ReduceOp, const CollectiveOptions&);
template void allreduce<float>(Transport&, std::span<float>, ReduceOp, const CollectiveOptions&);
template void allreduce<double>(Transport&, std::span<double>, ReduceOp, const CollectiveOptions&);
template void allreduce<float>(Transport&, std::span<const float>, std::span<float>, ReduceOp,
                               const CollectiveOptions&);
template void allreduce<double>(Transport&, std::span<const double>, std::span<double>, ReduceOp,
                                const CollectiveOptions&);
template void recursiveDoublingAllreduce<float>(Transport&, std::span<float>, ReduceOp,
                                                const CollectiveOptions&);
template void recursiveDoublingAllreduce<double>(Transport&, std::span<double>, ReduceOp,
                                                 const CollectiveOptions&);
template std::span<float> ringReduceScatter<float>(Transport&, std::span<float>, ReduceOp,
                                                   const CollectiveOptions&);
template std::span<double> ringReduceScatter<double>(Transport&, std::span<double>, ReduceOp,
                                                     const CollectiveOptions&);
template void ringAllgather<float>(Transport&, std::span<float>, const CollectiveOptions&);
template void ringAllgather<double>(Transport&, std::span<double>, const CollectiveOptions&);
template void ringAllreduce<float>(Transport&, std::span<float>, ReduceOp, const CollectiveOptions&);
template void ringAllreduce<double>(Transport&, std::span<double>, ReduceOp, const CollectiveOptions&);
template void broadcast<float>(Transport&, std::span<float>, int, const CollectiveOptions&);
template void broadcast<double>(Transport&, std::span<double>, int, const CollectiveOptions&);

// The split contexts held on this rank by the live split communicators whose
// views are on one top-level transport. One per top-level transport in the
// process, found through a registry, so that communicators of different trees
// over the same transport (say an optimizer's group communicator on a view of
// the main one's transport) never share a context.
struct Communicator::SplitContexts {
  std::mutex mu;
  std::bitset<kSplitContexts> live;

  static std::shared_ptr<SplitContexts> of(const Transport& root) {
    static std::mutex registryMu;
    static std::map<const Transport*, std::weak_ptr<SplitContexts>> registry;
    std::lock_guard<std::mutex> lk(registryMu);
    for (auto it = registry.begin(); it != registry.end();)  // forget transports without splits
      it = it->second.expired() ? registry.erase(it) : std::next(it);
    auto& slot = registry[&root];
    auto contexts = slot.lock();
    if (!contexts) slot = contexts = std::make_shared<SplitContexts>();
    return contexts;
  }
};

Communicator::Communicator(Transport& transport, double timeoutSeconds)
    : transport_(transport), timeout_(timeoutSeconds) {
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "timeout must be positive, got " << timeoutSeconds);
  if (auto* view = dynamic_cast<SubTransport*>(&transport)) {
    const int c = view->context();
    GOSSAMER_ENFORCE(c < kFirstSplitContext || c >= kFirstSplitContext + kSplitContexts,
                     "a communicator on a view of context " << c << ": contexts " << int{kFirstSplitContext}
                                                            << "-" << kFirstSplitContext + kSplitContexts - 1
                                                            << " are reserved for split");
  }
}

Communicator::Communicator(std::unique_ptr<Transport> view, double timeoutSeconds,
                           const CollectiveOptions& defaults, std::shared_ptr<SplitContexts> contexts,
                           std::uint8_t context)
    : owned_(std::move(view)),
      transport_(*owned_),
      timeout_(timeoutSeconds),
      defaults_(defaults),
      contexts_(std::move(contexts)),
      context_(context) {
  std::lock_guard<std::mutex> lk(contexts_->mu);  // held from here until the destructor
  contexts_->live.set(static_cast<std::size_t>(context_ - kFirstSplitContext));
}

Communicator::~Communicator() {
  if (context_ == 0) return;
  std::lock_guard<std::mutex> lk(contexts_->mu);
  contexts_->live.reset(static_cast<std::size_t>(context_ - kFirstSplitContext));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  GOSSAMER_ENFORCE(
      color >= 0 || color == kUndefinedColor,
      "split: color " << color << " must be >= 0 or kUndefinedColor (" << kUndefinedColor << ")");
  // A split of a split (or of a communicator on a view) is a view on the
  // top-level transport.
  auto* view = dynamic_cast<SubTransport*>(&transport_);
  Transport& root = view ? view->parent() : transport_;
  if (!contexts_) contexts_ = SplitContexts::of(root);
  // Every rank's color, key and held contexts (in words of 28 bits, exact in
  // a double), by a sum in which each entry has one contributor.
  constexpr int kWords = (kSplitContexts + 27) / 28, kStride = 2 + kWords;
  const int n = worldSize(), me = rank();
  std::vector<double> all(static_cast<std::size_t>(n * kStride), 0.0);
  double* mine = all.data() + static_cast<std::ptrdiff_t>(me) * kStride;
  mine[0] = color;
  mine[1] = key;
  std::bitset<kSplitContexts> held;
  {
    std::lock_guard<std::mutex> lk(contexts_->mu);
    held = contexts_->live;
  }
  for (int c = 0; c < kSplitContexts; ++c)
    if (held.test(static_cast<std::size_t>(c))) mine[2 + c / 28] += static_cast<double>(1 << (c % 28));
  CollectiveOptions o = next();
  o.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
  gossamer::allreduce<double>(transport_, all, ReduceOp::kSum, o);
  if (color == kUndefinedColor) return nullptr;

  // The members, ordered by (key, rank here); the lowest context that no
  // member holds.
  std::vector<std::pair<double, int>> order;
  std::bitset<kSplitContexts> taken;
  for (int r = 0; r < n; ++r) {
    const double* row = all.data() + static_cast<std::ptrdiff_t>(r) * kStride;
    if (row[0] != color) continue;
    order.emplace_back(row[1], r);
    for (int c = 0; c < kSplitContexts; ++c)
      if ((static_cast<std::uint32_t>(row[2 + c / 28]) >> (c % 28)) & 1u)
        taken.set(static_cast<std::size_t>(c));
  }
  std::sort(order.begin(), order.end());
  int free = 0;
  while (free < kSplitContexts && taken.test(static_cast<std::size_t>(free))) ++free;
  GOSSAMER_ENFORCE(free < kSplitContexts,
                   "split: the members of color "
                       << color << " hold all " << kSplitContexts
                       << " split contexts between them; destroy split communicators first");
  std::vector<int> members;
  for (const auto& [k, r] : order) members.push_back(view ? view->globalRank(r) : r);
  const auto context = static_cast<std::uint8_t>(kFirstSplitContext + free);
  auto sub = std::make_unique<SubTransport>(root, std::move(members), context);
  return std::unique_ptr<Communicator>(
      new Communicator(std::move(sub), timeout_, defaults_, contexts_, context));
}

CollectiveOptions Communicator::next() {
  CollectiveOptions o = defaults_;
  o.sequence = sequence_++ & Tag::kMaxStep;
  o.timeoutSeconds = timeout_;
  return o;
}

void Communicator::allreduce(std::span<float> data, ReduceOp op) {
  gossamer::allreduce(transport_, data, op, next());
}
void Communicator::allreduce(std::span<double> data, ReduceOp op) {
  gossamer::allreduce(transport_, data, op, next());
}
void Communicator::broadcast(std::span<float> data, int root) {
  gossamer::broadcast(transport_, data, root, next());
}
void Communicator::broadcast(std::span<double> data, int root) {
  gossamer::broadcast(transport_, data, root, next());
}

void Communicator::reduce(std::span<float> data, int root, ReduceOp op) {
  gossamer::reduce(transport_, data, root, op, next());
}

CostModel Communicator::calibrate(int reps) {
  CalibrationOptions c;
  c.reps = reps;
  return calibrate(c);
}

CostModel Communicator::calibrate(const CalibrationOptions& calibration) {
  CollectiveOptions o = defaults_;
  const std::uint64_t first = sequence_ & Tag::kMaxStep;
  o.sequence = first;
  o.timeoutSeconds = timeout_;
  defaults_.model = calibrateCostModel(transport_, o, calibration);
  sequence_ += o.sequence - first;
  return defaults_.model;
}

// Dissemination barrier (Hensgen, Finkel, Manber 1988): in round k each rank
// signals r + 2^k and waits for r - 2^k; after ceil(log2 N) rounds every rank
// has heard, transitively, from every other. All ranks leave within about one
// message latency of each other (a ring would release them N-1 hops apart).
void detail::disseminationBarrier(Transport& t, Op op, std::uint64_t sequence, double timeoutSeconds) {
  const int n = t.worldSize(), r = t.rank();
  std::uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    const auto tag = Tag::make(op, sequence, round);
    const std::byte token[1] = {std::byte{1}};
    std::byte in[1];
    Request recv = t.irecv(mod(r - dist, n), tag, in);
    t.isend(mod(r + dist, n), tag, token).wait(timeoutSeconds);
    recv.wait(timeoutSeconds);
  }
}

void Communicator::barrier() {
  const CollectiveOptions o = next();
  detail::disseminationBarrier(transport_, Op::kBarrier, o.sequence, o.timeoutSeconds);
}

}  // namespace gossamer
