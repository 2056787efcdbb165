// 2D-TGA-ADMM: consensus ADMM whose z-update is an allreduce (Wang et al., "A
// Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023), Sec. 4.1-4.2, Algorithm 2,
// Eqs. 5, 6a-6c, 7; the relative error f_rerr of Eq. 9; updating vs
// synchronisation wait time as in Table 4). The allreduce is whichever the
// communicator is set to (collectives.allreduce: 2D-TGA in the paper, or ring,
// torus, hierarchical, HiPS); the algorithms change only the order of the
// summation.
//
// Per rank i, from x_i = lambda_i = z = 0, iteration k:
//   1. x_i <- argmin f_i(x) + <lambda_i, x - z> + rho/2 ||x - z||^2   (6a)
//      by minimizeNewtonCg (newton_cg.cpp), warm-started at x_i   [update]
//   2. w_i <- x_i + lambda_i / rho                                     (7)
//   3. w <- sum_i w_i (allreduce), z <- w / N                 (6b) [sync wait]
//   4. lambda_i <- lambda_i + rho (x_i - z)                           (6c)
//   5. monitoring (untimed): sum over ranks of [f_i(z), ||x_i - z||^2,
//      sync seconds], max over ranks of [update seconds, Newton steps];
//      f_rerr = |f(z) - f*| / f* (9).
// Bytes on the wire per iteration: the allreduce of d float64 (8 d bytes in
// per rank; the ring sends 2 (N-1)/N of that per rank), and two allreduces of
// 3 and 2 float64 for the monitoring.
#include <chrono>
#include <cmath>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/optimizers/admm.hpp"

namespace gossamer::optimizers {

namespace {

/// The x-subproblem of Eq. 6a: f(x) + <lambda, x - z> + rho/2 ||x - z||^2.
class AugmentedObjective final : public LocalObjective {
 public:
  AugmentedObjective(LocalObjective& f, const Eigen::VectorXd& lambda, const Eigen::VectorXd& z, double rho)
      : f_(f), lambda_(lambda), z_(z), rho_(rho) {}

  int dimension() const override { return f_.dimension(); }

  double valueAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd& grad) override {
    const double fx = f_.valueAndGradient(x, grad);
    diff_ = x - z_;
    grad += lambda_ + rho_ * diff_;
    return fx + lambda_.dot(diff_) + 0.5 * rho_ * diff_.squaredNorm();
  }

  void setHessianPoint(const Eigen::VectorXd& x) override { f_.setHessianPoint(x); }

  void hessianVector(const Eigen::VectorXd& v, Eigen::VectorXd& hv) override {
    f_.hessianVector(v, hv);
    hv += rho_ * v;
  }

 private:
  LocalObjective& f_;
  const Eigen::VectorXd& lambda_;
  const Eigen::VectorXd& z_;
  double rho_;
  Eigen::VectorXd diff_;
};

void checkOptions(const LocalObjective& f, const AdmmOptions& o) {
  GOSSAMER_ENFORCE(f.dimension() >= 1, "dimension " << f.dimension());
  GOSSAMER_ENFORCE(o.rho > 0 && std::isfinite(o.rho), "rho " << o.rho);
  GOSSAMER_ENFORCE(o.maxIterations >= 1, "maxIterations " << o.maxIterations);
  GOSSAMER_ENFORCE(o.tolerance >= 0 && std::isfinite(o.tolerance), "tolerance " << o.tolerance);
  if (o.referenceObjective)
    GOSSAMER_ENFORCE(*o.referenceObjective > 0 && std::isfinite(*o.referenceObjective),
                     "referenceObjective " << *o.referenceObjective << " (f_rerr divides by it)");
  // The solver's options are checked by minimizeNewtonCg too, but only once
  // an iteration runs: check them here, before any message.
  GOSSAMER_ENFORCE(o.solver.maxIterations >= 1, "solver.maxIterations " << o.solver.maxIterations);
  GOSSAMER_ENFORCE(o.solver.maxCgIterations >= 1, "solver.maxCgIterations " << o.solver.maxCgIterations);
  GOSSAMER_ENFORCE(o.solver.gradientTolerance > 0 && std::isfinite(o.solver.gradientTolerance),
                   "solver.gradientTolerance " << o.solver.gradientTolerance);
  GOSSAMER_ENFORCE(o.solver.cgTolerance > 0 && o.solver.cgTolerance < 1,
                   "solver.cgTolerance " << o.solver.cgTolerance);
}

}  // namespace

