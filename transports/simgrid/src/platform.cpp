// The simulated network of a job: its islands as SimGrid zones.
//
// Each island is a star zone: host "rank-R" with an up link (its NIC's
// sending side: insideBytesPerSecond)
// and a down link (its receiving side: the same rate; none with
// receiveUnshaped) to the island's switch, a router that adds nothing.
// Islands hang under a full zone: from island a to island b a message
// crosses b's in link (betweenBytesPerSecond, shared by every flow entering
// b); what leaves an island is not shaped. (A link that cannot limit is left
// out rather than made unbounded: every link in SimGrid's sharing system
// ties the flows that cross it together, and a solve after each flow's end
// costs with the size of what is tied to it.) The links carry no latency: the transport holds a message for
// its route's latency (insideLatency, plus betweenLatency between islands)
// before its bytes go, as the namespace hosts' fault injector holds a
// message for the delay between islands, so that messages that follow one
// another on a pair go back to back, as on a TCP stream. So a message inside
// an island takes insideLatency + bytes / insideRate, one between islands
// insideLatency + betweenLatency + bytes / min(insideRate, betweenRate), and
// flows share what they cross (SimGrid's flow model, Velho et al., TOMACS
// 2013). This is the shaping of the namespace hosts that real runs use
// (tests/hosts/hosts.py: tbf on each host's egress and on each island's
// ingress), so that the two can be compared.
#include <dlfcn.h>
#include <simgrid/Exception.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/transports/simgrid.hpp"
#include "platform.hpp"

namespace gossamer::simgrid {

namespace s4u = ::simgrid::s4u;
using NetPoint = ::simgrid::kernel::routing::NetPoint;

namespace {

// Star zone `name` under `parent` (null: the root), with one host per rank of
// `ranks`; returns its router.
s4u::NetZone* buildIsland(const Platform& p, const std::string& name, const std::vector<int>& ranks,
                          const s4u::NetZone* parent, NetPoint** router) {
  auto* zone = s4u::create_star_zone(name);
  if (parent != nullptr) zone->set_parent(parent);
  for (const int r : ranks) {
    const std::string host = "rank-" + std::to_string(r);
    auto* h = zone->create_host(host, p.flopsPerSecond);
    auto* up = zone->create_link(host + "-up", p.insideBytesPerSecond)->seal();
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, {s4u::LinkInRoute(up)}, false);
    if (p.receiveUnshaped) {
      zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {}, false);
    } else {
      auto* down = zone->create_link(host + "-down", p.insideBytesPerSecond)->seal();
      zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {s4u::LinkInRoute(down)}, false);
    }
  }
  *router = nullptr;
  if (parent != nullptr) {
    *router = zone->create_router(name + "-switch");
    zone->add_route(*router, nullptr, nullptr, nullptr, {}, false);
    zone->add_route(nullptr, *router, nullptr, nullptr, {}, false);
  }
  return zone;
}

// SimGrid loads a platform file named *.so or *.dylib as a library that
// builds the platform (its function load_platform), and aborts the process
// if it cannot open it or finds no such function: refused here instead.
// Returns whether `file` is such a library.
bool checkLibrary(const std::string& file) {
  if (!file.ends_with(".so") && !file.ends_with(".dylib")) return false;
  void* library = ::dlopen(file.c_str(), RTLD_LAZY);
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw InvalidArgument("simgrid platform file " + file + ": cannot load it as a library (" +
                          (why != nullptr ? why : "dlopen failed") + ")");
  }
  ::dlerror();
  const bool builds = ::dlsym(library, "load_platform") != nullptr;
  ::dlclose(library);
  if (!builds)
    throw InvalidArgument("simgrid platform file " + file +
                          ": a library without a function load_platform (SimGrid loads a platform file named "
                          "*.so or *.dylib as a library; an XML platform needs another name)");
  return true;
}

