// Registry of named components, filled by the caller: no process-global
// state and no central switch to edit when adding an algorithm.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topology.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

/// What a transport factory gets.
struct TransportContext {
  const Config& config;
  int rank;
  Store& store;
};

/// What an optimizer factory gets. `tensorSizes` are the element counts of the
/// model's tensors in flat order.
struct OptimizerContext {
  const Config& config;
  Transport& transport;
  Communicator& communicator;
  const Topology& topology;
  const std::vector<std::size_t>& tensorSizes;
};

/// The fields every networked transport's Options has, filled from the
/// `transport:` section: rank, worldSize, protocol, host, timeoutSeconds
/// (seconds) and lingerSeconds (seconds). The rest keep their defaults.
template <typename Options>
Options networkOptionsFrom(const TransportContext& ctx) {
  Options o;
  o.rank = ctx.rank;
  o.worldSize = ctx.config.worldSize;
  o.protocol = ctx.config.transport.protocol;
  o.host = ctx.config.transport.host;
  o.timeoutSeconds = ctx.config.transport.timeoutSeconds;
  o.lingerSeconds = ctx.config.transport.lingerSeconds;
  return o;
}

/// Checks the fields networkOptionsFrom fills: world size >= 1, rank in
/// [0, world size), protocol "tcp" or "ipc", timeout > 0 s, linger >= 0 s.
/// @throws InvalidArgument naming the bad field.
template <typename Options>
void checkNetworkOptions(const Options& o) {
  GOSSAMER_ENFORCE(o.worldSize >= 1, "world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < o.worldSize,
                   "rank " << o.rank << " outside world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.protocol == "tcp" || o.protocol == "ipc",
                   "protocol must be tcp or ipc, got '" << o.protocol << "'");
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.lingerSeconds >= 0, "linger " << o.lingerSeconds);
}

using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportContext&)>;
using TopologyFactory = std::function<std::unique_ptr<Topology>(const Config&)>;
using OptimizerFactory = std::function<std::unique_ptr<DistributedOptimizer>(const OptimizerContext&)>;

/// Name -> factory maps for transports (config `transport.kind`), topologies
/// (`topology.kind`) and optimizers (`algorithm.name`).
class Registry {
 public:
  /// @throws InvalidArgument if the name is empty or already registered.
  void addTransport(const std::string& name, TransportFactory f);
  void addTopology(const std::string& name, TopologyFactory f);
  void addOptimizer(const std::string& name, OptimizerFactory f);

  /// @throws ConfigError (key transport.kind / topology.kind / algorithm.name)
  ///         listing the registered names when `name` is unknown.
  const TransportFactory& transport(const std::string& name) const;
  const TopologyFactory& topology(const std::string& name) const;
  const OptimizerFactory& optimizer(const std::string& name) const;

  std::vector<std::string> transportNames() const;
  std::vector<std::string> topologyNames() const;
  std::vector<std::string> optimizerNames() const;

 private:
  std::map<std::string, TransportFactory> transports_;
  std::map<std::string, TopologyFactory> topologies_;
  std::map<std::string, OptimizerFactory> optimizers_;
};

}  // namespace gossamer
