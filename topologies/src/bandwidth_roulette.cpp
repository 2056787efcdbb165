// The bandwidth-aware fair roulette: the random topology with fair peer
// selection of Crossover-SGD (Yeo et al., "Crossover-SGD: A gossip-based
// communication in distributed deep learning for alleviating large mini-batch
// problem and enhancing scalability", Sec. 3.2, Algorithm 2 and Theorem 3.1),
// made symmetric and weighted by the links' bandwidths from the job's
// `network:` section (gossamer/kit/network.hpp), so that segments cross the
// slow links between islands less often while the islands still mix. Registered
// as "bandwidth_roulette" with the key `topology.bandwidth_exponent`.
//
// A round (one step, one segment) pairs the ranks: a perfect matching for an
// even world size N, a matching that leaves one rank out for an odd N. The
// two ranks of a pair swap the segment and both keep the average, W(i,i) =
// W(i,j) = 1/2; the rank left out keeps its own, W(i,i) = 1. Every W is
// symmetric and doubly stochastic, so the average of the models is kept
// exactly and products of the W converge to the AllReduce matrix
// (Theorem 3.1), as with the fair roulette.
//
// Steps of the draw, the same on every rank from (seed, step, segment) alone
// (no messages):
//  1. Seed a std::mt19937_64 with splitmix64(seed ^ splitmix64(step ^
//     splitmix64(segment + 1))), as FairRoulette does.
//  2. While two or more ranks are unpaired, the caller is drawn uniformly
//     among them: its island A with probability c_A / U (c_A unpaired ranks
//     in A, U in all), then uniformly in A. It draws its partner's island B
//     with probability proportional to w(A, B) * (c_B - [A == B]), then the
//     partner uniformly among B's unpaired ranks. This is Algorithm 2's
//     roulette row (lines 2-8: the taken ranks zeroed, the row renormalised,
//     one choice) with the weights
//         w(A, B) = (bandwidth(A, B) / fastest link's bandwidth) ^ exponent,
//     except that a pair is taken on both sides at once.
//  3. A rank left over (odd N) sits the round out.
// Every weight is > 0 (enforced: >= kMinLinkWeight), so every pair has a
// positive probability and the expected mixing matrix keeps a spectral gap
// > 0 across islands. With one island, or exponent 0, every matching is
// equally likely (each rank's partner is uniform over the others); this is
// the uniform distribution the fair roulette aims at, not FairRoulette's
// draw itself (derangements, and its sequential order makes its marginals
// uneven), so the two are not bit-identical.
//
// Bytes on the wire per round: a paired rank sends its segment (4 bytes per
// float32 parameter of the segment) to its partner and receives as many; a
// rank left out sends nothing. Per step a rank sends at most 4P bytes (P
// parameters) in at most S messages (S segments), as with the fair roulette.
// With two islands of 4 ranks linked at 10 and 0.1 Gbit/s and the default
// exponent 1, 2.1% of the segments cross between the islands, against 56%
// for the fair roulette; the price is mixing between the islands: for two
// equal islands the spectral gap of E[W] is exactly that share (0.021
// against 0.57 for uniform pairs). docs/mixing.md has the figures.
//
// The exact pairing probabilities (pairProbabilities) come from a recursion
// over the vector of unpaired counts per island: the ranks of an island are
// exchangeable in the draw, so that vector is all that matters.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "common.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::topologies {

using namespace detail;

