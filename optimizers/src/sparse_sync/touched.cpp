// Input checks of the sparse synchronisation schedules: D_{n,m}, the sorted
// features each rank touches in each round (Yokoyama and Araki, "Efficient
// Distributed Machine Learning for Large-scale Models by Reducing Redundant
// Communication", Section IV-B, Table I). Steps: at least one rank; the same
// number of rounds M on every rank; each list strictly ascending; each feature
// below d when d is given.
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

std::size_t checkTouched(const TouchedFeatures& touched, std::size_t dimension) {
  if (touched.empty()) throw InvalidArgument("sparse sync: no ranks (touched features of 0 ranks)");
  const std::size_t rounds = touched[0].size();
  for (std::size_t n = 0; n < touched.size(); ++n) {
    if (touched[n].size() != rounds) {
      throw InvalidArgument("sparse sync: rank " + std::to_string(n) + " has " +
                            std::to_string(touched[n].size()) + " rounds, rank 0 has " +
                            std::to_string(rounds) + ": every rank needs the same M");
    }
    for (std::size_t m = 0; m < rounds; ++m) {
      const auto& d = touched[n][m];
      for (std::size_t i = 0; i < d.size(); ++i) {
        if (i > 0 && d[i] <= d[i - 1]) {
          throw InvalidArgument("sparse sync: rank " + std::to_string(n) + " round " + std::to_string(m) +
                                ": feature " + std::to_string(d[i]) + " at position " + std::to_string(i) +
                                " is not above the one before it (" + std::to_string(d[i - 1]) +
                                "): the features must be strictly ascending");
        }
        if (dimension != 0 && d[i] >= dimension) {
          throw InvalidArgument("sparse sync: rank " + std::to_string(n) + " round " + std::to_string(m) +
                                ": feature " + std::to_string(d[i]) + " outside [0, " +
                                std::to_string(dimension) + ")");
        }
      }
    }
  }
  return rounds;
}

}  // namespace gossamer::optimizers::sparse_sync
