// What a peer's gossip message carries is screened before it is mixed in.
//
// Push-sum gossip (SGP, Crossover-SGD) folds every message it receives into
// the local model: one corrupt or hostile peer that sends NaN or Inf values,
// or a push-sum weight that is not a weight, would spread them to every
// model its messages reach, and through those to the whole job. A message is
// admitted when its push-sum weight (if it carries one) is finite and within
// [0, world size] (the job's whole mass is the world size: no single push can
// carry more) and every value is finite. A refused message is not mixed in:
// SGP loses that push's mass (the estimate z = x / w stays an average of
// admitted values); Crossover-SGD's synchronous mix renormalises the
// weights of the messages it kept. Refusals are counted
// (DistributedOptimizer::rejectedMessages) and logged at most 10 lines a
// second. Cost: one pass over the received values (already in cache just
// before the mix reads them). On by default; `algorithm.check_received`.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "gossamer/log.hpp"

namespace gossamer::optimizers {

/// Screens received gossip messages (see the file comment). Thread-safe.
class GossipScreen {
 public:
  /// @param enabled false admits everything (counts nothing).
  /// @param who the optimizer's name, for the log ("sgp").
  GossipScreen(bool enabled, std::string who);

  /// True when a message from `peer` with push-sum weight `weight` and
  /// `values` (float32, any length) may be mixed in, for a job of
  /// `worldSize` ranks; otherwise counts and logs it and returns false.
  bool admit(int peer, double weight, std::span<const float> values, int worldSize);
  /// The same for a message without a weight (a synchronous Crossover-SGD segment).
  bool admit(int peer, std::span<const float> values);
  /// The same for float64 values (loss-tolerant SGP's running sums, whose
  /// weight sum grows without bound: only finiteness is checked).
  bool admit(int peer, std::span<const double> values);

  /// Messages refused so far.
  std::uint64_t rejected() const noexcept { return rejected_.load(); }
  bool enabled() const noexcept { return enabled_; }

 private:
  void refuse(int peer, const std::string& why);

  bool enabled_;
  std::string who_;
  std::atomic<std::uint64_t> rejected_{0};
  LogLimiter log_;
};

}  // namespace gossamer::optimizers
