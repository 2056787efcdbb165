// The SDK's time seam (kit/clock.hpp): the machine's clocks by default, an
// installed TimeSource's otherwise.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "gossamer/kit/clock.hpp"

using namespace gossamer;

namespace {
// A source whose time moves only when something sleeps on it.
std::atomic<std::int64_t> gFakeNanos{0};
const TimeSource kFake{[]() noexcept { return gFakeNanos.load(); },
                       []() noexcept { return 1e9 + static_cast<double>(gFakeNanos.load()) * 1e-9; },
                       [](double s) noexcept { gFakeNanos += static_cast<std::int64_t>(s * 1e9); }};
}  // namespace

TEST_CASE("the SDK clock is the steady clock by default and an installed source's otherwise", "[clock]") {
  const auto steady0 = std::chrono::steady_clock::now();
  const auto t0 = Clock::now();
  sleepFor(0.02);
  CHECK(secondsSince(t0) >= 0.019);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - steady0).count() >= 0.019);
  const double unix0 = unixSeconds();
  CHECK(unix0 > 1.6e9);  // after 2020: the system clock
  sleepFor(-1.0);        // a negative pause is none

  gFakeNanos = 5'000'000'000;
  setTimeSource(&kFake);
  const auto f0 = Clock::now();
  CHECK(f0.time_since_epoch() == std::chrono::seconds(5));
  CHECK(unixSeconds() == Approx(1e9 + 5));
  const auto wall0 = std::chrono::steady_clock::now();
  sleepFor(3600.0);  // an hour of the source's time, none of the machine's
  CHECK(secondsSince(f0) == Approx(3600.0));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count() < 60.0);
  const auto deadline = f0 + clockDuration(std::chrono::duration<double>(1800.0));
  CHECK(Clock::now() > deadline);

  setTimeSource(nullptr);
  CHECK(Clock::now().time_since_epoch() != std::chrono::seconds(3605));
  CHECK(unixSeconds() >= unix0);
}
