// The one table of allreduce algorithms. Dispatch (allreduce.cpp), the cost
// model and auto (cost_model.cpp), the names (parseAllreduceAlgorithm,
// toString) and the configuration's `collectives.allreduce` choices all read
// it. Each algorithm defines its entry in its own file; table.cpp lists them.
// Not installed.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "gossamer/collectives.hpp"
#include "gossamer/half.hpp"
#include "schedule.hpp"

namespace gossamer::detail {

/// One algorithm's allreduce for each element type the collectives take
/// (GOSSAMER_COLLECTIVE_TYPES). Build it with GOSSAMER_ALLREDUCE_RUNNERS(fn)
/// from a function template fn<T>(Transport&, std::span<T>, ReduceOp,
/// const CollectiveOptions&).
struct AllreduceRunners {
  template <typename T>
  using Fn = void (*)(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&);
  Fn<float> f32;
  Fn<double> f64;
  Fn<float16> f16;
  Fn<bfloat16> bf16;
  Fn<std::int32_t> i32;
  Fn<std::int64_t> i64;
  template <typename T>
  Fn<T> get() const {
    if constexpr (std::is_same_v<T, float>)
      return f32;
    else if constexpr (std::is_same_v<T, double>)
      return f64;
    else if constexpr (std::is_same_v<T, float16>)
      return f16;
    else if constexpr (std::is_same_v<T, bfloat16>)
      return bf16;
    else if constexpr (std::is_same_v<T, std::int32_t>)
      return i32;
    else
      return i64;
  }
};
#define GOSSAMER_ALLREDUCE_RUNNERS(fn)                                                         \
  ::gossamer::detail::AllreduceRunners {                                                       \
    &fn<float>, &fn<double>, &fn<float16>, &fn<bfloat16>, &fn<std::int32_t>, &fn<std::int64_t> \
  }

/// One allreduce algorithm: how to run it, and its schedule for the model.
struct AllreduceEntry {
  AllreduceAlgorithm id;     ///< Never kAuto.
  std::string_view name;     ///< Its `collectives.allreduce` value.
  std::string_view summary;  ///< One line for the configuration reference.
  /// Builds SubTransport views of its transport, so it cannot run on a view.
  bool needsViews;
  AllreduceRunners runners;  ///< The algorithm, one instantiation per element type.
  /// Appends its rounds for a vector of `bytes` over n ranks (n >= 2, bytes > 0).
  void (*rounds)(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& options);
  /// False if it cannot run over n ranks with these options (null: always can).
  bool (*fits)(int n, const CollectiveOptions& options) = nullptr;

  template <typename T>
  void run(Transport& t, std::span<T> data, ReduceOp op, const CollectiveOptions& o) const {
    runners.get<T>()(t, data, op, o);
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
extern const AllreduceEntry kRabenseifnerEntry;
extern const AllreduceEntry kTorus2dEntry;
extern const AllreduceEntry kHierarchicalEntry;
extern const AllreduceEntry kTga2dEntry;
extern const AllreduceEntry kHipsEntry;

}  // namespace gossamer::detail
