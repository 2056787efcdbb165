// Consensus ADMM with an allreduce z-update (2D-TGA-ADMM) and its local
// solver, a trust-region Newton-CG method: the 2D-TGA paper (Wang et al., "A
// Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce", 2023; Sec. 4, Algorithm 2,
// Eqs. 5-7; the x-subproblem Eq. 6a is solved with TRON, ref. [19] Lin,
// Weng & Keerthi 2008; convergence measured by f_rerr, Eq. 9; times split as in
// Table 4).
//
// The algorithm knows nothing of the data: each rank brings a LocalObjective
// f_i (value, gradient, Hessian-vector products on Eigen::VectorXd), and the
// ranks minimise sum_i f_i(x) (Eq. 4) together.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <Eigen/Core>

#include "gossamer/collectives.hpp"

namespace gossamer::optimizers {

/// A twice differentiable, convex function f: R^d -> R that a rank owns (its
/// f_i of Eq. 4). Vectors are double, of dimension() entries.
class LocalObjective {
 public:
  virtual ~LocalObjective() = default;
  /// d, the number of parameters (>= 1).
  virtual int dimension() const = 0;
  /// f(x), returned, and its gradient written to `grad` (resized to d).
  virtual double valueAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd& grad) = 0;
  /// f(x) alone (default: valueAndGradient with a scratch gradient).
  virtual double value(const Eigen::VectorXd& x);
  /// Fixes the point x at which later hessianVector() calls evaluate the
  /// Hessian (called once per Newton step, before its CG iterations).
  virtual void setHessianPoint(const Eigen::VectorXd& x) = 0;
  /// H v at the point of the last setHessianPoint(), written to `hv`
  /// (resized to d). H must be positive semidefinite.
  virtual void hessianVector(const Eigen::VectorXd& v, Eigen::VectorXd& hv) = 0;
};

/// Settings of minimizeNewtonCg.
struct NewtonCgOptions {
  /// Newton (outer) iterations at most, >= 1.
  int maxIterations = 50;
  /// Conjugate-gradient iterations per Newton step at most, >= 1.
  int maxCgIterations = 250;
  /// Stop once ||grad f(x)||_2 <= gradientTolerance * max(1, ||grad f(x0)||_2); > 0.
  double gradientTolerance = 1e-6;
  /// CG stops once the residual is <= cgTolerance * ||grad f(x)||_2 (TRON's 0.1); in (0, 1).
  double cgTolerance = 0.1;
};

/// What minimizeNewtonCg found.
struct NewtonCgResult {
  Eigen::VectorXd x;        ///< the last accepted iterate, d doubles
  double value = 0;         ///< f(x)
  double gradientNorm = 0;  ///< ||grad f(x)||_2
  int iterations = 0;       ///< Newton steps taken (accepted or not)
  int cgIterations = 0;     ///< CG iterations over all steps
  bool converged = false;   ///< the gradient test held
};

/// Minimises f from x0 by a trust-region Newton method whose steps solve
/// H s = -g by conjugate gradients truncated at the trust region's boundary
/// (Steihaug-Toint), as TRON (ref. [19] of the 2D-TGA paper; Nocedal & Wright,
/// Algorithms 4.1 and 7.2): a step is accepted when its actual reduction is
/// above 1e-4 of the predicted one; the radius (initially ||g(x0)||) shrinks
/// to ||s||/4 when the ratio is below 1/4 and doubles when it is above 3/4 at
/// the boundary. Where f cannot resolve a step's reduction (both the actual
/// and the predicted one below 1e-12 |f(x)|) the step is judged by whether it
/// lowers ||g||. Stops when the gradient test holds (converged), after
/// maxIterations steps, or when the radius falls to 1e-12 max(1, ||x||).
/// One valueAndGradient, one setHessianPoint and at most
/// maxCgIterations hessianVector calls per Newton step.
/// @param x0  start, f.dimension() doubles
/// @throws InvalidArgument if x0.size() != f.dimension() or an option is out
///         of range; Error if f(x0) or its gradient is not finite; whatever
///         f throws.
NewtonCgResult minimizeNewtonCg(LocalObjective& f, const Eigen::VectorXd& x0,
                                const NewtonCgOptions& options = {});

/// Settings of the consensus ADMM.
struct AdmmOptions {
  /// Penalty rho of the augmented Lagrangian (Eq. 5), > 0.
  double rho = 1.0;
  /// ADMM iterations at most (K of Algorithm 2), >= 1.
  int maxIterations = 100;
  /// With a reference optimum: stop at the first iteration whose f_rerr
  /// (Eq. 9) is <= tolerance; >= 0 (0: run all maxIterations).
  double tolerance = 1e-3;
  /// The reference optimum f* > 0 of sum_i f_i, computed elsewhere (e.g.
  /// centrally); unset: f_rerr is not computed and only maxIterations stops.
  std::optional<double> referenceObjective;
  /// The local solver of the x-update (Eq. 6a), warm-started at the last x_i.
  NewtonCgOptions solver;
};

