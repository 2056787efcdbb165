// The `admm:` section of gossamer-admm (see admm_config.hpp).
#include "admm_config.hpp"

#include <climits>

#include "components.hpp"
#include "launch_ranks.hpp"
#include "libsvm.hpp"

namespace gossamer::sparse {

void registerAdmmSection(Registry& registry) {
  const AdmmConfig d;
  registry.addSection(
      "admm", "gossamer-admm: consensus ADMM (2D-TGA-ADMM) on L2-regularised sparse logistic regression.",
      KeySet()
          .text("train", d.train, {}, "LIBSVM training file, split into one contiguous shard per rank")
          .perRank()
          .text("test", d.test, {}, "LIBSVM test file (accuracy of the consensus and the central model)")
          .perRank()
          .integer("features", d.features, 0, kMaxLibsvmFeatures,
                   "model dimension d (0: the largest feature index of the training file)")
          .real("l2", d.l2, {0.0, true, kUnbounded, false},
                "L2 coefficient of the loss (Eq. 8 of Wang et al. 2023: 1)")
          .real("rho", d.admm.rho, {0.0, false, kUnbounded, false}, "ADMM penalty rho (Eq. 5)")
          .integer("max_iterations", d.admm.maxIterations, 1, INT_MAX, "ADMM iterations at most")
          .real("tolerance", d.admm.tolerance, {0.0, true, kUnbounded, false},
                "stop once the relative error f_rerr (Eq. 9) is at most this (0: run max_iterations)")
          .integer("solver_iterations", d.admm.solver.maxIterations, 1, INT_MAX,
                   "Newton steps of each x-update (trust-region Newton-CG) at most")
          .real("solver_tolerance", d.admm.solver.gradientTolerance, {0.0, false, 1.0, false},
                "x-update stops at gradient norm <= this x max(1, initial gradient norm)")
          .real("reference_tolerance", d.referenceTolerance, {0.0, false, 1.0, false},
                "the same for the central solve on the whole training set that gives f* of Eq. 9"));
}

Registry makeAdmmRegistry() {
  Registry r = train::makeTrainRegistry();
  registerAdmmSection(r);
  // ADMM's rounds go back to the newest commit every member holds: a rank
  // that was away has none of them, so a removed rank is not taken back.
  r.setKeyDefault("membership", "rejoin", false);
  requireProcessTransport(r, "gossamer-admm");
  return r;
}

AdmmConfig admmConfigFrom(const Config& c) {
  AdmmConfig a;
  a.train = c.get<std::string>("admm.train");
  a.test = c.get<std::string>("admm.test");
  a.features = c.get<int>("admm.features");
  a.l2 = c.get<double>("admm.l2");
  a.admm.rho = c.get<double>("admm.rho");
  a.admm.maxIterations = c.get<int>("admm.max_iterations");
  a.admm.tolerance = c.get<double>("admm.tolerance");
  a.admm.solver.maxIterations = c.get<int>("admm.solver_iterations");
  a.admm.solver.gradientTolerance = c.get<double>("admm.solver_tolerance");
  a.referenceTolerance = c.get<double>("admm.reference_tolerance");
  return a;
}

}  // namespace gossamer::sparse
