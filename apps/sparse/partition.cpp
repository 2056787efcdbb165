// Shards, mini-batches and the features a mini-batch touches (partition.hpp;
// Yokoyama and Araki, "Efficient Distributed Machine Learning for Large-scale
// Models by Reducing Redundant Communication", Sec. II-B, Fig. 1 and
// Sec. IV-B).
#include "partition.hpp"

#include <algorithm>

#include "gossamer/errors.hpp"

namespace gossamer::sparse {

RowRange shardRows(int rows, int rank, int world) {
  GOSSAMER_ENFORCE(rows >= 0, "rows=" << rows);
  GOSSAMER_ENFORCE(world >= 1, "world=" << world);
  GOSSAMER_ENFORCE(rank >= 0 && rank < world, "rank=" << rank << " world=" << world);
  const int base = rows / world;
  const int extra = rows % world;
  const int begin = rank * base + std::min(rank, extra);
  return RowRange{begin, begin + base + (rank < extra ? 1 : 0)};
}

SparseDataset shard(const SparseDataset& data, int rank, int world) {
  const RowRange r = shardRows(data.rows(), rank, world);
  SparseDataset out;
  out.x = data.x.middleRows(r.begin, r.size());
  out.y = data.y.segment(r.begin, r.size());
  return out;
}

std::vector<RowRange> miniBatches(int rows, int batchSize) {
  GOSSAMER_ENFORCE(rows >= 0, "rows=" << rows);
  GOSSAMER_ENFORCE(batchSize >= 1, "batchSize=" << batchSize);
  std::vector<RowRange> out;
  out.reserve(static_cast<std::size_t>(rows / batchSize + 1));
  for (int begin = 0; begin < rows; begin += std::min(batchSize, rows - begin)) {
    out.push_back(RowRange{begin, begin + std::min(batchSize, rows - begin)});
  }
  return out;
}

std::vector<int> touchedFeatures(const CsrMatrix& x, RowRange range) {
  GOSSAMER_ENFORCE(
      range.begin >= 0 && range.begin <= range.end && range.end <= x.rows(),
      "rows [" << range.begin << ", " << range.end << ") of a matrix with " << x.rows() << " rows");
  GOSSAMER_ENFORCE(x.isCompressed(), "touchedFeatures needs a compressed matrix (call makeCompressed())");
  const int* outer = x.outerIndexPtr();
  std::vector<int> out(x.innerIndexPtr() + outer[range.begin], x.innerIndexPtr() + outer[range.end]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<MiniBatch> batchesWithFeatures(const CsrMatrix& x, int batchSize) {
  std::vector<MiniBatch> out;
  for (const RowRange& r : miniBatches(static_cast<int>(x.rows()), batchSize)) {
    out.push_back(MiniBatch{r, touchedFeatures(x, r)});
  }
  return out;
}

}  // namespace gossamer::sparse
