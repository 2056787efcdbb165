// 2D-TGA, the two-dimensional torus grouping allreduce (Wang et al., "A
// Communication Efficient ADMM-based Distributed Algorithm Using
// Two-Dimensional Torus Grouping AllReduce" (2023), Algorithm 1). The N ranks
// form groups of g consecutive ranks as in the hierarchical allreduce
// (collectives.group_size). Steps: ring allreduce inside each group (Alg. 1
// line 6; 2(g-1) steps); the L leaders run the 2D torus on a near-square grid
// (lines 7-16); binomial broadcast from each leader to its group (line 17;
// ceil(log2 g) rounds). Bytes per rank for a vector of B bytes: 2B(g-1)/g in
// the group, the torus's 2B(C-1)/C + 2B(R-1)/(RC) on the leaders, then B per
// broadcast round.
#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "grid.hpp"
#include "table.hpp"

namespace gossamer {

template <typename T>
void tga2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  detail::requireTopLevel(transport, "tga2dAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);
  const auto l = detail::groupLayout(transport, options);
  SubTransport group(transport, l.group, detail::kCtxTgaGroup);
  ringAllreduce(group, data, detail::partialOp(op), options);  // line 6: intra-group ring allreduce
  if (group.rank() == 0 && l.leaders.size() > 1) {             // lines 7-16: leaders' 2D torus
    const int leaders = static_cast<int>(l.leaders.size());
    detail::torusOn(transport, l.leaders, detail::squarestDivisor(leaders), data, detail::partialOp(op),
                    options, detail::kCtxTgaRow, detail::kCtxTgaCol);
  }
  broadcast(group, data, 0, options);  // line 17
  detail::scaleIfAverage(op, data, n);
}

#define GOSSAMER_INSTANTIATE(T) \
  template void tga2dAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

void tga2dRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  const double elems = modelElements(bytes);
  const int g = groupSizeOf(n, o), groups = (n + g - 1) / g;
  addRing(out, elems, g, groups, true, true, o);
  if (groups > 1) addTorus(out, elems, groups, squarestDivisor(groups), o);
  addTree(out, static_cast<double>(bytes), g, groups, false);
}

}  // namespace

const AllreduceEntry kTga2dEntry{AllreduceAlgorithm::kTga2d,
                                 "tga2d",
                                 "ring allreduce in groups, 2D torus among the leaders, binomial broadcast",
                                 true,
                                 GOSSAMER_ALLREDUCE_RUNNERS(tga2dAllreduce),
                                 &tga2dRounds};

}  // namespace detail

}  // namespace gossamer
