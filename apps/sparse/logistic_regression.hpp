// L2-regularised logistic regression on sparse samples, with the loss, its
// gradient and Hessian-vector products for a trust-region Newton (TRON) or
// Newton-CG solver of the ADMM subproblem: Wang et al. (2023), "A Communication
// Efficient ADMM-based Distributed Algorithm Using Two-Dimensional Torus
// Grouping AllReduce" (Sec. 5.2, Eq. 8; the subproblem Eq. 6a is solved
// with TRON, ref. [19] Lin, Weng, Keerthi 2008).
#pragma once

#include <Eigen/Core>

#include "csr.hpp"

namespace gossamer::sparse {

/// f(x) = sum_i log(1 + exp(-b_i x^T D_i)) + (lambda / 2) ||x||_2^2 over the
/// samples D_i (rows of data.x) with labels b_i in {-1, +1} (data.y): Eq. 8 of
/// the 2D-TGA paper, which has lambda = 1. A sum over samples, not a mean.
/// Under ADMM consensus (Eq. 4) each of N workers may carry lambda / N (or
/// lambda on one worker) so that the worker objectives f_i add up to Eq. 8.
///
/// Shapes and types: x, gradients and Hessian-vector products are double
/// vectors of data.features() entries; curvature() has data.rows() entries.
/// The object keeps a reference to `data`, which must outlive it and not
/// change. All members are const and reentrant.
class LogisticRegression {
 public:
  /// @param data    samples (rows) x features, labels in {-1, +1}
  /// @param lambda  L2 coefficient, finite and >= 0 (the 2D-TGA paper's Eq. 8: 1)
  /// @throws InvalidArgument if data.y.size() != data.rows(), a label is not
  ///         -1 or +1, data.x is not compressed, or lambda is negative or not
  ///         finite.
  explicit LogisticRegression(const SparseDataset& data, double lambda = 1.0);

  /// Number of parameters d = data.features().
  int dimension() const { return static_cast<int>(data_.x.cols()); }
  /// The L2 coefficient.
  double lambda() const { return lambda_; }

  /// f(x), Eq. 8 (with lambda): a double >= 0.
  /// @throws InvalidArgument if x.size() != dimension().
  double loss(const Eigen::VectorXd& x) const;

  /// f(x), returned, and its gradient, written to `grad` (resized to
  /// dimension()): grad = -sum_i b_i sigma(-b_i x^T D_i) D_i + lambda x.
  /// @throws InvalidArgument if x.size() != dimension().
  double lossAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd& grad) const;

  /// The diagonal of the Hessian's data term at x: c_i = sigma(m_i)(1 -
  /// sigma(m_i)) with m_i = b_i x^T D_i, one entry in [0, 1/4] per sample. The
  /// Hessian is H(x) = D^T diag(c) D + lambda I; compute c once per Newton
  /// step and pass it to hessianVector() for each CG iteration.
  /// @throws InvalidArgument if x.size() != dimension().
  Eigen::VectorXd curvature(const Eigen::VectorXd& x) const;

  /// H(x) v = D^T (c .* (D v)) + lambda v for c = curvature(x), written to
  /// `hv` (resized to dimension()). O(nnz + d).
  /// @throws InvalidArgument if c.size() != data.rows() or v.size() !=
  ///         dimension().
  void hessianVector(const Eigen::VectorXd& c, const Eigen::VectorXd& v, Eigen::VectorXd& hv) const;

 private:
  // m_i = b_i x^T D_i, after checking x's size.
  Eigen::VectorXd margins(const Eigen::VectorXd& x) const;

  const SparseDataset& data_;
  double lambda_;
};

}  // namespace gossamer::sparse
