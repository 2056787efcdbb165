// Trust-region Newton-CG: the local solver of the ADMM x-update (Wang et al.,
// "A Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023), Sec. 5.2: "we employ the
// Trust Region Newton method (TRON) [19]" for the subproblem Eq. 6a; ref. [19]
// Lin, Weng & Keerthi 2008, "Trust region Newton method for large-scale
// logistic regression"; Nocedal & Wright, Numerical Optimization,
// Algorithms 4.1 and 7.2).
//
// Each Newton step k at x with gradient g and Hessian H:
//   1. CG on H s = -g from s = 0, stopped when ||H s + g|| <= eta ||g||
//      (eta = cgTolerance), on negative curvature, or at the trust-region
//      boundary ||s|| = Delta (Steihaug-Toint: the last direction is followed
//      to the boundary);
//   2. rho = (f(x) - f(x + s)) / (-(g^T s + s^T H s / 2));
//   3. accept x + s if rho > 1e-4; Delta <- ||s|| / 4 if rho < 1/4,
//      Delta <- 2 Delta if rho > 3/4 and s reached the boundary;
//      When both reductions are below 1e-12 |f(x)| (what double precision
//      resolves in f; TRON's test), rho is taken as 1 if ||g(x + s)|| < ||g||
//      and 0 otherwise;
//   4. stop when ||g|| is small enough, after maxIterations steps, or when
//      Delta <= 1e-12 max(1, ||x||).
// No communication: everything is local to the rank.
#include <cmath>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/admm.hpp"

namespace gossamer::optimizers {

double LocalObjective::value(const Eigen::VectorXd& x) {
  Eigen::VectorXd scratch;
  return valueAndGradient(x, scratch);
}

namespace {

constexpr double kAcceptRatio = 1e-4;
constexpr double kShrinkRatio = 0.25;
constexpr double kGrowRatio = 0.75;
constexpr double kResolvable = 1e-12;

/// The step t >= 0 with ||s + t p|| = delta (s inside the region, p != 0).
double toBoundary(const Eigen::VectorXd& s, const Eigen::VectorXd& p, double delta) {
  const double pp = p.squaredNorm(), sp = s.dot(p), ss = s.squaredNorm();
  const double disc = std::max(0.0, sp * sp + pp * (delta * delta - ss));
  return (-sp + std::sqrt(disc)) / pp;
}

struct CgStep {
  Eigen::VectorXd s;
  Eigen::VectorXd hs;  // H s, for the predicted reduction
  int iterations = 0;
  bool atBoundary = false;
};

/// Steihaug-Toint CG for min g^T s + s^T H s / 2 subject to ||s|| <= delta.
CgStep steihaugCg(LocalObjective& f, const Eigen::VectorXd& g, double delta, const NewtonCgOptions& o) {
  const auto d = g.size();
  CgStep out{Eigen::VectorXd::Zero(d), Eigen::VectorXd::Zero(d)};
  Eigen::VectorXd r = -g, p = r, hp(d);
  double rr = r.squaredNorm();
  const double stop = o.cgTolerance * g.norm();
  while (out.iterations < o.maxCgIterations && std::sqrt(rr) > stop) {
    f.hessianVector(p, hp);
    ++out.iterations;
    const double pHp = p.dot(hp);
    if (pHp <= 0) {  // no curvature along p: go to the boundary
      const double t = toBoundary(out.s, p, delta);
      out.s += t * p;
      out.hs += t * hp;
      out.atBoundary = true;
      break;
    }
    const double alpha = rr / pHp;
    if ((out.s + alpha * p).norm() >= delta) {
      const double t = toBoundary(out.s, p, delta);
      out.s += t * p;
      out.hs += t * hp;
      out.atBoundary = true;
      break;
    }
    out.s += alpha * p;
    out.hs += alpha * hp;
    r -= alpha * hp;
    const double rrNext = r.squaredNorm();
    p = r + (rrNext / rr) * p;
    rr = rrNext;
  }
  return out;
}

}  // namespace

NewtonCgResult minimizeNewtonCg(LocalObjective& f, const Eigen::VectorXd& x0, const NewtonCgOptions& o) {
  GOSSAMER_ENFORCE(x0.size() == f.dimension(),
                   "x0 has " << x0.size() << " entries, f has dimension " << f.dimension());
  GOSSAMER_ENFORCE(o.maxIterations >= 1, "maxIterations " << o.maxIterations);
  GOSSAMER_ENFORCE(o.maxCgIterations >= 1, "maxCgIterations " << o.maxCgIterations);
  GOSSAMER_ENFORCE(o.gradientTolerance > 0 && std::isfinite(o.gradientTolerance),
                   "gradientTolerance " << o.gradientTolerance);
  GOSSAMER_ENFORCE(o.cgTolerance > 0 && o.cgTolerance < 1, "cgTolerance " << o.cgTolerance);

  NewtonCgResult res;
  res.x = x0;
  Eigen::VectorXd g, gTrial;
  res.value = f.valueAndGradient(res.x, g);
  // stableNorm: a gradient entry above 1e154 squares past the double range,
  // and an infinite norm would pass the test below (inf <= inf) at once.
  res.gradientNorm = g.stableNorm();
  if (!std::isfinite(res.value) || !std::isfinite(res.gradientNorm))
    throw Error("Newton-CG: f or its gradient at the start is not finite (f = " + std::to_string(res.value) +
                ", ||grad f|| = " + std::to_string(res.gradientNorm) +
                "): values too large for double precision?");
  const double target = o.gradientTolerance * std::max(1.0, res.gradientNorm);
  double delta = res.gradientNorm;
  Eigen::VectorXd trial;
  while (true) {
    if (res.gradientNorm <= target) {
      res.converged = true;
      break;
    }
    if (res.iterations >= o.maxIterations) break;
    ++res.iterations;
    f.setHessianPoint(res.x);
    const CgStep step = steihaugCg(f, g, delta, o);
    res.cgIterations += step.iterations;
    const double predicted = -(g.dot(step.s) + 0.5 * step.s.dot(step.hs));
    if (!(predicted > 0)) break;  // no descent left at double precision
    trial = res.x + step.s;
    const double fTrial = f.valueAndGradient(trial, gTrial);
    // Below what double precision resolves in f (both reductions under
    // 1e-12 |f|, TRON's test), f cannot judge the step: the gradient does.
    const bool unresolved = std::abs(res.value - fTrial) <= kResolvable * std::abs(res.value) &&
                            predicted <= kResolvable * std::abs(res.value);
    const double ratio =
        unresolved ? (gTrial.stableNorm() < res.gradientNorm ? 1.0 : 0.0) : (res.value - fTrial) / predicted;
    const double stepNorm = step.s.norm();
    if (ratio < kShrinkRatio)
      delta = kShrinkRatio * stepNorm;
    else if (ratio > kGrowRatio && step.atBoundary)
      delta = 2 * delta;
    if (ratio > kAcceptRatio) {
      res.x.swap(trial);
      g.swap(gTrial);
      res.value = fTrial;
      res.gradientNorm = g.stableNorm();
    }
    if (!(delta > kResolvable * std::max(1.0, res.x.norm()))) break;  // the region collapsed
  }
  return res;
}

}  // namespace gossamer::optimizers
