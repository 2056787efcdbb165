// Ring and fair-roulette topologies, and tensor-aligned segmentation.
// Fair roulette: paper 004_659e3573d5645e2e.txt, Algorithm 2 (see the header
// for the dead-end rule).
#include "gossamer/topologies/topologies.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "gossamer/errors.hpp"

namespace gossamer::topologies {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

double uniform01(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

// Index drawn with probability proportional to weights[k] (sum > 0).
int drawWeighted(std::mt19937_64& g, const std::vector<double>& weights, double sum) {
  double u = uniform01(g) * sum;
  int last = -1;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    if (weights[k] <= 0) continue;
    last = static_cast<int>(k);
    if (u < weights[k]) return last;
    u -= weights[k];
  }
  return last;  // rounding: the last positive entry
}

void checkRank(int rank, int n) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < n, "rank " << rank << " outside world size " << n);
}

}  // namespace

Ring::Ring(int worldSize) : n_(worldSize) { GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize); }

PeerSet Ring::peers(int rank, std::uint64_t, int) const {
  checkRank(rank, n_);
  PeerSet p;
  if (n_ == 1) return p;
  const int left = (rank + n_ - 1) % n_, right = (rank + 1) % n_;
  if (n_ == 2) {
    p.sendTo = {right};
    p.recvFrom = {left};
    p.selfWeight = 0.5;
    p.recvWeights = {0.5};
    return p;
  }
  p.sendTo = {left, right};
  p.recvFrom = {left, right};
  p.selfWeight = 1.0 / 3;
  p.recvWeights = {1.0 / 3, 1.0 / 3};
  return p;
}

FairRoulette::FairRoulette(int worldSize, std::uint64_t seed, std::vector<std::vector<double>> probabilities,
                           Selection selection)
    : n_(worldSize), seed_(seed), table_(std::move(probabilities)), selection_(selection) {
  GOSSAMER_ENFORCE(worldSize >= 2, "fair roulette needs at least 2 ranks, got " << worldSize);
  if (table_.empty()) {
    if (selection_ == Selection::kMatched) {  // uniform target
      table_.assign(static_cast<std::size_t>(n_), std::vector<double>(static_cast<std::size_t>(n_), 1.0));
      for (int i = 0; i < n_; ++i) table_[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = 0;
      decompose();
      table_.clear();
    }
    return;
  }
  GOSSAMER_ENFORCE(static_cast<int>(table_.size()) == n_,
                   "roulette table has " << table_.size() << " rows for world size " << n_);
  for (int i = 0; i < n_; ++i) {
    auto& row = table_[static_cast<std::size_t>(i)];
    GOSSAMER_ENFORCE(static_cast<int>(row.size()) == n_,
                     "roulette row " << i << " has " << row.size() << " entries, expected " << n_);
    double mass = 0;
    for (int j = 0; j < n_; ++j) {
      const double v = row[static_cast<std::size_t>(j)];
      GOSSAMER_ENFORCE(std::isfinite(v) && v >= 0, "roulette entry (" << i << "," << j << ") = " << v);
      if (j != i) mass += v;
    }
    GOSSAMER_ENFORCE(mass > 0, "roulette row " << i << " gives no probability to any other rank");
    row[static_cast<std::size_t>(i)] = 0;  // nobody sends to itself
  }
  if (selection_ == Selection::kMatched) decompose();
}

namespace {

// Kuhn's augmenting paths on the support {m(i,j) > eps}, trying large entries
// first. Returns dest per row, or empty if there is no perfect matching.
std::vector<int> perfectMatching(const Eigen::MatrixXd& m, double eps) {
  const int n = static_cast<int>(m.rows());
  std::vector<std::vector<int>> adj(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j)
      if (m(i, j) > eps) adj[static_cast<std::size_t>(i)].push_back(j);
    std::sort(adj[static_cast<std::size_t>(i)].begin(), adj[static_cast<std::size_t>(i)].end(),
              [&](int a, int b) { return m(i, a) > m(i, b); });
  }
  std::vector<int> owner(static_cast<std::size_t>(n), -1), dest(static_cast<std::size_t>(n), -1);
  std::vector<char> seen;
  std::function<bool(int)> augment = [&](int i) {
    for (int j : adj[static_cast<std::size_t>(i)]) {
      if (seen[static_cast<std::size_t>(j)]) continue;
      seen[static_cast<std::size_t>(j)] = 1;
      const int o = owner[static_cast<std::size_t>(j)];
      if (o < 0 || augment(o)) {
        owner[static_cast<std::size_t>(j)] = i;
        dest[static_cast<std::size_t>(i)] = j;
        return true;
      }
    }
    return false;
  };
  for (int i = 0; i < n; ++i) {
    seen.assign(static_cast<std::size_t>(n), 0);
    if (!augment(i)) return {};
  }
  return dest;
}

}  // namespace

