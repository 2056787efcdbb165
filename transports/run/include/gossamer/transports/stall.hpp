// The stall report: a transport wrapper that notices when this rank has
// waited on the same peer and operation for longer than a threshold, and
// says so (which rank, which peer, which operation and step, since when,
// and when that peer's last message came) while the wait goes on, instead
// of staying silent until the timeout. The same wrapper counts the bytes
// sent to and received from each peer (LinkMeter) for the run metrics.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/metrics.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::stall {

/// One stalled request, reported once when it has been pending for
/// thresholdSeconds.
struct StallReport {
  int rank = -1;             ///< This rank (the one waiting).
  std::vector<int> peers;    ///< The rank(s) it waits on: the destination, or the sources.
  bool send = false;         ///< A send not yet taken by its peer (else a receive).
  Tag tag;                   ///< The operation (tag.op), its step and segment.
  double waitedSeconds = 0;  ///< How long a thread had waited on it when reported, seconds.
  /// When a thread began to wait on it, seconds since the Unix epoch (system clock).
  double sinceUnixSeconds = 0;
  /// The last message this rank received from each of `peers` (same
  /// order), when the wrapper counts traffic (Options::meter); else empty.
  std::vector<LinkMeter::Last> lastFromPeers;
};

/// "stall: rank 0 has waited 2.0 s (since 12:00:01.250 UTC) for a receive
/// from rank 1: allreduce, step 41, segment 3; rank 1's last message came
/// 2.1 s ago (allreduce, step 41, segment 2)".
std::string describe(const StallReport& report);

/// "stall watch: rank 1 itself did not run for 2.3 s (stopped, or starved of
/// CPU); waits across that time do not count against its peers".
std::string describePause(int rank, double seconds);

/// Options of wrap().
struct Options {
  /// Report a request that a thread has waited on (Request::wait, waitFor)
  /// this long since its first wait, seconds (> 0; 0 with a meter: count
  /// traffic only). A request that is only pending (posted, tested,
  /// overlapped with computation) is not a stall.
  double thresholdSeconds = 10.0;
  /// Counts every payload byte sent to and received from each peer (by
  /// this transport's ranks) into it; null: no counting.
  std::shared_ptr<LinkMeter> meter;
  /// Called once per stalled request, from the watcher's thread; the default
  /// (empty) logs describe(report) as a warning.
  std::function<void(const StallReport&)> onStall;
  /// Called when the watcher finds that this process itself did not run for
  /// a while (it woke more than max(threshold / 2, 0.2 s) late: SIGSTOP, a
  /// debugger, CPU starvation), with the seconds it lost and since when
  /// (Unix seconds); that time is not counted in any wait. The default
  /// (empty) logs describePause as a warning.
  std::function<void(double seconds, double sinceUnixSeconds)> onPause;
};

/// Wraps `inner`: every send and receive it posts (but the membership
/// service's heartbeats and control messages, which wait by design) is
/// watched by a thread that wakes every thresholdSeconds / 4 and reports,
/// once, each one that a thread has waited on for the threshold. Costs per
/// request: a copy of its peer list and one short critical section, which
/// also drops up to two settled requests (Request::waitFor records when a
/// thread first waits); with a meter, two relaxed atomic adds.
/// @throws InvalidArgument if inner is null, thresholdSeconds < 0, or
///         thresholdSeconds is 0 without a meter.
std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, Options options);

}  // namespace gossamer::stall
