// The logistic loss of a margin, log(1 + e^{-m}), and its sigmoid
// derivatives, computed without overflow for any finite margin. The loss of
// Wang et al. (2023), "A Communication Efficient ADMM-based Distributed
// Algorithm Using Two-Dimensional Torus Grouping AllReduce" (Sec. 5.2, Eq. 8:
// m = b_i x^T D_i) and of Yokoyama and Araki, "Efficient Distributed Machine
// Learning for Large-scale Models by Reducing Redundant Communication"
// (Sec. VI-B: -ln sigma(y * yhat)).
#pragma once

#include <algorithm>
#include <cmath>

namespace gossamer::sparse {

/// sigma(m) = 1 / (1 + e^{-m}), in [0, 1]; exact to rounding for any double m
/// (no overflow of e^{-m} for large negative m).
inline double sigmoid(double m) {
  if (m >= 0) return 1.0 / (1.0 + std::exp(-m));
  const double e = std::exp(m);
  return e / (1.0 + e);
}

/// The logistic loss log(1 + e^{-m}) = -ln sigma(m) of a margin m, >= 0; equal
/// to -m up to rounding for m far below 0 instead of overflowing.
inline double logisticLoss(double m) { return std::max(-m, 0.0) + std::log1p(std::exp(-std::abs(m))); }

}  // namespace gossamer::sparse
