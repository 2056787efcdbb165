// Registry of named components, filled by the caller: no process-global
// state and no central switch to edit when adding an algorithm. Each
// component registers its factory together with its YAML keys (a KeySet),
// and the Registry's ConfigSchema is what configs are loaded and checked
// against.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/metrics.hpp"
#include "gossamer/optimizer.hpp"
#include "gossamer/schema.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topology.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

class Registry;
class Membership;

/// What the transport services of one Agent offer it besides the transport
/// they return, filled while they wrap it and read by the Agent and its
/// Session: the handle of a membership service. The Agent finds the
/// capability here, whatever the order in which services were registered or
/// wrap each other.
class ServiceCapabilities {
 public:
  /// Offers the membership handle; `membership` must live as long as the
  /// transport the service returned.
  /// @throws InvalidArgument if another service offered one already.
  void offerMembership(Membership& membership);
  /// The membership handle, or null when no service offered one.
  Membership* membership() const noexcept { return membership_; }

 private:
  Membership* membership_ = nullptr;
};

/// What a transport factory gets. `registry` is the one the factory was
/// found in (Agent sets it), so that a transport made of other transports
/// (composite) can build them by name; null where the caller has none.
struct TransportContext {
  const Config& config;
  int rank;
  Store& store;
  const Registry* registry = nullptr;
  /// The Agent's run metrics (records, per-peer counters), or null outside an Agent.
  Metrics* metrics = nullptr;
  /// Where a transport service offers capabilities (a membership handle) to
  /// the Agent; null outside an Agent.
  ServiceCapabilities* capabilities = nullptr;
  /// The most ranks the job may hold (membership.max_world_size, at least
  /// world_size): a transport that can take joins sizes itself for this
  /// many global ranks (Transport::capacity). 0: world_size.
  int maxWorldSize = 0;
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

/// The address a transport binds to: `transport.host`, or for "auto" the
/// store's localAddress() (the interface that reaches a tcp rendezvous),
/// "127.0.0.1" when the store has none.
/// @throws Error if the rendezvous host cannot be routed to.
std::string transportHost(const TransportContext& ctx);

/// The fields every networked transport's Options has, filled from the
/// `transport:` section: rank, worldSize, protocol, host (transportHost),
/// timeoutSeconds (seconds) and lingerSeconds (seconds). The rest keep their
/// defaults.
template <typename Options>
Options networkOptionsFrom(const TransportContext& ctx) {
  Options o;
  o.rank = ctx.rank;
  o.worldSize = ctx.config.worldSize();
  o.protocol = ctx.config.get<std::string>("transport.protocol");
  o.host = transportHost(ctx);
  o.timeoutSeconds = ctx.config.get<double>("transport.timeout_seconds");
  o.lingerSeconds = ctx.config.get<double>("transport.linger_seconds");
  return o;
}

/// Checks the fields networkOptionsFrom fills: world size >= 1, rank in
/// [0, world size) (or [0, maxWorldSize) for Options that have that field:
/// a rank that joins a running job), protocol "tcp" or "ipc", timeout > 0 s, linger >= 0 s.
/// @throws InvalidArgument naming the bad field.
template <typename Options>
void checkNetworkOptions(const Options& o) {
  GOSSAMER_ENFORCE(o.worldSize >= 1, "world size " << o.worldSize);
  int most = o.worldSize;
  if constexpr (requires { o.maxWorldSize; }) most = std::max(most, o.maxWorldSize);
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < most, "rank " << o.rank << " outside world size " << most);
  GOSSAMER_ENFORCE(o.protocol == "tcp" || o.protocol == "ipc",
                   "protocol must be tcp or ipc, got '" << o.protocol << "'");
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.lingerSeconds >= 0, "linger " << o.lingerSeconds);
}

using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportContext&)>;

