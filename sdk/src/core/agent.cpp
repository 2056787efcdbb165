// Agent: the transport, communicator, topology, optimizer and metrics of one
// rank, built from a Config and a Registry (gossamer/agent.hpp).
#include "gossamer/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>
#include <sstream>

#include "core/agent_impl.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/log.hpp"
#include "metrics/metered_optimizer.hpp"

namespace gossamer {

namespace {
// What a registered factory (or a transport service, a compressor) built,
// refused if it built nothing: the contract of Registry's factories.
[[noreturn]] void builtNothing(const char* kind, const std::string& name) {
  throw InvalidArgument(std::string(kind) + " '" + name +
                        "' built nothing: a registered factory must build one");
}
template <typename T>
std::unique_ptr<T> made(std::unique_ptr<T> p, const char* kind, const std::string& name) {
  if (p == nullptr) builtNothing(kind, name);
  return p;
}

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

namespace {
// A model's float32 parameters form one buffer: at least one tensor, none
// empty, and at most PTRDIFF_MAX bytes in all (so that no sum of sizes or
// pointer range wraps).
void checkTensorSizes(const std::vector<std::size_t>& sizes) {
  if (sizes.empty()) throw InvalidArgument("makeOptimizer: no tensor sizes");
  constexpr std::size_t kMaxElements = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float);
  std::size_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0)
      throw InvalidArgument("makeOptimizer: tensor " + std::to_string(i) + " has 0 elements");
    if (sizes[i] > kMaxElements - total)
      throw InvalidArgument("makeOptimizer: tensor sizes add up to more than " +
                            std::to_string(kMaxElements) + " float32 elements (at tensor " +
                            std::to_string(i) + ")");
    total += sizes[i];
  }
}
// Every rank of a job runs with the same settings (all keys but those
// declared perRank: paths, addresses to bind). Ranks started by hand with
// different --set values would otherwise train together on different
// learning rates or seeds, or fail later over frame sizes.
constexpr const char* kSettingsKey = "gossamer.settings";

// The first line of `mine` that `theirs` (rank 0's) does not have, as a
// ConfigError naming its key.
ConfigError settingsDiffer(const Config& c, int rank, const std::string& mine, const std::string& theirs) {
  std::istringstream a(mine), b(theirs);
  std::string here, there;
  while (std::getline(a, here)) {
    if (!std::getline(b, there)) there.clear();
    if (here == there) continue;
    const auto eq = here.find(" = ");
    const std::string name = here.substr(0, eq);
    const std::string value = eq == std::string::npos ? here : here.substr(eq + 3);
    const std::string other =
        there.rfind(name + " = ", 0) == 0 ? there.substr(name.size() + 3) : "(not declared: another program)";
    const auto by = c.overriddenBy.find(name);
    return ConfigError(
        by != c.overriddenBy.end() ? by->second : c.sourceFile, 0, name,
        "is " + value + " at rank " + std::to_string(rank) + " but " + other +
            " at rank 0: the ranks of a job run with the same settings (paths and addresses to "
            "bind may differ)");
  }
  return ConfigError(
      c.sourceFile, 0, "",
      "rank " + std::to_string(rank) + " declares fewer settings than rank 0: another program");
}