// SimGrid's scanner's line (its flex scanner's yyget_lineno, exported under
// SimGrid's prefix), found once: not in SimGrid's public headers, so looked
// up by name, and absent (null) where a version names it otherwise.
using LineFunction = int (*)();
LineFunction scannerLine() {
  static const LineFunction line = [] {
    // surf_parse_get_lineno() in SimGrid 3.32 (Debian 12's), simgrid_parse_get_lineno() in later ones.
    for (const char* name : {"_Z21surf_parse_get_linenov", "_Z24simgrid_parse_get_linenov"})
      if (void* symbol = ::dlsym(RTLD_DEFAULT, name)) return reinterpret_cast<LineFunction>(symbol);
    return LineFunction{nullptr};
  }();
  return line;
}

// Set while build() loads an XML file: outside a load the scanner's line is
// that of the last file's end, and a platform library is not scanned, so
// either would mislocate an error.
volatile std::sig_atomic_t gLoading = 0;

// "simgrid platform file FILE:LINE: what" (": what" alone without a line).
std::string located(const std::string& file, int line, const std::string& what) {
  std::string s = "simgrid platform file " + file;
  if (line > 0) s.append(":").append(std::to_string(line));
  return s.append(": ").append(what);
}

// Loads `file` into the engine. SimGrid throws a ParseError ("Parse error at
// FILE:LINE: what") for what its XML parser refuses, other exceptions (which
// name no line) for some of what it cannot build: each becomes an
// InvalidArgument naming the file and the line (no line for a platform
// library's: not a scanned file). (What it aborts on instead is
// checkFile's.)
void loadFile(const std::string& file) {
  const bool library = checkLibrary(file);
  // Looked up now, not first in the abort handler (a static's first
  // initialisation is not async-signal-safe).
  (void)scannerLine();
  gLoading = library ? 0 : 1;
  struct Done {
    ~Done() { gLoading = 0; }
  } done;
  try {
    s4u::Engine::get_instance()->load_platform(file);
  } catch (const ::simgrid::ParseError& e) {
    std::string what = e.what();
    int line = parsingLine();
    const std::string prefix = "Parse error at " + file + ":";
    if (what.rfind(prefix, 0) == 0) {
      std::size_t at = prefix.size(), end = at;
      while (end < what.size() && std::isdigit(static_cast<unsigned char>(what[end])) != 0) ++end;
      if (end > at && end - at <= 9 && what.compare(end, 2, ": ") == 0) {
        line = std::stoi(what.substr(at, end - at));
        what = what.substr(end + 2);
      }
    }
    // Its parser (generated from its DTD) wants the DOCTYPE after an XML
    // declaration, and says only that a '<' came unexpected.
    if (what.find("Unexpected character `<' in prolog") != std::string::npos)
      what +=
          " (after <?xml ...?>, SimGrid takes <!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\"> "
          "before <platform>)";
    throw InvalidArgument(located(file, line, what));
  } catch (const std::exception& e) {
    throw InvalidArgument(located(file, parsingLine(), e.what()));
  }
}

}  // namespace

std::vector<s4u::Link*> routeOf(const std::string& file, const s4u::Host* from, const s4u::Host* to, int src,
                                int dst) {
  std::vector<s4u::Link*> links;
  try {
    from->route_to(to, links, nullptr);
  } catch (const std::exception& e) {  // some routings throw on a missing route
    throw InvalidArgument("simgrid platform file " + file + ": no route from rank-" + std::to_string(src) +
                          " to rank-" + std::to_string(dst) + " (" + e.what() + ")");
  }
  // Others give no links, and SimGrid aborts the process on a flow over none.
  GOSSAMER_ENFORCE(src == dst || !links.empty(), "simgrid platform file " << file
                                                                          << " has no route from rank-" << src
                                                                          << " to rank-" << dst);
  return links;
}

int parsingLine() noexcept {
  if (gLoading == 0) return 0;
  const LineFunction line = scannerLine();
  return line != nullptr ? line() : 0;
}

