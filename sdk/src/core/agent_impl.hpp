// What an Agent holds (agent.cpp), shared with the Session (elastic/), which
// rebuilds the communicator, topology and optimizer over each new view.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/agent.hpp"

namespace gossamer {

struct Agent::Impl {
  Config config;
  const Registry* registry = nullptr;
  int rank = 0;
  std::unique_ptr<Metrics> metrics;  // before the transport: its services report into it
  std::uint64_t viewNumber = 0;      // the view in force, for step records
  std::unique_ptr<Transport> transport;
  ServiceCapabilities capabilities;  // what the transport services offered (the membership handle)
  Config viewConfig;                 // config with the view's world size and its islands
  CollectiveOptions collectiveOptions;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<Topology> topology;
  std::unique_ptr<DistributedOptimizer> optimizer;  // makeOptimizer's, or the Session's

  /// The membership handle, null when the service is off.
  Membership* membership() const { return capabilities.membership(); }
  /// The configured optimizer, wrapped by its compressor, over the current
  /// view (communicator and topology), for a model of `tensorSizes`.
  std::unique_ptr<DistributedOptimizer> createOptimizer(const std::vector<std::size_t>& tensorSizes) const;
  /// `inner` with step records in the metrics (when run.metrics is on).
  std::unique_ptr<DistributedOptimizer> metered(std::unique_ptr<DistributedOptimizer> inner);
  /// Agent::close (abort false) or abort: the metrics' end record, then the
  /// transport's close or abort, which runs even if the record throws (a
  /// subscriber's error); that error is rethrown after it.
  void endRun(bool abort);
  /// Communicator and topology over the transport's current view (the
  /// previous ones, and anything built over them, must be gone).
  void rebuildOverView();
  /// The topology over a membership view, from viewConfig, whose keys that
  /// name ranks inView renumbered (`renumbered`, dotted). Those may no longer
  /// hold over the survivors (a table row whose every weight went to lost
  /// ranks, edges that no longer connect them): then the key a rule names
  /// takes its default (in viewConfig, which the optimizer reads too), or,
  /// when the topology refuses its keys, the topology section's renumbered
  /// keys do, one at a time; failing all that, topology.kind takes its
  /// default. A warning names what was reset and why. Every member decides
  /// the same from the same view, and the job goes on.
  /// @throws InvalidArgument if even the default topology cannot be built.
  std::unique_ptr<Topology> topologyOverView(const std::vector<std::string>& renumbered);
};

}  // namespace gossamer
