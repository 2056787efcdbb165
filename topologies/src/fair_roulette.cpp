// The fair roulette of Crossover-SGD (Yeo et al., "Crossover-SGD: A
// gossip-based communication in distributed deep learning for alleviating large
// mini-batch problem and enhancing scalability", Sec. 3.2, Algorithm 2): per
// (step, segment) the destinations form a derangement, so
// every rank sends and receives exactly one segment (4P/S bytes each way for
// S segments of P float32 parameters); with a probability table, Sinkhorn
// balancing and a Birkhoff-von Neumann decomposition make the draws follow the
// balanced table exactly (see topologies.hpp). Registered as
// "fair_roulette" with key `probabilities`.
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
const auto& probabilitiesOf(const Config& c) {
  return c.get<std::vector<std::vector<double>>>("topology.probabilities");
}
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

// Zeroes the entries of m (n x n, non-negative) that lie on no perfect
// matching of its support. Sinkhorn balancing converges only at about 1/k
// on a support with such entries (it drives them to 0 in the limit), so they
// go first: then the balanced matrix is exact to rounding. An entry (i, j)
// off a perfect matching M lies on another one exactly when rank i and the
// row that M gives column j are in one strongly connected component of
// the graph with an arc from i to that row for every such entry (an
// alternating cycle through it). Returns false if the support has no perfect
// matching at all.
bool pruneToMatchable(Eigen::MatrixXd& m) {
  const int n = static_cast<int>(m.rows());
  const std::vector<int> dest = perfectMatching(m, 0.0);
  if (dest.empty()) return false;
  std::vector<int> owner(toIndex(n));
  for (int i = 0; i < n; ++i) owner[toIndex(dest[toIndex(i)])] = i;
  std::vector<std::vector<int>> arcs(toIndex(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (m(i, j) > 0 && j != dest[toIndex(i)]) arcs[toIndex(i)].push_back(owner[toIndex(j)]);
  // Tarjan's strongly connected components, iteratively (n may be thousands).
  std::vector<int> index(toIndex(n), -1), low(toIndex(n), 0), component(toIndex(n), -1), stack,
      next(toIndex(n), 0);
  std::vector<char> onStack(toIndex(n), 0);
  int counter = 0, components = 0;
  for (int root = 0; root < n; ++root) {
    if (index[toIndex(root)] >= 0) continue;
    std::vector<int> path{root};
    index[toIndex(root)] = low[toIndex(root)] = counter++;
    stack.push_back(root);
    onStack[toIndex(root)] = 1;
    while (!path.empty()) {
      const int v = path.back();
      auto& k = next[toIndex(v)];
      if (k < static_cast<int>(arcs[toIndex(v)].size())) {
        const int w = arcs[toIndex(v)][toIndex(k++)];
        if (index[toIndex(w)] < 0) {
          index[toIndex(w)] = low[toIndex(w)] = counter++;
          stack.push_back(w);
          onStack[toIndex(w)] = 1;
          path.push_back(w);
        } else if (onStack[toIndex(w)]) {
          low[toIndex(v)] = std::min(low[toIndex(v)], index[toIndex(w)]);
        }
        continue;
      }
      path.pop_back();
      if (!path.empty()) low[toIndex(path.back())] = std::min(low[toIndex(path.back())], low[toIndex(v)]);
      if (low[toIndex(v)] != index[toIndex(v)]) continue;
      for (int w = -1; w != v;) {
        w = stack.back();
        stack.pop_back();
        onStack[toIndex(w)] = 0;
        component[toIndex(w)] = components;
      }
      ++components;
    }
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (m(i, j) > 0 && j != dest[toIndex(i)] &&
          component[toIndex(i)] != component[toIndex(owner[toIndex(j)])])
        m(i, j) = 0;
  return true;
}

/// topology.probabilities: world_size x world_size, every row with some weight
/// on another rank (a single rank has no one to pick: nothing to require).
std::optional<ConfigIssue> checkProbabilities(const Config& c) {
  const std::string key = "topology.probabilities";
  const std::vector<std::vector<double>>& rows = probabilitiesOf(c);
  if (rows.empty()) return std::nullopt;  // Uniform.
  const auto n = toIndex(c.worldSize());
  if (rows.size() != n) {
    return ConfigIssue{key, "must be a world_size x world_size table (" + std::to_string(n) + " rows), got " +
                                std::to_string(rows.size()) + " rows"};
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i].size() != n) {
      return ConfigIssue{indexedKey(key, i), "row must have world_size (" + std::to_string(n) +
                                                 ") entries, got " + std::to_string(rows[i].size())};
    }
  }
  if (n < 2) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i) {
    double offDiagonal = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i) offDiagonal += rows[i][j];
    }
    if (!(offDiagonal > 0.0) || !std::isfinite(offDiagonal)) {
      return ConfigIssue{
          indexedKey(key, i),
          "rank " + std::to_string(i) +
              " needs a positive, finite total weight on the other ranks (the diagonal is ignored), "
              "got " +
              formatConfigValue(offDiagonal)};
    }
  }
  Eigen::MatrixXd support = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      if (i != j && rows[i][j] > 0) support(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = 1;
  if (perfectMatching(support, 0.0).empty())
    return ConfigIssue{key,
                       "admits no round in which every rank sends to one other rank and receives from one "
                       "(no derangement on its nonzero entries), so no fair assignment exists"};
  return std::nullopt;
}

