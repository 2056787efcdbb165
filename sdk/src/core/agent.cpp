#include "gossamer/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>

#include "elastic/resilient_optimizer.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/log.hpp"
#include "metrics/metered_optimizer.hpp"

namespace gossamer {

namespace {
// run.dir: "auto" is a new directory results/runs/<UTC time>-<pid>[-n] that
// rank 0 creates and publishes through the rendezvous; every other rank (a
// process that rejoins later too) reads it there.
std::string resolveRunDir(const Config& c, int rank, Store& store) {
  const std::string dir = c.get<std::string>("run.dir");
  if (dir != "auto") return dir;
  const std::string key = "gossamer.run.dir";
  if (rank != 0) return store.get(key, c.get<double>("transport.timeout_seconds"));
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
    auto inner = registry->optimizer(c.get<std::string>("algorithm.name"))(ctx);
    auto out = registry->compressor(c.get<std::string>("compression.kind"))(ctx, std::move(inner));
    GOSSAMER_CHECK(out != nullptr,
                   "compressor '" << c.get<std::string>("compression.kind") << "' returned no optimizer");
    return out;
  }

  // Communicator and topology over the transport's current view.
  void buildOverView() {
    viewConfig = config;
    viewConfig.set("world_size", transport->worldSize());
    // network.islands and algorithm.groups name the job's ranks; over a
    // view, the view's (the bandwidth roulette and hierarchical groups read them).
    if (membership != nullptr) {
      const auto members = membership->view().members;
      for (const char* key : {"network.islands", "algorithm.groups"}) {
        const auto partition = config.getOr<std::vector<std::vector<int>>>(key, {});
        if (!partition.empty()) viewConfig.set(key, islandsInView(partition, members));
      }
    }
    topology = registry->topology(viewConfig.get<std::string>("topology.kind"))(viewConfig);
    communicator =
        std::make_unique<Communicator>(*transport, config.get<double>("transport.timeout_seconds"));
    communicator->setOptions(collectiveOptions);
  }
};

Agent::Agent(const Config& config, int rank, Store& store, const Registry& registry)
    : impl_(std::make_unique<Impl>()) {
  // Keys the caller left out take their defaults; then everything is checked
  // against what is registered (components registered by the application included).
  impl_->config = registry.complete(config);
  validateConfig(impl_->config, registry.schema());
  GOSSAMER_ENFORCE(rank >= 0 && rank < config.worldSize(),
                   "rank " << rank << " outside world size " << config.worldSize());
  impl_->registry = &registry;
  impl_->rank = rank;
  // Look every name up before connecting, so a bad config fails before any peer waits.
  const Config& c = impl_->config;
  const auto& makeTopology = registry.topology(c.get<std::string>("topology.kind"));
  registry.optimizer(c.get<std::string>("algorithm.name"));
  registry.compressor(c.get<std::string>("compression.kind"));
  const auto& makeTransport = registry.transport(c.get<std::string>("transport.kind"));
  impl_->viewConfig = c;
  impl_->topology = makeTopology(impl_->config);
  MetricsOptions mo;
  mo.enabled = c.get<bool>("run.metrics");
  mo.every = static_cast<std::uint64_t>(c.get<int>("run.metrics_every"));
  if (mo.enabled) mo.dir = resolveRunDir(c, rank, store);
  impl_->metrics = std::make_unique<Metrics>(rank, c.worldSize(), std::move(mo));
  const TransportContext ctx{impl_->config, rank, store, &registry, impl_->metrics.get()};
  impl_->transport = makeTransport(ctx);
  for (const auto& wrap : registry.transportServices()) {
    impl_->transport = wrap(ctx, std::move(impl_->transport));
    GOSSAMER_CHECK(impl_->transport != nullptr, "a transport service returned no transport");
  }
  impl_->membership = dynamic_cast<Membership*>(impl_->transport.get());
  impl_->communicator =
      std::make_unique<Communicator>(*impl_->transport, c.get<double>("transport.timeout_seconds"));
  const CollectiveOptions co = collectiveOptionsFrom(c);
  impl_->communicator->setOptions(co);
  // Every rank measures together and keeps rank 0's model (same choices everywhere).
  if (c.get<bool>("collectives.calibrate")) impl_->communicator->calibrate();
  impl_->collectiveOptions = impl_->communicator->options();
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  impl_->metrics->emit("start", 0,
                       {{"world_size", std::int64_t{c.worldSize()}},
                        {"algorithm", c.get<std::string>("algorithm.name")},
                        {"topology", c.get<std::string>("topology.kind")},
                        {"transport", c.get<std::string>("transport.kind")},
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
int Agent::worldSize() const { return impl_->config.worldSize(); }
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
  for (int r = 0; r < impl_->config.worldSize(); ++r) v.members.push_back(r);
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
