// Grid and group allreduces of paper 000_a4345579c41fcb1d.txt: 2D torus
// (Sec. 2.2), hierarchical (Sec. 2.3) and 2D-TGA (Algorithm 1).
//
// All three are built from the ring phases and the binomial trees in
// collectives.cpp, run on SubTransport views of the caller's transport. Each
// view gets its own context, so the phases of one call never mix; all views
// of one call share options.sequence. Bytes per rank (vector of B bytes):
//   torus R x C:   2B(C-1)/C + 2B(R-1)/(RC)
//   hierarchical:  members B (reduce) + B (broadcast) in log2(g) rounds;
//                  leaders additionally 2B(L-1)/L
//   2D-TGA:        2B(g-1)/g in the group, leaders the torus over L, then B
//                  per broadcast round
#include <algorithm>
#include <cmath>
#include <vector>

#include "collectives_detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/sub_transport.hpp"

namespace gossamer {

namespace {

// Contexts of the views (SubTransport), distinct per role.
constexpr std::uint8_t kCtxTorusRow = 0x81, kCtxTorusCol = 0x82, kCtxGroup = 0x83, kCtxLeaders = 0x84,
                       kCtxTgaGroup = 0x85, kCtxTgaRow = 0x86, kCtxTgaCol = 0x87;

using detail::partialOp;
using detail::scaleIfAverage;
using detail::squarestDivisor;

// Torus over `members` (global ranks of `parent`, this rank among them) laid
// out row-major in a rows x (size/rows) grid. Sum or max (no averaging).
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

std::vector<std::vector<int>> consecutiveGroups(int n, int size) {
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

GroupLayout layout(const Transport& t, const CollectiveOptions& o) {
  const int n = t.worldSize();
  GOSSAMER_ENFORCE(o.groupSize >= 0, "group size " << o.groupSize);
  const int g = o.groupSize > 0 ? std::min(o.groupSize, n) : squarestDivisor(n);
  GroupLayout l;
  for (auto& grp : consecutiveGroups(n, g)) {
    l.leaders.push_back(grp.front());
    if (t.rank() >= grp.front() && t.rank() <= grp.back()) l.group = grp;
  }
  return l;
}

// The grid algorithms build SubTransport views of their transport, and views
// do not nest: on a view, fail before any message instead of at the first one.
void requireTopLevel(Transport& transport, const char* algorithm) {
  GOSSAMER_ENFORCE(dynamic_cast<SubTransport*>(&transport) == nullptr,
                   algorithm << " needs a top-level transport (its sub-transports cannot be nested)");
}

}  // namespace

template <typename T>
void torus2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                      const CollectiveOptions& options) {
  requireTopLevel(transport, "torus2dAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  const int rows = options.torusRows > 0 ? options.torusRows : squarestDivisor(n);
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<std::size_t>(r)] = r;
  torusOn(transport, all, rows, data, partialOp(op), options, kCtxTorusRow, kCtxTorusCol);
  scaleIfAverage(op, data, n);
}

template <typename T>
void hierarchicalAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                           const CollectiveOptions& options) {
  requireTopLevel(transport, "hierarchicalAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  const auto l = layout(transport, options);
  SubTransport group(transport, l.group, kCtxGroup);
  reduce(group, data, 0, partialOp(op), options);
  if (group.rank() == 0 && l.leaders.size() > 1) {
    SubTransport leaders(transport, l.leaders, kCtxLeaders);
    ringAllreduce(leaders, data, partialOp(op), options);
  }
  broadcast(group, data, 0, options);
  scaleIfAverage(op, data, n);
}

template <typename T>
void tga2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  requireTopLevel(transport, "tga2dAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  const auto l = layout(transport, options);
  SubTransport group(transport, l.group, kCtxTgaGroup);
  ringAllreduce(group, data, partialOp(op), options);  // Alg. 1 line 6: intra-group ring allreduce
  if (group.rank() == 0 && l.leaders.size() > 1) {     // lines 7-16: leaders' 2D torus
    const int leaders = static_cast<int>(l.leaders.size());
    torusOn(transport, l.leaders, squarestDivisor(leaders), data, partialOp(op), options, kCtxTgaRow,
            kCtxTgaCol);
  }
  broadcast(group, data, 0, options);  // line 17
  scaleIfAverage(op, data, n);
}

#define GOSSAMER_GRID(T)                                                                                \
  template void torus2dAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);      \
  template void hierarchicalAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&); \
  template void tga2dAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_GRID(float)
GOSSAMER_GRID(double)
#undef GOSSAMER_GRID

}  // namespace gossamer