// The ranks not yet taken as a destination, in increasing order: a Fenwick
// tree of 0/1 flags, whose k-th set flag is found by binary lifting, so that
// each draw of the uniform roulette costs O(log n) instead of a scan of n.
class FreeRanks {
 public:
  explicit FreeRanks(int n) : n_(n), count_(n), tree_(toIndex(n) + 1, 0) {
    for (int i = 1; i <= n; ++i) {
      tree_[toIndex(i)] += 1;
      const int parent = i + (i & -i);
      if (parent <= n) tree_[toIndex(parent)] += tree_[toIndex(i)];
    }
    while (top_ * 2 <= n) top_ *= 2;
  }
  int count() const { return count_; }
  bool isFree(int r) const { return before(r + 1) - before(r) == 1; }
  void take(int r) {
    for (int i = r + 1; i <= n_; i += i & -i) --tree_[toIndex(i)];
    --count_;
  }
  /// Free ranks below r.
  int before(int r) const {
    int s = 0;
    for (int i = r; i > 0; i -= i & -i) s += tree_[toIndex(i)];
    return s;
  }
  /// The k-th free rank, 0-based (k < count()).
  int kth(int k) const {
    int pos = 0, rest = k + 1;
    for (int step = top_; step > 0; step >>= 1)
      if (pos + step <= n_ && tree_[toIndex(pos + step)] < rest) {
        pos += step;
        rest -= tree_[toIndex(pos)];
      }
    return pos;
  }

 private:
  int n_, count_, top_ = 1;
  std::vector<int> tree_;  // 1-based
};

// The sequential draws of FairRoulette::destinations for the uniform roulette
// (no table), n >= 2: rank i draws uniformly among the free ranks but itself.
// drawWeighted over weights of 1 picks the floor(u)-th positive entry of
// u = uniform01 * count (subtracting 1.0 from u is exact below 2^53), the
// last one if rounding made u reach count: the same draw, found in O(log n).
std::vector<int> uniformDerangement(int n, std::mt19937_64& g) {
  std::vector<int> dest(toIndex(n), -1);
  FreeRanks free(n);
  for (int i = 0; i < n; ++i) {
    const bool selfFree = free.isFree(i);
    const int choices = free.count() - (selfFree ? 1 : 0);
    if (choices == 0) {
      // Dead end: i == n-1 and only i is free. Swap with an earlier rank j.
      const int j = std::min(static_cast<int>(uniform01(g) * static_cast<double>(i)), i - 1);
      dest[toIndex(i)] = dest[toIndex(j)];
      dest[toIndex(j)] = i;
      free.take(i);
      continue;
    }
    int k = std::min(static_cast<int>(uniform01(g) * static_cast<double>(choices)), choices - 1);
    if (selfFree && k >= free.before(i)) ++k;  // skip i itself
    const int d = free.kth(k);
    dest[toIndex(i)] = d;
    free.take(d);
  }
  return dest;
}

}  // namespace

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

// Sinkhorn balancing, then a Birkhoff-von Neumann decomposition (greedy:
// subtract the smallest entry along a perfect matching of the support).
void FairRoulette::decompose() {
  target_ = Eigen::MatrixXd::Zero(n_, n_);
  for (int i = 0; i < n_; ++i)
    for (int j = 0; j < n_; ++j)
      target_(i, j) = table_[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  GOSSAMER_ENFORCE(pruneToMatchable(target_),
                   "roulette table admits no fair assignment (no derangement on its nonzero entries)");
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
  if (table_.empty() && n_ >= 2) return uniformDerangement(n_, g);
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

Eigen::MatrixXd FairRoulette::mixingMatrix(std::uint64_t step, int segment) const {
  const auto dest = destinations(step, segment);
  std::vector<int> senders(static_cast<std::size_t>(n_), 0);  // how many send to each rank
  for (const int d : dest) ++senders[static_cast<std::size_t>(d)];
  // As peers(): half stays, the other half is split among those who sent.
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(n_, n_);
  for (int i = 0; i < n_; ++i) w(i, i) = 0.5;
  for (int j = 0; j < n_; ++j) {
    const int i = dest[static_cast<std::size_t>(j)];
    w(i, j) += 0.5 / senders[static_cast<std::size_t>(i)];
  }
  return w;
}

void registerFairRoulette(Registry& registry) {
  registry.addTopology(
      "fair_roulette",
      [](const Config& c) -> std::unique_ptr<Topology> {
        if (c.worldSize() < 2) return std::make_unique<Ring>(c.worldSize());  // one rank: nothing to mix
        // With a probability table the draws follow it exactly (Selection::kMatched);
        // without one, the paper's sequential Algorithm 2.
        const auto& table = probabilitiesOf(c);
        return std::make_unique<FairRoulette>(
            c.worldSize(), c.seed(), table,
            table.empty() ? FairRoulette::Selection::kSequential : FairRoulette::Selection::kMatched);
      },
      KeySet()
          .realMatrix(
              "probabilities", {0.0, true, kUnbounded, false},
              "world_size x world_size table of non-negative weights (row = sender, diagonal ignored); "
              "empty = uniform")
          .namesRanks(RankKey::kTable)
          .rule(checkProbabilities));
}

}  // namespace gossamer::topologies