Platform Platform::fromNetwork(const NetworkLayout& layout, double insideLatencySeconds) {
  Platform p;
  p.hosts = layout.worldSize();
  if (layout.islands().size() > 1) p.islands = layout.islands();
  p.insideBytesPerSecond = layout.insideGbps() * 1e9 / 8;
  p.betweenBytesPerSecond = layout.betweenGbps() * 1e9 / 8;
  p.insideLatencySeconds = insideLatencySeconds;
  p.betweenLatencySeconds = layout.betweenDelaySeconds();
  return p;
}

void Platform::shapeLikeNamespaceHosts() {
  constexpr double kMinimumBurst = 65536;  // hosts.py: burst()
  insideBurstBytes = std::max(kMinimumBurst, insideBytesPerSecond * 1e-3);
  betweenBurstBytes = std::max(kMinimumBurst, betweenBytesPerSecond * 1e-3);
  // A full segment on the veth pairs' 1,500-byte MTU: 14 bytes of Ethernet
  // header (tbf counts the frame from its destination address), 20 of IPv4,
  // 32 of TCP with timestamps, 1,448 of stream.
  constexpr double kFrame = 1514, kStream = 1448;
  wireBytesPerByte = kFrame / kStream;
}

void Platform::validate() const {
  GOSSAMER_ENFORCE(hosts >= 1, "simgrid platform: hosts " << hosts << " (at least 1)");
  // Every value finite: SimGrid aborts the process on a flow over a link of
  // infinite rate, and an infinite latency never lets a message arrive.
  GOSSAMER_ENFORCE(insideBytesPerSecond > 0 && std::isfinite(insideBytesPerSecond),
                   "simgrid platform: inside rate " << insideBytesPerSecond << " B/s");
  GOSSAMER_ENFORCE(betweenBytesPerSecond > 0 && std::isfinite(betweenBytesPerSecond),
                   "simgrid platform: between rate " << betweenBytesPerSecond << " B/s");
  GOSSAMER_ENFORCE(insideLatencySeconds >= 0 && std::isfinite(insideLatencySeconds),
                   "simgrid platform: inside latency " << insideLatencySeconds << " s");
  GOSSAMER_ENFORCE(betweenLatencySeconds >= 0 && std::isfinite(betweenLatencySeconds),
                   "simgrid platform: between latency " << betweenLatencySeconds << " s");
  GOSSAMER_ENFORCE(
      insideBurstBytes >= 0 && betweenBurstBytes >= 0 && std::isfinite(insideBurstBytes) &&
          std::isfinite(betweenBurstBytes),
      "simgrid platform: burst sizes " << insideBurstBytes << ", " << betweenBurstBytes << " bytes");
  GOSSAMER_ENFORCE(file.empty() || (insideBurstBytes == 0 && betweenBurstBytes == 0),
                   "simgrid platform: token buckets are for generated platforms, not a platform file");
  GOSSAMER_ENFORCE(wireBytesPerByte >= 1 && std::isfinite(wireBytesPerByte),
                   "simgrid platform: wire bytes per byte " << wireBytesPerByte << " (at least 1)");
  GOSSAMER_ENFORCE(flopsPerSecond > 0 && std::isfinite(flopsPerSecond),
                   "simgrid platform: host speed " << flopsPerSecond << " flop/s");
  if (!islands.empty()) NetworkLayout(hosts, islands, 1, 1);  // a partition of [0, hosts), or it throws
}