/// What a transport can do, declared with it (Registry::addTransport). The
/// load-time rules read it, so that a config asking a transport for what it
/// cannot do is a ConfigError naming the key before any rank starts.
struct TransportTraits {
  /// Links ranks that run in different processes (false: inproc, whose ranks
  /// are threads of one process). A program that runs its ranks as processes
  /// and the composite transport's inner transports need it.
  bool spansProcesses = true;
  /// Under security.enabled, authenticates and encrypts every link it makes
  /// (zmq's CURVE). A transport without it that spans processes and is not
  /// built of inner transports makes security.enabled a ConfigError.
  bool secures = false;
  /// Keys that name the inner transports this one is built of (composite:
  /// "transport.local", "transport.remote"): each must name a registered
  /// transport with no inner transports of its own, and security.enabled
  /// applies to each.
  std::vector<std::string> innerKeys;
};

/// The transports of a Registry with their traits, shared with the rules
/// that read them (Registry::transportCatalog), so that a rule sees the
/// transports registered after it too.
class TransportCatalog {
 public:
  /// Null when `name` is not registered.
  const TransportTraits* find(const std::string& name) const;
  /// The registered names, in registration order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  /// The registered names whose traits satisfy `pred`, in registration
  /// order, joined with `separator`: the "use ..." of a rule's message.
  std::string namesWhere(const std::function<bool(const TransportTraits&)>& pred,
                         const std::string& separator = ", ") const;
  /// The transports `config` runs, each with the key naming it:
  /// {"transport.kind", kind}, then {key, name} for each of kind's innerKeys
  /// (names not registered included as they are).
  std::vector<std::pair<std::string, std::string>> inUse(const Config& config) const;

 private:
  friend class Registry;
  std::map<std::string, TransportTraits> traits_;
  std::vector<std::string> names_;
};
using TopologyFactory = std::function<std::unique_ptr<Topology>(const Config&)>;
using OptimizerFactory = std::function<std::unique_ptr<DistributedOptimizer>(const OptimizerContext&)>;
/// A compressor wraps the optimizer the config names: it gets that optimizer
/// (built already) and returns the one to use, e.g. one that compresses what
/// the inner optimizer would exchange.
using CompressorFactory = std::function<std::unique_ptr<DistributedOptimizer>(
    const OptimizerContext&, std::unique_ptr<DistributedOptimizer> inner)>;
/// A service that sits on the transport (fault injection, stall reports,
/// membership): it gets the transport built so far and returns the one the
/// Agent uses, the same one when its section of the config leaves it off. A
/// service with a capability of its own offers it through
/// TransportContext::capabilities.
using TransportWrapper =
    std::function<std::unique_ptr<Transport>(const TransportContext&, std::unique_ptr<Transport> inner)>;

/// Name -> factory maps for transports (config `transport.kind`), topologies
/// (`topology.kind`), optimizers (`algorithm.name`) and compressors
/// (`compression.kind`), and the YAML schema they declare.
///
/// A new component is its own files plus one registration, e.g.
///
///     registry.addOptimizer("my_sgd", makeMySgd,
///                           KeySet().real("step_scale", 1.0, {0, false, 10, true}, "scale of each step"));
///
/// after which `algorithm: {name: my_sgd, step_scale: 2}` loads, is checked
/// with file:line errors, and ``algorithm.step_scale``
/// reads it.
class Registry {
 public:
  /// A registry with the SDK's own keys (world_size, seed, the shared
  /// transport keys, the four selectors, `collectives:`) and the compressor
  /// "none", which leaves the optimizer as it is.
  Registry();

  /// Registers a component and its keys (under its section: transport,
  /// topology, algorithm, compression). A transport declares what it can do
  /// in `traits`; the defaults are a transport that links processes
  /// (spansProcesses) and does not secure its links, so security.enabled
  /// over it is a ConfigError at load: a transport that authenticates and
  /// encrypts (through kit/security.hpp's keys) says secures = true, and one
  /// whose ranks are threads of one process says spansProcesses = false.
  /// The factory must return a component (a null one is an InvalidArgument
  /// when an Agent builds it). A refused call changes nothing.
  /// @throws InvalidArgument if the name is empty or already registered, the
  ///         factory is null, or a key clashes with one declared already.
  void addTransport(const std::string& name, TransportFactory f, const KeySet& keys = {},
                    TransportTraits traits = {});
  void addTopology(const std::string& name, TopologyFactory f, const KeySet& keys = {});
  void addOptimizer(const std::string& name, OptimizerFactory f, const KeySet& keys = {});
  void addCompressor(const std::string& name, CompressorFactory f, const KeySet& keys = {});

