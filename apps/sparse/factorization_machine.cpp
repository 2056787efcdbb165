// The order-2 factorization machine with logistic loss and sparse mini-batch
// gradients (factorization_machine.hpp; Yokoyama and Araki, "Efficient
// Distributed Machine Learning for Large-scale Models by Reducing Redundant
// Communication", Sec. VI-B and Sec. II-A; its ref. [19], Rendle 2010, for the
// O(k nnz) form).
#include "factorization_machine.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "gossamer/errors.hpp"
#include "logistic_loss.hpp"

namespace gossamer::sparse {

FactorizationMachine::FactorizationMachine(int features, int factors, double lambda)
    : features_(features), factors_(factors), lambda_(lambda) {
  GOSSAMER_ENFORCE(features >= 1, "features=" << features);
  GOSSAMER_ENFORCE(factors >= 1, "factors=" << factors);
  GOSSAMER_ENFORCE(std::isfinite(lambda) && lambda >= 0, "lambda=" << lambda);
}

FmParameters FactorizationMachine::initialParameters(double stddev, std::uint64_t seed) const {
  GOSSAMER_ENFORCE(std::isfinite(stddev) && stddev >= 0, "stddev=" << stddev);
  FmParameters p;
  p.table = DenseRows::Zero(features_, factors_ + 1);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, stddev);
  if (stddev > 0) {
    for (int j = 0; j < features_; ++j) {
      for (int f = 1; f <= factors_; ++f) p.table(j, f) = normal(rng);
    }
  }
  return p;
}

void FactorizationMachine::checkShapes(const FmParameters& p, const CsrMatrix& x) const {
  GOSSAMER_ENFORCE(p.table.rows() == features_ && p.table.cols() == factors_ + 1,
                   "parameter table is " << p.table.rows() << " x " << p.table.cols() << ", the model needs "
                                         << features_ << " x " << factors_ + 1);
  GOSSAMER_ENFORCE(x.cols() == features_, "data has " << x.cols() << " features, the model " << features_);
  GOSSAMER_ENFORCE(x.isCompressed(), "the sample matrix must be compressed (call makeCompressed())");
}

namespace {

// yhat of row i of x, leaving s_f = sum_j v_{j,f} x_j in s (Rendle's
// linear-time form of the pairwise term). Shapes are checked by the callers.
double score(const FmParameters& p, const CsrMatrix& x, int i, Eigen::RowVectorXd& s) {
  const int k = p.factors();
  s.setZero(k);
  double yhat = p.w0;
  double squares = 0;
  for (CsrMatrix::InnerIterator it(x, i); it; ++it) {
    const auto v = p.table.row(it.col()).tail(k);
    yhat += p.table(it.col(), 0) * it.value();
    s += it.value() * v;
    squares += v.squaredNorm() * it.value() * it.value();
  }
  return yhat + 0.5 * (s.squaredNorm() - squares);
}

}  // namespace

double FactorizationMachine::predict(const FmParameters& p, const CsrMatrix& x, int row) const {
  checkShapes(p, x);
  GOSSAMER_ENFORCE(row >= 0 && row < x.rows(), "row " << row << " of " << x.rows());
  Eigen::RowVectorXd s;
  return score(p, x, row, s);
}

double FactorizationMachine::evaluate(const FmParameters& p, const SparseDataset& data,
                                      const MiniBatch& batch, FmGradient* g) const {
  const CsrMatrix& x = data.x;
  checkShapes(p, x);
  GOSSAMER_ENFORCE(data.y.size() == x.rows(), data.y.size() << " labels for " << x.rows() << " samples");
  const RowRange rows = batch.rows;
  GOSSAMER_ENFORCE(rows.begin >= 0 && rows.begin < rows.end && rows.end <= x.rows(),
                   "batch rows [" << rows.begin << ", " << rows.end << ") of " << x.rows() << " samples");
  const std::vector<int>& touched = batch.features;
  for (std::size_t r = 0; r < touched.size(); ++r) {
    GOSSAMER_ENFORCE(touched[r] >= 0 && touched[r] < features_ && (r == 0 || touched[r - 1] < touched[r]),
                     "batch.features must be strictly increasing feature indices in [0, "
                         << features_ << "); entry " << r << " is " << touched[r]);
  }
  const int k = factors_;
  if (g != nullptr) {
    g->w0 = 0;
    g->features = touched;
    g->rows = DenseRows::Zero(static_cast<Eigen::Index>(touched.size()), k + 1);
  }
  const double scale = 1.0 / rows.size();
  Eigen::RowVectorXd s(k);
  std::vector<Eigen::Index> slots;
  double sum = 0;
  for (int i = rows.begin; i < rows.end; ++i) {
    const double y = data.y[i];
    GOSSAMER_ENFORCE(y == 1.0 || y == -1.0, "label " << y << " of sample " << i << " is not -1 or +1");
    const double yhat = score(p, x, i, s);
    slots.clear();
    for (CsrMatrix::InnerIterator it(x, i); it; ++it) {
      const auto found = std::lower_bound(touched.begin(), touched.end(), it.col());
      GOSSAMER_ENFORCE(found != touched.end() && *found == it.col(),
                       "sample " << i << " touches feature " << it.col() << ", which batch.features misses");
      slots.push_back(found - touched.begin());
    }
    const double margin = y * yhat;
    sum += logisticLoss(margin);
    if (g == nullptr) continue;
    // Backward: d V / d yhat_i, then the chain rule into each touched row.
    const double c = -y * sigmoid(-margin) * scale;
    g->w0 += c;
    std::size_t e = 0;
    for (CsrMatrix::InnerIterator it(x, i); it; ++it, ++e) {
      auto grad = g->rows.row(slots[e]);
      const double xj = it.value();
      grad(0) += c * xj;
      grad.tail(k) += (c * xj) * (s - xj * p.table.row(it.col()).tail(k));
    }
  }
  double loss = sum * scale;
  if (lambda_ > 0) {
    for (std::size_t r = 0; r < touched.size(); ++r) {
      const auto row = p.table.row(touched[r]);
      loss += 0.5 * lambda_ * row.squaredNorm();
      if (g != nullptr) g->rows.row(static_cast<Eigen::Index>(r)) += lambda_ * row;
    }
  }
  return loss;
}

double FactorizationMachine::loss(const FmParameters& p, const SparseDataset& data,
                                  const MiniBatch& batch) const {
  return evaluate(p, data, batch, nullptr);
}

double FactorizationMachine::lossAndGradient(const FmParameters& p, const SparseDataset& data,
                                             const MiniBatch& batch, FmGradient& g) const {
  return evaluate(p, data, batch, &g);
}

void FactorizationMachine::sgdStep(FmParameters& p, const FmGradient& g, double rate) {
  GOSSAMER_ENFORCE(std::isfinite(rate), "rate=" << rate);
  GOSSAMER_ENFORCE(
      g.rows.rows() == static_cast<Eigen::Index>(g.features.size()) && g.rows.cols() == p.table.cols(),
      "gradient rows are " << g.rows.rows() << " x " << g.rows.cols() << " for " << g.features.size()
                           << " features of a " << p.table.cols() << "-column table");
  for (const int j : g.features) {
    GOSSAMER_ENFORCE(j >= 0 && j < p.table.rows(),
                     "feature " << j << " of a " << p.table.rows() << "-row table");
  }
  p.w0 -= rate * g.w0;
  for (std::size_t r = 0; r < g.features.size(); ++r) {
    p.table.row(g.features[r]) -= rate * g.rows.row(static_cast<Eigen::Index>(r));
  }
}

}  // namespace gossamer::sparse