RouteLatency build(const Platform& p) {
  if (!p.file.empty()) {
    auto* engine = s4u::Engine::get_instance();
    loadFile(p.file);
    std::vector<s4u::Host*> hosts;
    for (int r = 0; r < p.hosts; ++r) {
      hosts.push_back(s4u::Host::by_name_or_null("rank-" + std::to_string(r)));
      GOSSAMER_ENFORCE(hosts.back() != nullptr, "simgrid platform file " << p.file << " has no host rank-"
                                                                         << r << " (world size " << p.hosts
                                                                         << ")");
      // A zone of routing "None" has no routes, and SimGrid aborts the
      // process when asked for one. (Its class is private to SimGrid: known
      // by its type's name.)
      const auto* zone = hosts.back()->get_englobing_zone();
      if (p.hosts > 1 && zone != nullptr &&
          std::string_view(typeid(*zone->get_impl()).name()).find("EmptyZone") != std::string_view::npos)
        throw InvalidArgument("simgrid platform file " + p.file + ": host rank-" + std::to_string(r) +
                              " is in zone " + zone->get_name() +
                              " of routing \"None\", which has no routes");
    }
    // The file's latencies move from the links to the transport's hold.
    // SimGrid aborts the process on a flow over a link without bandwidth, so
    // such a link is refused here.
    auto original = std::make_shared<std::unordered_map<const s4u::Link*, double>>();
    for (auto* link : engine->get_all_links()) {
      GOSSAMER_ENFORCE(link->get_bandwidth() > 0 && std::isfinite(link->get_bandwidth()),
                       "simgrid platform file " << p.file << ": link " << link->get_name()
                                                << " has bandwidth " << link->get_bandwidth()
                                                << " B/s (it must be above 0)");
      GOSSAMER_ENFORCE(link->get_latency() >= 0 && std::isfinite(link->get_latency()),
                       "simgrid platform file " << p.file << ": link " << link->get_name() << " has latency "
                                                << link->get_latency() << " s");
      (*original)[link] = link->get_latency();
      link->set_latency(0);
    }
    auto cache = std::make_shared<std::unordered_map<std::uint64_t, double>>();
    return [hosts, original, cache, file = p.file](int src, int dst) {
      const std::uint64_t key = (static_cast<std::uint64_t>(src) << 32) | static_cast<std::uint32_t>(dst);
      if (const auto it = cache->find(key); it != cache->end()) return it->second;
      const auto links =
          routeOf(file, hosts[static_cast<std::size_t>(src)], hosts[static_cast<std::size_t>(dst)], src, dst);
      double latency = 0;
      for (const auto* link : links) latency += original->at(link);
      (*cache)[key] = latency;
      return latency;
    };
  }
  std::vector<int> island(static_cast<std::size_t>(p.hosts), 0);
  for (std::size_t k = 0; k < p.islands.size(); ++k)
    for (const int r : p.islands[k]) island[static_cast<std::size_t>(r)] = static_cast<int>(k);
  const RouteLatency latency = [island, inside = p.insideLatencySeconds, between = p.betweenLatencySeconds](
                                   int src, int dst) {
    return inside +
           (island[static_cast<std::size_t>(src)] != island[static_cast<std::size_t>(dst)] ? between : 0);
  };
  NetPoint* unused = nullptr;
  if (p.islands.empty()) {
    std::vector<int> all(static_cast<std::size_t>(p.hosts));
    for (int r = 0; r < p.hosts; ++r) all[static_cast<std::size_t>(r)] = r;
    buildIsland(p, "island-0", all, nullptr, &unused)->seal();
    return latency;
  }
  auto* root = s4u::create_full_zone("islands");
  std::vector<s4u::NetZone*> zones;
  std::vector<NetPoint*> routers;
  std::vector<s4u::Link*> in;
  for (std::size_t k = 0; k < p.islands.size(); ++k) {
    const std::string name = "island-" + std::to_string(k);
    NetPoint* router = nullptr;
    zones.push_back(buildIsland(p, name, p.islands[k], root, &router));
    zones.back()->seal();
    routers.push_back(router);
    in.push_back(root->create_link(name + "-in", p.betweenBytesPerSecond)->seal());
  }
  for (std::size_t a = 0; a < zones.size(); ++a)
    for (std::size_t b = 0; b < zones.size(); ++b)
      if (a != b)
        root->add_route(zones[a]->get_netpoint(), zones[b]->get_netpoint(), routers[a], routers[b],
                        {s4u::LinkInRoute(in[b])}, false);
  root->seal();
  return latency;
}

}  // namespace gossamer::simgrid
