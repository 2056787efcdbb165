// Synthetic sparse classification data for the tests of apps/sparse:
// random sparse samples labelled by a hidden linear rule, so that the set is
// separable, drawn from a seeded generator (the same data on every run). The
// labels are -1/+1 as in the 2D-TGA-ADMM paper (Wang et al., Sec. 5.2, Eq. 8)
// and the sparse-synchronisation paper (Yokoyama, Araki, Sec. VI-B).
#pragma once

#include <Eigen/Core>
#include <Eigen/SparseCore>

#include <cstdint>
#include <random>
#include <vector>

#include "csr.hpp"

namespace gossamer::testing {

/// `rows` samples over `features` features, each feature present with
/// probability `density` (at least one per sample) with a value uniform in
/// [0.5, 1.5]; label +1 where the sample's dot product with a hidden random
/// weight vector is positive, else -1.
inline sparse::SparseDataset syntheticSparse(int rows, int features, double density, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  Eigen::VectorXd hidden(features);
  for (int j = 0; j < features; ++j) hidden[j] = normal(rng);
  std::vector<Eigen::Triplet<double>> entries;
  sparse::SparseDataset d;
  d.y.resize(rows);
  for (int i = 0; i < rows; ++i) {
    double dot = 0;
    int count = 0;
    for (int j = 0; j < features; ++j) {
      if (unit(rng) >= density && !(j == features - 1 && count == 0)) continue;
      const double v = 0.5 + unit(rng);
      entries.emplace_back(i, j, v);
      dot += v * hidden[j];
      ++count;
    }
    d.y[i] = dot > 0 ? 1.0 : -1.0;
  }
  d.x.resize(rows, features);
  d.x.setFromTriplets(entries.begin(), entries.end());
  d.x.makeCompressed();
  return d;
}

}  // namespace gossamer::testing