// Sinkhorn balancing, then a Birkhoff-von Neumann decomposition (greedy:
// subtract the smallest entry along a perfect matching of the support).
void FairRoulette::decompose() {
  target_ = Eigen::MatrixXd::Zero(n_, n_);
  for (int i = 0; i < n_; ++i)
    for (int j = 0; j < n_; ++j)
      target_(i, j) = table_[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  bool balanced = false;
  for (int it = 0; it < 100000 && !balanced; ++it) {
    target_ = (target_.array().colwise() / target_.rowwise().sum().array()).matrix();
    const Eigen::RowVectorXd cols = target_.colwise().sum();
    GOSSAMER_ENFORCE((cols.array() > 0).all(),
                     "roulette table: some rank can never be chosen, so no fair assignment exists");
    target_ = (target_.array().rowwise() / cols.array()).matrix();
    balanced = (target_.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-13;
  }
  GOSSAMER_ENFORCE(balanced, "roulette table admits no fair (doubly stochastic) assignment");
  Eigen::MatrixXd rest = target_;
  double left = 1.0;
  std::vector<double> theta;
  while (left > 1e-12) {
    auto dest = perfectMatching(rest, 1e-14);
    if (dest.empty()) break;  // only rounding residue is left
    double t = left;
    for (int i = 0; i < n_; ++i) t = std::min(t, rest(i, dest[static_cast<std::size_t>(i)]));
    for (int i = 0; i < n_; ++i) rest(i, dest[static_cast<std::size_t>(i)]) -= t;
    left -= t;
    perms_.push_back(std::move(dest));
    theta.push_back(t);
  }
  GOSSAMER_ENFORCE(!perms_.empty(), "roulette table admits no fair assignment");
  const double total = std::accumulate(theta.begin(), theta.end(), 0.0);
  double acc = 0;
  for (double t : theta) cumulative_.push_back(acc += t / total);
  cumulative_.back() = 1.0;
}

std::vector<int> FairRoulette::destinations(std::uint64_t step, int segment) const {
  std::mt19937_64 g(
      splitmix64(seed_ ^ splitmix64(step ^ splitmix64(static_cast<std::uint64_t>(segment) + 1))));
  if (selection_ == Selection::kMatched) {
    const double u = uniform01(g);
    const auto k = static_cast<std::size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) -
                                            cumulative_.begin());
    return perms_[std::min(k, perms_.size() - 1)];
  }
  std::vector<int> dest(static_cast<std::size_t>(n_), -1);
  std::vector<char> taken(static_cast<std::size_t>(n_), 0);
  std::vector<double> row(static_cast<std::size_t>(n_));
  for (int i = 0; i < n_; ++i) {
    double sum = 0;
    for (int j = 0; j < n_; ++j) {
      const auto uj = static_cast<std::size_t>(j);
      double w = table_.empty() ? 1.0 : table_[static_cast<std::size_t>(i)][uj];
      if (j == i || taken[uj]) w = 0;
      row[uj] = w;
      sum += w;
    }
    if (sum <= 0) {
      // Either the dead end (only i itself is left; i == n-1) or a table whose
      // free entries are all zero: fall back to the free ranks uniformly.
      for (int j = 0; j < n_; ++j)
        row[static_cast<std::size_t>(j)] = (j != i && !taken[static_cast<std::size_t>(j)]) ? 1.0 : 0.0;
      sum = std::accumulate(row.begin(), row.end(), 0.0);
    }
    if (sum <= 0) {
      // Dead end: i == n-1 and only i is free. Swap with an earlier rank j.
      std::vector<double> w(static_cast<std::size_t>(n_), 0.0);
      double ws = 0;
      for (int j = 0; j < i; ++j) {
        w[static_cast<std::size_t>(j)] =
            table_.empty()
                ? 1.0
                : std::max(table_[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)], 1e-12);
        ws += w[static_cast<std::size_t>(j)];
      }
      const int j = drawWeighted(g, w, ws);
      dest[static_cast<std::size_t>(i)] = dest[static_cast<std::size_t>(j)];
      dest[static_cast<std::size_t>(j)] = i;
      taken[static_cast<std::size_t>(i)] = 1;
      continue;
    }
    const int d = drawWeighted(g, row, sum);
    dest[static_cast<std::size_t>(i)] = d;
    taken[static_cast<std::size_t>(d)] = 1;
  }
  return dest;
}

