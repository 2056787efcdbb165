// Consensus ADMM (optimizers/src/admm/admm.cpp, the 2D-TGA-ADMM paper (Wang et al.) Algorithm 2) and
// its trust-region Newton-CG solver (optimizers/src/admm/newton_cg.cpp):
// the solver against the closed-form minimiser of a quadratic; ADMM over the
// inproc transport (ranks as threads) against the closed-form optimum of a
// consensus quadratic, with ring, 2D-TGA, hierarchical, 2D-torus and HiPS
// allreduce; the f_rerr stop (Eq. 9); ADMM on sparse logistic regression
// against the central Newton-CG solution; bad arguments.
#include <catch2/catch.hpp>

#include <Eigen/Cholesky>

#include <cmath>
#include <random>
#include <vector>

#include "admm_objective.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/admm.hpp"
#include "gossamer/transports/inproc.hpp"
#include "partition.hpp"
#include "threads.hpp"

using namespace gossamer;
using Eigen::MatrixXd;
using Eigen::VectorXd;
using gossamer::testing::onEveryRank;

namespace {

/// f(x) = 1/2 (x - c)^T A (x - c) + offset, A symmetric positive definite.
class Quadratic final : public optimizers::LocalObjective {
 public:
  Quadratic(MatrixXd a, VectorXd c, double offset) : a_(std::move(a)), c_(std::move(c)), offset_(offset) {}
  int dimension() const override { return static_cast<int>(c_.size()); }
  double valueAndGradient(const VectorXd& x, VectorXd& grad) override {
    const VectorXd diff = x - c_;
    grad = a_ * diff;
    return 0.5 * diff.dot(grad) + offset_;
  }
  void setHessianPoint(const VectorXd&) override { ++hessianPoints; }
  void hessianVector(const VectorXd& v, VectorXd& hv) override { hv = a_ * v; }
  const MatrixXd& a() const { return a_; }
  const VectorXd& c() const { return c_; }
  int hessianPoints = 0;

 private:
  MatrixXd a_;
  VectorXd c_;
  double offset_;
};

MatrixXd randomSpd(int d, std::mt19937& rng, double minEigen) {
  std::normal_distribution<double> g;
  MatrixXd m(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) m(i, j) = g(rng);
  return m * m.transpose() / d + minEigen * MatrixXd::Identity(d, d);
}

VectorXd randomVector(int d, std::mt19937& rng) {
  std::normal_distribution<double> g;
  VectorXd v(d);
  for (int i = 0; i < d; ++i) v[i] = g(rng);
  return v;
}

/// rows x cols samples with N(0, 1) entries, each present with probability
/// `density`, labels y_i = sign(x_i^T w + noise N(0, 0.25)) for w ~ N(0, I).
sparse::SparseDataset randomSparse(int rows, int cols, double density, std::mt19937& rng) {
  std::vector<Eigen::Triplet<double>> entries;
  std::bernoulli_distribution keep(density);
  std::normal_distribution<double> g;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      if (keep(rng)) entries.emplace_back(i, j, g(rng));
  sparse::SparseDataset data;
  data.x.resize(rows, cols);
  data.x.setFromTriplets(entries.begin(), entries.end());
  data.x.makeCompressed();
  const VectorXd margins = data.x * randomVector(cols, rng);
  data.y.resize(rows);
  for (int i = 0; i < rows; ++i) data.y[i] = margins[i] + 0.5 * g(rng) >= 0 ? 1.0 : -1.0;
  return data;
}

/// Rank r's f_r of a consensus problem: sum_r f_r has the minimiser
/// (sum A_r)^{-1} sum A_r c_r.
std::vector<Quadratic> consensusQuadratics(int n, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Quadratic> fs;
  for (int r = 0; r < n; ++r) fs.emplace_back(randomSpd(d, rng, 0.5), randomVector(d, rng), 1.0);
  return fs;
}

struct Optimum {
  VectorXd x;
  double value;
};

Optimum consensusOptimum(std::vector<Quadratic>& fs) {
  const int d = fs[0].dimension();
  MatrixXd a = MatrixXd::Zero(d, d);
  VectorXd b = VectorXd::Zero(d);
  for (const auto& f : fs) {
    a += f.a();
    b += f.a() * f.c();
  }
  Optimum o{a.ldlt().solve(b), 0.0};
  for (auto& f : fs) o.value += f.value(o.x);
  return o;
}

/// runAdmm on every rank r (a thread) with fs[r] and the allreduce
/// `algorithm`; the results by rank.
template <typename Objective>
std::vector<optimizers::AdmmResult> runOnRanks(std::vector<Objective>& fs, const optimizers::AdmmOptions& o,
                                               AllreduceAlgorithm algorithm) {
  const int n = static_cast<int>(fs.size());
  auto fabric = inproc::makeFabric(n);
  std::vector<optimizers::AdmmResult> out(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 20.0);
    Communicator comm(*t, 20.0);
    CollectiveOptions co;
    co.algorithm = algorithm;
    comm.setOptions(co);
    out[static_cast<std::size_t>(r)] = optimizers::runAdmm(comm, fs[static_cast<std::size_t>(r)], o);
  });
  return out;
}

}  // namespace

