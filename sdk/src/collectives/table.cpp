// The one table of allreduce algorithms (see table.hpp). A new algorithm is
// its own file with its entry, its AllreduceAlgorithm value, and a line here.
#include "table.hpp"

#include <array>
#include <string>
#include <tuple>

#include "gossamer/errors.hpp"

namespace gossamer::detail {

namespace {

const std::array<const AllreduceEntry*, 7> kTable = {&kRingEntry,         &kRecursiveDoublingEntry,
                                                     &kRabenseifnerEntry, &kTorus2dEntry,
                                                     &kHierarchicalEntry, &kTga2dEntry,
                                                     &kHipsEntry};

static_assert(std::tuple_size_v<decltype(kTable)> + 1 == kAllreduceAlgorithmCount,
              "every AllreduceAlgorithm but kAuto has one entry");

}  // namespace

std::span<const AllreduceEntry* const> allreduceAlgorithms() { return kTable; }

const AllreduceEntry& allreduceEntry(AllreduceAlgorithm algorithm) {
  for (const auto* e : kTable)
    if (e->id == algorithm) return *e;
  throw InvalidArgument(std::string("allreduceEntry: no entry for ") + toString(algorithm));
}

}  // namespace gossamer::detail
