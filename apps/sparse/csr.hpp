// The sparse data types of the apps/sparse models: a CSR matrix of
// samples, its labels, and row ranges. The samples D_i of L2-regularised
// logistic regression (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023),
// Sec. 5.2, Eq. 8) and the samples x of the factorization machine (Yokoyama and
// Araki, "Efficient Distributed Machine Learning for Large-scale Models by
// Reducing Redundant Communication", Sec. II-C and VI-B) are rows of a
// CsrMatrix.
#pragma once

#include <Eigen/Core>
#include <Eigen/SparseCore>

namespace gossamer::sparse {

/// Compressed sparse row matrix of doubles with int indices: one sample per
/// row, one (0-based) feature per column. Always in compressed mode
/// (isCompressed()), with strictly increasing column indices within a row.
using CsrMatrix = Eigen::SparseMatrix<double, Eigen::RowMajor, int>;

/// Labelled sparse samples, e.g. one file of LIBSVM data or one rank's shard.
struct SparseDataset {
  /// samples x features; feature j of the LIBSVM file (1-based) is column j-1.
  CsrMatrix x;
  /// One label per row of x, each -1.0 or +1.0 (b_i of the 2D-TGA paper's
  /// Eq. 8, y of Yokoyama and Araki's Sec. VI-B).
  Eigen::VectorXd y;

  /// Number of samples (rows of x).
  int rows() const { return static_cast<int>(x.rows()); }
  /// Number of features (columns of x).
  int features() const { return static_cast<int>(x.cols()); }
};

/// The rows [begin, end) of a matrix; empty when begin == end.
struct RowRange {
  int begin = 0;  ///< first row, inclusive
  int end = 0;    ///< one past the last row

  /// Number of rows, end - begin.
  int size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

}  // namespace gossamer::sparse
