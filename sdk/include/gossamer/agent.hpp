// Agent: the one object a user holds per rank.
#pragma once

#include <memory>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topology.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

/// One peer of a job: its transport, communicator, topology and optimizer,
/// built from a Config and the components in a Registry. Holds no global
/// state, so several Agents may live in one process (e.g. as threads over the
/// inproc transport). Not thread-safe; move-only.
class Agent final {
 public:
  /// Connects this rank: creates the transport named by config.transport.kind
  /// (rendezvous through `store`, which must outlive construction only), the
  /// communicator and the topology named by config.topology.kind. Keys the
  /// config lacks take their registered defaults (Registry::complete); the
  /// registry must outlive the Agent.
  /// @throws ConfigError for an invalid config or unknown component name;
  ///         InvalidArgument for a rank outside [0, worldSize); TimeoutError
  ///         if peers do not show up within transport.timeout_seconds.
  Agent(const Config& config, int rank, Store& store, const Registry& registry);
  ~Agent();
  Agent(Agent&&) noexcept;
  Agent& operator=(Agent&&) noexcept;

  int rank() const;
  int worldSize() const;
  const Config& config() const;
  Transport& transport();
  Communicator& communicator();
  const Topology& topology() const;

  /// Creates the optimizer named by config.algorithm.name for a model whose
  /// flat parameter vector is made of tensors of `tensorSizes` elements,
  /// wrapped by the compressor named by config.compression.kind, and keeps
  /// it; replaces any previous one.
  /// @throws ConfigError for an unknown algorithm, InvalidArgument.
  DistributedOptimizer& makeOptimizer(const std::vector<std::size_t>& tensorSizes);
  /// The optimizer made by makeOptimizer. @throws InvalidArgument if none.
  DistributedOptimizer& optimizer();

  /// Averages `data` (L float32 elements, same L on all ranks) over all ranks
  /// with the configured allreduce (`collectives.allreduce`; with "auto" the
  /// algorithm is chosen by size, e.g. recursive doubling for small vectors).
  /// Convenience for communicator().allreduce(data, ReduceOp::kAverage).
  /// @throws PeerFailure, TimeoutError as the allreduce does.
  void average(std::span<float> data);

  /// Delivers queued messages (within transport.linger_seconds), says goodbye
  /// to the peers and releases the transport. Idempotent; the destructor calls it.
  void close();
  /// Closes without delivering what is still queued (error paths).
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossamer
