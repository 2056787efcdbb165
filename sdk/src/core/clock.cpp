// The SDK's time seam (kit/clock.hpp): the machine's clocks unless a
// simulator installs its own.
#include "gossamer/kit/clock.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace gossamer {

namespace detail {
void addThreadWait(std::int64_t nanos) noexcept;  // metrics.cpp
}  // namespace detail

namespace {
std::atomic<const TimeSource*> gSource{nullptr};
}  // namespace

void setTimeSource(const TimeSource* source) noexcept { gSource.store(source, std::memory_order_release); }

Clock::time_point Clock::now() noexcept {
  if (const auto* s = gSource.load(std::memory_order_acquire)) return time_point(duration(s->steadyNanos()));
  return time_point(
      std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch()));
}

double unixSeconds() noexcept {
  if (const auto* s = gSource.load(std::memory_order_acquire)) return s->unixSeconds();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void sleepFor(double seconds) noexcept {
  if (!(seconds > 0)) return;
  // Above 1e9 s (about 32 years; infinity too) the conversion to the
  // clock's integer ticks would overflow into a negative pause: capped.
  seconds = std::min(seconds, 1e9);
  const auto t0 = Clock::now();
  if (const auto* s = gSource.load(std::memory_order_acquire))
    s->sleepSeconds(seconds);
  else
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  // The SDK pauses only to let a peer's messages arrive: the time counts as
  // waiting (threadWaitSeconds), as a Request::wait's does.
  detail::addThreadWait(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

}  // namespace gossamer
