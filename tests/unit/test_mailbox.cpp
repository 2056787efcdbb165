// Mailbox::claim, which transports use to fill a posted receive in place:
// matching order, and receives from several ranks left alone on request.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/mailbox.hpp"

using namespace gossamer;

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