/// One ADMM iteration as every rank sees it (the same numbers on all ranks).
struct AdmmIteration {
  int iteration = 0;           ///< k + 1: 1 after the first update
  double objective = 0;        ///< f(z^{k+1}) = sum_i f_i(z^{k+1})
  double relativeError = -1;   ///< f_rerr = |f - f*| / f* (Eq. 9); -1 without f*
  double primalResidual = 0;   ///< sqrt(sum_i ||x_i^{k+1} - z^{k+1}||^2)
  double updateSeconds = 0;    ///< the x-update's wall time, the longest over the ranks (Table 4)
  double syncWaitSeconds = 0;  ///< the z allreduce's wall time, averaged over the ranks (Table 4)
  int solverIterations = 0;    ///< Newton steps of the x-update, the most over the ranks
};

/// What runAdmm returns on every rank.
struct AdmmResult {
  Eigen::VectorXd z;                   ///< the consensus model z^K, d doubles, the same on every rank
  std::vector<AdmmIteration> history;  ///< one entry per iteration run
  bool converged = false;              ///< stopped by the f_rerr tolerance
};

/// One rank's consensus ADMM (the 2D-TGA paper, Algorithm 2), an iteration at a
/// time: its x_i and lambda_i, and z, the consensus, the same on every rank.
/// From x_i = lambda_i = z = 0, each iterate(comm)
///   1. x_i <- argmin_x f_i(x) + <lambda_i, x - z> + rho/2 ||x - z||^2 (Eq. 6a),
///      by minimizeNewtonCg from the previous x_i ("update" time);
///   2. w_i <- x_i + lambda_i / rho (Eq. 7);
///   3. w <- allreduce-sum of w_i with the communicator's algorithm (2D-TGA,
///      ring, hierarchical, ...: comm.setOptions) and z <- w / N, N the
///      communicator's world size (Eq. 6b; "sync wait" time: the allreduce
///      call, which includes waiting for the slowest rank's update);
///   4. lambda_i <- lambda_i + rho (x_i - z) (Eq. 6c);
///   5. monitoring, not timed: one sum-allreduce of [f_i(z), ||x_i - z||^2,
///      sync time] and one max-allreduce of [update time, Newton steps]
///      (5 doubles), giving the AdmmIteration.
/// On the wire per iteration: one allreduce of d float64 (8 d bytes of input
/// per rank; the algorithm decides what travels) and two of 3 and 2 float64.
/// Every rank of comm runs the same iterations with the same options and the
/// same dimension. A rank's state (state(), setState()) is what a program
/// keeps to return to an iteration after a view change (gossamer-admm).
class ConsensusAdmm {
 public:
  /// x_i, lambda_i and z as one rank holds them (d doubles each).
  struct State {
    Eigen::VectorXd x, lambda, z;
    int iterations = 0;      ///< Iterations done.
    bool converged = false;  ///< The last one's f_rerr reached the tolerance.
  };

  /// `f` (this rank's f_i) must outlive the object (or be replaced by
  /// setObjective).
  /// @throws InvalidArgument for options out of range (rho <= 0, maxIterations
  ///         < 1, tolerance < 0, referenceObjective <= 0 or not finite, solver
  ///         options) or f.dimension() < 1.
  ConsensusAdmm(LocalObjective& f, const AdmmOptions& options);

  /// One iteration over `comm` (steps 1-5); returns its record, the same on
  /// every rank. @throws TimeoutError, PeerFailure as the allreduce.
  AdmmIteration iterate(Communicator& comm);
  /// Whether the last iteration's f_rerr (Eq. 9) is <= tolerance (with a
  /// reference objective and a tolerance > 0): decided alike on every rank.
  bool converged() const { return state_.converged; }
  /// The consensus model z, d doubles.
  const Eigen::VectorXd& z() const { return state_.z; }
  /// This rank's state, to return to later.
  const State& state() const { return state_; }
  /// Returns to a state of the same dimension. @throws InvalidArgument otherwise.
  void setState(const State& state);
  /// Replaces f_i (same dimension), e.g. after a view change.
  /// @throws InvalidArgument for another dimension.
  void setObjective(LocalObjective& f);

 private:
  LocalObjective* f_;
  AdmmOptions options_;
  State state_;
};

/// Consensus ADMM over the ranks of `comm` (the 2D-TGA paper, Algorithm 2): the
/// iterations of ConsensusAdmm until maxIterations, or until f_rerr <=
/// tolerance (the same decision on every rank: it is taken on allreduced
/// values); `onIteration`, if set, is called with each iteration's record on
/// every rank. Collective: every rank of comm calls it with the same options
/// and the same dimension.
/// @throws InvalidArgument as ConsensusAdmm; TimeoutError, PeerFailure as the allreduce.
AdmmResult runAdmm(Communicator& comm, LocalObjective& f, const AdmmOptions& options,
                   const std::function<void(const AdmmIteration&)>& onIteration = {});

}  // namespace gossamer::optimizers
