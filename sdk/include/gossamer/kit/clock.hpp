// The time the SDK keeps, behind one seam: the clock its deadlines and
// durations are read on, and the pause of a polling loop.
//
// By default that is the machine's: std::chrono::steady_clock,
// std::chrono::system_clock and std::this_thread::sleep_for. A simulator in
// which time is its own (the simgrid transport: SimGrid's simulated seconds)
// installs a TimeSource, so that an optimizer's "wait up to 50 ms for what
// is still in flight" lasts 50 simulated milliseconds, during which the
// other simulated ranks run, and a metrics record says when in the
// simulation it was written. The algorithms read time only through here.
#pragma once

#include <chrono>
#include <cstdint>

namespace gossamer {

/// Where the SDK's time comes from (setTimeSource). Every function may be
/// called from any thread and must not throw.
struct TimeSource {
  /// Monotonic time in nanoseconds from an arbitrary origin.
  std::int64_t (*steadyNanos)() noexcept;
  /// Seconds since the Unix epoch (what metrics records carry as "time").
  double (*unixSeconds)() noexcept;
  /// Pauses the running thread of execution for `seconds` (>= 0) of this
  /// source's time.
  void (*sleepSeconds)(double seconds) noexcept;
};

/// Installs `source` for the whole process (null: the machine's clocks, the
/// default). `source` must outlive its installation. Install it before the
/// threads that use the SDK start, and remove it after they end.
void setTimeSource(const TimeSource* source) noexcept;

/// The SDK's steady clock (std::chrono's Clock requirements): steady_clock
/// unless a TimeSource is installed, then the source's time.
struct Clock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock>;
  static constexpr bool is_steady = true;
  /// Now, on the installed source.
  static time_point now() noexcept;
};

/// Seconds since the Unix epoch on the installed source (system_clock by default).
double unixSeconds() noexcept;

/// Pauses the running thread of execution for `seconds` of the installed
/// source's time (std::this_thread::sleep_for by default); negative or NaN:
/// none; above 1e9 (infinity too): 1e9 seconds.
/// The SDK pauses only for a peer's messages: the time counts as this
/// thread's waiting (threadWaitSeconds, the metrics' waiting_s).
void sleepFor(double seconds) noexcept;

/// `d` (any std::chrono duration) as a Clock duration, for deadlines:
/// `Clock::now() + clockDuration(std::chrono::duration<double>(s))`.
template <typename Rep, typename Period>
constexpr Clock::duration clockDuration(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration_cast<Clock::duration>(d);
}

/// The time point `seconds` after `now` on clock `C` (Clock, or
/// std::chrono::steady_clock for a condition variable), saturating: a
/// timeout of 1e9 seconds (31 years) or more, infinity included, is no
/// deadline (C::time_point::max()), where converting it to nanoseconds would
/// overflow into the past; 0 or less (NaN included) is `now`. Callers
/// refuse a negative or NaN timeout first.
template <typename C = Clock>
typename C::time_point deadlineAfter(double seconds, typename C::time_point now = C::now()) noexcept {
  if (!(seconds > 0)) return now;
  if (seconds >= 1e9) return C::time_point::max();
  return now + std::chrono::duration_cast<typename C::duration>(std::chrono::duration<double>(seconds));
}

/// Seconds elapsed since `t0` on Clock.
inline double secondsSince(Clock::time_point t0) noexcept {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace gossamer
