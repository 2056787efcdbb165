// Topology interface: who talks to whom at a given step, as a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace gossamer {

/// One rank's view of a gossip round: the peers it sends to, the peers it
/// receives from, and the mixing weights it applies,
///   x_new = selfWeight * x + sum_j recvWeights[j] * x_{recvFrom[j]}.
struct PeerSet {
  std::vector<int> sendTo;
  std::vector<int> recvFrom;
  double selfWeight = 1.0;
  std::vector<double> recvWeights;  ///< Same length as recvFrom.
};

/// A (possibly time-varying) communication graph. Implementations are pure
/// and deterministic functions of (rank, step, segment) and their
/// construction arguments (world size, shared seed): every rank computes the
/// same graph without communicating. Thread-safe (const).
class Topology {
 public:
  virtual ~Topology() = default;
  /// The ranks it connects, N.
  virtual int worldSize() const = 0;
  /// The registered kind ("ring", "fair_roulette", ...).
  virtual std::string name() const = 0;
  /// The peers of `rank` in round `step` for `segment` (topologies that do not
  /// depend on the segment ignore it).
  /// @throws InvalidArgument for a rank outside [0, worldSize).
  virtual PeerSet peers(int rank, std::uint64_t step, int segment = 0) const = 0;
  /// The N x N mixing matrix W of round `step` (row i: the weights rank i
  /// applies, W(i,i) = selfWeight, W(i,j) = weight of what i receives from j).
  /// Built from peers() of every rank.
  /// @throws InvalidArgument if peers() gives a source outside [0, N) or
  ///         not as many weights as sources.
  virtual Eigen::MatrixXd mixingMatrix(std::uint64_t step, int segment = 0) const;
};

}  // namespace gossamer