namespace {

const char* const kExponentKey = "topology.bandwidth_exponent";

std::size_t at(int v) { return static_cast<std::size_t>(v); }

// Uniform index in [0, size) (size >= 1) from the top 53 bits of one draw.
std::size_t uniformIndex(std::mt19937_64& g, std::size_t size) {
  const auto k = static_cast<std::size_t>(uniform01(g) * static_cast<double>(size));
  return std::min(k, size - 1);
}

// Removes and returns v[k] (order not kept).
int takeAt(std::vector<int>& v, std::size_t k) {
  const int r = v[k];
  v[k] = v.back();
  v.pop_back();
  return r;
}

// The slowest and the fastest link of a layout, Gbit/s (a link joins two
// different ranks: an island of one rank has no link inside).
std::pair<double, double> linkRange(const NetworkLayout& net) {
  const auto& islands = net.islands();
  double slow = 0, fast = 0;
  bool any = false;
  for (std::size_t a = 0; a < islands.size(); ++a) {
    for (std::size_t b = a; b < islands.size(); ++b) {
      if (a == b && islands[a].size() < 2) continue;
      const double bw = net.bandwidthGbps(islands[a][0], a == b ? islands[a][1] : islands[b][0]);
      slow = any ? std::min(slow, bw) : bw;
      fast = any ? std::max(fast, bw) : bw;
      any = true;
    }
  }
  return {slow, fast};
}

// Why `exponent` is refused for links from `slow` to `fast` Gbit/s, or "".
std::string exponentProblem(double exponent, double slow, double fast) {
  std::ostringstream why;
  if (!(exponent >= 0) || !std::isfinite(exponent)) {
    why << "must be a finite number >= 0, got " << exponent;
  } else if (std::pow(slow / fast, exponent) < BandwidthRoulette::kMinLinkWeight) {
    // (slow/fast)^e >= kMin  <=>  e <= log(kMin) / log(slow/fast)
    why << exponent << " makes the slowest link (" << slow << " Gbit/s against " << fast << ") weigh "
        << std::pow(slow / fast, exponent) << ", below " << BandwidthRoulette::kMinLinkWeight
        << ": it would practically never be drawn and the islands would not mix; at most "
        << std::log(BandwidthRoulette::kMinLinkWeight) / std::log(slow / fast) << " for these bandwidths";
  }
  return why.str();
}

// topology.bandwidth_exponent against the network's bandwidths, when this
// topology is the selected one.
std::optional<ConfigIssue> checkExponent(const Config& c) {
  if (c.get<std::string>("topology.kind") != "bandwidth_roulette" || c.worldSize() < 2) return std::nullopt;
  const auto [slow, fast] = linkRange(NetworkLayout::from(c));
  const std::string why = exponentProblem(c.get<double>(kExponentKey), slow, fast);
  if (why.empty()) return std::nullopt;
  return ConfigIssue{kExponentKey, why};
}

}  // namespace

BandwidthRoulette::BandwidthRoulette(NetworkLayout network, std::uint64_t seed, double exponent)
    : network_(std::move(network)), seed_(seed), exponent_(exponent) {
  GOSSAMER_ENFORCE(network_.worldSize() >= 2,
                   "bandwidth roulette needs at least 2 ranks, got " << network_.worldSize());
  const auto [slow, fast] = linkRange(network_);
  const std::string why = exponentProblem(exponent, slow, fast);
  GOSSAMER_ENFORCE(why.empty(), kExponentKey << ": " << why);
  const auto& islands = network_.islands();
  islandWeight_.assign(islands.size(), std::vector<double>(islands.size(), 1.0));
  for (std::size_t a = 0; a < islands.size(); ++a)
    for (std::size_t b = 0; b < islands.size(); ++b)
      islandWeight_[a][b] = std::pow(network_.bandwidthGbps(islands[a][0], islands[b][0]) / fast, exponent);
}

double BandwidthRoulette::linkWeight(int a, int b) const {
  return islandWeight_[at(network_.islandOf(a))][at(network_.islandOf(b))];
}

std::vector<int> BandwidthRoulette::partners(std::uint64_t step, int segment) const {
  std::mt19937_64 g(
      splitmix64(seed_ ^ splitmix64(step ^ splitmix64(static_cast<std::uint64_t>(segment) + 1))));
  const int n = worldSize();
  std::vector<std::vector<int>> unpaired = network_.islands();
  const std::size_t k = unpaired.size();
  std::vector<int> partner(at(n), -1);
  std::vector<double> w(k);
  int left = n;
  while (left >= 2) {
    for (std::size_t a = 0; a < k; ++a) w[a] = static_cast<double>(unpaired[a].size());
    const auto a = at(drawWeighted(g, w, static_cast<double>(left)));
    const int i = takeAt(unpaired[a], uniformIndex(g, unpaired[a].size()));
    double sum = 0;
    for (std::size_t b = 0; b < k; ++b)
      sum += w[b] = islandWeight_[a][b] * static_cast<double>(unpaired[b].size());
    const auto b = at(drawWeighted(g, w, sum));
    const int j = takeAt(unpaired[b], uniformIndex(g, unpaired[b].size()));
    partner[at(i)] = j;
    partner[at(j)] = i;
    left -= 2;
  }
  for (const auto& island : unpaired)
    for (int r : island) partner[at(r)] = r;  // odd N: the one left out
  return partner;
}

PeerSet BandwidthRoulette::peers(int rank, std::uint64_t step, int segment) const {
  checkRank(rank, worldSize());
  const int j = partners(step, segment)[at(rank)];
  PeerSet p;
  if (j == rank) return p;  // sits the round out: keeps its own (selfWeight 1)
  p.sendTo = {j};
  p.recvFrom = {j};
  p.selfWeight = 0.5;
  p.recvWeights = {0.5};
  return p;
}

