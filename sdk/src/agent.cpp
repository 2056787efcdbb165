#include "gossamer/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/network.hpp"
#include "metered_optimizer.hpp"
#include "resilient_optimizer.hpp"

namespace gossamer {

namespace {
template <typename F>
const F& lookup(const std::map<std::string, F>& m, const std::string& name, const char* key) {
  auto it = m.find(name);
  if (it == m.end()) {
    std::string known;
    for (const auto& [k, v] : m) known += (known.empty() ? "" : ", ") + k;
    throw ConfigError("", 0, key, "'" + name + "' is not registered (known: " + known + ")");
  }
  return it->second;
}
template <typename F>
void insert(std::map<std::string, F>& m, const std::string& name, F f) {
  GOSSAMER_ENFORCE(!name.empty(), "component name is empty");
  GOSSAMER_ENFORCE(f, "null factory for '" << name << "'");
  GOSSAMER_ENFORCE(m.emplace(name, std::move(f)).second, "'" << name << "' is already registered");
}
template <typename F>
std::vector<std::string> names(const std::map<std::string, F>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

namespace {
// run.dir: "auto" is a new directory results/runs/<UTC time>-<pid>[-n] that
// rank 0 creates and publishes through the rendezvous; every other rank (a
// process that rejoins later too) reads it there.
std::string resolveRunDir(const Config& c, int rank, Store& store) {
  const std::string dir = c.getOr<std::string>("run.dir", "");
  if (dir != "auto") return dir;
  const std::string key = "gossamer.run.dir";
  if (rank != 0) return store.get(key, c.transport.timeoutSeconds);
  if (auto known = store.tryGet(key)) return *known;  // rank 0 restarted into a running job
  char stamp[32] = "run";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  const std::string base = "results/runs/" + std::string(stamp) + "-" + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::create_directories("results/runs", ec);
  if (ec) throw Error("run.dir auto: cannot create results/runs: " + ec.message());
  std::string chosen;
  for (int n = 1; chosen.empty(); ++n) {  // several jobs of one process in one second
    const std::string candidate = n == 1 ? base : base + "-" + std::to_string(n);
    if (std::filesystem::create_directory(candidate, ec)) chosen = candidate;
    if (ec) throw Error("run.dir auto: cannot create " + candidate + ": " + ec.message());
    GOSSAMER_CHECK(n < 100000, "run.dir auto: no free directory name below results/runs");
  }
  chosen = std::filesystem::absolute(chosen).lexically_normal().string();
  store.set(key, chosen);
  return chosen;
}
}  // namespace

std::string transportHost(const TransportContext& ctx) {
  const std::string& host = ctx.config.transport.host;
  if (host != "auto") return host;
  return ctx.store.localAddress().value_or("127.0.0.1");
}

Registry::Registry() {
  detail::addCoreKeys(schema_);
  // "none" leaves the optimizer as it is.
  addCompressor("none",
                [](const OptimizerContext&, std::unique_ptr<DistributedOptimizer> inner) { return inner; });
  setDefault("compression", "none");
}

void Registry::addTransport(const std::string& n, TransportFactory f, const KeySet& keys) {
  insert(transports_, n, std::move(f));
  schema_.addChoice("transport", n, keys);
}
void Registry::addTopology(const std::string& n, TopologyFactory f, const KeySet& keys) {
  insert(topologies_, n, std::move(f));
  schema_.addChoice("topology", n, keys);
}
void Registry::addOptimizer(const std::string& n, OptimizerFactory f, const KeySet& keys) {
  insert(optimizers_, n, std::move(f));
  schema_.addChoice("algorithm", n, keys);
}
void Registry::addCompressor(const std::string& n, CompressorFactory f, const KeySet& keys) {
  insert(compressors_, n, std::move(f));
  schema_.addChoice("compression", n, keys);
}
void Registry::addSection(const std::string& section, const std::string& doc, const KeySet& keys) {
  schema_.addSection(section, doc);
  schema_.addKeys(section, keys);
}
void Registry::addTransportService(const std::string& section, const std::string& doc, const KeySet& keys,
                                   TransportWrapper wrap) {
  GOSSAMER_ENFORCE(wrap, "null transport wrapper for section '" << section << "'");
  addSection(section, doc, keys);
  services_.push_back(std::move(wrap));
}
void Registry::setDefault(const std::string& section, const std::string& name) {
  schema_.setDefaultChoice(section, name);
}
const TransportFactory& Registry::transport(const std::string& n) const {
  return lookup(transports_, n, "transport.kind");
}
const TopologyFactory& Registry::topology(const std::string& n) const {
  return lookup(topologies_, n, "topology.kind");
}
const OptimizerFactory& Registry::optimizer(const std::string& n) const {
  return lookup(optimizers_, n, "algorithm.name");
}
const CompressorFactory& Registry::compressor(const std::string& n) const {
  return lookup(compressors_, n, "compression.kind");
}
std::vector<std::string> Registry::transportNames() const { return names(transports_); }
std::vector<std::string> Registry::topologyNames() const { return names(topologies_); }
std::vector<std::string> Registry::optimizerNames() const { return names(optimizers_); }
std::vector<std::string> Registry::compressorNames() const { return names(compressors_); }

struct Agent::Impl {
  Config config;
  const Registry* registry;
  int rank;
  std::unique_ptr<Metrics> metrics;  // before the transport: its services report into it
  std::uint64_t viewNumber = 0;      // the view in force, for step records
  std::unique_ptr<Transport> transport;
  Membership* membership = nullptr;  // the transport, when the membership service is on
  Config viewConfig;                 // config with the view's world size
  CollectiveOptions collectiveOptions;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<Topology> topology;
  std::vector<std::size_t> tensorSizes;
  std::unique_ptr<DistributedOptimizer> optimizer;
  detail::ResilientOptimizer* resilient = nullptr;  // optimizer, when it is one
  std::vector<ViewChange> changes;
  bool evaluating = false;                  // inside survive(): a collective of the caller's own
  std::function<bool()> collectivePending;  // setCollectivePending
  // View changes that moved this rank past the point where a collective of
  // its own in progress (survive()) belonged: it jumped to the survivors'
  // step, or they are past the collective, or it went back to one.
  std::uint64_t moves = 0;
  // A view change sent this rank back to the collective it had completed
  // after this many steps (the others were still in it): until it runs it
  // again, it reports it as pending.
  std::optional<std::uint64_t> owedCollective;

  // The configured optimizer (wrapped by its compressor) over the current view.
  std::unique_ptr<DistributedOptimizer> makeInner() {
    const Config& c = viewConfig;
    const OptimizerContext ctx{c, *transport, *communicator, *topology, tensorSizes};
    auto inner = registry->optimizer(c.algorithm.name)(ctx);
    auto out = registry->compressor(c.compression.kind)(ctx, std::move(inner));
    GOSSAMER_CHECK(out != nullptr, "compressor '" << c.compression.kind << "' returned no optimizer");
    return out;
  }

  // Communicator and topology over the transport's current view.
  void buildOverView() {
    viewConfig = config;
    viewConfig.worldSize = transport->worldSize();
    // network.islands and algorithm.groups name the job's ranks; over a
    // view, the view's (the bandwidth roulette and hierarchical groups read them).
    if (membership != nullptr) {
      const auto members = membership->view().members;
      for (const char* key : {"network.islands", "algorithm.groups"}) {
        const auto partition = config.getOr<std::vector<std::vector<int>>>(key, {});
        if (!partition.empty()) viewConfig.set(key, islandsInView(partition, members));
      }
    }
    topology = registry->topology(viewConfig.topology.kind)(viewConfig);
    communicator = std::make_unique<Communicator>(*transport, config.transport.timeoutSeconds);
    communicator->setOptions(collectiveOptions);
  }
};

Agent::Agent(const Config& config, int rank, Store& store, const Registry& registry)
    : impl_(std::make_unique<Impl>()) {
  // Keys the caller left out take their defaults; then everything is checked
  // against what is registered (components registered by the application included).
  impl_->config = registry.complete(config);
  validateConfig(impl_->config, registry.schema());
  GOSSAMER_ENFORCE(rank >= 0 && rank < config.worldSize,
                   "rank " << rank << " outside world size " << config.worldSize);
  impl_->registry = &registry;
  impl_->rank = rank;
  // Look every name up before connecting, so a bad config fails before any peer waits.
  const Config& c = impl_->config;
  const auto& makeTopology = registry.topology(c.topology.kind);
  registry.optimizer(c.algorithm.name);
  registry.compressor(c.compression.kind);
  const auto& makeTransport = registry.transport(c.transport.kind);
  impl_->viewConfig = c;
  impl_->topology = makeTopology(impl_->config);
  MetricsOptions mo;
  mo.enabled = c.getOr("run.metrics", true);
  mo.every = static_cast<std::uint64_t>(c.getOr("run.metrics_every", 1));
  if (mo.enabled) mo.dir = resolveRunDir(c, rank, store);
  impl_->metrics = std::make_unique<Metrics>(rank, c.worldSize, std::move(mo));
  const TransportContext ctx{impl_->config, rank, store, &registry, impl_->metrics.get()};
  impl_->transport = makeTransport(ctx);
  for (const auto& wrap : registry.transportServices()) {
    impl_->transport = wrap(ctx, std::move(impl_->transport));
    GOSSAMER_CHECK(impl_->transport != nullptr, "a transport service returned no transport");
  }
  impl_->membership = dynamic_cast<Membership*>(impl_->transport.get());
  impl_->communicator = std::make_unique<Communicator>(*impl_->transport, c.transport.timeoutSeconds);
  const auto& cc = c.collectives;
  CollectiveOptions co;
  co.algorithm = parseAllreduceAlgorithm(cc.allreduce);
  co.chunkBytes = static_cast<std::size_t>(cc.chunkBytes);
  co.smallMessageBytes = static_cast<std::size_t>(cc.smallMessageBytes);
  co.groupSize = cc.groupSize;
  co.torusRows = cc.torusRows;
  co.useCostModel = cc.costModel || cc.calibrate;  // a measured model is there to be used
  co.model.alphaSeconds = cc.alphaSeconds;
  co.model.betaSecondsPerByte = cc.betaSecondsPerByte;
  co.model.gammaSecondsPerByte = cc.gammaSecondsPerByte;
  co.model.contention = cc.contention;
  impl_->communicator->setOptions(co);
  // Every rank measures together and keeps rank 0's model (same choices everywhere).
  if (cc.calibrate) impl_->communicator->calibrate();
  impl_->collectiveOptions = impl_->communicator->options();
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  impl_->metrics->emit("start", 0,
                       {{"world_size", std::int64_t{c.worldSize}},
                        {"algorithm", c.algorithm.name},
                        {"topology", c.topology.kind},
                        {"transport", c.transport.kind},
                        {"host", std::string(host)},
                        {"pid", std::int64_t{::getpid()}},
                        {"metrics_every", static_cast<std::int64_t>(impl_->metrics->every())}});
}

Agent::~Agent() {
  try {
    close();
  } catch (...) {
    // Never throw from a destructor.
  }
}
Agent::Agent(Agent&&) noexcept = default;
Agent& Agent::operator=(Agent&&) noexcept = default;

int Agent::rank() const { return impl_->rank; }
int Agent::worldSize() const { return impl_->config.worldSize; }
const Config& Agent::config() const { return impl_->config; }
Transport& Agent::transport() { return *impl_->transport; }
Communicator& Agent::communicator() { return *impl_->communicator; }
const Topology& Agent::topology() const { return *impl_->topology; }

DistributedOptimizer& Agent::makeOptimizer(const std::vector<std::size_t>& tensorSizes) {
  Impl& m = *impl_;
  m.resilient = nullptr;
  m.optimizer.reset();
  m.tensorSizes = tensorSizes;
  std::unique_ptr<DistributedOptimizer> inner;
  if (m.membership == nullptr) {
    m.optimizer = m.makeInner();
  } else {
    // Over a view that is revoked already (this process joins a running job,
    // or a peer failed meanwhile) the optimizer is built by the first step's
    // recovery: building it may take a collective (hierarchical groups split).
    try {
      if (!m.membership->revoked()) inner = m.makeInner();
    } catch (const PeerFailure&) {
      if (!m.membership->revoked()) throw;
      inner.reset();
    }
    auto r = std::make_unique<detail::ResilientOptimizer>(std::move(inner), *m.membership,
                                                          [this] { return recover(); });
    m.resilient = r.get();
    m.optimizer = std::move(r);
  }
  if (m.metrics->enabled())
    m.optimizer = std::make_unique<detail::MeteredOptimizer>(std::move(m.optimizer), *m.metrics,
                                                             [impl = &m] { return impl->viewNumber; });
  return *m.optimizer;
}

ViewChange Agent::recover() {
  Impl& m = *impl_;
  GOSSAMER_ENFORCE(m.membership != nullptr,
                   "recover() needs the membership service (membership.enabled: true)");
  const std::uint64_t completed = m.resilient ? m.resilient->steps() : 0;
  const bool owed = m.owedCollective && *m.owedCollective == completed;
  const bool pending = m.evaluating || owed || (m.collectivePending && m.collectivePending());
  ViewChange change = m.membership->recover(m.resilient ? m.resilient->reportedSteps() : 0, pending);
  // Everything built over the old view goes first (it refers to the old communicator).
  if (m.resilient) m.resilient->dropInner();
  m.communicator.reset();
  m.topology.reset();
  m.buildOverView();
  if (m.resilient) {
    m.resilient->setInner(m.makeInner());
    m.changes.push_back(change);
    if (std::find(change.joined.begin(), change.joined.end(), m.rank) != change.joined.end()) {
      // Rejoined: jumps to the survivors' step (also when the model
      // transfer in afterViewChange fails).
      ++m.moves;
      m.owedCollective.reset();
    }
    const bool jumped = m.resilient->afterViewChange(change, *m.communicator, *m.transport);
    if (!jumped && m.resilient->lockstep()) {
      // Every member runs the collective of the resume step if a survivor
      // at that step still had it to run, or was inside it
      // (change.evaluating), and none does otherwise.
      if (pending && completed < change.resumeStep) {
        // The others are past it: this rank drops it and skips to their step.
        ++m.moves;
        m.owedCollective.reset();
      } else if (!pending && change.evaluating && completed == change.resumeStep) {
        // This rank had completed that collective, another had not: the
        // step in progress returns without stepping, and this rank runs
        // the collective again with the others.
        m.resilient->returnWithoutStepping();
        ++m.moves;
        m.owedCollective = completed;
      }
    }
  } else {
    m.changes.push_back(change);
  }
  m.viewNumber = change.view.number;
  m.metrics->emit("view", m.resilient ? m.resilient->steps() : completed,
                  {{"view", static_cast<std::int64_t>(change.view.number)},
                   {"members", change.view.members},
                   {"lost", change.lost},
                   {"joined", change.joined},
                   {"agreement_s", change.seconds},
                   {"resume_step", static_cast<std::int64_t>(change.resumeStep)},
                   {"evaluating", change.evaluating},
                   {"completed_step", static_cast<std::int64_t>(completed)},
                   {"pending", pending}});
  if (logEnabled(LogLevel::kWarning) && !change.lost.empty()) {
    std::string lost;
    for (int p : change.lost) lost += (lost.empty() ? "" : ", ") + std::to_string(p);
    log(LogLevel::kWarning, "rank " + std::to_string(m.rank) + ": lost rank(s) " + lost + " at step " +
                                std::to_string(completed) + "; view " + std::to_string(change.view.number) +
                                " has " + std::to_string(change.view.members.size()) + " ranks (agreed in " +
                                std::to_string(change.seconds) + " s)");
  }
  return change;
}

bool Agent::hasMembership() const { return impl_->membership != nullptr; }

void Agent::setCollectivePending(std::function<bool()> pending) {
  impl_->collectivePending = std::move(pending);
}

View Agent::view() const {
  if (impl_->membership != nullptr) return impl_->membership->view();
  View v;
  for (int r = 0; r < impl_->config.worldSize; ++r) v.members.push_back(r);
  return v;
}

const std::vector<ViewChange>& Agent::viewChanges() const { return impl_->changes; }

bool Agent::survive(const std::function<void()>& f) {
  struct Flag {
    bool& b;
    explicit Flag(bool& x) : b(x) { b = true; }
    ~Flag() { b = false; }
  } evaluating(impl_->evaluating);
  impl_->owedCollective.reset();  // this is the collective it owed, if any
  const std::uint64_t moves = impl_->moves;
  bool failed = false;  // a peer failed: recover before running f again
  for (;;) {
    try {
      if (impl_->membership != nullptr && (failed || impl_->membership->revoked())) {
        // A PeerFailure from the recovery itself (a peer failed during the
        // change, or during the model transfer of a rank that rejoined)
        // leaves `failed` set: the next view is agreed on, then f runs.
        failed = true;
        recover();
        failed = false;
      }
      // A rank that rejoined jumped to the survivors' step, or the
      // survivors are past this collective: it belongs to a step they
      // will not run it at.
      if (impl_->moves != moves) return false;
      f();
      return true;
    } catch (const Expelled&) {
      throw;
    } catch (const PeerFailure&) {
      if (impl_->membership == nullptr) throw;
      failed = true;
    }
  }
}

DistributedOptimizer& Agent::optimizer() {
  GOSSAMER_ENFORCE(impl_->optimizer, "no optimizer yet: call makeOptimizer first");
  return *impl_->optimizer;
}

void Agent::average(std::span<float> data) { impl_->communicator->allreduce(data, ReduceOp::kAverage); }

Metrics& Agent::metrics() { return *impl_->metrics; }

void Agent::close() {
  if (impl_ && impl_->metrics) impl_->metrics->finish(impl_->optimizer ? impl_->optimizer->steps() : 0);
  if (impl_ && impl_->transport) impl_->transport->close();
}

void Agent::abort() {
  if (impl_ && impl_->metrics) impl_->metrics->finish(impl_->optimizer ? impl_->optimizer->steps() : 0);
  if (impl_ && impl_->transport) impl_->transport->abort();
}

}  // namespace gossamer
