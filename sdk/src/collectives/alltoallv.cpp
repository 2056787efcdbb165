// Alltoallv: rank r sends sendCounts[j] elements to each rank j and receives
// recvCounts[j] from it, all messages at once (the sender tells them apart; a
// share above 1 GiB, the largest message, goes as blocks of at most 1 GiB,
// block b under segment b); its own share is copied locally. One step; bytes
// sent per rank: the sum of its sendCounts except its own, times sizeof(T).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"

namespace gossamer {

using detail::expectBytes;

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
  // Checked before any receive is posted into `recv`: a throw further down
  // would leave them posted.
  GOSSAMER_ENFORCE(sendCounts[static_cast<std::size_t>(r)] == recvCounts[static_cast<std::size_t>(r)],
                   "alltoallv: " << sendCounts[static_cast<std::size_t>(r)] << " elements to itself but "
                                 << recvCounts[static_cast<std::size_t>(r)] << " expected from itself");
  for (int j = 0; j < n; ++j)
    if (detail::messageBlocks<T>(
            std::max(sendCounts[static_cast<std::size_t>(j)], recvCounts[static_cast<std::size_t>(j)]),
            options) > Tag::kMaxSegment)
      throw InvalidArgument("alltoallv: a share of rank " + std::to_string(j) + " is too large");
  auto tag = [&](std::size_t block) {
    return Tag::make(Op::kAllreduce, options.sequence, static_cast<std::uint32_t>(block));
  };
  std::vector<Request> recvs, sends;
  std::vector<std::pair<int, std::size_t>> expected;  // per receive: the rank and bytes
  std::size_t off = 0;
  for (int j = 0; j < n; ++j) {
    const std::size_t c = recvCounts[static_cast<std::size_t>(j)];
    if (j != r && c > 0) {
      const std::span<T> share = recv.subspan(off, c);
      for (std::size_t b = 0; b < detail::messageBlocks<T>(c, options); ++b) {
        const std::span<T> block = detail::messageBlock(share, b, options);
        recvs.push_back(transport.irecvOf<T>(j, tag(b), block));
        expected.emplace_back(j, block.size_bytes());
      }
    }
    off += c;
  }
  std::size_t sendOff = 0, selfOff = 0;
  for (int j = 0; j < r; ++j) selfOff += recvCounts[static_cast<std::size_t>(j)];
  for (int j = 0; j < n; ++j) {
    const std::size_t c = sendCounts[static_cast<std::size_t>(j)];
    if (j == r) {
      std::copy_n(send.begin() + static_cast<std::ptrdiff_t>(sendOff), c,
                  recv.begin() + static_cast<std::ptrdiff_t>(selfOff));
    } else if (c > 0) {
      const std::span<const T> share = send.subspan(sendOff, c);
      for (std::size_t b = 0; b < detail::messageBlocks<T>(c, options); ++b)
        sends.push_back(transport.isendOf<T>(j, tag(b), detail::messageBlock(share, b, options)));
    }
    sendOff += c;
  }
  for (std::size_t k = 0; k < recvs.size(); ++k) {
    detail::await(transport, recvs[k], options.timeoutSeconds, "alltoallv");
    expectBytes(transport, recvs[k], expected[k].second, expected[k].first);
  }
  detail::awaitAll(transport, sends, options.timeoutSeconds, "alltoallv");
}

#define GOSSAMER_INSTANTIATE(T)                                                                          \
  template void alltoallv<T>(Transport&, std::span<const T>, std::span<const std::size_t>, std::span<T>, \
                             std::span<const std::size_t>, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
// Raw bytes, for elements of any other type (moved, never combined).
GOSSAMER_INSTANTIATE(std::byte)
#undef GOSSAMER_INSTANTIATE

}  // namespace gossamer