// Once the ranks are connected, on the bare transport (before the services
// that count, delay or drop messages wrap it): every rank sends rank 0 the
// CRC-32C of its ConfigSchema::sharedSettings, and rank 0 answers every rank
// with the lowest rank whose digest is not its own (world_size: none). Rank
// 0 put its text in the store before it connected (so it is this job's, not
// a killed one's left in a reused rendezvous), for the rank that differs to
// name the key; the others fail naming that rank. A process restarted into a
// running job compares with the store's text alone.
void checkSettings(const Config& c, const ConfigSchema& schema, int rank, Store& store, Transport& t) {
  const std::string mine = schema.sharedSettings(c);
  const double timeout = c.get<double>("transport.timeout_seconds");
  if (c.getOr("membership.restarted", false)) {
    const auto theirs = store.tryGet(kSettingsKey);
    if (theirs && *theirs != mine) throw settingsDiffer(c, rank, mine, *theirs);
    return;
  }
  const int n = c.worldSize();
  if (n == 1 || rank >= n) return;  // (a rank beyond world_size joins: membership.restarted)
  const auto digest =
      static_cast<std::int64_t>(crc32c(std::as_bytes(std::span<const char>(mine.data(), mine.size()))));
  const Tag toRoot = Tag::make(Op::kControl, Tag::kMaxStep, 1),
            fromRoot = Tag::make(Op::kControl, Tag::kMaxStep, 2);
  std::int64_t verdict = n;
  if (rank == 0) {
    std::vector<std::int64_t> digests(static_cast<std::size_t>(n), digest);
    std::vector<Request> receives;
    for (int p = 1; p < n; ++p)
      receives.push_back(
          t.irecvOf<std::int64_t>(p, toRoot, std::span(&digests[static_cast<std::size_t>(p)], 1)));
    try {
      waitAll(receives, timeout);
    } catch (const TimeoutError& e) {
      throw TimeoutError(std::string("rank 0: not every rank reported its settings (a rank of another job, "
                                     "world_size or rendezvous?): ") +
                         e.what());
    }
    for (int p = 1; p < n && verdict == n; ++p)
      if (digests[static_cast<std::size_t>(p)] != digest) verdict = p;
    std::vector<Request> sends;
    for (int p = 1; p < n; ++p) sends.push_back(t.isendOf<std::int64_t>(p, fromRoot, std::span(&verdict, 1)));
    waitAll(sends, timeout);
  } else {
    Request answer = t.irecvOf<std::int64_t>(0, fromRoot, std::span(&verdict, 1));
    try {
      t.isendOf<std::int64_t>(0, toRoot, std::span<const std::int64_t>(&digest, 1)).wait(timeout);
      answer.wait(timeout);
    } catch (const TimeoutError& e) {
      throw TimeoutError(
          "rank " + std::to_string(rank) +
          ": rank 0 did not answer with the job's settings (a rank 0 of another job, world_size or "
          "rendezvous?): " +
          e.what());
    }
  }
  if (verdict == n) return;
  if (verdict == rank) throw settingsDiffer(c, rank, mine, store.get(kSettingsKey, timeout));
  throw ConfigError(
      c.sourceFile, 0, "",
      "rank " + std::to_string(verdict) +
          " runs with other settings than rank 0 (its error names the key): the ranks of a job run "
          "with the same settings");
}
}  // namespace

std::unique_ptr<DistributedOptimizer> Agent::Impl::createOptimizer(
    const std::vector<std::size_t>& tensorSizes) const {
  checkTensorSizes(tensorSizes);
  const Config& c = viewConfig;
  const OptimizerContext ctx{c, *transport, *communicator, *topology, tensorSizes};
  const std::string& name = c.get<std::string>("algorithm.name");
  auto inner = made(registry->optimizer(name)(ctx), "optimizer", name);
  const std::string& compression = c.get<std::string>("compression.kind");
  return made(registry->compressor(compression)(ctx, std::move(inner)), "compressor", compression);
}

std::unique_ptr<DistributedOptimizer> Agent::Impl::metered(std::unique_ptr<DistributedOptimizer> inner) {
  if (!metrics->enabled()) return inner;
  return std::make_unique<detail::MeteredOptimizer>(std::move(inner), *metrics,
                                                    [this] { return viewNumber; });
}

namespace {
// The first issue that `schema`'s rules find in `c` about one of `keys`
// (dotted; an issue about "a.b[2]" is about "a.b"), if any.
std::optional<ConfigIssue> issueAbout(const ConfigSchema& schema, const Config& c,
                                      const std::vector<std::string>& keys) {
  for (const ConfigRule& rule : schema.rules()) {
    std::optional<ConfigIssue> issue;
    try {
      issue = rule(c);
    } catch (const std::exception&) {
      continue;  // a rule of other keys that the view's world size upsets: not for this check to judge
    }
    if (!issue) continue;
    const std::string key = issue->key.substr(0, issue->key.find('['));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return issue;
  }
  return std::nullopt;
}

}  // namespace

