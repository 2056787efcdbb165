// Algorithm 2: per round, the features that exactly one rank updates (the
// candidates for direct transmission between ranks).
//
// Source: Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Section IV-C,
// Algorithm 2 ("Identification of features transmittable directly": for
// m = 1..M, extract the features updated at only one node from D_{.,m}; S gets
// (f, n, m)).
//
// Steps, for each round m: gather the (feature, rank) pairs of every D_{n,m},
// sort them by feature, and keep the features whose run has length 1.
#include <algorithm>
#include <utility>

#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

std::vector<std::vector<SingleRankFeature>> singleRankFeatures(const TouchedFeatures& touched) {
  const std::size_t rounds = checkTouched(touched);
  std::vector<std::vector<SingleRankFeature>> single(rounds);
  std::vector<std::pair<std::uint32_t, int>> pairs;
  for (std::size_t m = 0; m < rounds; ++m) {
    pairs.clear();
    for (std::size_t n = 0; n < touched.size(); ++n)
      for (std::uint32_t f : touched[n][m]) pairs.emplace_back(f, static_cast<int>(n));
    std::sort(pairs.begin(), pairs.end());
    for (std::size_t i = 0; i < pairs.size();) {
      std::size_t j = i + 1;
      while (j < pairs.size() && pairs[j].first == pairs[i].first) ++j;
      if (j - i == 1) single[m].push_back({pairs[i].first, pairs[i].second});
      i = j;
    }
  }
  return single;
}

}  // namespace gossamer::optimizers::sparse_sync
