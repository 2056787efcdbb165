// L2-regularised logistic regression: loss, gradient and Hessian-vector
// product (logistic_regression.hpp; Wang et al., "A Communication Efficient
// ADMM-based Distributed Algorithm Using Two-Dimensional Torus Grouping
// AllReduce" (2023), Sec. 5.2, Eq. 8; Hessian form as used by TRON, its
// ref. [19]).
#include "logistic_regression.hpp"

#include <cmath>

#include "gossamer/errors.hpp"
#include "logistic_loss.hpp"

namespace gossamer::sparse {

LogisticRegression::LogisticRegression(const SparseDataset& data, double lambda)
    : data_(data), lambda_(lambda) {
  GOSSAMER_ENFORCE(data.y.size() == data.x.rows(), data.y.size()
                                                       << " labels for " << data.x.rows() << " samples");
  GOSSAMER_ENFORCE(data.x.isCompressed(), "the sample matrix must be compressed (call makeCompressed())");
  for (Eigen::Index i = 0; i < data.y.size(); ++i) {
    GOSSAMER_ENFORCE(data.y[i] == 1.0 || data.y[i] == -1.0,
                     "label " << data.y[i] << " of sample " << i << " is not -1 or +1");
  }
  GOSSAMER_ENFORCE(std::isfinite(lambda) && lambda >= 0, "lambda=" << lambda);
}

Eigen::VectorXd LogisticRegression::margins(const Eigen::VectorXd& x) const {
  GOSSAMER_ENFORCE(x.size() == data_.x.cols(), "x has " << x.size() << " entries, the model " << dimension());
  return (data_.x * x).cwiseProduct(data_.y);
}

double LogisticRegression::loss(const Eigen::VectorXd& x) const {
  const Eigen::VectorXd m = margins(x);
  double sum = 0;
  for (Eigen::Index i = 0; i < m.size(); ++i) sum += logisticLoss(m[i]);
  return sum + 0.5 * lambda_ * x.squaredNorm();
}

double LogisticRegression::lossAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd& grad) const {
  const Eigen::VectorXd m = margins(x);
  Eigen::VectorXd r(m.size());  // d loss_i / d (x^T D_i)
  double sum = 0;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    sum += logisticLoss(m[i]);
    r[i] = -data_.y[i] * sigmoid(-m[i]);
  }
  grad = data_.x.transpose() * r;
  grad += lambda_ * x;
  return sum + 0.5 * lambda_ * x.squaredNorm();
}

Eigen::VectorXd LogisticRegression::curvature(const Eigen::VectorXd& x) const {
  const Eigen::VectorXd m = margins(x);
  Eigen::VectorXd c(m.size());
  for (Eigen::Index i = 0; i < m.size(); ++i) c[i] = sigmoid(m[i]) * sigmoid(-m[i]);
  return c;
}

void LogisticRegression::hessianVector(const Eigen::VectorXd& c, const Eigen::VectorXd& v,
                                       Eigen::VectorXd& hv) const {
  GOSSAMER_ENFORCE(c.size() == data_.x.rows(),
                   "curvature has " << c.size() << " entries for " << data_.x.rows() << " samples");
  GOSSAMER_ENFORCE(v.size() == data_.x.cols(), "v has " << v.size() << " entries, the model " << dimension());
  const Eigen::VectorXd dv = (data_.x * v).cwiseProduct(c);
  hv = data_.x.transpose() * dv;
  hv += lambda_ * v;
}

}  // namespace gossamer::sparse
