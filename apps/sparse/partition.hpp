// How sparse data is split for distributed training: each rank takes a
// contiguous block of rows (its shard), walks it in mini-batches of
// consecutive rows, and for each mini-batch lists the distinct features its
// rows touch. The split of Yokoyama and Araki, "Efficient Distributed Machine
// Learning for Large-scale Models by Reducing Redundant Communication"
// (Sec. II-B, Fig. 1: every mini-batch divided among the nodes; here global
// mini-batch m is the union of the ranks' m-th local batches), and the
// per-batch feature set that its sparse synchronisation exchanges (Sec. II-C,
// IV-B: the features F_n updated by node n).
#pragma once

#include <vector>

#include "csr.hpp"

namespace gossamer::sparse {

/// The contiguous block of rows rank `rank` of `world` ranks owns out of
/// `rows`: the first rows % world ranks get rows / world + 1 rows, the others
/// rows / world, in rank order, so the blocks tile [0, rows) and differ in
/// size by at most one. Deterministic; a rank may get an empty block when
/// rows < world.
/// @throws InvalidArgument if rows < 0, world < 1 or rank is not in [0, world).
RowRange shardRows(int rows, int rank, int world);

/// A copy of the rows shardRows(data.rows(), rank, world) of `data`: the
/// samples and labels of one rank, with all data.features() columns.
/// @throws InvalidArgument as shardRows.
SparseDataset shard(const SparseDataset& data, int rank, int world);

/// The mini-batches of rows [0, rows): consecutive ranges of batchSize rows in
/// order, the last one shorter when batchSize does not divide rows (none when
/// rows == 0).
/// @throws InvalidArgument if rows < 0 or batchSize < 1.
std::vector<RowRange> miniBatches(int rows, int batchSize);

/// The sorted distinct (0-based) column indices of the stored entries of the
/// rows `range` of x: the features a mini-batch touches, whose parameters
/// its gradient updates. Explicitly stored zeros count as touched.
/// @return  strictly increasing indices in [0, x.cols())
/// @throws InvalidArgument if range is not within [0, x.rows()],
///         range.begin > range.end, or x is not compressed.
std::vector<int> touchedFeatures(const CsrMatrix& x, RowRange range);

/// One mini-batch of a shard: its rows and the features they touch.
struct MiniBatch {
  RowRange rows;              ///< rows of the shard's matrix
  std::vector<int> features;  ///< touchedFeatures(x, rows)
};

/// miniBatches(x.rows(), batchSize), each with its touchedFeatures().
/// @throws InvalidArgument if batchSize < 1 or x is not compressed.
std::vector<MiniBatch> batchesWithFeatures(const CsrMatrix& x, int batchSize);

}  // namespace gossamer::sparse
