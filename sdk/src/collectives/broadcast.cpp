// Binomial-tree broadcast and reduce. Broadcast: with v = (rank - root) mod N,
// a rank receives the whole vector from v - m (m its lowest set bit) and then
// sends it to v + m' for every m' < m, so after ceil(log2 N) rounds every rank
// holds it; N-1 messages of L * sizeof(T) bytes in all. Reduce is the mirror
// image: in the round of mask m the ranks with bit m set send their partial
// result to v - m and stop, the others combine what they receive;
// ceil(log2 N) rounds, N-1 messages of the whole vector. Used on their own
// and inside the hierarchical allreduce and 2D-TGA (Wang et al., "A
// Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023), Sec. 2.3 and Algorithm 1
// line 17). A rank that knows of a failed rank of the group once its part
// is done throws PeerFailure, as the ranks in that rank's subtree do (a rank
// outside it waits on no one the failed rank holds up). A vector above 1 GiB
// (the largest message) goes through the tree as consecutive blocks of at
// most 1 GiB, block b under segment b (broadcast) or kMaxSegment - b
// (reduce).
#include <cstdint>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"

namespace gossamer {

using detail::combine;
using detail::expectBytes;
using detail::mod;

namespace {

// One block of a broadcast: the binomial tree above, under `tag`.
template <typename T>
void broadcastBlock(Transport& transport, std::span<T> data, int root, const Tag& tag,
                    const CollectiveOptions& options) {
  const int n = transport.worldSize();
  const int vr = mod(transport.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      const int parent = mod(vr - mask + root, n);
      Request recv = transport.irecvOf<T>(parent, tag, data);
      detail::await(transport, recv, options.timeoutSeconds, "broadcast");
      expectBytes(transport, recv, data.size_bytes(), parent);
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
  detail::awaitAll(transport, sends, options.timeoutSeconds, "broadcast");
}

// One block of a reduce: the mirror-image tree above, under `tag`.
template <typename T>
void reduceBlock(Transport& transport, std::span<T> data, int root, ReduceOp op, const Tag& tag,
                 const CollectiveOptions& options) {
  const int n = transport.worldSize();
  const int vr = mod(transport.rank() - root, n);
  const auto incoming = detail::scratch<T>(detail::ScratchSlot::kReduce, data.size());
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {  // send the partial sum to the parent and stop
      detail::await(transport, transport.isendOf<T>(mod(vr - mask + root, n), tag, std::span<const T>(data)),
                    options.timeoutSeconds, "reduce");
      break;
    }
    if (vr + mask < n) {
      const int child = mod(vr + mask + root, n);
      Request recv = transport.irecvOf<T>(child, tag, std::span<T>(incoming));
      detail::await(transport, recv, options.timeoutSeconds, "reduce");
      expectBytes(transport, recv, data.size_bytes(), child);
      combine(op, data.data(), incoming.data(), data.size());
    }
  }
}

}  // namespace

template <typename T>
void broadcast(Transport& transport, std::span<T> data, int root, const CollectiveOptions& options) {
  const int n = transport.worldSize();
  GOSSAMER_ENFORCE(root >= 0 && root < n, "broadcast root " << root << " outside world size " << n);
  if (n == 1) return;
  const std::size_t blocks = detail::messageBlocks<T>(data.size(), options);
  if (blocks > Tag::kMaxSegment)
    throw InvalidArgument("broadcast of " + std::to_string(data.size_bytes()) + " bytes: too large");
  for (std::size_t b = 0; b < blocks; ++b)
    broadcastBlock(transport, detail::messageBlock(data, b, options), root,
                   Tag::make(Op::kBroadcast, options.sequence, static_cast<std::uint32_t>(b)), options);
  // A rank outside a failed rank's subtree waits on no one it needs: without
  // this it would return as if the broadcast had succeeded everywhere.
  detail::throwIfGroupFailed(transport, "broadcast");
}

template <typename T>
void reduce(Transport& transport, std::span<T> data, int root, ReduceOp op,
            const CollectiveOptions& options) {
  const int n = transport.worldSize();
  GOSSAMER_ENFORCE(root >= 0 && root < n, "reduce root " << root << " outside world size " << n);
  op = detail::premultipliedAverage(data, op, n);
  if (n > 1) {
    const std::size_t blocks = detail::messageBlocks<T>(data.size(), options);
    if (blocks > Tag::kMaxSegment)
      throw InvalidArgument("reduce of " + std::to_string(data.size_bytes()) + " bytes: too large");
    // Block b under segment kMaxSegment - b.
    for (std::size_t b = 0; b < blocks; ++b)
      reduceBlock(
          transport, detail::messageBlock(data, b, options), root, op,
          Tag::make(Op::kAllreduce, options.sequence, static_cast<std::uint32_t>(Tag::kMaxSegment - b)),
          options);
    detail::throwIfGroupFailed(transport, "reduce");  // (as broadcast's)
  }
  if (transport.rank() == root) detail::scaleIfAverage(op, data, n);
}

#define GOSSAMER_INSTANTIATE(T)                                                               \
  template void reduce<T>(Transport&, std::span<T>, int, ReduceOp, const CollectiveOptions&); \
  template void broadcast<T>(Transport&, std::span<T>, int, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE
// Raw bytes, for elements of any other type (moved, never combined).
template void broadcast<std::byte>(Transport&, std::span<std::byte>, int, const CollectiveOptions&);

}  // namespace gossamer
