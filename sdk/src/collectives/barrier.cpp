// Dissemination barrier (Hensgen, Finkel and Manber, "Two algorithms for
// barrier synchronization", IJPP 1988): in round k each rank signals
// r + 2^k and waits for r - 2^k; after ceil(log2 N) rounds every rank has
// heard, transitively, from every other. One-byte messages, ceil(log2 N)
// rounds. All ranks leave within about one message latency of each other (a
// ring would release them N-1 hops apart).
#include <cstddef>
#include <cstdint>

#include "detail.hpp"
#include "gossamer/collectives.hpp"

namespace gossamer {

void detail::disseminationBarrier(Transport& t, Op op, std::uint64_t sequence, double timeoutSeconds) {
  const int n = t.worldSize(), r = t.rank();
  std::uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    const auto tag = Tag::make(op, sequence, round);
    const std::byte token[1] = {std::byte{1}};
    std::byte in[1];
    Request recv = t.irecv(detail::mod(r - dist, n), tag, in);
    detail::await(t, t.isend(detail::mod(r + dist, n), tag, token), timeoutSeconds, "barrier");
    detail::await(t, recv, timeoutSeconds, "barrier");
  }
}

}  // namespace gossamer