TEST_CASE("newton-cg reaches the minimiser of a quadratic", "[admm]") {
  std::mt19937 rng(3);
  const int d = 30;
  Quadratic f(randomSpd(d, rng, 0.1), randomVector(d, rng), 2.0);
  optimizers::NewtonCgOptions o;
  o.gradientTolerance = 1e-10;
  const auto r = optimizers::minimizeNewtonCg(f, VectorXd::Zero(d), o);
  CHECK(r.converged);
  CHECK((r.x - f.c()).norm() < 1e-8);
  CHECK(r.value == Approx(2.0).epsilon(1e-12));
  CHECK(r.iterations >= 1);
  CHECK(r.cgIterations >= 1);
  CHECK(f.hessianPoints == r.iterations);
  // From the minimiser there is nothing to do.
  const auto again = optimizers::minimizeNewtonCg(f, f.c(), o);
  CHECK(again.converged);
  CHECK(again.iterations == 0);
}

TEST_CASE("newton-cg minimises sparse logistic regression to a zero gradient", "[admm]") {
  std::mt19937 rng(5);
  const int cols = 50;
  const sparse::SparseDataset data = randomSparse(200, cols, 0.2, rng);
  sparse::LogisticObjective f(data, 1.0);
  optimizers::NewtonCgOptions o;
  o.gradientTolerance = 1e-10;
  const auto r = optimizers::minimizeNewtonCg(f, VectorXd::Zero(cols), o);
  CHECK(r.converged);
  VectorXd grad;
  f.valueAndGradient(r.x, grad);
  CHECK(grad.norm() < 1e-8 * std::max(1.0, r.gradientNorm) + 1e-6);
  // A strictly convex function: any step away from the minimiser costs.
  for (int k = 0; k < 5; ++k) CHECK(f.value(r.x + 1e-3 * randomVector(cols, rng)) > r.value);
}

