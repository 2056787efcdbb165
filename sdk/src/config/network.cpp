// The `network:` section: islands of ranks and their links' bandwidths
// (see network.hpp).
#include "gossamer/kit/network.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

// Where `key` (islands or groups) fails to partition [0, n): nullopt if it does.
std::optional<ConfigIssue> partitionIssue(int n, const std::vector<std::vector<int>>& parts,
                                          const std::string& key, const std::string& noun) {
  std::vector<std::optional<std::size_t>> owner(static_cast<std::size_t>(n));
  for (std::size_t g = 0; g < parts.size(); ++g) {
    for (std::size_t j = 0; j < parts[g].size(); ++j) {
      const int r = parts[g][j];
      const std::string at = indexedKey(indexedKey(key, g), j);
      if (r < 0 || r >= n)
        return ConfigIssue{at, "rank " + std::to_string(r) + " does not exist (" + rankRangeText(n) + ")"};
      auto& o = owner[static_cast<std::size_t>(r)];
      if (o)
        return ConfigIssue{at, "rank " + std::to_string(r) + " is already in " + indexedKey(key, *o) + " (" +
                                   noun + "s must not overlap)"};
      o = g;
    }
  }
  for (std::size_t r = 0; r < owner.size(); ++r)
    if (!owner[r])
      return ConfigIssue{key, "the " + noun + "s must cover every rank exactly once (" + rankRangeText(n) +
                                  "), but rank " + std::to_string(r) + " is in no " + noun};
  return std::nullopt;
}

}  // namespace

std::optional<ConfigIssue> checkRankPartition(const Config& c, const std::string& key,
                                              const std::string& noun) {
  const auto& parts = c.get<std::vector<std::vector<int>>>(key);
  if (parts.empty()) return std::nullopt;
  return partitionIssue(c.worldSize(), parts, key, noun);
}

NetworkLayout::NetworkLayout(int worldSize, std::vector<std::vector<int>> islands, double insideGbps,
                             double betweenGbps, double betweenDelaySeconds)
    : islands_(std::move(islands)),
      insideGbps_(insideGbps),
      betweenGbps_(betweenGbps),
      betweenDelaySeconds_(betweenDelaySeconds) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize << " must be at least 1");
  GOSSAMER_ENFORCE(
      insideGbps > 0 && std::isfinite(insideGbps) && betweenGbps > 0 && std::isfinite(betweenGbps),
      "link bandwidths must be positive, got " << insideGbps << " and " << betweenGbps << " Gbit/s");
  GOSSAMER_ENFORCE(betweenDelaySeconds >= 0 && std::isfinite(betweenDelaySeconds),
                   "delay between islands " << betweenDelaySeconds << " s must be finite and not negative");
  if (islands_.empty()) {
    islands_.emplace_back(static_cast<std::size_t>(worldSize));
    for (int r = 0; r < worldSize; ++r) islands_[0][static_cast<std::size_t>(r)] = r;
  }
  if (auto issue = partitionIssue(worldSize, islands_, "network.islands", "island"))
    throw InvalidArgument(issue->key + ": " + issue->message);
  islandOf_.assign(static_cast<std::size_t>(worldSize), -1);
  for (std::size_t i = 0; i < islands_.size(); ++i) {
    std::sort(islands_[i].begin(), islands_[i].end());
    for (int r : islands_[i]) islandOf_[static_cast<std::size_t>(r)] = static_cast<int>(i);
  }
}

NetworkLayout NetworkLayout::from(const Config& c) {
  return NetworkLayout(c.worldSize(), c.get<std::vector<std::vector<int>>>("network.islands"),
                       c.get<double>("network.inside_gbps"), c.get<double>("network.between_gbps"),
                       c.get<double>("network.between_delay_ms") / 1000.0);
}

NetworkLayout NetworkLayout::uniform(int worldSize, double gbps) {
  return NetworkLayout(worldSize, {}, gbps, gbps);
}

int NetworkLayout::islandOf(int rank) const {
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize(),
                   "rank " << rank << " outside " << rankRangeText(worldSize()));
  return islandOf_[static_cast<std::size_t>(rank)];
}

double NetworkLayout::bandwidthGbps(int a, int b) const {
  return sameIsland(a, b) ? insideGbps_ : betweenGbps_;
}

std::vector<std::vector<int>> islandsInView(const std::vector<std::vector<int>>& islands,
                                            const std::vector<int>& members) {
  std::vector<std::vector<int>> out;
  for (const auto& island : islands) {
    std::vector<int> kept;
    for (int r : island) {
      const auto it = std::lower_bound(members.begin(), members.end(), r);
      if (it != members.end() && *it == r) kept.push_back(static_cast<int>(it - members.begin()));
    }
    if (!kept.empty()) out.push_back(std::move(kept));
  }
  return out;
}

namespace detail {
void addNetworkKeys(ConfigSchema& schema) {
  const RealRange positive{0.0, false, 1e6, true};
  schema.addSection("network",
                    "Where the ranks are: islands of fast links (a host, a cluster) joined by slower ones. "
                    "Hierarchical groups follow the islands, the bandwidth-aware roulette draws slow links "
                    "less often, and the fault injector can delay messages between islands.");
  schema.addKeys(
      "network",
      KeySet()
          .intListList("islands", 0, kMaxWorldSize - 1, true,
                       "the islands, each a list of ranks (a partition of the ranks); empty = one island")
          .namesRanks(RankKey::kPartition)
          .real("inside_gbps", 10.0, positive, "bandwidth of a link inside an island, Gbit/s")
          .real("between_gbps", 10.0, positive, "bandwidth of a link between islands, Gbit/s")
          .real("between_delay_ms", 0.0, {0.0, true, 60000.0, true},
                "one-way delay of a link between islands, milliseconds (applied by faults.island_delay)")
          .rule([](const Config& c) { return checkRankPartition(c, "network.islands", "island"); }));
}
}  // namespace detail

std::string routeAddressTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0 || found == nullptr)
    throw Error("cannot resolve '" + host + "' to an IPv4 address: " + ::gai_strerror(rc));
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    throw Error(std::string("socket: ") + std::strerror(errno));
  }
  const int connected = ::connect(fd, found->ai_addr, found->ai_addrlen);
  const int err = errno;
  ::freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (connected != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    ::close(fd);
    throw Error("no route to '" + host + "': " + std::strerror(connected != 0 ? err : errno));
  }
  ::close(fd);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

}  // namespace gossamer
