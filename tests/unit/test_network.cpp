// NetworkLayout: islands from the config or given in code, each rank's
// island, link bandwidths and delays, and the partition checks.
#include <catch2/catch.hpp>

#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "registry.hpp"

using gossamer::InvalidArgument;
using gossamer::NetworkLayout;

TEST_CASE("network: two islands, their ranks, bandwidths and delays", "[network]") {
  const NetworkLayout n(6, {{5, 0, 1}, {2, 3, 4}}, 10.0, 0.1, 0.02);
  CHECK(n.worldSize() == 6);
  CHECK(n.islands() == std::vector<std::vector<int>>{{0, 1, 5}, {2, 3, 4}});  // sorted in each island
  CHECK(n.islandOf(5) == 0);
  CHECK(n.islandOf(3) == 1);
  CHECK(n.sameIsland(0, 5));
  CHECK_FALSE(n.sameIsland(1, 2));
  CHECK(n.bandwidthGbps(0, 1) == 10.0);
  CHECK(n.bandwidthGbps(4, 5) == 0.1);
  CHECK(n.delaySeconds(0, 1) == 0.0);
  CHECK(n.delaySeconds(0, 2) == 0.02);
  CHECK_THROWS_AS(n.islandOf(6), InvalidArgument);
  CHECK_THROWS_AS(n.islandOf(-1), InvalidArgument);
}

TEST_CASE("network: no islands is one island of every rank", "[network]") {
  const auto n = NetworkLayout::uniform(4, 25.0);
  CHECK(n.islands() == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(n.bandwidthGbps(0, 3) == 25.0);
  CHECK(n.delaySeconds(1, 2) == 0.0);
}

TEST_CASE("network: islands that are not a partition of the ranks are refused", "[network]") {
  CHECK_THROWS_WITH(NetworkLayout(4, {{0, 1}, {1, 2, 3}}, 1, 1), Catch::Contains("network.islands[1][0]"));
  CHECK_THROWS_WITH(NetworkLayout(4, {{0, 1}, {2}}, 1, 1), Catch::Contains("rank 3 is in no island"));
  CHECK_THROWS_WITH(NetworkLayout(4, {{0, 1}, {2, 3, 4}}, 1, 1), Catch::Contains("rank 4 does not exist"));
  CHECK_THROWS_AS(NetworkLayout(4, {}, 0.0, 1), InvalidArgument);
  CHECK_THROWS_AS(NetworkLayout(4, {}, 1, 1, -0.5), InvalidArgument);
}

TEST_CASE("network: read from the network section of a config", "[network][config]") {
  const auto c = gossamer::parseConfig(
      "world_size: 8\nnetwork:\n  islands: [[0, 1, 2, 3], [4, 5, 6, 7]]\n  between_gbps: 0.1\n"
      "  between_delay_ms: 20\n",
      gossamer::test::trainRegistry().schema(), "network.yaml");
  const auto n = NetworkLayout::from(c);
  CHECK(n.islands().size() == 2);
  CHECK(n.islandOf(6) == 1);
  CHECK(n.insideGbps() == 10.0);  // the default
  CHECK(n.bandwidthGbps(0, 7) == 0.1);
  CHECK(n.delaySeconds(3, 4) == Approx(0.02));
}

TEST_CASE("network: islands over a membership view name the view's ranks", "[network][membership]") {
  using gossamer::islandsInView;
  const std::vector<std::vector<int>> islands{{0, 1, 2}, {3, 4, 5}};
  // Rank 4 lost: the view's ranks 0..4 are the job's 0, 1, 2, 3, 5.
  CHECK(islandsInView(islands, {0, 1, 2, 3, 5}) == std::vector<std::vector<int>>{{0, 1, 2}, {3, 4}});
  // A whole island lost is dropped; the order of the islands is kept.
  CHECK(islandsInView({{5, 1}, {0, 2}, {3, 4}}, {1, 3, 4, 5}) ==
        std::vector<std::vector<int>>{{3, 0}, {1, 2}});
  CHECK(islandsInView(islands, {0, 1, 2, 3, 4, 5}) == islands);
  CHECK(islandsInView({}, {0, 1}).empty());
  // What comes out is a partition of the view's ranks.
  const NetworkLayout view(5, islandsInView(islands, {0, 1, 2, 3, 5}), 10.0, 0.1);
  CHECK(view.islandOf(4) == 1);
}
