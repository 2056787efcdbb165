// Algorithm 3 and the replacement with direct transmission: for each feature
// that one rank alone updates in a round, find the neighbour rounds before
// and after it in which any rank touches the feature, and send it directly
// between those ranks instead of reducing it to its owner and broadcasting it
// back; count the elements of both schedules (the form of Table II).
//
// Source: paper 001_0e82f64010384eaf.txt, Section IV-C (Algorithm 3, "Search
// of neighbor rounds": forward / backward, the nearest round in which any
// node deals with f, and all nodes updating f there), Section IV-D
// ("Replacement with Direct Communication between Workers": f0 leaves
// F^R_{n,m'0}, F^B_{n0,m0}, F^R_{n0,m0}, F^B_{n,m''0} and joins
// F^D(n, n0, m'0) and F^D(n0, n, m0)), Section VI-C and Table II (elements
// of reduce / broadcast and of direct transmission).
//
// Steps:
//   1. S from Algorithm 2 (singleRankFeatures);
//   2. an index of every (feature, round, rank) occurrence, sorted: the
//      rounds touching a feature are consecutive in it, ascending, so the
//      neighbour rounds of (f0, m0) are the groups just before and after
//      (f0, m0) (Algorithm 3 by binary search rather than a scan of rounds);
//   3. for each (f0, n0, m0): the removals and direct sends listed in
//      planDirectTransmission's comment (sparse_sync.hpp);
//   4. F^R = F^B = D minus the removals; F^D de-duplicated, its diagonal
//      counted as kept; the element counts.
#include <algorithm>
#include <tuple>

#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

namespace {

using Features = std::vector<std::uint32_t>;

void sortUnique(Features& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// d minus the sorted, unique `removed`.
Features without(const Features& d, Features& removed) {
  sortUnique(removed);
  Features out;
  out.reserve(d.size());
  std::set_difference(d.begin(), d.end(), removed.begin(), removed.end(), std::back_inserter(out));
  return out;
}

struct Occurrence {
  std::uint32_t feature;
  std::uint32_t round;
  int rank;
  bool operator<(const Occurrence& o) const {
    return std::tie(feature, round, rank) < std::tie(o.feature, o.round, o.rank);
  }
};

}  // namespace

DirectSchedule planDirectTransmission(const TouchedFeatures& touched) {
  const auto single = singleRankFeatures(touched);  // checks `touched`
  const std::size_t rounds = single.size(), n = touched.size();
  // Step 2: every occurrence, sorted by (feature, round, rank).
  std::vector<Occurrence> index;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t m = 0; m < rounds; ++m)
      for (std::uint32_t f : touched[r][m])
        index.push_back({f, static_cast<std::uint32_t>(m), static_cast<int>(r)});
  std::sort(index.begin(), index.end());
  // Step 3.
  std::vector<std::vector<Features>> removeReduce(rounds, std::vector<Features>(n)),
      removeBroadcast(rounds, std::vector<Features>(n));
  DirectSchedule s;
  s.direct.assign(rounds, std::vector<std::vector<Features>>(n, std::vector<Features>(n)));
  for (std::size_t m0 = 0; m0 < rounds; ++m0) {
    for (const auto& [f0, n0] : single[m0]) {
      const auto round0 = static_cast<std::uint32_t>(m0);
      const auto at = std::lower_bound(index.begin(), index.end(), Occurrence{f0, round0, 0});
      const auto here = static_cast<std::size_t>(at - index.begin());  // (f0, m0, n0): its only rank
      const auto rank0 = static_cast<std::size_t>(n0);
      // Backward neighbour m'0: the group of f0 occurrences just before.
      if (here > 0 && index[here - 1].feature == f0) {
        const std::uint32_t back = index[here - 1].round;
        for (std::size_t i = here; i > 0 && index[i - 1].feature == f0 && index[i - 1].round == back; --i) {
          const auto r = static_cast<std::size_t>(index[i - 1].rank);
          removeReduce[back][r].push_back(f0);
          s.direct[back][r][rank0].push_back(f0);
        }
        removeBroadcast[m0][rank0].push_back(f0);
      }
      // Forward neighbour m''0: the group just after.
      if (here + 1 < index.size() && index[here + 1].feature == f0) {
        const std::uint32_t forward = index[here + 1].round;
        for (std::size_t i = here + 1;
             i < index.size() && index[i].feature == f0 && index[i].round == forward; ++i) {
          const auto r = static_cast<std::size_t>(index[i].rank);
          removeBroadcast[forward][r].push_back(f0);
          s.direct[m0][rank0][r].push_back(f0);
        }
        removeReduce[m0][rank0].push_back(f0);
      }
    }
  }
  // Step 4.
  s.reduce.assign(rounds, std::vector<Features>(n));
  s.broadcast.assign(rounds, std::vector<Features>(n));
  DirectCounts& c = s.counts;
  for (std::size_t m = 0; m < rounds; ++m) {
    for (std::size_t r = 0; r < n; ++r) {
      c.baselineElements += touched[r][m].size();
      s.reduce[m][r] = without(touched[r][m], removeReduce[m][r]);
      s.broadcast[m][r] = without(touched[r][m], removeBroadcast[m][r]);
      c.reduceElements += s.reduce[m][r].size();
      c.broadcastElements += s.broadcast[m][r].size();
      for (std::size_t dst = 0; dst < n; ++dst) {
        Features& sent = s.direct[m][r][dst];
        sortUnique(sent);
        if (dst == r) {
          c.keptElements += sent.size();
          sent.clear();
        } else {
          c.directElements += sent.size();
        }
      }
    }
  }
  if (c.baselineElements > 0) {
    c.decreasingRate = static_cast<double>(c.reduceElements + c.broadcastElements + c.directElements) /
                       (2.0 * static_cast<double>(c.baselineElements));
  }
  return s;
}

}  // namespace gossamer::optimizers::sparse_sync
