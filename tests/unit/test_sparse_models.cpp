// Tests of the sparse models of apps/sparse: L2-regularised logistic
// regression (the 2D-TGA-ADMM paper (Wang et al.), Sec. 5.2, Eq. 8) and the
// order-2 factorization machine (the sparse-synchronisation paper (Yokoyama, Araki),
// Sec. VI-B). Values are checked against direct dense evaluations of the
// papers' formulas, gradients and Hessian-vector products against central
// finite differences, and both models must learn a separable synthetic set
// and the SpamAssassin data of scripts/spam-data.sh.
#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "dataset.hpp"
#include "factorization_machine.hpp"
#include "gossamer/errors.hpp"
#include "libsvm.hpp"
#include "logistic_regression.hpp"
#include "partition.hpp"
#include "sparse_synthetic.hpp"

namespace {

using gossamer::InvalidArgument;
using gossamer::sparse::DenseRows;
using gossamer::sparse::FactorizationMachine;
using gossamer::sparse::FmGradient;
using gossamer::sparse::FmParameters;
using gossamer::sparse::LogisticRegression;
using gossamer::sparse::MiniBatch;
using gossamer::sparse::RowRange;
using gossamer::sparse::SparseDataset;
using gossamer::sparse::touchedFeatures;
using gossamer::testing::syntheticSparse;

Eigen::VectorXd randomVector(int n, unsigned seed, double scale) {
  std::srand(seed);
  return scale * Eigen::VectorXd::Random(n);
}

/// Eq. 8 evaluated directly on the dense samples.
double denseLogisticLoss(const SparseDataset& d, const Eigen::VectorXd& x, double lambda) {
  const Eigen::MatrixXd samples(d.x);
  double f = 0.5 * lambda * x.squaredNorm();
  for (int i = 0; i < d.rows(); ++i) f += std::log(1.0 + std::exp(-d.y[i] * samples.row(i).dot(x)));
  return f;
}

/// The FM model equation of the sparse-synchronisation paper (Yokoyama, Araki) Sec. VI-B with its O(d^2)
/// double sum.
double denseFmScore(const FmParameters& p, const Eigen::RowVectorXd& x) {
  const int k = p.factors();
  double y = p.w0;
  for (int i = 0; i < x.size(); ++i) {
    y += p.table(i, 0) * x[i];
    for (int j = i + 1; j < x.size(); ++j) {
      y += p.table.row(i).tail(k).dot(p.table.row(j).tail(k)) * x[i] * x[j];
    }
  }
  return y;
}

MiniBatch batchOf(const SparseDataset& d, RowRange rows) {
  return MiniBatch{rows, touchedFeatures(d.x, rows)};
}

double accuracy(const Eigen::VectorXd& scores, const Eigen::VectorXd& y) {
  return ((scores.array() * y.array()) > 0).cast<double>().mean();
}

}  // namespace

TEST_CASE("logistic regression evaluates Eq. 8 with lambda", "[sparse][logistic]") {
  const SparseDataset d = syntheticSparse(60, 25, 0.2, 1);
  const Eigen::VectorXd x = randomVector(25, 2, 0.5);
  for (const double lambda : {0.0, 1.0, 0.3}) {
    const LogisticRegression lr(d, lambda);
    CHECK(lr.dimension() == 25);
    CHECK(lr.loss(x) == Approx(denseLogisticLoss(d, x, lambda)).epsilon(1e-12));
    Eigen::VectorXd g;
    CHECK(lr.lossAndGradient(x, g) == Approx(lr.loss(x)).epsilon(1e-14));
  }
  // Large margins neither overflow nor lose the loss: log(1 + e^{-m}) ~ -m.
  const LogisticRegression lr(d, 0.0);
  const double far = lr.loss(Eigen::VectorXd::Constant(25, -1e4));
  CHECK(std::isfinite(far));
  CHECK(far > 1e4);
}

