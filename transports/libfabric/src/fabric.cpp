// Provider selection for the libfabric transport (see fabric.hpp).
#include "fabric.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "gossamer/errors.hpp"

namespace gossamer::libfabric {

namespace detail {

namespace {

/// The API version we ask for: the one of the headers we were built with.
constexpr std::uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

/// What the transport needs from an endpoint: reliable datagrams, tagged
/// send/receive, thread-safe calls (the progress thread makes the data-path
/// calls, other threads wake it with fi_cq_signal). It can live with the
/// FI_CONTEXT modes (every operation carries an fi_context2) and registers
/// local buffers when a provider asks for FI_MR_LOCAL; it never uses RMA, so
/// the other memory-registration modes cost it nothing. With `sources`, it
/// also asks for each message's sender (FI_SOURCE) and for receives that
/// match only one sender (FI_DIRECTED_RECV), so that an endpoint outside the
/// job can neither speak for a rank nor write into a payload under way.
InfoPtr makeHints(const std::string& provider, bool sources) {
  InfoPtr hints(api().dupinfo(nullptr));  // fi_allocinfo()
  if (!hints) throw Error("libfabric: fi_allocinfo failed (out of memory)");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | (sources ? FI_SOURCE | FI_DIRECTED_RECV : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (!provider.empty()) {
    hints->fabric_attr->prov_name = strdup(provider.c_str());  // freed by fi_freeinfo
    if (!hints->fabric_attr->prov_name) throw Error("libfabric: out of memory");
  }
  return hints;
}

std::string coreName(const std::string& provider) { return provider.substr(0, provider.find(';')); }

/// `<kShmNamePrefix><pid>-<16 hex digits>`: unique on this host for as long as
/// the process lives, and tells removeStaleShmFiles whose file it is.
std::string uniqueShmName() {
  std::random_device rd;
  const std::uint64_t bits = (std::uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(bits));
  return kShmNamePrefix + std::to_string(::getpid()) + '-' + hex;
}

}  // namespace

std::string errorText(long rc) { return api().strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

void check(long rc, const char* what) {
  if (rc < 0)
    throw Error(std::string("libfabric ") + what + ": " + errorText(rc) + " (" + std::to_string(rc) + ")");
}

bool usesIpAddresses(const std::string& provider) {
  static const char* const kIp[] = {"tcp", "verbs", "net", "sockets", "udp"};
  const std::string core = coreName(provider);
  return std::any_of(std::begin(kIp), std::end(kIp), [&](const char* p) { return core == p; });
}

InfoPtr selectProvider(const Options& o) {
  const std::string name = providerName(o.provider);
  GOSSAMER_ENFORCE(!name.empty(), "libfabric provider name is empty");
  const bool bind = usesIpAddresses(name) && !o.host.empty();
  const bool shm = coreName(name) == "shm";
  fi_info* raw = nullptr;
  // For IP providers the host is the source address (FI_SOURCE): on loopback
  // every rank then binds 127.0.0.1, so all endpoints of a job share one
  // interface (tcp;ofi_rxm endpoints bound to different interfaces hang), and
  // no traffic leaves the machine. This is what FI_TCP_IFACE=lo would do,
  // without touching the process environment. For shm the source address is
  // a unique name (see the header).
  std::string node;
  if (bind) node = o.host;
  if (shm) {
    removeStaleShmFiles();
    node = uniqueShmName();
  }
  // A provider that cannot name senders is still used: it then trusts the
  // sender rank a message states (docs/security.md).
  int rc = -FI_ENODATA;
  for (const bool sources : {true, false}) {
    auto hints = makeHints(name, sources);
    rc = api().getinfo(kApiVersion, node.empty() ? nullptr : node.c_str(), nullptr,
                       node.empty() ? 0 : FI_SOURCE, hints.get(), &raw);
    if (rc != -FI_ENODATA && (rc != 0 || raw)) break;
  }
  InfoPtr info(raw);
  if (rc == -FI_ENODATA || (rc == 0 && !info)) {
    std::string msg = "libfabric provider '" + o.provider + "'";
    if (name != o.provider) msg += " ('" + name + "')";
    msg += " offers no reliable-datagram tagged endpoint here";
    if (bind) msg += " on address " + o.host;
    const auto available = availableProviders();
    if (available.empty()) {
      msg += "; libfabric finds no provider that does (is a libfabric provider package installed?)";
    } else {
      msg += "; providers that do: ";
      for (std::size_t i = 0; i < available.size(); ++i) msg += (i ? ", " : "") + available[i];
      msg += " ('tcp' stands for tcp;ofi_rxm)";
    }
    throw ProviderNotFound(msg);
  }
  check(rc, "fi_getinfo");
  return info;
}

std::size_t removeStaleShmFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::size_t removed = 0;
  std::error_code ec;
  const std::string prefix = kShmNamePrefix;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.compare(0, prefix.size(), prefix) != 0) continue;
    const char* first = file.data() + prefix.size();
    const char* last = file.data() + file.size();
    long pid = 0;
    const auto [p, err] = std::from_chars(first, last, pid);
    if (err != std::errc() || p == first || p == last || *p != '-' || pid <= 0) continue;
    // ESRCH only: EPERM means a process of another user has that id.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rmEc;
    if (fs::remove(it->path(), rmEc)) ++removed;
  }
  return removed;
}

}  // namespace detail

std::string providerName(const std::string& provider) {
  if (provider == "tcp") return "tcp;ofi_rxm";
  if (provider == "verbs") return "verbs;ofi_rxm";
  return provider;
}

std::vector<std::string> availableProviders() {
  auto hints = detail::makeHints("", false);
  fi_info* raw = nullptr;
  const int rc = detail::api().getinfo(detail::kApiVersion, nullptr, nullptr, 0, hints.get(), &raw);
  detail::InfoPtr info(raw);
  std::vector<std::string> names;
  if (rc != 0) return names;
  for (const fi_info* i = info.get(); i; i = i->next) {
    if (!i->fabric_attr || !i->fabric_attr->prov_name) continue;
    const std::string n = i->fabric_attr->prov_name;
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

}  // namespace gossamer::libfabric
