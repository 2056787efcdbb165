// Mixing analysis: products of per-round mixing matrices, their second
// eigenvalue / singular value and the imbalance against AllReduce
// (Yeo et al., "Crossover-SGD: A gossip-based communication in distributed deep
// learning for alleviating large mini-batch problem and enhancing scalability",
// Sec. 3.2, Fig. 6). See mixing.hpp.
#include "gossamer/topologies/mixing.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>
#include <numeric>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <Eigen/Sparse>

#include "gossamer/errors.hpp"

namespace gossamer::topologies {

Eigen::MatrixXd stepMixingMatrix(const Topology& t, std::uint64_t step,
                                 const std::vector<std::size_t>& segmentSizes) {
  if (segmentSizes.empty()) return t.mixingMatrix(step, 0);
  const std::size_t total = std::accumulate(segmentSizes.begin(), segmentSizes.end(), std::size_t{0});
  GOSSAMER_ENFORCE(total > 0, "segment sizes sum to 0 (" << segmentSizes.size() << " segments)");
  const int n = t.worldSize();
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
  for (std::size_t s = 0; s < segmentSizes.size(); ++s) {
    if (segmentSizes[s] == 0) continue;
    const double w = static_cast<double>(segmentSizes[s]) / static_cast<double>(total);
    m += w * t.mixingMatrix(step, static_cast<int>(s));
  }
  return m;
}

std::vector<MixingStats> analyzeMixing(const Topology& t, std::uint64_t steps,
                                       const std::vector<std::size_t>& segmentSizes) {
  const int n = t.worldSize();
  std::vector<MixingStats> out;
  out.reserve(static_cast<std::size_t>(steps));
  if (n <= 1) {
    for (std::uint64_t k = 1; k <= steps; ++k) out.push_back(MixingStats{k, 0, 0, 0});
    return out;
  }
  const double invN = 1.0 / static_cast<double>(n);
  Eigen::MatrixXd product = Eigen::MatrixXd::Identity(n, n);
  Eigen::EigenSolver<Eigen::MatrixXd> eig;
  Eigen::JacobiSVD<Eigen::MatrixXd> svd;
  std::vector<double> moduli(static_cast<std::size_t>(n));
  for (std::uint64_t k = 1; k <= steps; ++k) {
    product = stepMixingMatrix(t, k - 1, segmentSizes) * product;  // new round on the left
    MixingStats st;
    st.step = k;
    eig.compute(product, /*computeEigenvectors=*/false);
    GOSSAMER_ENFORCE(eig.info() == Eigen::Success, "eigenvalues of the product after " << k << " rounds");
    for (int i = 0; i < n; ++i) moduli[static_cast<std::size_t>(i)] = std::abs(eig.eigenvalues()(i));
    std::partial_sort(moduli.begin(), moduli.begin() + 2, moduli.end(), std::greater<>());
    st.slem = moduli[1];
    svd.compute(product);  // singular values only, sorted in decreasing order
    st.sigma2 = svd.singularValues()(1);
    st.imbalance = (product.array() - invN).square().sum() * invN * invN;
    out.push_back(st);
  }
  return out;
}

namespace {

// Second largest eigenvalue modulus of a square matrix (n >= 2).
double secondModulus(const Eigen::MatrixXd& m) {
  Eigen::EigenSolver<Eigen::MatrixXd> eig(m, /*computeEigenvectors=*/false);
  GOSSAMER_ENFORCE(eig.info() == Eigen::Success, "eigenvalues of the expected mixing matrix");
  std::vector<double> moduli(static_cast<std::size_t>(m.rows()));
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    moduli[static_cast<std::size_t>(i)] = std::abs(eig.eigenvalues()(i));
  std::partial_sort(moduli.begin(), moduli.begin() + 2, moduli.end(), std::greater<>());
  return moduli[1];
}

}  // namespace

ExpectedMixing estimateExpectedMixing(const Topology& t, const NetworkLayout& network, std::uint64_t rounds,
                                      int segments) {
  const int n = t.worldSize();
  GOSSAMER_ENFORCE(rounds >= 2, "estimating the expected mixing needs at least 2 rounds, got " << rounds);
  GOSSAMER_ENFORCE(segments >= 1, "segments " << segments << " must be at least 1");
  GOSSAMER_ENFORCE(network.worldSize() == n,
                   "network of " << network.worldSize() << " ranks for a topology of " << n);
  ExpectedMixing out;
  out.rounds = rounds;
  out.segments = segments;
  out.mean = Eigen::MatrixXd::Zero(n, n);
  const Eigen::MatrixXd centre =
      Eigen::MatrixXd::Identity(n, n) - Eigen::MatrixXd::Constant(n, n, 1.0 / static_cast<double>(n));
  // Sum of W^T (I - J) W = W^T W - (W^T 1)(W^T 1)^T / N: W has a few
  // entries per row, so W^T W is a sparse product (O(N) per sample, not the
  // O(N^3) of the dense one), and the rank-one term O(N^2).
  Eigen::MatrixXd square = Eigen::MatrixXd::Zero(n, n);
  double messages = 0, shareSum = 0, shareSquares = 0;
  for (std::uint64_t r = 0; r < rounds; ++r) {
    double sent = 0, cross = 0;
    for (int s = 0; s < segments; ++s) {
      const Eigen::MatrixXd w = t.mixingMatrix(r, s);
      out.mean += w;
      const Eigen::SparseMatrix<double> sparse = w.sparseView();
      const Eigen::SparseMatrix<double> wtw = Eigen::SparseMatrix<double>(sparse.transpose()) * sparse;
      for (int k = 0; k < wtw.outerSize(); ++k)
        for (Eigen::SparseMatrix<double>::InnerIterator it(wtw, k); it; ++it)
          square(it.row(), it.col()) += it.value();
      const Eigen::VectorXd v = w.colwise().sum().transpose();
      square.noalias() -= (v * v.transpose()) / static_cast<double>(n);
      for (int i = 0; i < n; ++i)
        for (int j : t.peers(i, r, s).sendTo) {
          sent += 1;
          if (!network.sameIsland(i, j)) cross += 1;
        }
    }
    messages += sent;
    const double share = sent > 0 ? cross / sent : 0.0;
    shareSum += share;
    shareSquares += share * share;
  }
  const double samples = static_cast<double>(rounds) * segments;
  out.mean /= samples;
  square /= samples;
  out.messagesPerRank = messages / static_cast<double>(rounds) / n;
  if (n >= 2) {
    out.slem = secondModulus(out.mean);
    const Eigen::MatrixXd q = centre * square * centre;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> sym((q + q.transpose()) / 2, Eigen::EigenvaluesOnly);
    GOSSAMER_ENFORCE(sym.info() == Eigen::Success, "eigenvalues of the expected mean-square matrix");
    out.meanSquareRate = sym.eigenvalues().maxCoeff();
    out.meanSquareRateAverage = q.trace() / static_cast<double>(n - 1);
  }
  const auto rf = static_cast<double>(rounds);
  out.crossShare = messages > 0 ? shareSum / rf : 0.0;
  const double variance = std::max(0.0, (shareSquares - shareSum * shareSum / rf) / (rf - 1));
  out.crossShareStdError = std::sqrt(variance / rf);
  return out;
}

}  // namespace gossamer::topologies
