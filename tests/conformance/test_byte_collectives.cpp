// The data-movement collectives over raw bytes (T = std::byte): broadcast,
// ring allgather and alltoallv move the bytes of elements of any type (the
// torch.distributed backend's uint8, int8, bool, int16 and complex tensors),
// odd lengths and uneven counts included, over inproc with 3 and 4 ranks.
#include <catch2/catch.hpp>

#include "groups.hpp"
#include "threads.hpp"

#include <cstddef>
#include <numeric>
#include <vector>

#include "gossamer/collectives.hpp"

using namespace gossamer;
using gossamer::testing::Group;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

// A byte that names its rank and place.
std::byte tagged(int rank, std::size_t i) {
  return static_cast<std::byte>(rank * 64 + static_cast<int>(i % 64));
}

}  // namespace

TEST_CASE("byte broadcast, allgather and alltoallv move every byte to its place", "[collectives][bytes]") {
  for (const int n : {3, 4}) {
    Group g = gossamer::testing::inprocGroup(n, kTimeout);
    // Broadcast of 13 bytes from the last rank.
    std::vector<std::vector<std::byte>> b(n, std::vector<std::byte>(13));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < 13; ++i) b[r][i] = tagged(r, i);
    onEveryRank(n, [&](int r) {
      broadcast<std::byte>(*g[r], std::span<std::byte>(b[r]), n - 1, {1, kTimeout});
    });
    // Allgather of 5 bytes per rank.
    std::vector<std::vector<std::byte>> ag(n, std::vector<std::byte>(5 * static_cast<std::size_t>(n)));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < 5; ++i) ag[r][5 * static_cast<std::size_t>(r) + i] = tagged(r, i);
    onEveryRank(n, [&](int r) {
      ringAllgather<std::byte>(*g[r], std::span<std::byte>(ag[r]), {2, kTimeout});
    });
    // Alltoallv: rank r sends s + r + 1 bytes to rank s.
    std::vector<std::vector<std::size_t>> sendCounts(n), recvCounts(n);
    std::vector<std::vector<std::byte>> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < n; ++s) {
        sendCounts[r].push_back(static_cast<std::size_t>(s + r + 1));
        recvCounts[r].push_back(static_cast<std::size_t>(r + s + 1));
      }
      const std::size_t total = std::accumulate(sendCounts[r].begin(), sendCounts[r].end(), std::size_t{0});
      for (std::size_t i = 0; i < total; ++i) send[r].push_back(tagged(r, i));
      recv[r].resize(std::accumulate(recvCounts[r].begin(), recvCounts[r].end(), std::size_t{0}));
    }
    onEveryRank(n, [&](int r) {
      alltoallv<std::byte>(*g[r], std::span<const std::byte>(send[r]), sendCounts[r],
                           std::span<std::byte>(recv[r]), recvCounts[r], {3, kTimeout});
    });
    for (int r = 0; r < n; ++r) {
      CHECK(b[r] == b[n - 1]);
      for (std::size_t i = 0; i < 13; ++i) CHECK(b[r][i] == tagged(n - 1, i));
      for (int s = 0; s < n; ++s)
        for (std::size_t i = 0; i < 5; ++i) CHECK(ag[r][5 * static_cast<std::size_t>(s) + i] == tagged(s, i));
      std::size_t at = 0;
      for (int s = 0; s < n; ++s) {
        // Rank s's bytes for r start after what it sent to ranks 0..r-1.
        std::size_t from = 0;
        for (int q = 0; q < r; ++q) from += sendCounts[s][q];
        for (std::size_t i = 0; i < recvCounts[r][s]; ++i) CHECK(recv[r][at + i] == tagged(s, from + i));
        at += recvCounts[r][s];
      }
    }
  }
}
