// Algorithm 3 and the replacement with direct transmission: for each feature
// that one rank alone updates in a round, find the neighbour rounds before
// and after it in which any rank touches the feature, and send it directly
// between those ranks instead of reducing it to its owner and broadcasting it
// back; count the elements of both schedules (the form of Table II).
//
// Source: Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Section IV-C
// (Algorithm 3, "Search of neighbor rounds": forward / backward, the nearest
// round in which any node deals with f, and all nodes updating f there),
// Section IV-D ("Replacement with Direct Communication between Workers": f0
// leaves F^R_{n,m'0}, F^B_{n0,m0}, F^R_{n0,m0}, F^B_{n,m''0} and joins
// F^D(n, n0, m'0) and F^D(n0, n, m0)), Section VI-C and Table II (elements
// of reduce / broadcast and of direct transmission).
//
// The paper's replacement is kept where it leaves synchronous SGD exact and
// narrowed where it would not (see planDirectTransmission in
// sparse_sync.hpp: the values carried, and the owner kept up to date).
//
// Steps:
//   1. an index of every (feature, round, rank) occurrence, sorted: the
//      rounds touching a feature are consecutive in it, ascending, so the
//      neighbour rounds of a round are the groups just before and after it
//      (Algorithm 3 without a scan of rounds), and a group of one rank is
//      Algorithm 2's single-rank feature;
//   2. per feature, the hop between consecutive groups: a direct value, a
//      direct gradient, or through the owner;
//   3. F^R, F^B and F^D from the hops (each list filled in ascending feature
//      order, so sorted), the diagonal of F^D counted as kept; the counts.
#include <algorithm>
#include <tuple>

#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

namespace {

using Features = std::vector<std::uint32_t>;

// How a feature's value gets from one round that touches it to the next.
enum class Hop { kNone, kOwner, kDirectValue, kDirectGradient };

struct Occurrence {
  std::uint32_t feature;
  std::uint32_t round;
  int rank;
  bool operator<(const Occurrence& o) const {
    return std::tie(feature, round, rank) < std::tie(o.feature, o.round, o.rank);
  }
};

}  // namespace

DirectSchedule existingSchedule(const TouchedFeatures& touched) {
  const std::size_t rounds = checkTouched(touched), n = touched.size();
  DirectSchedule s;
  s.reduce.assign(rounds, std::vector<Features>(n));
  s.broadcast.assign(rounds, std::vector<Features>(n));
  s.direct.assign(rounds, std::vector<std::vector<Features>>(n, std::vector<Features>(n)));
  for (std::size_t m = 0; m < rounds; ++m) {
    for (std::size_t r = 0; r < n; ++r) {
      s.reduce[m][r] = s.broadcast[m][r] = touched[r][m];
      s.counts.baselineElements += touched[r][m].size();
    }
  }
  s.counts.reduceElements = s.counts.broadcastElements = s.counts.baselineElements;
  return s;
}

DirectSchedule planDirectTransmission(const TouchedFeatures& touched) {
  const std::size_t rounds = checkTouched(touched), n = touched.size();
  // Step 1: every occurrence, sorted by (feature, round, rank).
  std::vector<Occurrence> index;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t m = 0; m < rounds; ++m)
      for (std::uint32_t f : touched[r][m])
        index.push_back({f, static_cast<std::uint32_t>(m), static_cast<int>(r)});
  std::sort(index.begin(), index.end());
  // Step 2: per feature, its touching rounds r_1 < ... < r_K with rank sets
  // T_1, ..., T_K (consecutive groups of the index), and the hop from each
  // r_i to r_{i+1} (the rules in sparse_sync.hpp).
  DirectSchedule s;
  s.reduce.assign(rounds, std::vector<Features>(n));
  s.broadcast.assign(rounds, std::vector<Features>(n));
  s.direct.assign(rounds, std::vector<std::vector<Features>>(n, std::vector<Features>(n)));
  DirectCounts& c = s.counts;
  std::vector<std::pair<std::size_t, std::size_t>> groups;  // [begin, end) in index, one per round
  std::vector<Hop> hops;
  for (std::size_t b = 0; b < index.size();) {
    const std::uint32_t f = index[b].feature;
    groups.clear();
    std::size_t e = b;
    while (e < index.size() && index[e].feature == f) {
      std::size_t g = e;
      while (g < index.size() && index[g].feature == f && index[g].round == index[e].round) ++g;
      groups.emplace_back(e, g);
      e = g;
    }
    const std::size_t k = groups.size();
    const auto size = [&](std::size_t i) { return groups[i].second - groups[i].first; };
    const auto roundOf = [&](std::size_t i) { return index[groups[i].first].round; };
    const auto holds = [&](std::size_t i, int rank) {
      for (std::size_t j = groups[i].first; j < groups[i].second; ++j)
        if (index[j].rank == rank) return true;
      return false;
    };
    hops.assign(k, Hop::kNone);
    for (std::size_t i = 0; i + 1 < k; ++i) {
      if (size(i) == 1)
        hops[i] = Hop::kDirectValue;
      else if (size(i + 1) == 1 && holds(i, index[groups[i + 1].first].rank))
        hops[i] = Hop::kDirectGradient;
      else
        hops[i] = Hop::kOwner;
    }
    // Round r_i reduces gradients to the owner (which must then hold w^(r_i)).
    const auto reducesGradients = [&](std::size_t i) {
      return size(i) > 1 && (i + 1 == k || hops[i] == Hop::kOwner);
    };
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint32_t m = roundOf(i);
      const bool reduce =
          i + 1 == k || hops[i] == Hop::kOwner || (hops[i] == Hop::kDirectValue && reducesGradients(i + 1));
      const bool broadcast = i == 0 || hops[i - 1] == Hop::kOwner;
      for (std::size_t j = groups[i].first; j < groups[i].second; ++j) {
        const auto r = static_cast<std::size_t>(index[j].rank);
        if (reduce) s.reduce[m][r].push_back(f);
        if (broadcast) s.broadcast[m][r].push_back(f);
      }
      if (hops[i] == Hop::kDirectValue || hops[i] == Hop::kDirectGradient) {
        for (std::size_t j = groups[i].first; j < groups[i].second; ++j) {
          for (std::size_t l = groups[i + 1].first; l < groups[i + 1].second; ++l) {
            const auto src = static_cast<std::size_t>(index[j].rank),
                       dst = static_cast<std::size_t>(index[l].rank);
            if (src == dst)
              ++c.keptElements;
            else
              s.direct[m][src][dst].push_back(f);
          }
        }
      }
    }
    b = e;
  }
  // Step 3: the features were visited in ascending order, so every list is sorted.
  for (std::size_t m = 0; m < rounds; ++m) {
    for (std::size_t r = 0; r < n; ++r) {
      c.baselineElements += touched[r][m].size();
      c.reduceElements += s.reduce[m][r].size();
      c.broadcastElements += s.broadcast[m][r].size();
      for (const Features& sent : s.direct[m][r]) c.directElements += sent.size();
    }
  }
  if (c.baselineElements > 0) {
    c.decreasingRate = static_cast<double>(c.reduceElements + c.broadcastElements + c.directElements) /
                       (2.0 * static_cast<double>(c.baselineElements));
  }
  return s;
}

}  // namespace gossamer::optimizers::sparse_sync
