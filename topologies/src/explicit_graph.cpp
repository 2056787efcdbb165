// A fixed directed graph from YAML: rank j splits its push-sum mass
// uniformly over itself and its out-neighbours, 4P + 4 bytes per out-edge per
// step. Registered as "explicit" with key `edges` (checked: ranks exist, every
// rank has an out-edge, strongly connected).
#include "gossamer/topologies/topologies.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "common.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::topologies {

using namespace detail;

namespace {

std::size_t toIndex(int v) { return static_cast<std::size_t>(v); }
std::string pairText(const std::pair<int, int>& p) {
  return "[" + std::to_string(p.first) + ", " + std::to_string(p.second) + "]";
}

const auto& edgesOf(const Config& c) { return c.get<std::vector<std::pair<int, int>>>("topology.edges"); }

/// Ranks reachable from rank 0 along `adjacency`.
std::vector<bool> reachableFromZero(const std::vector<std::vector<int>>& adjacency) {
  std::vector<bool> seen(adjacency.size(), false);
  std::vector<int> stack{0};
  seen[0] = true;
  while (!stack.empty()) {
    const int r = stack.back();
    stack.pop_back();
    for (int next : adjacency[toIndex(r)]) {
      if (!seen[toIndex(next)]) {
        seen[toIndex(next)] = true;
        stack.push_back(next);
      }
    }
  }
  return seen;
}

/// topology.edges: ranks below world_size, an out-edge from every rank, and a
/// strongly connected graph (every rank's updates reach every other rank).
std::optional<ConfigIssue> checkEdges(const Config& c) {
  const std::string key = "topology.edges";
  const std::vector<std::pair<int, int>>& edges = edgesOf(c);
  if (edges.empty()) return std::nullopt;
  const auto n = toIndex(c.worldSize());
  std::vector<std::vector<int>> out(n), in(n);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const auto [from, to] = edges[i];
    for (int r : {from, to}) {
      if (toIndex(r) >= n) {
        return ConfigIssue{indexedKey(key, i), "rank " + std::to_string(r) + " in " + pairText(edges[i]) +
                                                   " does not exist (" + rankRangeText(c.worldSize()) + ")"};
      }
    }
    out[toIndex(from)].push_back(to);
    in[toIndex(to)].push_back(from);
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (out[r].empty()) {
      return ConfigIssue{key,
                         "rank " + std::to_string(r) + " has no out-edge (every rank must send to a peer)"};
    }
  }
  const std::vector<bool> forward = reachableFromZero(out);
  const std::vector<bool> backward = reachableFromZero(in);
  for (std::size_t r = 0; r < n; ++r) {
    if (!forward[r]) {
      return ConfigIssue{key, "the graph is not strongly connected: rank " + std::to_string(r) +
                                  " cannot be reached from rank 0"};
    }
    if (!backward[r]) {
      return ConfigIssue{key, "the graph is not strongly connected: rank 0 cannot be reached from rank " +
                                  std::to_string(r)};
    }
  }
  return std::nullopt;
}

/// topology.kind explicit takes its graph from topology.edges.
std::optional<ConfigIssue> checkExplicitHasEdges(const Config& c) {
  if (c.get<std::string>("topology.kind") != "explicit" || !edgesOf(c).empty()) return std::nullopt;
  return ConfigIssue{"topology.kind",
                     "'explicit' needs the graph in topology.edges (a non-empty list of [from, to] pairs)"};
}

}  // namespace

ExplicitGraph::ExplicitGraph(int worldSize, std::vector<std::pair<int, int>> edges)
    : n_(worldSize), out_(static_cast<std::size_t>(worldSize)), in_(static_cast<std::size_t>(worldSize)) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  for (const auto& [from, to] : edges) {
    GOSSAMER_ENFORCE(from >= 0 && from < n_ && to >= 0 && to < n_,
                     "edge (" << from << ", " << to << ") outside world size " << n_);
    GOSSAMER_ENFORCE(from != to, "self-loop at rank " << from);
    auto& o = out_[static_cast<std::size_t>(from)];
    GOSSAMER_ENFORCE(std::find(o.begin(), o.end(), to) == o.end(),
                     "duplicate edge (" << from << ", " << to << ")");
    o.push_back(to);
    in_[static_cast<std::size_t>(to)].push_back(from);
  }
}

PeerSet ExplicitGraph::peers(int rank, std::uint64_t, int) const {
  checkRank(rank, n_);
  PeerSet p;
  const auto ur = static_cast<std::size_t>(rank);
  p.sendTo = out_[ur];
  p.recvFrom = in_[ur];
  p.selfWeight = 1.0 / static_cast<double>(out_[ur].size() + 1);
  for (int j : in_[ur])
    p.recvWeights.push_back(1.0 / static_cast<double>(out_[static_cast<std::size_t>(j)].size() + 1));
  return p;
}

void registerExplicitGraph(Registry& registry) {
  registry.addTopology(
      "explicit", [](const Config& c) { return std::make_unique<ExplicitGraph>(c.worldSize(), edgesOf(c)); },
      KeySet()
          .intPairList("edges", 0, kMaxWorldSize - 1, true, true,
                       "directed edges [from, to]: no self-loops or duplicates, strongly connected")
          .namesRanks(RankKey::kEdges)
          .rule(checkExplicitHasEdges)
          .rule(checkEdges));
}

}  // namespace gossamer::topologies