TEST_CASE("logistic regression gradient matches central differences", "[sparse][logistic]") {
  const SparseDataset d = syntheticSparse(50, 20, 0.25, 3);
  const LogisticRegression lr(d, 0.7);
  const Eigen::VectorXd x = randomVector(20, 4, 0.4);
  Eigen::VectorXd g;
  lr.lossAndGradient(x, g);
  REQUIRE(g.size() == 20);
  const double h = 1e-6;
  for (int j = 0; j < 20; ++j) {
    Eigen::VectorXd up = x, down = x;
    up[j] += h;
    down[j] -= h;
    const double fd = (lr.loss(up) - lr.loss(down)) / (2 * h);
    INFO("coordinate " << j);
    CHECK(g[j] == Approx(fd).margin(1e-6).epsilon(1e-6));
  }
}

TEST_CASE("logistic regression Hessian-vector products match differences of gradients",
          "[sparse][logistic]") {
  const SparseDataset d = syntheticSparse(50, 20, 0.25, 5);
  const double lambda = 0.4;
  const LogisticRegression lr(d, lambda);
  const Eigen::VectorXd x = randomVector(20, 6, 0.4);
  const Eigen::VectorXd c = lr.curvature(x);
  REQUIRE(c.size() == 50);
  CHECK(c.minCoeff() > 0);
  CHECK(c.maxCoeff() <= 0.25);
  // The dense Hessian D^T diag(c) D + lambda I, for comparison.
  const Eigen::MatrixXd samples(d.x);
  const Eigen::MatrixXd hessian =
      samples.transpose() * c.asDiagonal() * samples + lambda * Eigen::MatrixXd::Identity(20, 20);
  const double eps = 1e-5;
  for (unsigned seed = 10; seed < 13; ++seed) {
    const Eigen::VectorXd v = randomVector(20, seed, 1.0);
    Eigen::VectorXd hv, gUp, gDown;
    lr.hessianVector(c, v, hv);
    lr.lossAndGradient(x + eps * v, gUp);
    lr.lossAndGradient(x - eps * v, gDown);
    const Eigen::VectorXd fd = (gUp - gDown) / (2 * eps);
    CHECK((hv - fd).norm() <= 1e-6 * std::max(1.0, fd.norm()));
    CHECK((hv - hessian * v).norm() <= 1e-12 * std::max(1.0, hv.norm()));
  }
  Eigen::VectorXd hv;
  CHECK_THROWS_AS(lr.hessianVector(c.head(10), Eigen::VectorXd::Zero(20), hv), InvalidArgument);
  CHECK_THROWS_AS(lr.hessianVector(c, Eigen::VectorXd::Zero(19), hv), InvalidArgument);
}

TEST_CASE("logistic regression rejects bad labels, lambda and sizes", "[sparse][logistic]") {
  SparseDataset d = syntheticSparse(10, 5, 0.5, 7);
  CHECK_THROWS_AS(LogisticRegression(d, -1.0), InvalidArgument);
  CHECK_THROWS_AS(LogisticRegression(d, std::nan("")), InvalidArgument);
  const LogisticRegression lr(d);
  CHECK(lr.lambda() == 1.0);  // the 2D-TGA-ADMM paper (Wang et al.) Eq. 8
  Eigen::VectorXd g;
  CHECK_THROWS_AS(lr.loss(Eigen::VectorXd::Zero(4)), InvalidArgument);
  CHECK_THROWS_AS(lr.lossAndGradient(Eigen::VectorXd::Zero(6), g), InvalidArgument);
  d.y[3] = 0.0;
  CHECK_THROWS_AS(LogisticRegression(d), InvalidArgument);
  d.y.resize(9);
  CHECK_THROWS_AS(LogisticRegression(d), InvalidArgument);
}