  /// A service with its own section: `wrap` is applied to every Agent's
  /// transport, in registration order, after the transport is built.
  /// @throws InvalidArgument on a key that clashes with one declared already, or a null `wrap`.
  void addTransportService(const std::string& section, const std::string& doc, const KeySet& keys,
                           TransportWrapper wrap);
  /// The services' wrappers, in registration order.
  const std::vector<TransportWrapper>& transportServices() const { return services_; }

  /// An application's (or a shared component's) own section, e.g.
  /// `training:`; calling it again adds keys to the same section. A
  /// refused call changes nothing.
  /// @throws InvalidArgument on a clashing key.
  void addSection(const std::string& section, const std::string& doc, const KeySet& keys);

  /// The component a config gets when its YAML does not name one, for
  /// section "transport", "topology", "algorithm" or "compression".
  /// @throws InvalidArgument if `name` is not registered there.
  void setDefault(const std::string& section, const std::string& name);

  /// This program's default for a declared key, e.g.
  /// setKeyDefault("membership", "rejoin", false) (ConfigSchema::setKeyDefault).
  /// @throws InvalidArgument if the key is not declared or `value` has another type.
  void setKeyDefault(const std::string& section, const std::string& key, const ConfigValue& value) {
    schema_.setKeyDefault(section, key, value);
  }

  /// @throws ConfigError (key transport.kind / topology.kind / algorithm.name
  ///         / compression.kind) listing the registered names when `name` is unknown.
  const TransportFactory& transport(const std::string& name) const;
  const TopologyFactory& topology(const std::string& name) const;
  const OptimizerFactory& optimizer(const std::string& name) const;
  const CompressorFactory& compressor(const std::string& name) const;

  /// What transport `name` can do (as registered).
  /// @throws ConfigError (key transport.kind) as transport() when `name` is unknown.
  const TransportTraits& transportTraits(const std::string& name) const;
  /// The transports with their traits, for rules that read them; it grows
  /// with each addTransport of this Registry (a copy of the Registry shares it).
  std::shared_ptr<const TransportCatalog> transportCatalog() const noexcept { return catalog_; }

  std::vector<std::string> transportNames() const;
  std::vector<std::string> topologyNames() const;
  std::vector<std::string> optimizerNames() const;
  std::vector<std::string> compressorNames() const;

  /// Every section and key registered so far.
  const ConfigSchema& schema() const noexcept { return schema_; }

  /// `config` with every missing key at its default and every unset
  /// selector at its default component: what an Agent runs with.
  Config complete(const Config& config) const { return schema_.complete(config); }

  /// Reads a YAML file against schema(), then `overrides` ("key=value", see
  /// loadConfig). @throws ConfigError
  Config load(const std::string& path, const std::vector<std::string>& overrides = {}) const {
    return loadConfig(path, schema_, overrides);
  }
  /// Reads YAML text against schema(); `name` names it in errors. @throws ConfigError
  Config parse(const std::string& yamlText, const std::string& name = "<string>",
               const std::vector<std::string>& overrides = {}) const {
    return parseConfig(yamlText, schema_, name, overrides);
  }

 private:
  ConfigSchema schema_;
  std::map<std::string, TransportFactory> transports_;
  std::shared_ptr<TransportCatalog> catalog_ = std::make_shared<TransportCatalog>();
  std::vector<TransportWrapper> services_;
  std::map<std::string, TopologyFactory> topologies_;
  std::map<std::string, OptimizerFactory> optimizers_;
  std::map<std::string, CompressorFactory> compressors_;
};

namespace detail {
/// Declares the SDK's own keys and selectors in `schema` (sdk/src/core_keys.cpp).
void addCoreKeys(ConfigSchema& schema);
}  // namespace detail

}  // namespace gossamer
