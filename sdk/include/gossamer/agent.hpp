// Agent: the one object a user holds per rank.
#pragma once

#include <functional>
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
  ///         InvalidArgument for a rank outside [0, worldSize); TimeoutError
  ///         if peers do not show up within transport.timeout_seconds;
  ///         Error if the run directory cannot be created.
  Agent(const Config& config, int rank, Store& store, const Registry& registry);
  ~Agent();
  Agent(Agent&&) noexcept;
  Agent& operator=(Agent&&) noexcept;

  /// This rank in the job (its global rank; the view's rank is communicator().rank()).
  int rank() const;
  /// The job's world size (the view's size is communicator().worldSize()).
  int worldSize() const;
  const Config& config() const;
  /// The transport (with the membership service on: the current view).
  Transport& transport();
  /// The communicator over the current view; replaced by recover(), so do
  /// not keep the reference across a view change.
  Communicator& communicator();
  /// The topology over the current view; replaced by recover().
  const Topology& topology() const;

  /// Creates the optimizer named by `algorithm.name` for a model whose
  /// flat parameter vector is made of tensors of `tensorSizes` elements,
  /// wrapped by the compressor named by `compression.kind`, and keeps
  /// it; replaces any previous one. With the membership service on, the
  /// optimizer survives peers that die or fall silent: a step that fails
  /// with PeerFailure is undone, the survivors agree on a new view
  /// (recover()), and the step is redone over it (or skipped by a rank that
  /// is behind, see ViewChange::resumeStep). Its step-carried state (push-sum
  /// weight, momentum, overlap and async messages in flight) starts afresh
  /// in the new view; the model is kept.
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

  /// Whether the membership service is on (membership.enabled).
  bool hasMembership() const;
  /// The view in force: every rank of the job when membership is off.
  View view() const;
  /// Takes part in a view change after a PeerFailure (the optimizer's steps
  /// do this themselves; call it for collectives of your own, or use
  /// survive()): agrees with the survivors on the next view, rebuilds the
  /// communicator, topology and optimizer over it and realigns the
  /// optimizer's steps. Every survivor must call it (it blocks until they
  /// agree). Returns the change (lost ranks, seconds it took).
  /// @throws InvalidArgument without the membership service; Expelled if
  ///         the survivors removed this rank; TimeoutError if they do not
  ///         agree within membership.agreement_seconds; PeerFailure if
  ///         another peer fails during the change (call it again).
  ViewChange recover();
  /// The view changes so far, oldest first.
  const std::vector<ViewChange>& viewChanges() const;
  /// Runs `f` (collectives of the caller's own, e.g. an evaluation) until it
  /// completes: when it throws PeerFailure and the membership service is on,
  /// recovers and runs it again over the new view, so `f` must recompute
  /// its inputs each time. Without the service the PeerFailure propagates.
  /// Returns true once `f` completed; false if a view change during the call
  /// left `f` behind: this rank rejoined the job and jumped to the
  /// survivors' step (optimizer().steps()), or (lockstep algorithms) the
  /// survivors are past the step where `f` belonged and did not run theirs
  /// there (ViewChange::evaluating false), so this rank skips to their step.
  /// Then `f` was not completed, and the caller continues from that step.
  /// @throws Expelled, TimeoutError from recover(); whatever `f` throws.
  bool survive(const std::function<void()>& f);
  /// Tells view changes whether this rank, at its current step count, still
  /// has a collective of its own to run before its next step (gossamer-train:
  /// the evaluation of an epoch whose last step it completed, also while it
  /// flushes before it). It is reported like a failure inside survive()
  /// (ViewChange::evaluating), so that every member of the new view runs the
  /// collective of that step: ranks that rejoin or catch up to it, and
  /// (lockstep algorithms) ranks that had completed it already: their step
  /// in progress returns without stepping (steps() unchanged), and they run
  /// it again. Called during recover() on this thread; empty (the default):
  /// only survive() counts.
  void setCollectivePending(std::function<bool()> pending);

  /// This rank's run metrics (docs/metrics.md): subscribe() to get every
  /// record (start, step, view, stall, end, and the application's own),
  /// emit() to add records (gossamer-train's `epoch`), note() to attach a
  /// value such as the loss to the next step record; dir() is the run
  /// directory (run.dir), empty when records go to callbacks only. Step
  /// records come from the optimizer made by makeOptimizer; per-peer bytes
  /// from the `run` transport service. With run.metrics false it records
  /// nothing.
  Metrics& metrics();

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
