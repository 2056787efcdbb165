// Leader groups (Yeo et al., "Crossover-SGD: A gossip-based communication in
// distributed deep learning for alleviating large mini-batch problem and
// enhancing scalability", Sec. 3.3) and tensor-aligned segmentation of a model
// into S segments.
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
