// Mailbox::claim, which transports use to fill a posted receive in place:
// matching order, and receives from several ranks left alone on request;
// Mailbox::discard, which drops queued messages by tag; the failures of a
// request whose ranks are renamed.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/membership.hpp"

using namespace gossamer;
using Clock = std::chrono::steady_clock;

TEST_CASE("Mailbox::claim takes the oldest matching pending receive, and leaves the rest posted",
          "[mailbox]") {
  Mailbox box(3);
  const auto tag = Tag::make(Op::kUser, 1);
  std::array<std::byte, 8> a{}, b{};
  const std::array<int, 1> from0{0};
  auto ra = box.post(from0, tag, a);
  auto rb = box.post(from0, tag, b);
  CHECK(box.claim(1, tag).state == nullptr);                      // no receive from rank 1
  CHECK(box.claim(0, Tag::make(Op::kUser, 2)).state == nullptr);  // nor under that tag
  const auto c = box.claim(0, tag);
  REQUIRE(c.state != nullptr);
  CHECK(c.buffer.data() == a.data());  // the older one
  c.state->complete(0, 8);
  CHECK(ra.test());
  // The younger one is still posted: a delivered message fills it.
  const std::array<std::byte, 8> payload{std::byte{7}};
  box.deliver(0, tag, InboundPayload{nullptr, payload});
  CHECK(rb.test());
  CHECK(b[0] == std::byte{7});
}

TEST_CASE("Mailbox::discard drops the queued messages whose tag it is given, and no others", "[mailbox]") {
  Mailbox box(3);
  // Full tags: op, segment and all 40 bits of the step come back from the queue.
  const Tag dropped{Op::kAllreduce, 3, (std::uint64_t{0x11} << 24) | 5};
  const Tag kept{Op::kAllreduce, 3, (std::uint64_t{0x21} << 24) | 5};
  const std::array<std::byte, 4> one{std::byte{1}}, two{std::byte{2}};
  box.deliver(0, dropped, InboundPayload{nullptr, one});
  box.deliver(1, dropped, InboundPayload{nullptr, one});
  box.deliver(0, kept, InboundPayload{nullptr, two});
  REQUIRE(box.unexpectedCount() == 3);
  CHECK(box.discard([&](const Tag& t) { return t == dropped; }) == 2);
  CHECK(box.unexpectedCount() == 1);
  // A receive under the dropped tag waits for a new message; the kept one is there.
  std::array<std::byte, 4> a{}, b{};
  const std::array<int, 2> from01{0, 1};
  auto ra = box.post(from01, dropped, a);
  auto rb = box.post(from01, kept, b);
  CHECK_FALSE(ra.test());
  REQUIRE(rb.test());
  CHECK(b[0] == std::byte{2});
  box.deliver(1, dropped, InboundPayload{nullptr, two});
  REQUIRE(ra.test());
  CHECK(a[0] == std::byte{2});
  CHECK(box.unexpectedCount() == 0);
}

TEST_CASE("Mailbox::claim with singleSourceOnly leaves a receive from several ranks first in line",
          "[mailbox]") {
  Mailbox box(3);
  const auto tag = Tag::make(Op::kUser, 1);
  std::array<std::byte, 8> any{}, one{};
  const std::array<int, 2> from02{0, 2};
  const std::array<int, 1> from0{0};
  auto rAny = box.post(from02, tag, any);
  auto rOne = box.post(from0, tag, one);
  // The oldest match takes two sources: nothing is claimed, and the younger
  // single-source receive is not taken out of turn either.
  CHECK(box.claim(0, tag, /*singleSourceOnly=*/true).state == nullptr);
  // Without the restriction the oldest one is claimed.
  const auto c = box.claim(0, tag);
  REQUIRE(c.state != nullptr);
  CHECK(c.buffer.data() == any.data());
  c.state->fail(std::make_exception_ptr(PeerFailure(0, "test")));
  CHECK_THROWS_AS(rAny.test(), PeerFailure);
  // Now the single-source one is oldest, and may be claimed.
  const auto d = box.claim(0, tag, true);
  REQUIRE(d.state != nullptr);
  CHECK(d.buffer.data() == one.data());
  d.state->complete(0, 0);
  CHECK(rOne.test());
}

TEST_CASE(
    "a handed-over payload keeps its owner alive, and received() of a failed or cancelled receive is empty",
    "[mailbox]") {
  Mailbox box(2);
  const std::array<int, 1> from0{0};
  const auto tag = Tag::make(Op::kUser, 1);
  std::array<std::byte, 16> buf{};
  Request r;
  {
    auto owned = std::make_shared<std::vector<std::byte>>(16, std::byte{0x42});
    box.deliver(0, tag, InboundPayload{owned, *owned});
    r = box.post(from0, tag, buf, nullptr, true);
  }  // only the Request owns the payload now
  REQUIRE(r.test());
  const auto got = r.received(buf);
  REQUIRE(got.size() == 16);
  CHECK(got.data() != buf.data());
  CHECK(got[15] == std::byte{0x42});
  // Too long: failed; received() must not be called by users but returns empty.
  std::array<std::byte, 4> small{};
  auto big = std::make_shared<std::vector<std::byte>>(16);
  auto rf = box.post(from0, Tag::make(Op::kUser, 2), small, nullptr, true);
  box.deliver(0, Tag::make(Op::kUser, 2), InboundPayload{big, *big});
  CHECK_THROWS_AS(rf.test(), ProtocolError);
  CHECK(rf.received(small).empty());
  auto rc = box.post(from0, Tag::make(Op::kUser, 3), small, nullptr, true);
  rc.cancel();
  CHECK(rc.received(small).empty());
}

