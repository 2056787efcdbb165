// gossamer-admm's own YAML section `admm:` (consensus ADMM on sparse logistic
// regression, Wang et al., "A Communication Efficient ADMM-based Distributed
// Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023),
// Algorithm 2, Eq. 8-9; docs/admm.md). Registered like any component's keys
// (registerAdmmSection), so configs are checked with file:line errors; the
// allreduce of the z-update is `collectives.allreduce`.
#pragma once

#include <string>

#include "gossamer/config.hpp"
#include "gossamer/optimizers/admm.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::sparse {

/// The `admm:` section.
struct AdmmConfig {
  std::string train = "data/spam/spam-train.libsvm";  ///< LIBSVM training file (scripts/spam-data.sh)
  std::string test = "data/spam/spam-test.libsvm";    ///< LIBSVM test file
  int features = 1 << 18;  ///< columns d of the model (0: the largest index in the training file)
  double l2 = 1.0;         ///< L2 coefficient of Eq. 8 (the paper's 1), split as l2 / N over the ranks
  /// ADMM settings: rho, max_iterations, tolerance (f_rerr of Eq. 9), and the
  /// x-update's solver_iterations, solver_tolerance (referenceObjective unset).
  optimizers::AdmmOptions admm;
  /// Relative gradient tolerance of the central solve that gives f* (Eq. 9).
  double referenceTolerance = 1e-10;
};

/// Declares the `admm:` section in `registry`.
/// @throws InvalidArgument if its keys clash with registered ones.
void registerAdmmSection(Registry& registry);

/// gossamer-train's registry (train::makeTrainRegistry) with the `admm:`
/// section, membership.rejoin false by default and a transport that links
/// processes (requireProcessTransport): gossamer-admm's.
/// @throws InvalidArgument if the keys clash (a bug).
Registry makeAdmmRegistry();

/// The section's values from a config loaded by a registry that
/// registerAdmmSection filled.
/// @throws InvalidArgument if a key is missing.
AdmmConfig admmConfigFrom(const Config& config);

}  // namespace gossamer::sparse