std::vector<int> FairRoulette::destinationsWithoutFairness(std::uint64_t step, int segment) const {
  std::mt19937_64 g(
      splitmix64(seed_ ^ splitmix64(step ^ splitmix64(static_cast<std::uint64_t>(segment) + 1))));
  std::vector<int> dest(static_cast<std::size_t>(n_));
  std::vector<double> row(static_cast<std::size_t>(n_));
  for (int i = 0; i < n_; ++i) {
    double sum = 0;
    for (int j = 0; j < n_; ++j) {
      const double w =
          j == i ? 0.0
                 : (table_.empty() ? 1.0 : table_[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]);
      row[static_cast<std::size_t>(j)] = w;
      sum += w;
    }
    dest[static_cast<std::size_t>(i)] = drawWeighted(g, row, sum);
  }
  return dest;
}

PeerSet FairRoulette::peers(int rank, std::uint64_t step, int segment) const {
  checkRank(rank, n_);
  const auto dest = destinations(step, segment);
  PeerSet p;
  p.sendTo = {dest[static_cast<std::size_t>(rank)]};
  for (int j = 0; j < n_; ++j)
    if (dest[static_cast<std::size_t>(j)] == rank) p.recvFrom.push_back(j);
  p.selfWeight = 0.5;
  p.recvWeights.assign(p.recvFrom.size(), 0.5 / static_cast<double>(p.recvFrom.size()));
  return p;
}

DirectedExponential::DirectedExponential(int worldSize, int peersPerStep)
    : n_(worldSize), peersPerStep_(peersPerStep) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  GOSSAMER_ENFORCE(peersPerStep == 1 || peersPerStep == 2,
                   "peers per step must be 1 or 2, got " << peersPerStep);
  for (long o = 1; o < n_; o *= 2) offsets_.push_back(static_cast<int>(o));
}

std::vector<int> DirectedExponential::offsetsAt(std::uint64_t step) const {
  if (offsets_.empty()) return {};
  const auto m = offsets_.size();
  if (peersPerStep_ == 1) return {offsets_[step % m]};
  const int a = offsets_[(2 * step) % m], b = offsets_[(2 * step + 1) % m];
  return a == b ? std::vector<int>{a} : std::vector<int>{a, b};
}

PeerSet DirectedExponential::peers(int rank, std::uint64_t step, int) const {
  checkRank(rank, n_);
  PeerSet p;
  const auto offs = offsetsAt(step);
  const double w = 1.0 / static_cast<double>(offs.size() + 1);
  p.selfWeight = w;
  for (int o : offs) {
    p.sendTo.push_back((rank + o) % n_);
    p.recvFrom.push_back(((rank - o) % n_ + n_) % n_);
    p.recvWeights.push_back(w);
  }
  return p;
}

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

UnfairRoulette::UnfairRoulette(int worldSize, std::uint64_t seed,
                               std::vector<std::vector<double>> probabilities)
    : roulette_(worldSize, seed, std::move(probabilities)) {}

PeerSet UnfairRoulette::peers(int rank, std::uint64_t step, int segment) const {
  const int n = roulette_.worldSize();
  checkRank(rank, n);
  const auto dest = roulette_.destinationsWithoutFairness(step, segment);
  PeerSet p;
  p.sendTo = {dest[static_cast<std::size_t>(rank)]};
  for (int j = 0; j < n; ++j)
    if (dest[static_cast<std::size_t>(j)] == rank) p.recvFrom.push_back(j);
  const double w = 1.0 / static_cast<double>(p.recvFrom.size() + 1);
  p.selfWeight = w;
  p.recvWeights.assign(p.recvFrom.size(), w);
  return p;
}

