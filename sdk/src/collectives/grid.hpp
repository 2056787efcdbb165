// Building blocks of the grid and group allreduces (torus2d.cpp,
// hierarchical.cpp, tga2d.cpp): the torus on a subset of ranks, and the
// consecutive groups with their leaders. Not installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/kit/sub_transport.hpp"

namespace gossamer::detail {

/// Torus over `members` (global ranks of `parent`, this rank among them) laid
/// out row-major in a rows x (size/rows) grid, on views with contexts rowCtx
/// and colCtx: ring reduce-scatter along the row, ring allreduce of the owned
/// chunk down the column, ring allgather along the row. Sum or max (no
/// averaging). @throws InvalidArgument if rows does not divide the members.
template <typename T>
void torusOn(Transport& parent, const std::vector<int>& members, int rows, std::span<T> data, ReduceOp op,
             const CollectiveOptions& o, std::uint8_t rowCtx, std::uint8_t colCtx) {
  const int n = static_cast<int>(members.size());
  GOSSAMER_ENFORCE(rows >= 1 && n % rows == 0, "torus rows " << rows << " do not divide " << n << " ranks");
  const int cols = n / rows;
  const int me = static_cast<int>(std::find(members.begin(), members.end(), parent.rank()) - members.begin());
  const int row = me / cols, col = me % cols;
  std::vector<int> rowMembers, colMembers;
  for (int c = 0; c < cols; ++c) rowMembers.push_back(members[static_cast<std::size_t>(row * cols + c)]);
  for (int r = 0; r < rows; ++r) colMembers.push_back(members[static_cast<std::size_t>(r * cols + col)]);
  SubTransport rowT(parent, rowMembers, rowCtx), colT(parent, colMembers, colCtx);
  auto mine = ringReduceScatter(rowT, data, op, o);  // this rank's 1/C of the row sum
  ringAllreduce(colT, mine, op, o);                  // the "segmented ring" along the column
  ringAllgather(rowT, data, o);
}

/// Ranks 0..n-1 cut into groups of `size` consecutive ranks (the last shorter).
inline std::vector<std::vector<int>> consecutiveGroups(int n, int size) {
  std::vector<std::vector<int>> groups;
  for (int b = 0; b < n; b += size) {
    groups.emplace_back();
    for (int r = b; r < std::min(n, b + size); ++r) groups.back().push_back(r);
  }
  return groups;
}

struct GroupLayout {
  std::vector<int> group;    // this rank's group (global ranks)
  std::vector<int> leaders;  // the groups' lowest ranks
};

/// Ranks per group of the hierarchical allreduce and 2D-TGA over n ranks:
/// o.groupSize capped at n, or squarestDivisor(n) when it is 0.
inline int groupSizeOf(int n, const CollectiveOptions& o) {
  return o.groupSize > 0 ? std::min(o.groupSize, n) : squarestDivisor(n);
}

/// `o.groupSize` (0: squarestDivisor(N)) consecutive ranks per group, the
/// last one possibly smaller; the leaders are each group's lowest rank.
inline GroupLayout groupLayout(const Transport& t, const CollectiveOptions& o) {
  const int n = t.worldSize();
  GOSSAMER_ENFORCE(o.groupSize >= 0, "group size " << o.groupSize);
  const int g = groupSizeOf(n, o);
  GroupLayout l;
  for (auto& grp : consecutiveGroups(n, g)) {
    l.leaders.push_back(grp.front());
    if (t.rank() >= grp.front() && t.rank() <= grp.back()) l.group = grp;
  }
  return l;
}

}  // namespace gossamer::detail
