// 2D-torus allreduce (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce" (2023),
// Sec. 2.2). The N ranks form an R x C grid (R = collectives.torus_rows,
// default the largest divisor of N not above sqrt(N)), row-major by rank.
// Steps: ring reduce-scatter along each row (C-1 steps), ring allreduce of the
// owned 1/C chunk down each column (2(R-1) steps), ring allgather along each
// row (C-1 steps). Bytes sent per rank for a vector of B bytes:
// 2B(C-1)/C + 2B(R-1)/(RC). The rows and columns are SubTransport views with
// their own contexts (detail.hpp).
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "grid.hpp"
#include "table.hpp"

namespace gossamer {

template <typename T>
void torus2dAllreduce(Transport& transport, std::span<T> data, ReduceOp op,
                      const CollectiveOptions& options) {
  detail::requireTopLevel(transport, "torus2dAllreduce");
  const int n = transport.worldSize();
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);
  const int rows = options.torusRows > 0 ? options.torusRows : detail::squarestDivisor(n);
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<std::size_t>(r)] = r;
  detail::torusOn(transport, all, rows, data, detail::partialOp(op), options, detail::kCtxTorusRow,
                  detail::kCtxTorusCol);
  detail::scaleIfAverage(op, data, n);
}

#define GOSSAMER_INSTANTIATE(T) \
  template void torus2dAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

void torus2dRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  addTorus(out, modelElements(bytes), n, o.torusRows > 0 ? o.torusRows : squarestDivisor(n), o);
}

bool torusFits(int n, const CollectiveOptions& o) { return o.torusRows <= 0 || n % o.torusRows == 0; }

}  // namespace

const AllreduceEntry kTorus2dEntry{AllreduceAlgorithm::kTorus2d,
                                   "torus2d",
                                   "R x C grid: ring reduce-scatter on rows, ring allreduce on columns, "
                                   "allgather on rows",
                                   true,
                                   GOSSAMER_ALLREDUCE_RUNNERS(torus2dAllreduce),
                                   &torus2dRounds,
                                   &torusFits};

}  // namespace detail

}  // namespace gossamer