TEST_CASE("logistic regression learns a separable set by gradient descent", "[sparse][logistic]") {
  const SparseDataset d = syntheticSparse(200, 30, 0.15, 8);
  const double lambda = 0.01;
  const LogisticRegression lr(d, lambda);
  // Step 1/L with L = ||X||_F^2 / 4 + lambda >= the largest Hessian eigenvalue:
  // the loss cannot increase.
  const double step = 1.0 / (0.25 * d.x.squaredNorm() + lambda);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(30), g;
  const double first = lr.loss(x);
  double previous = first;
  for (int it = 0; it < 500; ++it) {
    const double f = lr.lossAndGradient(x, g);
    CHECK(f <= previous + 1e-12);
    previous = f;
    x -= step * g;
  }
  CHECK(previous < 0.3 * first);
  CHECK(accuracy(d.x * x, d.y) >= 0.95);
}

TEST_CASE("factorization machine scores match the O(d^2) model equation", "[sparse][fm]") {
  const SparseDataset d = syntheticSparse(15, 12, 0.4, 20);
  const FactorizationMachine fm(12, 4);
  FmParameters p = fm.initialParameters(0.5, 21);
  p.w0 = 0.3;
  p.table.col(0) = randomVector(12, 22, 1.0);
  const Eigen::MatrixXd samples(d.x);
  for (int i = 0; i < d.rows(); ++i) {
    CHECK(fm.predict(p, d.x, i) == Approx(denseFmScore(p, samples.row(i))).epsilon(1e-12));
  }
  CHECK_THROWS_AS(fm.predict(p, d.x, 15), InvalidArgument);
  CHECK_THROWS_AS(fm.predict(FactorizationMachine(12, 3).initialParameters(0.1, 1), d.x, 0), InvalidArgument);
}

TEST_CASE("factorization machine initial parameters are seeded draws", "[sparse][fm]") {
  const FactorizationMachine fm(50, 3);
  const FmParameters a = fm.initialParameters(0.1, 7);
  CHECK(a.features() == 50);
  CHECK(a.factors() == 3);
  CHECK(a.w0 == 0);
  CHECK(a.table.col(0).isZero());
  CHECK(a.table == fm.initialParameters(0.1, 7).table);
  CHECK(a.table != fm.initialParameters(0.1, 8).table);
  const double sd = std::sqrt(a.table.rightCols(3).squaredNorm() / 150.0);
  CHECK(sd > 0.07);
  CHECK(sd < 0.13);
  CHECK_THROWS_AS(fm.initialParameters(-1.0, 1), InvalidArgument);
  CHECK_THROWS_AS(FactorizationMachine(0, 3), InvalidArgument);
  CHECK_THROWS_AS(FactorizationMachine(5, 0), InvalidArgument);
  CHECK_THROWS_AS(FactorizationMachine(5, 2, -0.1), InvalidArgument);
}