namespace {

// Guards deliver() racing cancel(): if Mailbox::deliver checked isPending(), let go of
// the request's lock, and fill() then did nothing if cancel() had won in
// between; deliver() still erased the posted receive and returned, so the
// message was neither delivered nor queued. Returns how many were lost.
int lostInRace(bool handOver) {
  Mailbox box(2);
  const std::array<int, 1> from0{0};
  std::atomic<long> go{-1}, done{-1};
  std::atomic<bool> stop{false};
  std::thread deliverer([&] {
    long seen = -1;
    while (!stop.load()) {
      const long g = go.load();
      if (g == seen) continue;
      seen = g;
      auto owned = std::make_shared<std::vector<std::byte>>(8, std::byte{7});
      box.deliver(0, Tag::make(Op::kUser, static_cast<std::uint64_t>(g)), InboundPayload{owned, *owned});
      done.store(g);
    }
  });
  std::mt19937 rng(3);
  int lost = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(8);
  for (long i = 0; i < 100000 && Clock::now() < deadline; ++i) {
    std::array<std::byte, 8> buf{};
    const auto tag = Tag::make(Op::kUser, static_cast<std::uint64_t>(i));
    auto r = box.post(from0, tag, buf, nullptr, handOver);
    go.store(i);
    for (unsigned k = rng() % 400; k > 0; --k) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // keeps the delay loop
    }
    r.cancel();
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (done.load() != i && Clock::now() < until) {
    }
    if (done.load() != i) {  // (the thread joined first: a failure is reported, not std::terminate)
      stop = true;
      deliverer.join();
      FAIL("the deliverer did not deliver message " << i << " within 5 s");
    }
    bool got = false;
    try {
      got = r.test();
    } catch (const Cancelled&) {
    }
    if (!got) {
      std::array<std::byte, 8> b2{};
      auto r2 = box.post(from0, tag, b2, nullptr, handOver);
      if (!r2.test()) ++lost;  // deliver() returned: the message must be queued
    }
  }
  stop = true;
  deliverer.join();
  return lost;
}

}  // namespace

TEST_CASE("a delivery racing cancel() never drops the message (copied)", "[mailbox]") {
  CHECK(lostInRace(false) == 0);
}
TEST_CASE("a delivery racing cancel() never drops the message (handed over)", "[mailbox]") {
  CHECK(lostInRace(true) == 0);
}

TEST_CASE("a sliced wait calls its check only while the request is pending, and keeps the timeout",
          "[mailbox]") {
  Mailbox box(2);
  const auto tag = Tag::make(Op::kUser, 9);
  std::vector<std::byte> buf(4);
  int checks = 0;
  // Completed at once: the check never runs.
  box.deliver(1, tag, InboundPayload{nullptr, std::span<const std::byte>(buf.data(), 4)});
  auto done = box.post(std::vector<int>{1}, tag, buf);
  done.wait(5.0, 0.05, [&] { ++checks; });
  CHECK(checks == 0);
  // Pending: the check runs after each slice and may end the wait.
  auto pending = box.post(std::vector<int>{1}, tag, buf);
  const auto start = Clock::now();
  CHECK_THROWS_AS(pending.wait(5.0, 0.05,
                               [&] {
                                 if (++checks == 3) throw PeerFailure(1, "held up");
                               }),
                  PeerFailure);
  CHECK(checks == 3);
  CHECK(Clock::now() - start < std::chrono::milliseconds(4500));  // the check ended it, not the 5 s timeout
  // A check that never throws: the same TimeoutError as wait(0.2).
  CHECK_THROWS_WITH(pending.wait(0.2, 0.05, [] {}), Catch::Contains("timed out after 0.2"));
  pending.cancel();
}

TEST_CASE(
    "a renamed request's PeerFailure names the outer rank, and ViewChanged and Expelled keep their type",
    "[mailbox][membership]") {
  // An inner transport's request (the composite's local side) renames the
  // ranks in its failures; the membership service fails such requests with
  // ViewChanged (another rank revoked the view) or Expelled, which name global
  // ranks and which the Session tells from a peer's failure by their type.
  // They used to become plain PeerFailures, with the rank renamed.
  const auto names = std::make_shared<const std::vector<int>>(std::vector<int>{4, 6, 9});
  const auto failedWith = [&](std::exception_ptr e) {
    auto s = std::make_shared<detail::RequestState>();
    s->peerNames = names;
    s->fail(std::move(e));
    return Request(s);
  };
  try {
    failedWith(std::make_exception_ptr(PeerFailure(1, "lost"))).wait(1);
    FAIL("no failure");
  } catch (const ViewChanged&) {
    FAIL("a PeerFailure became a ViewChanged");
  } catch (const PeerFailure& e) {
    CHECK(e.peer() == 6);
  }
  try {
    failedWith(std::make_exception_ptr(ViewChanged(2, "revoked"))).wait(1);
    FAIL("no failure");
  } catch (const ViewChanged& e) {
    CHECK(e.peer() == 2);
  }
  try {
    failedWith(std::make_exception_ptr(Expelled(5, "removed"))).wait(1);
    FAIL("no failure");
  } catch (const Expelled& e) {
    CHECK(e.peer() == 5);
  }
}