TEST_CASE(
    "admm converges to the optimum of a consensus quadratic with ring, 2D-TGA and hierarchical allreduce",
    "[admm]") {
  const int n = 4, d = 12;
  auto fs = consensusQuadratics(n, d, 11);
  const Optimum opt = consensusOptimum(fs);
  optimizers::AdmmOptions o;
  o.rho = 1.0;
  o.maxIterations = 200;
  o.tolerance = 0;  // run all iterations
  o.referenceObjective = opt.value;
  o.solver.gradientTolerance = 1e-12;
  std::vector<VectorXd> finals;
  for (const auto algorithm :
       {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTga2d, AllreduceAlgorithm::kHierarchical,
        AllreduceAlgorithm::kTorus2d, AllreduceAlgorithm::kHips}) {
    CAPTURE(toString(algorithm));
    const auto results = runOnRanks(fs, o, algorithm);
    for (const auto& r : results) {
      REQUIRE(r.history.size() == 200);
      CHECK(!r.converged);
      CHECK((r.z - results[0].z).norm() == 0.0);  // one consensus model, bit for bit
      CHECK(r.history.back().relativeError == results[0].history.back().relativeError);
    }
    const auto& r0 = results[0];
    CHECK((r0.z - opt.x).norm() < 1e-8 * opt.x.norm());
    CHECK(r0.history.back().relativeError < 1e-12);
    CHECK(r0.history.back().primalResidual < 1e-8);
    CHECK(r0.history.front().relativeError > 1e-3);
    for (const auto& it : r0.history) {
      CHECK(it.updateSeconds >= 0);
      CHECK(it.syncWaitSeconds >= 0);
    }
    finals.push_back(r0.z);
  }
  // The allreduce algorithms change only the order of the sums.
  for (std::size_t k = 1; k < finals.size(); ++k) CHECK((finals[k] - finals[0]).norm() < 1e-10);
}

TEST_CASE("admm stops at the first iteration with f_rerr <= tolerance", "[admm]") {
  auto fs = consensusQuadratics(3, 6, 17);
  const Optimum opt = consensusOptimum(fs);
  optimizers::AdmmOptions o;
  o.maxIterations = 500;
  o.tolerance = 1e-6;
  o.referenceObjective = opt.value;
  const auto results = runOnRanks(fs, o, AllreduceAlgorithm::kRing);
  const auto& h = results[0].history;
  CHECK(results[0].converged);
  REQUIRE(h.size() >= 2);
  CHECK(h.size() < 500);
  CHECK(h.back().relativeError <= 1e-6);
  CHECK(h[h.size() - 2].relativeError > 1e-6);
  for (const auto& r : results) CHECK(r.history.size() == h.size());
  // Without a reference there is no f_rerr and no early stop.
  o.referenceObjective.reset();
  o.maxIterations = 5;
  const auto plain = runOnRanks(fs, o, AllreduceAlgorithm::kRing);
  CHECK(plain[0].history.size() == 5);
  CHECK(plain[0].history.back().relativeError == -1);
}

TEST_CASE("admm on sharded sparse logistic regression reaches the central solution", "[admm]") {
  std::mt19937 rng(23);
  const int n = 4, cols = 40;
  const sparse::SparseDataset all = randomSparse(400, cols, 0.15, rng);
  sparse::LogisticObjective central(all, 1.0);
  optimizers::NewtonCgOptions so;
  so.gradientTolerance = 1e-12;
  const auto ref = optimizers::minimizeNewtonCg(central, VectorXd::Zero(cols), so);
  REQUIRE(ref.converged);

  // Each rank: its rows and 1/N of the regulariser (the f_i add up to Eq. 8).
  const double share = 1.0 / n;
  optimizers::AdmmOptions o;
  o.rho = 1.0;
  o.maxIterations = 300;
  o.tolerance = 1e-9;
  o.referenceObjective = ref.value;
  std::vector<sparse::LogisticObjective> objectives;
  std::vector<sparse::SparseDataset> shards;
  for (int r = 0; r < n; ++r) shards.push_back(sparse::shard(all, r, n));
  for (const auto& s : shards) objectives.emplace_back(s, share);
  const auto out = runOnRanks(objectives, o, AllreduceAlgorithm::kTga2d);
  CHECK(out[0].converged);
  CHECK((out[0].z - ref.x).norm() < 1e-3 * ref.x.norm());
  CHECK(sparse::linearAccuracy(all, out[0].z) == Approx(sparse::linearAccuracy(all, ref.x)).margin(0.01));
}

