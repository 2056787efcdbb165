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
#include <vector>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

// Chunk i has length/n elements, plus one for the first length % n chunks.
std::size_t chunkBegin(std::size_t length, int n, int i) {
  const auto un = static_cast<std::size_t>(n), ui = static_cast<std::size_t>(i);
  return ui * (length / un) + std::min(ui, length % un);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

template <typename T>
void expectBytes(const Request& r, std::size_t expected, int peer) {
  if (r.bytes() != expected)
    throw ProtocolError(peer, frame_offset::kPayloadBytes,
                        "collective chunk of " + std::to_string(r.bytes()) + " bytes, expected " +
                            std::to_string(expected) + " (do all ranks pass the same length?)");
}

}  // namespace

template <typename T>
void ringAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  const int n = transport.worldSize();
  const int r = transport.rank();
  if (n == 1 || data.empty()) return;  // empty on every rank: nothing to exchange
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t len = data.size();
  std::size_t maxChunk = 0;
  for (int i = 0; i < n; ++i)
    maxChunk = std::max(maxChunk, chunkBegin(len, n, i + 1) - chunkBegin(len, n, i));
  std::vector<T> incoming(maxChunk);
  auto chunk = [&](int i) {
    const std::size_t b = chunkBegin(len, n, i), e = chunkBegin(len, n, i + 1);
    return data.subspan(b, e - b);
  };
  std::uint32_t substep = 0;
  // Reduce-scatter.
  for (int s = 0; s < n - 1; ++s, ++substep) {
    const auto tag = Tag::make(Op::kAllreduce, options.sequence, substep);
    auto out = chunk(mod(r - s, n));
    auto in = chunk(mod(r - s - 1, n));
    std::span<T> inBuf(incoming.data(), in.size());
    Request recv = transport.irecvOf<T>(left, tag, inBuf);
    Request send = transport.isendOf<T>(right, tag, std::span<const T>(out));
    recv.wait(options.timeoutSeconds);
    expectBytes<T>(recv, in.size_bytes(), left);
    for (std::size_t k = 0; k < in.size(); ++k) in[k] += inBuf[k];
    send.wait(options.timeoutSeconds);
  }
  if (op == ReduceOp::kAverage) {
    const T scale = T(1) / static_cast<T>(n);
    for (auto& v : chunk(mod(r + 1, n))) v *= scale;
  }
  // Allgather.
  for (int s = 0; s < n - 1; ++s, ++substep) {
    const auto tag = Tag::make(Op::kAllreduce, options.sequence, substep);
    auto out = chunk(mod(r + 1 - s, n));
    auto in = chunk(mod(r - s, n));
    Request recv = transport.irecvOf<T>(left, tag, in);
    Request send = transport.isendOf<T>(right, tag, std::span<const T>(out));
    recv.wait(options.timeoutSeconds);
    expectBytes<T>(recv, in.size_bytes(), left);
    send.wait(options.timeoutSeconds);
  }
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
    std::vector<T> incoming(data.size());
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
        for (std::size_t k = 0; k < data.size(); ++k) data[k] += incoming[k];
      }
    }
  }
  if (op == ReduceOp::kAverage && transport.rank() == root) {
    const T scale = T(1) / static_cast<T>(n);
    for (auto& v : data) v *= scale;
  }
}

template void reduce<float>(Transport&, std::span<float>, int, ReduceOp, const CollectiveOptions&);
template void reduce<double>(Transport&, std::span<double>, int, ReduceOp, const CollectiveOptions&);
template void ringAllreduce<float>(Transport&, std::span<float>, ReduceOp, const CollectiveOptions&);
template void ringAllreduce<double>(Transport&, std::span<double>, ReduceOp, const CollectiveOptions&);
template void broadcast<float>(Transport&, std::span<float>, int, const CollectiveOptions&);
template void broadcast<double>(Transport&, std::span<double>, int, const CollectiveOptions&);

Communicator::Communicator(Transport& transport, double timeoutSeconds)
    : transport_(transport), timeout_(timeoutSeconds) {
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "timeout must be positive, got " << timeoutSeconds);
}

CollectiveOptions Communicator::next() {
  CollectiveOptions o;
  o.sequence = sequence_++ & Tag::kMaxStep;
  o.timeoutSeconds = timeout_;
  return o;
}

void Communicator::allreduce(std::span<float> data, ReduceOp op) {
  ringAllreduce(transport_, data, op, next());
}
void Communicator::allreduce(std::span<double> data, ReduceOp op) {
  ringAllreduce(transport_, data, op, next());
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

// Dissemination barrier (Hensgen, Finkel, Manber 1988): in round k each rank
// signals r + 2^k and waits for r - 2^k; after ceil(log2 N) rounds every rank
// has heard, transitively, from every other. All ranks leave within about one
// message latency of each other (a ring would release them N-1 hops apart).
void Communicator::barrier() {
  const int n = transport_.worldSize(), r = transport_.rank();
  const CollectiveOptions o = next();
  std::uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    const auto tag = Tag::make(Op::kBarrier, o.sequence, round);
    const std::byte token[1] = {std::byte{1}};
    std::byte in[1];
    Request recv = transport_.irecv(mod(r - dist, n), tag, in);
    transport_.isend(mod(r + dist, n), tag, token).wait(o.timeoutSeconds);
    recv.wait(o.timeoutSeconds);
  }
}

}  // namespace gossamer
