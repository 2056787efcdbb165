#include "gossamer/topology.hpp"

#include <string>

#include "gossamer/errors.hpp"

namespace gossamer {

Eigen::MatrixXd Topology::mixingMatrix(std::uint64_t step, int segment) const {
  const int n = worldSize();
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    const PeerSet p = peers(i, step, segment);
    GOSSAMER_ENFORCE(p.recvFrom.size() == p.recvWeights.size(),
                     "topology " << name() << " gives " << p.recvFrom.size() << " sources but "
                                 << p.recvWeights.size() << " weights");
    w(i, i) += p.selfWeight;
    for (std::size_t k = 0; k < p.recvFrom.size(); ++k) {
      const int j = p.recvFrom[k];
      if (j < 0 || j >= n)
        throw InvalidArgument("topology " + name() + " gives rank " + std::to_string(i) + " source " +
                              std::to_string(j) + " at step " + std::to_string(step) + ", outside [0, " +
                              std::to_string(n) + ")");
      w(i, j) += p.recvWeights[k];
    }
  }
  return w;
}

}  // namespace gossamer
