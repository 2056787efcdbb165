// Tests of the data split of apps/sparse (partition.hpp): per-rank shards,
// mini-batches and the features each mini-batch touches (the sparse-synchronisation paper (Yokoyama, Araki),
// Sec. II-B Fig. 1 and Sec. IV-B).
#include <Eigen/Core>
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "gossamer/errors.hpp"
#include "partition.hpp"
#include "sparse_synthetic.hpp"

namespace {

using gossamer::InvalidArgument;
using gossamer::sparse::batchesWithFeatures;
using gossamer::sparse::miniBatches;
using gossamer::sparse::RowRange;
using gossamer::sparse::shard;
using gossamer::sparse::shardRows;
using gossamer::sparse::SparseDataset;
using gossamer::sparse::touchedFeatures;

}  // namespace

TEST_CASE("shardRows tiles the rows into contiguous blocks differing by at most one", "[sparse][partition]") {
  for (const int rows : {0, 1, 7, 100, 101}) {
    for (const int world : {1, 2, 3, 8, 150}) {
      INFO("rows=" << rows << " world=" << world);
      int next = 0;
      int smallest = rows;
      int largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const RowRange r = shardRows(rows, rank, world);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
        CHECK(r == shardRows(rows, rank, world));  // deterministic
      }
      CHECK(next == rows);
      CHECK(largest - smallest <= 1);
    }
  }
  CHECK_THROWS_AS(shardRows(-1, 0, 1), InvalidArgument);
  CHECK_THROWS_AS(shardRows(10, 0, 0), InvalidArgument);
  CHECK_THROWS_AS(shardRows(10, 3, 3), InvalidArgument);
  CHECK_THROWS_AS(shardRows(10, -1, 3), InvalidArgument);
}

TEST_CASE("shard copies a rank's rows and labels with all columns", "[sparse][partition]") {
  const SparseDataset d = gossamer::testing::syntheticSparse(23, 9, 0.3, 5);
  const Eigen::MatrixXd all(d.x);
  for (int rank = 0; rank < 4; ++rank) {
    const RowRange r = shardRows(d.rows(), rank, 4);
    const SparseDataset s = shard(d, rank, 4);
    REQUIRE(s.rows() == r.size());
    CHECK(s.features() == d.features());
    CHECK(s.x.isCompressed());
    CHECK(Eigen::MatrixXd(s.x) == all.middleRows(r.begin, r.size()));
    CHECK(s.y == d.y.segment(r.begin, r.size()));
  }
}

TEST_CASE("miniBatches cover the rows in order, the last one shorter", "[sparse][partition]") {
  const std::vector<RowRange> b = miniBatches(10, 4);
  CHECK(b == std::vector<RowRange>{{0, 4}, {4, 8}, {8, 10}});
  CHECK(miniBatches(8, 4).size() == 2);
  CHECK(miniBatches(0, 4).empty());
  CHECK(miniBatches(3, 100) == std::vector<RowRange>{{0, 3}});
  CHECK_THROWS_AS(miniBatches(10, 0), InvalidArgument);
  CHECK_THROWS_AS(miniBatches(-1, 2), InvalidArgument);
}

TEST_CASE("touchedFeatures lists the distinct columns a batch's rows store", "[sparse][partition]") {
  const SparseDataset d = gossamer::testing::syntheticSparse(40, 30, 0.1, 11);
  const Eigen::MatrixXd all(d.x);
  for (const auto& batch : batchesWithFeatures(d.x, 7)) {
    std::set<int> want;
    for (int i = batch.rows.begin; i < batch.rows.end; ++i) {
      for (int j = 0; j < all.cols(); ++j) {
        if (all(i, j) != 0) want.insert(j);
      }
    }
    CHECK(batch.features == std::vector<int>(want.begin(), want.end()));
    CHECK(batch.features == touchedFeatures(d.x, batch.rows));
  }
  CHECK(touchedFeatures(d.x, RowRange{5, 5}).empty());
  CHECK_THROWS_AS(touchedFeatures(d.x, RowRange{5, 41}), InvalidArgument);
  CHECK_THROWS_AS(touchedFeatures(d.x, RowRange{6, 5}), InvalidArgument);
}
