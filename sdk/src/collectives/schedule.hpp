// The rounds an allreduce schedule is made of, for the cost model
// (cost_model.cpp). Each algorithm's file describes its own schedule with
// these blocks (AllreduceEntry::rounds in table.hpp); the cost model sums
// them and compares them. Not installed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "gossamer/collectives.hpp"

namespace gossamer::detail {

/// Element size, bytes, where the model cuts a vector into chunks (float32).
inline constexpr double kModelElementBytes = 4;

/// One synchronous round: each of `concurrency` senders sends `hops` messages
/// (one after another) carrying `bytes` in all; each receiver reduces
/// `reduced` bytes. Cost: (hops alpha + bytes beta + reduced gamma) times
/// (1 + contention (concurrency - 1)); see CostModel.
struct Round {
  double hops = 0, concurrency = 1, bytes = 0, reduced = 0;
  friend auto operator<=>(const Round&, const Round&) = default;
};
using Rounds = std::vector<Round>;

/// Elements of a vector of `bytes` under kModelElementBytes (rounded up).
inline double modelElements(std::size_t bytes) {
  return std::ceil(static_cast<double>(bytes) / kModelElementBytes);
}

/// The ring's two phases (either or both) over n ranks on a vector of `elems`
/// elements, with `groups` such rings running at once (ring.cpp): n chunks
/// whose lengths differ by at most one, each step sending one chunk as pieces
/// of at most chunkBytes. Only the ranks whose chunk is non-empty send, so a
/// vector of fewer than n elements has fewer concurrent senders.
inline void addRing(Rounds& out, double elems, int n, double groups, bool reduceScatter, bool allgather,
                    const CollectiveOptions& o) {
  if (n <= 1 || elems <= 0 || groups <= 0) return;
  const double chunkElems = std::ceil(elems / n);
  const double pieceElems = std::max(1.0, std::floor(static_cast<double>(o.chunkBytes) / kModelElementBytes));
  const double maxPieces = std::floor((Tag::kMaxSegment + 1.0) / (2.0 * (n - 1)));
  const double pieces = std::clamp(std::ceil(chunkElems / pieceElems), 1.0, std::max(1.0, maxPieces));
  const double chunk = chunkElems * kModelElementBytes;
  const double senders = groups * std::min<double>(n, elems);
  if (reduceScatter) out.push_back({(n - 1) * pieces, senders, (n - 1) * chunk, (n - 1) * chunk});
  if (allgather) out.push_back({(n - 1) * pieces, senders, (n - 1) * chunk, 0});
}

/// Binomial reduce (or broadcast) of `bytes` inside `groups` groups of g
/// ranks (broadcast.cpp): in the round of mask m the ranks whose lowest set
/// bit is m send their whole vector, one message.
inline void addTree(Rounds& out, double bytes, int g, double groups, bool reduces) {
  for (int mask = 1; mask < g; mask <<= 1) {
    int senders = 0;
    for (int v = 1; v < g; ++v)
      if ((v & -v) == mask) ++senders;
    out.push_back({1, groups * senders, bytes, reduces ? bytes : 0});
  }
}

/// 2D torus over n ranks in `rows` x (n / rows) (torus2d.cpp): ring
/// reduce-scatter along the rows, ring allreduce of the owned chunk down the
/// columns, ring allgather along the rows.
inline void addTorus(Rounds& out, double elems, int n, int rows, const CollectiveOptions& o) {
  const int cols = n / rows;
  addRing(out, elems, cols, rows, true, false, o);
  addRing(out, std::ceil(elems / cols), rows, std::min<double>(cols, elems), true, true, o);
  addRing(out, elems, cols, rows, false, true, o);
}

}  // namespace gossamer::detail