std::vector<std::vector<int>> makeGroups(int worldSize, int groupSize, std::vector<std::vector<int>> groups) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  if (groups.empty()) {
    GOSSAMER_ENFORCE(groupSize >= 1, "group size " << groupSize);
    for (int b = 0; b < worldSize; b += groupSize) {
      groups.emplace_back();
      for (int r = b; r < std::min(worldSize, b + groupSize); ++r) groups.back().push_back(r);
    }
    return groups;
  }
  std::vector<int> seen(static_cast<std::size_t>(worldSize), 0);
  for (auto& g : groups) {
    GOSSAMER_ENFORCE(!g.empty(), "empty group");
    std::sort(g.begin(), g.end());
    for (int r : g) {
      GOSSAMER_ENFORCE(r >= 0 && r < worldSize,
                       "rank " << r << " in a group is outside world size " << worldSize);
      GOSSAMER_ENFORCE(seen[static_cast<std::size_t>(r)]++ == 0, "rank " << r << " is in two groups");
    }
  }
  for (int r = 0; r < worldSize; ++r)
    GOSSAMER_ENFORCE(seen[static_cast<std::size_t>(r)], "rank " << r << " is in no group");
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::vector<std::pair<std::size_t, std::size_t>> segmentsAlongTensors(
    const std::vector<std::size_t>& tensorSizes, int segments) {
  GOSSAMER_ENFORCE(segments >= 1, "segments must be >= 1, got " << segments);
  const std::size_t total = std::accumulate(tensorSizes.begin(), tensorSizes.end(), std::size_t{0});
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (total == 0) return out;
  const std::size_t s = std::min<std::size_t>(static_cast<std::size_t>(segments), total);
  const std::size_t target = (total + s - 1) / s;
  // Pieces: tensors, with tensors larger than the target cut into equal parts.
  std::vector<std::size_t> cuts;  // piece ends
  std::size_t at = 0;
  for (std::size_t t : tensorSizes) {
    if (t == 0) continue;
    const std::size_t parts = (t + target - 1) / target;
    for (std::size_t k = 1; k <= parts; ++k) cuts.push_back(at + (t * k) / parts);
    at += t;
  }
  if (cuts.size() < s) {  // more segments than pieces: split evenly instead
    for (std::size_t q = 0; q < s; ++q) out.emplace_back((total * q) / s, (total * (q + 1)) / s);
    return out;
  }
  // Segment k ends at the piece end closest to k * total / s, leaving at least
  // one piece for each segment still to come.
  std::size_t begin = 0, lo = 0;
  for (std::size_t k = 1; k < s; ++k) {
    const std::size_t ideal = (total * k) / s;
    const std::size_t hi = cuts.size() - 1 - (s - k);
    std::size_t best = lo;
    for (std::size_t idx = lo; idx <= hi; ++idx) {
      const auto dist = [&](std::size_t c) { return c > ideal ? c - ideal : ideal - c; };
      if (dist(cuts[idx]) < dist(cuts[best])) best = idx;
    }
    out.emplace_back(begin, cuts[best]);
    begin = cuts[best];
    lo = best + 1;
  }
  out.emplace_back(begin, total);
  return out;
}

}  // namespace gossamer::topologies

#include "gossamer/registry.hpp"

namespace gossamer::topologies {
void registerBuiltins(Registry& registry) {
  registry.addTopology("ring", [](const Config& c) { return std::make_unique<Ring>(c.worldSize); });
  registry.addTopology("fair_roulette", [](const Config& c) -> std::unique_ptr<Topology> {
    if (c.worldSize < 2) return std::make_unique<Ring>(c.worldSize);  // one rank: nothing to mix
    // With a probability table the draws follow it exactly (Selection::kMatched);
    // without one, the paper's sequential Algorithm 2.
    return std::make_unique<FairRoulette>(c.worldSize, c.seed, c.topology.probabilities,
                                          c.topology.probabilities.empty()
                                              ? FairRoulette::Selection::kSequential
                                              : FairRoulette::Selection::kMatched);
  });
  registry.addTopology("directed_exponential", [](const Config& c) {
    return std::make_unique<DirectedExponential>(c.worldSize, c.topology.peersPerStep);
  });
  registry.addTopology("explicit", [](const Config& c) {
    return std::make_unique<ExplicitGraph>(c.worldSize, c.topology.edges);
  });
}
}  // namespace gossamer::topologies