ConsensusAdmm::ConsensusAdmm(LocalObjective& f, const AdmmOptions& options) : f_(&f), options_(options) {
  checkOptions(f, options);
  const int d = f.dimension();
  state_.x = Eigen::VectorXd::Zero(d);
  state_.lambda = Eigen::VectorXd::Zero(d);
  state_.z = Eigen::VectorXd::Zero(d);
}

void ConsensusAdmm::setState(const State& state) {
  const auto d = static_cast<Eigen::Index>(f_->dimension());
  GOSSAMER_ENFORCE(state.x.size() == d && state.lambda.size() == d && state.z.size() == d,
                   "ADMM state of dimension " << state.x.size() << ", expected " << d);
  state_ = state;
}

void ConsensusAdmm::setObjective(LocalObjective& f) {
  GOSSAMER_ENFORCE(f.dimension() == f_->dimension(),
                   "objective of dimension " << f.dimension() << ", expected " << f_->dimension());
  f_ = &f;
}

AdmmIteration ConsensusAdmm::iterate(Communicator& comm) {
  const AdmmOptions& o = options_;
  State& s = state_;
  const double n = comm.worldSize();
  AugmentedObjective sub(*f_, s.lambda, s.z, o.rho);
  auto t0 = Clock::now();
  const NewtonCgResult solved = minimizeNewtonCg(sub, s.x, o.solver);  // (6a)
  s.x = solved.x;
  Eigen::VectorXd w = s.x + s.lambda / o.rho;  // (7)
  const double updateSeconds = secondsSince(t0);

  t0 = Clock::now();
  comm.allreduce(std::span<double>(w.data(), static_cast<std::size_t>(w.size())), ReduceOp::kSum);
  s.z = w / n;  // (6b)
  const double syncSeconds = secondsSince(t0);

  s.lambda += o.rho * (s.x - s.z);  // (6c)

  double sums[3] = {f_->value(s.z), (s.x - s.z).squaredNorm(), syncSeconds};
  double maxima[2] = {updateSeconds, static_cast<double>(solved.iterations)};
  comm.allreduce(std::span<double>(sums), ReduceOp::kSum);
  comm.allreduce(std::span<double>(maxima), ReduceOp::kMax);
  AdmmIteration it;
  it.iteration = ++s.iterations;
  it.objective = sums[0];
  it.primalResidual = std::sqrt(sums[1]);
  it.syncWaitSeconds = sums[2] / n;
  it.updateSeconds = maxima[0];
  it.solverIterations = static_cast<int>(maxima[1]);
  if (o.referenceObjective)
    it.relativeError = std::abs(it.objective - *o.referenceObjective) / *o.referenceObjective;  // (9)
  s.converged = o.referenceObjective && o.tolerance > 0 && it.relativeError <= o.tolerance;
  return it;
}

AdmmResult runAdmm(Communicator& comm, LocalObjective& f, const AdmmOptions& o,
                   const std::function<void(const AdmmIteration&)>& onIteration) {
  ConsensusAdmm admm(f, o);
  AdmmResult res;
  for (int k = 0; k < o.maxIterations && !admm.converged(); ++k) {
    res.history.push_back(admm.iterate(comm));
    if (onIteration) onIteration(res.history.back());
  }
  res.z = admm.z();
  res.converged = admm.converged();
  return res;
}

}  // namespace gossamer::optimizers
