// The ADMM local objective (gossamer/optimizers/admm.hpp) of L2-regularised
// logistic regression on a rank's shard, and the test accuracy of a linear
// model: the 2D-TGA paper (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce", 2023;
// Sec. 5.2, Eq. 8; each worker's f_i of Eq. 4 is the loss of its samples plus
// lambda/N of the regulariser, so that the f_i add up to Eq. 8).
#pragma once

#include <Eigen/Core>

#include "csr.hpp"
#include "gossamer/optimizers/admm.hpp"
#include "logistic_regression.hpp"

namespace gossamer::sparse {

/// LogisticRegression(data, lambda) as an optimizers::LocalObjective: value,
/// gradient and Hessian-vector products of Eq. 8 (with L2 coefficient
/// `lambda`) in double, d = data.features(). Keeps a reference to `data`,
/// which must outlive it. setHessianPoint computes the per-sample curvature
/// (data.rows() doubles) that hessianVector reuses. Not thread-safe.
class LogisticObjective final : public optimizers::LocalObjective {
 public:
  /// @throws InvalidArgument as LogisticRegression's constructor.
  LogisticObjective(const SparseDataset& data, double lambda) : model_(data, lambda) {}

  int dimension() const override { return model_.dimension(); }
  double valueAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd& grad) override {
    return model_.lossAndGradient(x, grad);
  }
  double value(const Eigen::VectorXd& x) override { return model_.loss(x); }
  void setHessianPoint(const Eigen::VectorXd& x) override { curvature_ = model_.curvature(x); }
  /// @throws InvalidArgument before any setHessianPoint (no curvature yet).
  void hessianVector(const Eigen::VectorXd& v, Eigen::VectorXd& hv) override {
    model_.hessianVector(curvature_, v, hv);
  }

 private:
  LogisticRegression model_;
  Eigen::VectorXd curvature_;
};

/// Fraction in [0, 1] of the rows D_i of `data` whose label b_i has the sign
/// of x^T D_i (a margin of 0 counts as +1); 0 for an empty set.
/// @throws InvalidArgument if x.size() != data.features().
double linearAccuracy(const SparseDataset& data, const Eigen::VectorXd& x);

}  // namespace gossamer::sparse