TEST_CASE("newton-cg does not take a gradient whose squares overflow for a converged one", "[admm]") {
  // A feature of 1e160: the gradient at 0 holds ~1e160, whose square is
  // past the double range. Its norm was inf, and inf <= tol * inf said
  // "converged" before any step, at a point far from the minimiser.
  sparse::SparseDataset data;
  std::vector<Eigen::Triplet<double>> entries{{0, 0, 1e160}, {0, 2, 0.5}, {1, 1, 1.0},
                                              {2, 0, 0.2},   {2, 1, 0.3}, {3, 2, 1.0}};
  data.x.resize(4, 3);
  data.x.setFromTriplets(entries.begin(), entries.end());
  data.x.makeCompressed();
  data.y = VectorXd(4);
  data.y << 1.0, -1.0, 1.0, -1.0;
  sparse::LogisticObjective f(data, 1.0);
  const auto r = optimizers::minimizeNewtonCg(f, VectorXd::Zero(3));
  CHECK(std::isfinite(r.gradientNorm));
  CHECK(r.iterations >= 1);
  // (Its Hessian overflows too: no step may be found, but it is not called
  // converged where it started.)
  CHECK((!r.converged || r.value < f.value(VectorXd::Zero(3))));
  // A start where f itself is not finite is an error, not a result.
  std::mt19937 rng(2);
  Quadratic far(randomSpd(3, rng, 1.0), VectorXd::Constant(3, 1e200), 0.0);
  CHECK_THROWS_WITH(optimizers::minimizeNewtonCg(far, VectorXd::Zero(3)), Catch::Contains("not finite"));
}

TEST_CASE("admm and newton-cg reject bad arguments", "[admm]") {
  std::mt19937 rng(1);
  Quadratic f(randomSpd(3, rng, 1.0), randomVector(3, rng), 1.0);
  optimizers::NewtonCgOptions so;
  CHECK_THROWS_AS(optimizers::minimizeNewtonCg(f, VectorXd::Zero(4), so), InvalidArgument);
  so.maxIterations = 0;
  CHECK_THROWS_AS(optimizers::minimizeNewtonCg(f, VectorXd::Zero(3), so), InvalidArgument);
  so = {};
  so.cgTolerance = 1.0;
  CHECK_THROWS_AS(optimizers::minimizeNewtonCg(f, VectorXd::Zero(3), so), InvalidArgument);
  so = {};
  so.gradientTolerance = 0;
  CHECK_THROWS_AS(optimizers::minimizeNewtonCg(f, VectorXd::Zero(3), so), InvalidArgument);

  auto fabric = inproc::makeFabric(1);
  auto t = inproc::makeTransport(fabric, 0, 5.0);
  Communicator comm(*t, 5.0);
  const auto bad = [&](auto tweak) {
    optimizers::AdmmOptions o;
    tweak(o);
    return [&comm, &f, o] { optimizers::runAdmm(comm, f, o); };
  };
  CHECK_THROWS_AS(bad([](auto& o) { o.rho = 0; })(), InvalidArgument);
  CHECK_THROWS_AS(bad([](auto& o) { o.rho = std::nan(""); })(), InvalidArgument);
  CHECK_THROWS_AS(bad([](auto& o) { o.maxIterations = 0; })(), InvalidArgument);
  CHECK_THROWS_AS(bad([](auto& o) { o.tolerance = -1; })(), InvalidArgument);
  CHECK_THROWS_AS(bad([](auto& o) { o.referenceObjective = 0.0; })(), InvalidArgument);
  CHECK_THROWS_AS(bad([](auto& o) { o.solver.maxCgIterations = 0; })(), InvalidArgument);
  // One rank is a valid job: ADMM then solves f itself.
  optimizers::AdmmOptions o;
  o.maxIterations = 100;
  o.referenceObjective = 1.0;  // f's minimum (offset 1)
  o.tolerance = 1e-10;
  const auto r = optimizers::runAdmm(comm, f, o);
  CHECK(r.converged);
  CHECK((r.z - f.c()).norm() < 1e-4);
}
