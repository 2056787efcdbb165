// An order-2 factorization machine for binary classification with the
// logistic loss, evaluated in O(k nnz) and differentiated sparsely: the
// gradient of a mini-batch covers only the features its rows touch, which is
// what sparse synchronisation reduces. Yokoyama and Araki, "Efficient
// Distributed Machine Learning for Large-scale Models by Reducing Redundant
// Communication" (Sec. VI-B, the model equation and l(y, yhat) = -ln
// sigma(y yhat); the mini-batch objective V_m of Sec. II-A), after its
// ref. [19] (Rendle, "Factorization machines", ICDM 2010: the linear-time form
// of the pairwise term and its gradient).
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

#include "csr.hpp"
#include "partition.hpp"

namespace gossamer::sparse {

/// Dense row-major double matrix.
using DenseRows = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The parameters of a factorization machine over d features with k factors.
///
/// The per-feature parameters are rows of one table, so that the unit that
/// sparse synchronisation exchanges for feature j (Yokoyama and Araki's
/// "feature") is the contiguous row
/// table.row(j) = [w_j, v_{j,1}, ..., v_{j,k}].
struct FmParameters {
  /// The bias w_0.
  double w0 = 0;
  /// d x (1 + k): column 0 the linear weights w_j, columns 1..k the factors v_j.
  DenseRows table;

  /// Number of features d.
  int features() const { return static_cast<int>(table.rows()); }
  /// Number of factors k.
  int factors() const { return static_cast<int>(table.cols()) - 1; }
};

/// The gradient of a mini-batch objective: the bias entry and one table row
/// for each feature the batch touches (every other row of the gradient is 0).
struct FmGradient {
  /// d V / d w_0.
  double w0 = 0;
  /// The touched features (0-based, strictly increasing): MiniBatch::features.
  std::vector<int> features;
  /// features.size() x (1 + k): row r is d V / d table.row(features[r]).
  DenseRows rows;
};

/// yhat(x) = w_0 + sum_j w_j x_j + sum_{i<j} <v_i, v_j> x_i x_j (Yokoyama and
/// Araki, Sec. VI-B), with the pairwise term computed as
/// 1/2 sum_f [(sum_j v_{j,f} x_j)^2 - sum_j v_{j,f}^2 x_j^2] in O(k nnz(x)).
///
/// Mini-batch objective, for the rows B of a batch and the set F_B of the
/// features they touch:
///   V_B = (1/|B|) sum_{i in B} log(1 + exp(-y_i yhat(x_i)))
///         + (lambda/2) sum_{j in F_B} ||table.row(j)||^2,
/// the mean logistic loss (Yokoyama and Araki, Sec. II-A, V_m, and Sec. VI-B)
/// plus an L2 penalty on the touched rows only (so the gradient stays sparse;
/// w_0 is not penalised). Labels y_i are -1 or +1.
///
/// All members are const and reentrant; the model holds only its sizes.
class FactorizationMachine {
 public:
  /// @param features  d >= 1, the number of columns of the data
  /// @param factors   k >= 1
  /// @param lambda    L2 coefficient on the touched rows, finite and >= 0
  /// @throws InvalidArgument on any other value.
  FactorizationMachine(int features, int factors, double lambda = 0.0);

  /// Number of features d (rows of the parameter table).
  int features() const { return features_; }
  /// Number of factors k (the table has 1 + k columns).
  int factors() const { return factors_; }
  /// The L2 coefficient on the touched rows.
  double lambda() const { return lambda_; }

  /// Parameters with w_0 = 0, w = 0 and each v_{j,f} drawn from N(0,
  /// stddev^2) by std::normal_distribution over std::mt19937_64(seed), row by
  /// row: the same for the same seed and standard library.
  /// @throws InvalidArgument if stddev is negative or not finite.
  FmParameters initialParameters(double stddev, std::uint64_t seed) const;

  /// yhat of row `row` of x (a raw score; sigma(yhat) is the probability of +1).
  /// @throws InvalidArgument if the shapes of p or x do not match the model
  ///         or row is not in [0, x.rows()).
  double predict(const FmParameters& p, const CsrMatrix& x, int row) const;

  /// V_B of the rows batch.rows of data, as defined above.
  /// @throws InvalidArgument as lossAndGradient.
  double loss(const FmParameters& p, const SparseDataset& data, const MiniBatch& batch) const;

  /// V_B, returned, and its gradient, written to g: g.w0, g.features =
  /// batch.features and g.rows (batch.features.size() x (1 + k)), with
  ///   d l_i / d yhat = -y_i sigma(-y_i yhat_i),
  ///   d yhat / d w_j = x_j,
  ///   d yhat / d v_{j,f} = x_j (sum_l v_{l,f} x_l) - v_{j,f} x_j^2.
  /// O(k nnz(batch) + log |F_B| nnz(batch)).
  /// @throws InvalidArgument if p does not have features() x (1 + factors())
  ///         entries, data.x has another number of columns or is not
  ///         compressed, data.y another number of rows, batch.rows is empty
  ///         or outside [0, data.rows()), a label is not -1 or +1, or
  ///         batch.features is not strictly increasing or misses a feature
  ///         the rows touch.
  double lossAndGradient(const FmParameters& p, const SparseDataset& data, const MiniBatch& batch,
                         FmGradient& g) const;

  /// One SGD step: w_0 -= rate g.w0 and table.row(g.features[r]) -= rate
  /// g.rows.row(r); the rows of other features do not change.
  /// @throws InvalidArgument if g does not fit p (a feature out of range, or
  ///         g.rows of the wrong shape) or rate is not finite.
  static void sgdStep(FmParameters& p, const FmGradient& g, double rate);

 private:
  // Throws InvalidArgument unless p and x have the model's shapes.
  void checkShapes(const FmParameters& p, const CsrMatrix& x) const;
  // Runs the forward pass (and the backward pass when g is not null).
  double evaluate(const FmParameters& p, const SparseDataset& data, const MiniBatch& batch,
                  FmGradient* g) const;

  int features_;
  int factors_;
  double lambda_;
};

}  // namespace gossamer::sparse
