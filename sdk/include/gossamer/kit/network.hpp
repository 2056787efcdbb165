// The job's network as its YAML declares it (`network:`): which ranks share
// an island of fast links, and how fast the links inside an island and
// between islands are. Components that care where their peers are read it:
// hierarchical groups follow the islands, the bandwidth-aware roulette draws
// slow links less often, and the fault injector delays messages between
// islands.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/schema.hpp"

namespace gossamer {

/// The islands of a job and their links' bandwidths.
class NetworkLayout {
 public:
  /// Reads `network.islands`, `network.inside_gbps`, `network.between_gbps`
  /// and `network.between_delay_ms` of a completed, validated Config. With
  /// no islands given, every rank is in one island.
  /// @throws InvalidArgument if the keys are not set (a Config not completed).
  static NetworkLayout from(const Config& config);

  /// One island of `worldSize` ranks, `gbps` everywhere.
  /// @throws InvalidArgument unless worldSize >= 1 and gbps > 0.
  static NetworkLayout uniform(int worldSize, double gbps = 10.0);

  /// Islands as given (a partition of [0, worldSize), checked).
  /// @throws InvalidArgument naming the rank that is missing, repeated or out of range,
  ///         or a bandwidth that is not positive.
  NetworkLayout(int worldSize, std::vector<std::vector<int>> islands, double insideGbps, double betweenGbps,
                double betweenDelaySeconds = 0.0);

  int worldSize() const { return static_cast<int>(islandOf_.size()); }
  /// The islands, each a list of ranks in increasing order, in the order given.
  const std::vector<std::vector<int>>& islands() const { return islands_; }
  /// Island index of `rank` (0-based).
  /// @throws InvalidArgument for a rank outside [0, worldSize).
  int islandOf(int rank) const;
  bool sameIsland(int a, int b) const { return islandOf(a) == islandOf(b); }
  /// Link bandwidth between ranks `a` and `b`, Gbit/s (inside_gbps within an
  /// island, between_gbps across).
  double bandwidthGbps(int a, int b) const;
  /// One-way delay added between islands, seconds (0 within an island).
  double delaySeconds(int a, int b) const { return sameIsland(a, b) ? 0.0 : betweenDelaySeconds_; }
  double insideGbps() const { return insideGbps_; }
  double betweenGbps() const { return betweenGbps_; }
  /// One-way delay added between islands, seconds (network.between_delay_ms).
  double betweenDelaySeconds() const { return betweenDelaySeconds_; }

 private:
  std::vector<std::vector<int>> islands_;
  std::vector<int> islandOf_;
  double insideGbps_ = 10.0, betweenGbps_ = 10.0, betweenDelaySeconds_ = 0.0;
};

/// Whether `key` (a list of lists of ranks) is empty or a partition of
/// [0, world_size); if not, the issue names the offending element and calls
/// the lists `noun`s ("island", "group"). For rules of keys such as
/// network.islands and algorithm.groups.
std::optional<ConfigIssue> checkRankPartition(const Config& c, const std::string& key,
                                              const std::string& noun);

/// The islands `islands` (ranks of the job) over a membership view whose
/// members are `members` (ranks of the job, ascending; member k is rank k of
/// the view): each island keeps the ranks that are members, as their ranks in
/// the view, and an island with none left is dropped. Ranks of the job that
/// are not members are left out; empty islands give empty (one island).
/// ConfigSchema::inView renumbers the keys marked RankKey::kPartition
/// (network.islands, algorithm.groups) with it over every view, so that the
/// components that read them see the view's ranks.
std::vector<std::vector<int>> islandsInView(const std::vector<std::vector<int>>& islands,
                                            const std::vector<int>& members);

namespace detail {
/// Declares the `network:` section (sdk/src/network.cpp).
void addNetworkKeys(ConfigSchema& schema);

}  // namespace detail

/// This host's IPv4 address on the interface the kernel routes `host` (a
/// name or an IPv4 address) through: a UDP socket connected to it (no packet
/// is sent) and getsockname(2). "127.0.0.1" for a loopback host.
/// @throws Error naming `host` if it does not resolve to IPv4 or has no route.
std::string routeAddressTo(const std::string& host);

}  // namespace gossamer
