// The largest message: every collective moves a vector, share or piece above
// CollectiveOptions::maxMessageBytes (1 GiB by default, the largest frame the
// socket, zmq and libfabric transports take) as several messages. Here over
// inproc ranks that refuse any message above a small limit, as those
// transports refuse a frame above 1 GiB, so that the blocks are exercised on
// vectors of a few hundred elements; and the order in which recursive
// doubling combines, which gives every rank the same bits.
#include <catch2/catch.hpp>

#include "forwarding.hpp"
#include "groups.hpp"
#include "threads.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"

using namespace gossamer;
using gossamer::testing::Forwarding;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;
constexpr std::size_t kLimit = 40;  // bytes: 10 float32, 5 int64

// A rank that refuses to send more than kLimit bytes in one message (as a
// frame encoder refuses more than kMaxPayloadBytes), and keeps the largest
// message it sent.
class Limited final : public Forwarding {
 public:
  explicit Limited(std::unique_ptr<Transport> inner) : Forwarding(std::move(inner)) {}
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    check(data.size());
    return Forwarding::isend(dst, tag, data, dtype);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    check(data.size());
    return Forwarding::isendBorrowed(dst, tag, data, dtype, checksum);
  }
  std::size_t largest() const { return largest_.load(); }

 private:
  void check(std::size_t bytes) {
    if (bytes > kLimit) throw InvalidArgument("a message of " + std::to_string(bytes) + " bytes");
    std::size_t seen = largest_.load();
    while (bytes > seen && !largest_.compare_exchange_weak(seen, bytes)) {
    }
  }
  std::atomic<std::size_t> largest_{0};
};

std::vector<std::unique_ptr<Limited>> limitedGroup(int n) {
  auto inner = gossamer::testing::inprocGroup(n, kTimeout);
  std::vector<std::unique_ptr<Limited>> g;
  for (auto& t : inner) g.push_back(std::make_unique<Limited>(std::move(t)));
  return g;
}

CollectiveOptions limited(std::uint64_t sequence, AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto) {
  CollectiveOptions o{sequence, kTimeout, algorithm};
  o.maxMessageBytes = kLimit;
  o.chunkBytes = std::size_t{1} << 30;  // pieces as large as the limit lets them be
  o.groupSize = 2;
  return o;
}

}  // namespace

TEST_CASE(
    "every allreduce algorithm moves a vector above maxMessageBytes as messages of at most that many bytes",
    "[collectives][limit]") {
  for (int n : {2, 3, 5}) {
    auto g = limitedGroup(n);
    std::uint64_t seq = 0;
    for (auto a :
         {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling,
          AllreduceAlgorithm::kRabenseifner, AllreduceAlgorithm::kTorus2d, AllreduceAlgorithm::kHierarchical,
          AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHips}) {
      for (std::size_t len : {std::size_t{9}, std::size_t{10}, std::size_t{11}, std::size_t{517}}) {
        INFO("world size " << n << ", " << toString(a) << ", " << len << " floats");
        std::vector<std::vector<float>> data(n, std::vector<float>(len));
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < len; ++i)
            data[r][i] = static_cast<float>(r * 1000 + static_cast<int>(i));
        const CollectiveOptions o = limited(++seq, a);
        onEveryRank(n, [&](int r) { allreduce<float>(*g[r], std::span<float>(data[r]), ReduceOp::kSum, o); });
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < len; ++i)
            REQUIRE(data[r][i] == static_cast<float>(1000 * n * (n - 1) / 2 + n * static_cast<int>(i)));
      }
    }
    for (auto& t : g) CHECK(t->largest() == kLimit);
  }
}