TEST_CASE("factorization machine sparse gradient matches central differences", "[sparse][fm]") {
  const SparseDataset d = syntheticSparse(30, 40, 0.08, 30);
  const double lambda = 0.05;
  const FactorizationMachine fm(40, 3, lambda);
  FmParameters p = fm.initialParameters(0.3, 31);
  p.w0 = -0.2;
  p.table.col(0) = randomVector(40, 32, 0.5);
  const MiniBatch batch = batchOf(d, RowRange{4, 13});
  REQUIRE(batch.features.size() < 40);  // some features are untouched

  // The loss is the mean logistic loss of the batch plus the penalty on its rows.
  const Eigen::MatrixXd samples(d.x);
  double want = 0;
  for (int i = 4; i < 13; ++i) want += std::log(1.0 + std::exp(-d.y[i] * denseFmScore(p, samples.row(i))));
  want /= 9;
  for (const int j : batch.features) want += 0.5 * lambda * p.table.row(j).squaredNorm();
  CHECK(fm.loss(p, d, batch) == Approx(want).epsilon(1e-12));

  FmGradient g;
  const double f = fm.lossAndGradient(p, d, batch, g);
  CHECK(f == Approx(want).epsilon(1e-12));
  CHECK(g.features == batch.features);
  REQUIRE(g.rows.rows() == static_cast<Eigen::Index>(batch.features.size()));
  REQUIRE(g.rows.cols() == 4);
  const double h = 1e-6;
  auto centralDifference = [&](double& entry) {
    const double saved = entry;
    entry = saved + h;
    const double up = fm.loss(p, d, batch);
    entry = saved - h;
    const double down = fm.loss(p, d, batch);
    entry = saved;
    return (up - down) / (2 * h);
  };
  CHECK(g.w0 == Approx(centralDifference(p.w0)).margin(1e-7));
  for (std::size_t r = 0; r < batch.features.size(); ++r) {
    for (int c = 0; c < 4; ++c) {
      INFO("feature " << batch.features[r] << " column " << c);
      CHECK(g.rows(static_cast<Eigen::Index>(r), c) ==
            Approx(centralDifference(p.table(batch.features[r], c))).margin(1e-7));
    }
  }
  // The rows of untouched features do not move the batch loss: their gradient is 0.
  for (int j = 0; j < 40; ++j) {
    if (std::binary_search(batch.features.begin(), batch.features.end(), j)) continue;
    for (int c = 0; c < 4; ++c) CHECK(centralDifference(p.table(j, c)) == 0.0);
  }
}

TEST_CASE("factorization machine validates batches and applies sparse SGD steps", "[sparse][fm]") {
  const SparseDataset d = syntheticSparse(20, 30, 0.1, 40);
  const FactorizationMachine fm(30, 2);
  FmParameters p = fm.initialParameters(0.1, 41);
  FmGradient g;
  MiniBatch batch = batchOf(d, RowRange{0, 5});
  fm.lossAndGradient(p, d, batch, g);
  const FmParameters before = p;
  FactorizationMachine::sgdStep(p, g, 0.5);
  CHECK(p.w0 == before.w0 - 0.5 * g.w0);
  for (int j = 0; j < 30; ++j) {
    const auto found = std::lower_bound(batch.features.begin(), batch.features.end(), j);
    if (found != batch.features.end() && *found == j) {
      CHECK(p.table.row(j) == before.table.row(j) - 0.5 * g.rows.row(found - batch.features.begin()));
    } else {
      CHECK(p.table.row(j) == before.table.row(j));
    }
  }
  // A batch whose feature list misses a touched feature, is unsorted, or is
  // empty, and parameters of another shape, are rejected.
  MiniBatch missing = batch;
  missing.features.erase(missing.features.begin());
  CHECK_THROWS_AS(fm.lossAndGradient(p, d, missing, g), InvalidArgument);
  MiniBatch unsorted = batch;
  std::reverse(unsorted.features.begin(), unsorted.features.end());
  CHECK_THROWS_AS(fm.loss(p, d, unsorted), InvalidArgument);
  CHECK_THROWS_AS(fm.loss(p, d, MiniBatch{RowRange{3, 3}, {}}), InvalidArgument);
  CHECK_THROWS_AS(fm.loss(p, d, MiniBatch{RowRange{15, 21}, {}}), InvalidArgument);
  CHECK_THROWS_AS(fm.loss(FactorizationMachine(31, 2).initialParameters(0.1, 1), d, batch), InvalidArgument);
  SparseDataset badLabel = d;
  badLabel.y[2] = 0.5;
  CHECK_THROWS_AS(fm.loss(p, badLabel, batch), InvalidArgument);
  g.features.push_back(30);
  CHECK_THROWS_AS(FactorizationMachine::sgdStep(p, g, 0.1), InvalidArgument);
}

