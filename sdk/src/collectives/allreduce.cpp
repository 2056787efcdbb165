// allreduce(): runs the algorithm options.algorithm names, through the table
// of algorithms (table.hpp); kAuto asks the cost model (cost_model.cpp) which
// one is fastest for this size and world size. (Each algorithm scales a
// 16-bit average by 1/N before the sum itself: detail::premultipliedAverage.)
// Also the algorithms' names.
#include <algorithm>
#include <string>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "table.hpp"

namespace gossamer {

template <typename T>
void allreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options) {
  auto algorithm = options.algorithm;
  if (algorithm == AllreduceAlgorithm::kAuto)
    algorithm = detail::chooseAllreduce(data.size_bytes(), transport.worldSize(), options,
                                        dynamic_cast<SubTransport*>(&transport) == nullptr);
  detail::allreduceEntry(algorithm).run(transport, data, op, options);
}

template <typename T>
void allreduce(Transport& transport, std::span<const T> in, std::span<T> out, ReduceOp op,
               const CollectiveOptions& options) {
  GOSSAMER_ENFORCE(in.size() == out.size(),
                   "allreduce: input has " << in.size() << " elements, output " << out.size());
  if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
  allreduce(transport, out, op, options);
}

#define GOSSAMER_INSTANTIATE(T)                                                             \
  template void allreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&); \
  template void allreduce<T>(Transport&, std::span<const T>, std::span<T>, ReduceOp,        \
                             const CollectiveOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

AllreduceAlgorithm parseAllreduceAlgorithm(const std::string& name) {
  if (name == "auto") return AllreduceAlgorithm::kAuto;
  std::string known = "auto";
  for (const auto* e : detail::allreduceAlgorithms()) {
    if (e->name == name) return e->id;
    known += ", " + std::string(e->name);
  }
  throw InvalidArgument("unknown allreduce algorithm '" + name + "' (" + known + ")");
}

bool allreduceBuildsViews(AllreduceAlgorithm algorithm) {
  if (algorithm == AllreduceAlgorithm::kAuto) return false;
  return detail::allreduceEntry(algorithm).needsViews;
}

const char* toString(AllreduceAlgorithm a) {
  if (a == AllreduceAlgorithm::kAuto) return "auto";
  for (const auto* e : detail::allreduceAlgorithms())
    if (e->id == a) return e->name.data();
  return "unknown";
}

}  // namespace gossamer
