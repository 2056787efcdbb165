// Test accuracy of a linear model (see admm_objective.hpp).
#include "admm_objective.hpp"

#include "gossamer/errors.hpp"

namespace gossamer::sparse {

double linearAccuracy(const SparseDataset& data, const Eigen::VectorXd& x) {
  GOSSAMER_ENFORCE(x.size() == data.features(),
                   "x has " << x.size() << " entries, the data " << data.features() << " features");
  if (data.rows() == 0) return 0.0;
  const Eigen::VectorXd margins = data.x * x;
  int right = 0;
  for (int i = 0; i < data.rows(); ++i) right += ((margins[i] >= 0 ? 1.0 : -1.0) == data.y[i]) ? 1 : 0;
  return static_cast<double>(right) / data.rows();
}

}  // namespace gossamer::sparse