TEST_CASE("factorization machine learns a separable set by mini-batch SGD", "[sparse][fm]") {
  const SparseDataset d = syntheticSparse(300, 40, 0.1, 50);
  const FactorizationMachine fm(40, 4, 1e-4);
  FmParameters p = fm.initialParameters(0.05, 51);
  const MiniBatch all = batchOf(d, RowRange{0, d.rows()});
  const std::vector<MiniBatch> batches = gossamer::sparse::batchesWithFeatures(d.x, 16);
  const double first = fm.loss(p, d, all);
  FmGradient g;
  std::vector<double> epochLoss;
  for (int epoch = 0; epoch < 40; ++epoch) {
    for (const MiniBatch& b : batches) {
      fm.lossAndGradient(p, d, b, g);
      FactorizationMachine::sgdStep(p, g, 0.5);
    }
    epochLoss.push_back(fm.loss(p, d, all));
  }
  CHECK(epochLoss[4] < first);
  CHECK(epochLoss.back() < epochLoss[4]);
  CHECK(epochLoss.back() < 0.5 * first);
  Eigen::VectorXd scores(d.rows());
  for (int i = 0; i < d.rows(); ++i) scores[i] = fm.predict(p, d.x, i);
  CHECK(accuracy(scores, d.y) >= 0.9);
}

TEST_CASE("both models learn the SpamAssassin data from contiguous shards", "[sparse][spam]") {
  gossamer::testing::requireSpamData();
  const std::string dir = gossamer::testing::spamDataDir();
  const int features =
      nlohmann::json::parse(std::ifstream(dir + "/spam-stats.json")).at("features").get<int>();
  const SparseDataset train = gossamer::sparse::readLibsvm(dir + "/spam-train.libsvm", features);
  const SparseDataset test = gossamer::sparse::readLibsvm(dir + "/spam-test.libsvm", features);
  // The rows are in a pseudo-random order: every contiguous shard mixes the
  // classes about as the whole set does.
  const double spam = (train.y.array() > 0).cast<double>().mean();
  for (int rank = 0; rank < 4; ++rank) {
    const SparseDataset s = gossamer::sparse::shard(train, rank, 4);
    CHECK(std::abs((s.y.array() > 0).cast<double>().mean() - spam) < 0.05);
  }

  // Logistic regression, Eq. 8 with lambda = 1: five Newton steps, each
  // solving H s = -g by at most 50 conjugate-gradient iterations.
  const LogisticRegression lr(train, 1.0);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(features), g, hv;
  const double first = lr.loss(x);
  for (int newton = 0; newton < 5; ++newton) {
    lr.lossAndGradient(x, g);
    const Eigen::VectorXd c = lr.curvature(x);
    Eigen::VectorXd step = Eigen::VectorXd::Zero(features), r = -g, dir = r;
    double rr = r.squaredNorm();
    for (int cg = 0; cg < 50 && std::sqrt(rr) > 0.1 * g.norm(); ++cg) {
      lr.hessianVector(c, dir, hv);
      const double alpha = rr / dir.dot(hv);
      step += alpha * dir;
      r -= alpha * hv;
      const double next = r.squaredNorm();
      dir = r + (next / rr) * dir;
      rr = next;
    }
    x += step;
  }
  CHECK(lr.loss(x) < 0.1 * first);
  CHECK(accuracy(test.x * x, test.y) >= 0.95);

  // The factorization machine, k = 8: two epochs of SGD on batches of 32.
  const FactorizationMachine fm(features, 8, 1e-4);
  FmParameters p = fm.initialParameters(0.01, 1);
  FmGradient grad;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const MiniBatch& b : gossamer::sparse::batchesWithFeatures(train.x, 32)) {
      fm.lossAndGradient(p, train, b, grad);
      FactorizationMachine::sgdStep(p, grad, 0.05);
    }
  }
  Eigen::VectorXd scores(test.rows());
  for (int i = 0; i < test.rows(); ++i) scores[i] = fm.predict(p, test.x, i);
  CHECK(accuracy(scores, test.y) >= 0.95);
}