TEST_CASE("broadcast, reduce and alltoallv above maxMessageBytes go as blocks of at most that many bytes",
          "[collectives][limit]") {
  const int n = 5;
  auto g = limitedGroup(n);
  const std::size_t len = 23;  // 184 bytes: blocks of 5, 5, 5, 5 and 3 int64
  std::vector<std::vector<std::int64_t>> v(n, std::vector<std::int64_t>(len));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < len; ++i) v[r][i] = r * 100 + static_cast<std::int64_t>(i);
  auto b = v, red = v;
  onEveryRank(n,
              [&](int r) { broadcast<std::int64_t>(*g[r], std::span<std::int64_t>(b[r]), 3, limited(1)); });
  onEveryRank(n, [&](int r) {
    reduce<std::int64_t>(*g[r], std::span<std::int64_t>(red[r]), 1, ReduceOp::kSum, limited(2));
  });
  // alltoallv: rank r sends 7 + s elements to rank s (a share of 2 blocks or more).
  std::vector<std::vector<std::int64_t>> send(n), got(n);
  std::vector<std::vector<std::size_t>> sendCounts(n), recvCounts(n);
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) {
      sendCounts[r].push_back(static_cast<std::size_t>(7 + s));
      recvCounts[r].push_back(static_cast<std::size_t>(7 + r));
      for (int i = 0; i < 7 + s; ++i) send[r].push_back(r * 10000 + s * 100 + i);
    }
  for (int r = 0; r < n; ++r) got[r].assign(static_cast<std::size_t>(n * (7 + r)), -1);
  onEveryRank(n, [&](int r) {
    alltoallv<std::int64_t>(*g[r], std::span<const std::int64_t>(send[r]), sendCounts[r],
                            std::span<std::int64_t>(got[r]), recvCounts[r], limited(3));
  });
  for (int r = 0; r < n; ++r) {
    CHECK(b[r] == v[3]);
    std::size_t k = 0;
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < 7 + r; ++i) CHECK(got[r][k++] == s * 10000 + r * 100 + i);
  }
  for (std::size_t i = 0; i < len; ++i) CHECK(red[1][i] == 1000 + n * static_cast<std::int64_t>(i));
  for (auto& t : g) CHECK(t->largest() == kLimit);
  // Without the limit the same vector goes whole (and Limited refuses it).
  auto plain = limitedGroup(2);
  std::vector<std::int64_t> x(len, 1);
  CHECK_THROWS_AS(broadcast<std::int64_t>(*plain[0], std::span<std::int64_t>(x), 0, {4, kTimeout}),
                  InvalidArgument);
}

TEST_CASE("a chunk_bytes far above a message's size, SIZE_MAX included, still moves every byte",
          "[collectives][limit]") {
  const int n = 2;
  auto g = gossamer::testing::inprocGroup(n, kTimeout);
  std::vector<std::vector<std::byte>> v(n, std::vector<std::byte>(8));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 8; ++i)
      v[r][i] = i / 4 == static_cast<std::size_t>(r) ? std::byte{static_cast<unsigned char>(10 * r + i)}
                                                     : std::byte{0};
  CollectiveOptions o{1, kTimeout};
  o.chunkBytes = std::numeric_limits<std::size_t>::max();
  onEveryRank(n, [&](int r) { ringAllgather<std::byte>(*g[r], std::span<std::byte>(v[r]), o); });
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 8; ++i)
      CHECK(v[r][i] == std::byte{static_cast<unsigned char>(10 * (i / 4) + i)});
}

TEST_CASE("recursive doubling gives every rank the same bits where the order of the operands shows",
          "[collectives][limit]") {
  // max(+0, -0) keeps whichever came first, and a sum of two NaNs keeps the
  // first one's payload: both partners combine the lower rank's vector first.
  for (int n : {2, 3, 4, 6}) {
    auto g = gossamer::testing::inprocGroup(n, kTimeout);
    const float nanA = std::bit_cast<float>(0x7FC00001u), nanB = std::bit_cast<float>(0xFFC00002u);
    for (auto op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kSum}) {
      INFO("world size " << n << ", op " << int(op));
      std::vector<std::vector<float>> data(n);
      for (int r = 0; r < n; ++r) data[r] = {r % 2 == 0 ? 0.0f : -0.0f, r % 2 == 0 ? nanA : nanB, 1.0f};
      CollectiveOptions o{static_cast<std::uint64_t>(op) + 1, kTimeout,
                          AllreduceAlgorithm::kRecursiveDoubling};
      onEveryRank(n, [&](int r) { allreduce<float>(*g[r], std::span<float>(data[r]), op, o); });
      for (int r = 1; r < n; ++r)
        for (std::size_t i = 0; i < data[r].size(); ++i)
          CHECK(std::bit_cast<std::uint32_t>(data[r][i]) == std::bit_cast<std::uint32_t>(data[0][i]));
    }
  }
}