void Agent::Impl::rebuildOverView() {
  std::vector<std::string> renumbered;
  viewConfig = membership() != nullptr
                   ? registry->schema().inView(config, membership()->view().members, &renumbered)
                   : config;
  viewConfig.set("world_size", transport->worldSize());
  topology = membership() != nullptr
                 ? topologyOverView(renumbered)
                 : made(registry->topology(viewConfig.get<std::string>("topology.kind"))(viewConfig),
                        "topology", viewConfig.get<std::string>("topology.kind"));
  communicator = std::make_unique<Communicator>(*transport, config.get<double>("transport.timeout_seconds"));
  communicator->setOptions(collectiveOptions);
}

std::unique_ptr<Topology> Agent::Impl::topologyOverView(const std::vector<std::string>& renumbered) {
  const ConfigSchema& schema = registry->schema();
  std::vector<std::string> watched = renumbered;
  watched.emplace_back("topology.kind");  // (an explicit graph without edges is a rule of topology.kind)
  const auto wasRenumbered = [&](const std::string& key) {
    return std::find(renumbered.begin(), renumbered.end(), key) != renumbered.end();
  };
  // A key left out takes its default (a selector its default choice) when the schema completes the config.
  const auto resetToDefault = [&](const std::string& key) {
    viewConfig.values.erase(key);
    viewConfig = schema.complete(viewConfig);
  };
  std::string why;                 // the first reason: the later ones follow from the resets
  std::vector<std::string> reset;  // renumbered keys put back to their defaults, in order
  bool kindReset = false;
  for (;;) {
    const std::string kind = viewConfig.get<std::string>("topology.kind");
    std::string reason, culprit;
    // (The rules run only when something was renumbered: otherwise the keys
    // are the job's, checked at start.)
    if (auto issue = renumbered.empty() ? std::nullopt : issueAbout(schema, viewConfig, watched)) {
      reason = "key '" + issue->key + "': " + issue->message;
      const std::string key = issue->key.substr(0, issue->key.find('['));
      if (wasRenumbered(key) && std::find(reset.begin(), reset.end(), key) == reset.end()) culprit = key;
    } else {
      try {
        auto out = registry->topology(kind)(viewConfig);
        // (Error, not InvalidArgument: not a reason to reset a key.)
        if (out == nullptr) throw Error("topology '" + kind + "' built nothing");
        if (!reset.empty() || kindReset) {
          std::ostringstream what;
          for (std::size_t k = 0; k < reset.size(); ++k) what << (k == 0 ? "" : ", ") << reset[k];
          GOSSAMER_LOG(kWarning, "rank "
                                     << rank << ": over view " << membership()->view().number << " ("
                                     << transport->worldSize() << " ranks) " << why << "; "
                                     << (reset.empty()
                                             ? ""
                                             : what.str() + (reset.size() == 1 ? " takes its default, "
                                                                               : " take their defaults, "))
                                     << "the topology is " << kind << (kindReset ? " (the default)" : ""));
        }
        return out;
      } catch (const InvalidArgument& e) {
        reason = "topology " + kind + ": " + e.what();
        // The topology's own renumbered keys (not the ones the optimizer reads).
        for (const auto& key : renumbered)
          if (key.rfind("topology.", 0) == 0 && std::find(reset.begin(), reset.end(), key) == reset.end()) {
            culprit = key;
            break;
          }
      }
    }
    if (why.empty()) why = reason;
    if (!culprit.empty()) {
      resetToDefault(culprit);
      reset.push_back(culprit);
    } else if (!kindReset) {
      resetToDefault("topology.kind");
      kindReset = true;
    } else {
      throw InvalidArgument("no topology can be built over view " +
                            std::to_string(membership()->view().number) + " (" +
                            std::to_string(transport->worldSize()) + " ranks): " + why + "; then " + reason);
    }
  }
}

