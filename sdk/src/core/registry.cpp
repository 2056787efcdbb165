// Registry: the name -> factory maps and the schema they declare (see
// gossamer/registry.hpp).
#include "gossamer/registry.hpp"

#include "gossamer/errors.hpp"
#include "gossamer/kit/security.hpp"

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
// Adds `name` -> `f` to `m` and its choice (with `keys`) to `section` of
// `schema`, or, if any part is refused (a name taken, keys that clash with
// another choice's), changes nothing.
template <typename F>
void addChoice(ConfigSchema& schema, std::map<std::string, F>& m, const std::string& section,
               const std::string& name, F f, const KeySet& keys) {
  GOSSAMER_ENFORCE(!name.empty(), "component name is empty");
  GOSSAMER_ENFORCE(f, "null factory for '" << name << "'");
  GOSSAMER_ENFORCE(m.count(name) == 0, "'" << name << "' is already registered");
  ConfigSchema next = schema;
  next.addChoice(section, name, keys);
  m.emplace(name, std::move(f));
  schema = std::move(next);
}
template <typename F>
std::vector<std::string> names(const std::map<std::string, F>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

void ServiceCapabilities::offerMembership(Membership& membership) {
  GOSSAMER_ENFORCE(membership_ == nullptr, "two transport services offer a membership handle");
  membership_ = &membership;
}

std::string transportHost(const TransportContext& ctx) {
  const std::string& host = ctx.config.get<std::string>("transport.host");
  if (host != "auto") return host;
  return ctx.store.localAddress().value_or("127.0.0.1");
}

const TransportTraits* TransportCatalog::find(const std::string& name) const {
  auto it = traits_.find(name);
  return it == traits_.end() ? nullptr : &it->second;
}

std::string TransportCatalog::namesWhere(const std::function<bool(const TransportTraits&)>& pred,
                                         const std::string& separator) const {
  std::string out;
  for (const std::string& n : names_)
    if (pred(traits_.at(n))) out += (out.empty() ? "" : separator) + n;
  return out;
}

std::vector<std::pair<std::string, std::string>> TransportCatalog::inUse(const Config& config) const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string& kind = config.get<std::string>("transport.kind");
  out.emplace_back("transport.kind", kind);
  if (const TransportTraits* t = find(kind))
    for (const std::string& key : t->innerKeys) out.emplace_back(key, config.getOr<std::string>(key, ""));
  return out;
}

Registry::Registry() {
  detail::addCoreKeys(schema_);
  schema_.addKeys("security", KeySet().rule(detail::securedTransportsRule(catalog_)));
  // "none" leaves the optimizer as it is.
  addCompressor("none",
                [](const OptimizerContext&, std::unique_ptr<DistributedOptimizer> inner) { return inner; });
  setDefault("compression", "none");
}

void Registry::addTransport(const std::string& n, TransportFactory f, const KeySet& keys,
                            TransportTraits traits) {
  // A copy of a Registry shares its catalog (transportCatalog): a name one
  // of them registered is taken in both.
  GOSSAMER_ENFORCE(catalog_ != nullptr && catalog_->find(n) == nullptr,
                   "transport '" << n << "' is registered already (in this registry or a copy of it)");
  addChoice(schema_, transports_, "transport", n, std::move(f), keys);
  catalog_->traits_[n] = std::move(traits);
  catalog_->names_.push_back(n);
}
void Registry::addTopology(const std::string& n, TopologyFactory f, const KeySet& keys) {
  addChoice(schema_, topologies_, "topology", n, std::move(f), keys);
}
void Registry::addOptimizer(const std::string& n, OptimizerFactory f, const KeySet& keys) {
  addChoice(schema_, optimizers_, "algorithm", n, std::move(f), keys);
}
void Registry::addCompressor(const std::string& n, CompressorFactory f, const KeySet& keys) {
  addChoice(schema_, compressors_, "compression", n, std::move(f), keys);
}
void Registry::addSection(const std::string& section, const std::string& doc, const KeySet& keys) {
  ConfigSchema next = schema_;  // a refused section or key changes nothing
  next.addSection(section, doc);
  next.addKeys(section, keys);
  schema_ = std::move(next);
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
const TransportTraits& Registry::transportTraits(const std::string& n) const {
  transport(n);  // throws the ConfigError listing the registered names
  return *catalog_->find(n);
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

}  // namespace gossamer
