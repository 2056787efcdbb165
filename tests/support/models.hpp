// Models of several ranks for the gossip tests: random starting points, their
// mean and their consensus distance.
#pragma once

#include <random>
#include <vector>

namespace gossamer::testing {

/// n models of p float32 elements drawn from N(0, 1) with `seed`.
inline std::vector<std::vector<float>> randomModels(int n, std::size_t p, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> xs(static_cast<std::size_t>(n), std::vector<float>(p));
  for (auto& x : xs)
    for (auto& v : x) v = normal(rng);
  return xs;
}

/// The element-wise mean of the models, in float64.
inline std::vector<double> meanOver(const std::vector<std::vector<float>>& xs) {
  std::vector<double> m(xs[0].size(), 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) m[i] += x[i];
  for (auto& v : m) v /= static_cast<double>(xs.size());
  return m;
}

/// Consensus distance: (1/n) sum_i ||x_i - mean||^2.
inline double consensusDistance(const std::vector<std::vector<float>>& xs) {
  const auto m = meanOver(xs);
  double d = 0;
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) d += (m[i] - x[i]) * (m[i] - x[i]);
  return d / static_cast<double>(xs.size());
}

}  // namespace gossamer::testing