Agent::Agent(const Config& config, int rank, Store& store, const Registry& registry)
    : impl_(std::make_unique<Impl>()) {
  // Keys the caller left out take their defaults; then everything is checked
  // against what is registered (components registered by the application included).
  impl_->config = registry.complete(config);
  validateConfig(impl_->config, registry.schema());
  // Ranks from world_size up join a running job (membership.max_world_size).
  const int most = maxWorldSize(impl_->config);
  GOSSAMER_ENFORCE(rank >= 0 && rank < most, "rank " << rank << " outside world size " << most);
  impl_->registry = &registry;
  impl_->rank = rank;
  // Rank 0's settings, before it connects (checkSettings).
  if (rank == 0 && !impl_->config.getOr("membership.restarted", false))
    store.set(kSettingsKey, registry.schema().sharedSettings(impl_->config));
  // Look every name up before connecting, so a bad config fails before any peer waits.
  const Config& c = impl_->config;
  const auto& makeTopology = registry.topology(c.get<std::string>("topology.kind"));
  registry.optimizer(c.get<std::string>("algorithm.name"));
  registry.compressor(c.get<std::string>("compression.kind"));
  const auto& makeTransport = registry.transport(c.get<std::string>("transport.kind"));
  impl_->viewConfig = c;
  impl_->topology = made(makeTopology(impl_->config), "topology", c.get<std::string>("topology.kind"));
  MetricsOptions mo;
  mo.enabled = c.get<bool>("run.metrics");
  mo.every = static_cast<std::uint64_t>(c.get<int>("run.metrics_every"));
  if (mo.enabled) mo.dir = resolveRunDir(c, rank, store);
  impl_->metrics = std::make_unique<Metrics>(rank, most, std::move(mo));
  const TransportContext ctx{impl_->config,        rank, store, &registry, impl_->metrics.get(),
                             &impl_->capabilities, most};
  impl_->transport = made(makeTransport(ctx), "transport", c.get<std::string>("transport.kind"));
  if (impl_->transport->capacity() < most)
    throw ConfigError(c.sourceFile, 0, "membership.max_world_size",
                      std::to_string(most) + " ranks, but transport " + impl_->transport->name() +
                          " takes no rank beyond world_size (" + std::to_string(c.worldSize()) +
                          "): it cannot address ranks that join a running job");
  // (Ranks that share one process share their config: nothing to compare.)
  if (registry.transportTraits(c.get<std::string>("transport.kind")).spansProcesses)
    checkSettings(c, registry.schema(), rank, store, *impl_->transport);
  for (const auto& wrap : registry.transportServices()) {
    impl_->transport = made(wrap(ctx, std::move(impl_->transport)), "a transport service over",
                            c.get<std::string>("transport.kind"));
  }
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
Agent& Agent::operator=(Agent&& other) noexcept {
  if (this != &other) {
    try {
      close();       // this Agent's job ends as the destructor would end it
    } catch (...) {  // NOLINT(bugprone-empty-catch): as in the destructor
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

int Agent::rank() const { return impl_->rank; }
int Agent::worldSize() const { return impl_->config.worldSize(); }
const Config& Agent::config() const { return impl_->config; }
Transport& Agent::transport() { return *impl_->transport; }
Communicator& Agent::communicator() { return *impl_->communicator; }
const Topology& Agent::topology() const { return *impl_->topology; }

DistributedOptimizer& Agent::makeOptimizer(const std::vector<std::size_t>& tensorSizes) {
  checkTensorSizes(tensorSizes);  // a refused call keeps the optimizer there is
  impl_->optimizer.reset();
  impl_->optimizer = impl_->metered(impl_->createOptimizer(tensorSizes));
  return *impl_->optimizer;
}

bool Agent::hasMembership() const { return impl_->membership() != nullptr; }

View Agent::view() const {
  if (impl_->membership() != nullptr) return impl_->membership()->view();
  View v;
  for (int r = 0; r < impl_->config.worldSize(); ++r) v.members.push_back(r);
  return v;
}

DistributedOptimizer& Agent::optimizer() {
  GOSSAMER_ENFORCE(impl_->optimizer, "no optimizer yet: call makeOptimizer first");
  return *impl_->optimizer;
}

void Agent::average(std::span<float> data) { impl_->communicator->allreduce(data, ReduceOp::kAverage); }

Metrics& Agent::metrics() { return *impl_->metrics; }

void Agent::Impl::endRun(bool abort) {
  std::exception_ptr failed;
  try {
    if (metrics) metrics->finish(optimizer ? optimizer->steps() : 0);
  } catch (...) {
    failed = std::current_exception();
  }
  if (transport) abort ? transport->abort() : transport->close();
  if (failed) std::rethrow_exception(failed);
}

void Agent::close() {
  if (impl_) impl_->endRun(false);
}

void Agent::abort() {
  if (impl_) impl_->endRun(true);
}

}  // namespace gossamer
