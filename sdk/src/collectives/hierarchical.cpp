// Hierarchical allreduce (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023),
// Sec. 2.3). The N ranks form groups of g consecutive ranks
// (g = collectives.group_size, default the largest divisor of N not above
// sqrt(N)); each group's lowest rank is its leader. Steps: binomial reduce to
// the leader inside each group (ceil(log2 g) rounds, the whole vector per
// message), ring allreduce among the L leaders (2(L-1) steps), binomial
// broadcast from the leader (ceil(log2 g) rounds). Bytes per rank for a vector
// of B bytes: members B (reduce) + B (broadcast); leaders additionally
// 2B(L-1)/L. The groups and the leaders are SubTransport views with their own
// contexts (detail.hpp).
#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "grid.hpp"
#include "table.hpp"

namespace gossamer {

template <typename T>
void hierarchicalAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                           const CollectiveOptions& options) {
  detail::requireTopLevel(transport, "hierarchicalAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);
  const auto l = detail::groupLayout(transport, options);
  SubTransport group(transport, l.group, detail::kCtxGroup);
  reduce(group, data, 0, detail::partialOp(op), options);
  if (group.rank() == 0 && l.leaders.size() > 1) {
    SubTransport leaders(transport, l.leaders, detail::kCtxLeaders);
    ringAllreduce(leaders, data, detail::partialOp(op), options);
  }
  broadcast(group, data, 0, options);
  detail::scaleIfAverage(op, data, n);
}

#define GOSSAMER_INSTANTIATE(T) \
  template void hierarchicalAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

void hierarchicalRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  const double b = static_cast<double>(bytes);
  const int g = groupSizeOf(n, o), groups = (n + g - 1) / g;
  addTree(out, b, g, groups, true);
  addRing(out, modelElements(bytes), groups, 1, true, true, o);
  addTree(out, b, g, groups, false);
}

}  // namespace

const AllreduceEntry kHierarchicalEntry{AllreduceAlgorithm::kHierarchical,
                                        "hierarchical",
                                        "binomial reduce in groups, ring allreduce among the leaders, "
                                        "binomial broadcast",
                                        true,
                                        GOSSAMER_ALLREDUCE_RUNNERS(hierarchicalAllreduce),
                                        &hierarchicalRounds};

}  // namespace detail

}  // namespace gossamer
