// The one table of allreduce algorithms. Dispatch (allreduce.cpp), the cost
// model and auto (cost_model.cpp), the names (parseAllreduceAlgorithm,
// toString) and the configuration's `collectives.allreduce` choices all read
// it. Each algorithm defines its entry in its own file; table.cpp lists them.
// Not installed.
#pragma once

#include <span>
#include <string_view>

#include "gossamer/collectives.hpp"
#include "schedule.hpp"

namespace gossamer::detail {

/// One allreduce algorithm: how to run it, and its schedule for the model.
struct AllreduceEntry {
  AllreduceAlgorithm id;     ///< Never kAuto.
  std::string_view name;     ///< Its `collectives.allreduce` value.
  std::string_view summary;  ///< One line for the configuration reference.
  /// Builds SubTransport views of its transport, so it cannot run on a view.
  bool needsViews;
  void (*runFloat)(Transport&, std::span<float>, ReduceOp, const CollectiveOptions&);
  void (*runDouble)(Transport&, std::span<double>, ReduceOp, const CollectiveOptions&);
  /// Appends its rounds for a vector of `bytes` over n ranks (n >= 2, bytes > 0).
  void (*rounds)(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& options);
  /// False if it cannot run over n ranks with these options (null: always can).
  bool (*fits)(int n, const CollectiveOptions& options) = nullptr;

  void run(Transport& t, std::span<float> data, ReduceOp op, const CollectiveOptions& o) const {
    runFloat(t, data, op, o);
  }
  void run(Transport& t, std::span<double> data, ReduceOp op, const CollectiveOptions& o) const {
    runDouble(t, data, op, o);
  }
  bool fitsOn(int n, const CollectiveOptions& o) const { return fits == nullptr || fits(n, o); }
};

/// Every algorithm, the simplest first (the ring): auto keeps the earlier one
/// on a tie, and calibration times the ring first.
std::span<const AllreduceEntry* const> allreduceAlgorithms();

/// The entry of `algorithm`. @throws InvalidArgument for kAuto.
const AllreduceEntry& allreduceEntry(AllreduceAlgorithm algorithm);

// Each defined in its algorithm's file.
extern const AllreduceEntry kRingEntry;
extern const AllreduceEntry kRecursiveDoublingEntry;
extern const AllreduceEntry kTorus2dEntry;
extern const AllreduceEntry kHierarchicalEntry;
extern const AllreduceEntry kTga2dEntry;
extern const AllreduceEntry kHipsEntry;

}  // namespace gossamer::detail