Eigen::MatrixXd BandwidthRoulette::pairProbabilities() const {
  const auto& islands = network_.islands();
  const std::size_t k = islands.size();
  // State: unpaired count per island, as a mixed-radix index; a pair lowers
  // the index, so one pass from the full state down sees every state after
  // all the mass that reaches it.
  std::vector<std::size_t> stride(k);
  std::size_t states = 1, full = 0;
  for (std::size_t a = 0; a < k; ++a) {
    stride[a] = states;
    full += islands[a].size() * states;
    GOSSAMER_ENFORCE(states <= kMaxExactStates / (islands[a].size() + 1),
                     "the exact pairing probabilities of " << k << " islands walk more than "
                                                           << kMaxExactStates
                                                           << " states; estimate them instead "
                                                              "(estimateExpectedMixing)");
    states *= islands[a].size() + 1;
  }
  std::vector<double> mass(states, 0.0);
  mass[full] = 1.0;
  Eigen::MatrixXd pairs = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(k), static_cast<Eigen::Index>(k));
  std::vector<double> leftOut(k, 0.0);
  std::vector<std::size_t> c(k);
  for (std::size_t idx = full + 1; idx-- > 0;) {
    const double m = mass[idx];
    if (m == 0) continue;
    std::size_t u = 0;
    for (std::size_t a = 0; a < k; ++a) u += c[a] = (idx / stride[a]) % (islands[a].size() + 1);
    if (u == 1) {
      for (std::size_t a = 0; a < k; ++a) leftOut[a] += c[a] != 0 ? m : 0.0;
      continue;
    }
    for (std::size_t a = 0; a < k; ++a) {
      if (c[a] == 0) continue;
      double sum = 0;
      for (std::size_t b = 0; b < k; ++b) sum += islandWeight_[a][b] * static_cast<double>(c[b] - (a == b));
      for (std::size_t b = 0; b < k; ++b) {
        const std::size_t free = c[b] - (a == b);
        if (free == 0) continue;
        const double p = m * static_cast<double>(c[a]) / static_cast<double>(u) * islandWeight_[a][b] *
                         static_cast<double>(free) / sum;
        pairs(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b)) += p;
        mass[idx - stride[a] - stride[b]] += p;
      }
    }
  }
  // Expected pairs between islands A and B, spread over their rank pairs.
  const int n = worldSize();
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(n, n);
  for (std::size_t a = 0; a < k; ++a) {
    const auto na = static_cast<double>(islands[a].size());
    for (std::size_t b = 0; b < k; ++b) {
      const auto ea = static_cast<Eigen::Index>(a), eb = static_cast<Eigen::Index>(b);
      const double each =
          a == b ? pairs(ea, ea) / (na * (na - 1) / 2)
                 : (pairs(ea, eb) + pairs(eb, ea)) / (na * static_cast<double>(islands[b].size()));
      for (int i : islands[a])
        for (int j : islands[b])
          if (i != j) out(i, j) = each;
    }
    for (int i : islands[a]) out(i, i) = leftOut[a] / na;
  }
  return out;
}

Eigen::MatrixXd BandwidthRoulette::expectedMixingMatrix() const {
  const int n = worldSize();
  return (Eigen::MatrixXd::Identity(n, n) + pairProbabilities()) / 2;
}

double BandwidthRoulette::expectedCrossIslandShare() const {
  const Eigen::MatrixXd p = pairProbabilities();
  double cross = 0, all = 0;
  for (int i = 0; i < worldSize(); ++i)
    for (int j = 0; j < worldSize(); ++j) {
      if (i == j) continue;
      all += p(i, j);
      if (!network_.sameIsland(i, j)) cross += p(i, j);
    }
  return all > 0 ? cross / all : 0.0;
}

void registerBandwidthRoulette(Registry& registry) {
  registry.addTopology(
      "bandwidth_roulette",
      [](const Config& c) -> std::unique_ptr<Topology> {
        if (c.worldSize() < 2) return std::make_unique<Ring>(c.worldSize());  // one rank: nothing to mix
        return std::make_unique<BandwidthRoulette>(NetworkLayout::from(c), c.seed(),
                                                   c.get<double>(kExponentKey));
      },
      KeySet()
          .real("bandwidth_exponent", 1.0, {0.0, true, 64.0, true},
                "how strongly slow links are avoided: a pair's link is drawn with weight (its Gbit/s / the "
                "fastest link's)^exponent (network: section); 0 = uniform, 1 = in proportion to bandwidth; "
                "the slowest link's weight must stay >= 1e-12")
          .onlyWhenSelected()
          .rule(checkExponent));
}

}  // namespace gossamer::topologies
