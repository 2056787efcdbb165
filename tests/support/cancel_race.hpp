// Test support: cancel receives at random moments of their message's arrival.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::testing {

/// `rounds` times: `receiver` posts a receive from `sender`'s rank into a
/// buffer of `sent.size()` bytes, `sender` sends `sent`, and after a busy wait
/// of a random 0..maxSpin the receive is cancelled. Each round checks (Catch2
/// REQUIRE) that either the receive completed with the message whole, or it
/// ended cancelled, its buffer did not change after cancel() returned, and the
/// next receive got the message whole (nothing lost). Tags are
/// Tag::make(Op::kUser, firstStep + round). Returns how many rounds ended
/// cancelled. Waits are bounded by `timeoutSeconds` (TimeoutError).
inline int cancelAtRandomMoments(Transport& sender, Transport& receiver, const std::vector<std::byte>& sent,
                                 int rounds, std::chrono::nanoseconds maxSpin, std::uint64_t firstStep,
                                 double timeoutSeconds) {
  constexpr auto kUntouched = std::byte{0xA5};
  std::mt19937 rng(static_cast<std::uint32_t>(firstStep));
  int cancelled = 0;
  // Allocated once: fresh pages every round would cost more than the rounds.
  std::vector<std::byte> first(sent.size()), second(sent.size()), snapshot(sent.size());
  for (int i = 0; i < rounds; ++i) {
    INFO("round " << i);
    const auto tag = Tag::make(Op::kUser, firstStep + static_cast<std::uint64_t>(i));
    std::fill(first.begin(), first.end(), kUntouched);
    auto r1 = receiver.irecv(sender.rank(), tag, first);
    sender.isend(receiver.rank(), tag, sent);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(rng() % static_cast<std::uint64_t>(maxSpin.count() + 1));
    while (std::chrono::steady_clock::now() < until) {
    }
    r1.cancel();
    try {
      r1.wait(timeoutSeconds);
      REQUIRE(first == sent);  // it had arrived before the cancel
      continue;
    } catch (const Cancelled&) {
      ++cancelled;
    }
    snapshot = first;
    std::fill(second.begin(), second.end(), kUntouched);
    auto r2 = receiver.irecv(sender.rank(), tag, second);
    r2.wait(timeoutSeconds);  // nothing lost
    REQUIRE(second == sent);
    REQUIRE(first == snapshot);  // nothing written after cancel() returned
  }
  return cancelled;
}

}  // namespace gossamer::testing
