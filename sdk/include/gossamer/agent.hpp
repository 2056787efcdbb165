// Agent: the one object a user holds per rank.
#pragma once

#include <memory>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/metrics.hpp"
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
  /// Connects this rank: opens its run metrics (run.dir; "auto": rank 0
  /// makes a new results/runs/<UTC time>-<pid> and shares it through
  /// `store`), creates the transport named by `transport.kind`
  /// (rendezvous through `store`, which must outlive construction only), the
  /// communicator and the topology named by `topology.kind`. Keys the
  /// config lacks take their registered defaults (Registry::complete); the
  /// registry must outlive the Agent.
  /// @throws ConfigError for an invalid config or unknown component name;
  ///         InvalidArgument for a rank outside [0, worldSize) (with
  ///         membership.max_world_size above world_size: [0, max_world_size),
  ///         a rank that joins a running job), or a factory that builds
  ///         nothing; TimeoutError
  ///         if peers do not show up within transport.timeout_seconds;
  ///         Error if the run directory cannot be created.
  Agent(const Config& config, int rank, Store& store, const Registry& registry);
  ~Agent();
  /// A moved-from Agent may only be destroyed or assigned to.
  Agent(Agent&&) noexcept;
  /// Closes this Agent's own job first (as the destructor does, errors
  /// swallowed), then takes `other`'s.
  Agent& operator=(Agent&& other) noexcept;

  /// This rank in the job (its global rank; the view's rank is communicator().rank()).
  int rank() const;
  /// The job's world size (the view's size is communicator().worldSize()).
  int worldSize() const;
  /// The config it was built with, completed with the registered defaults.
  const Config& config() const;
  /// The transport (with the membership service on: the current view; its
  /// rank() and worldSize() are the view's).
  Transport& transport();
  /// The communicator over the current view; replaced at a view change
  /// (Session::recover), so do not keep the reference across one.
  Communicator& communicator();
  /// The topology over the current view; replaced at a view change.
  const Topology& topology() const;

  /// Creates the optimizer named by `algorithm.name` for a model whose
  /// flat parameter vector is made of tensors of `tensorSizes` elements,
  /// wrapped by the compressor named by `compression.kind`, and keeps it;
  /// replaces any previous one. A peer that fails makes its steps throw
  /// PeerFailure; for training that goes on over the survivors, make it
  /// with a Session (Session::makeOptimizer, Session::train).
  /// A refused size keeps the previous optimizer; any other error (the
  /// factory's or compressor's) leaves none.
  /// @throws InvalidArgument for no tensors, a tensor of 0 elements, sizes
  ///         adding up to more than PTRDIFF_MAX / 4 elements, or a factory or
  ///         compressor that builds nothing; what the optimizer's factory
  ///         throws (ConfigError, InvalidArgument for settings it refuses).
  DistributedOptimizer& makeOptimizer(const std::vector<std::size_t>& tensorSizes);
  /// The optimizer made by makeOptimizer (or by the Session that holds
  /// this Agent). @throws InvalidArgument if none.
  DistributedOptimizer& optimizer();

  /// Averages `data` (L float32 elements, same L on all ranks) over all ranks
  /// with the configured allreduce (`collectives.allreduce`; with "auto" the
  /// algorithm is chosen by size, e.g. recursive doubling for small vectors).
  /// Convenience for communicator().allreduce(data, ReduceOp::kAverage).
  /// @throws PeerFailure, TimeoutError as the allreduce does.
  void average(std::span<float> data);

  /// Whether a transport service offered a membership handle (the
  /// membership service is on: membership.enabled).
  bool hasMembership() const;
  /// The view in force: every rank of the job when membership is off.
  View view() const;

  /// This rank's run metrics (docs/metrics.md): subscribe() to get every
  /// record (start, step, view, stall, end, and the application's own),
  /// emit() to add records (gossamer-train's `epoch`), note() to attach a
  /// value such as the loss to the next step record; dir() is the run
  /// directory (run.dir), empty when records go to callbacks only. Step
  /// records come from the optimizer made by makeOptimizer; per-peer bytes
  /// from the `run` transport service. With run.metrics false it records
  /// nothing.
  Metrics& metrics();

  /// Writes the metrics' end record, delivers queued messages (within
  /// transport.linger_seconds), says goodbye to the peers and releases the
  /// transport. Idempotent; the destructor calls it. The transport closes
  /// even if the end record throws (a metrics subscriber's error), which is
  /// rethrown after.
  void close();
  /// Closes without delivering what is still queued (error paths).
  void abort();

 private:
  friend class Session;  // rebuilds the communicator, topology and optimizer over a new view
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossamer
