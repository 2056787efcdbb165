// PeerLifecycle (gossamer/kit/peer_lifecycle.hpp), the goodbye, failure-verdict,
// grace and statistics bookkeeping every network transport shares: a verdict
// fails exactly the receives that wait only on the departed peer, the first
// verdict stands, close() waits only for peers that have not settled, and a
// lost peer is failed once its grace period is over, not before.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/peer_lifecycle.hpp"
#include "gossamer/kit/single_copy.hpp"

using gossamer::Mailbox;
using gossamer::PeerLifecycle;
using gossamer::Tag;

namespace {
Tag userTag() { return Tag::make(gossamer::Op::kUser, 7); }
}  // namespace

TEST_CASE("lifecycle: a bye fails receives waiting only on that peer, with the reason it gave",
          "[lifecycle]") {
  Mailbox box(3);
  PeerLifecycle life("test", 0, 3, box);
  std::vector<std::byte> a(4), b(4);
  auto onlyOne = box.post(std::vector<int>{1}, userTag(), a);
  auto either = box.post(std::vector<int>{1, 2}, userTag(), b);
  life.onBye(1, PeerLifecycle::kByeAfterError);
  CHECK(life.leaving(1));
  CHECK(life.settled(1));
  CHECK_FALSE(life.acked(1));
  CHECK_THROWS_WITH(onlyOne.test(), Catch::Contains("it stopped after an error of its own"));
  CHECK_FALSE(either.test());  // rank 2 may still send
  // A later failure report does not replace the bye.
  CHECK_FALSE(life.declareFailed(1, "connection lost"));
  CHECK_THROWS_WITH(life.throwGone(1, "unused"), Catch::Contains("error of its own"));
}

TEST_CASE("lifecycle: close waits for unsettled peers only, and is woken by an ack", "[lifecycle]") {
  Mailbox box(3);
  PeerLifecycle life("test", 1, 3, box);
  CHECK(life.beginClose());
  CHECK_FALSE(life.beginClose());
  CHECK_THROWS_AS(life.checkSend(0), gossamer::Cancelled);
  CHECK_THROWS_AS(life.checkOpen("irecv"), gossamer::Cancelled);
  CHECK_FALSE(life.waitSettled(0.01));
  life.onBye(0, 0);
  std::thread acker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    life.onByeAck(2);
  });
  CHECK(life.waitSettled(30));  // settled by the ack, not the time running out
  acker.join();
  CHECK(life.acked(2));
  CHECK_FALSE(life.leaving(2));
}

TEST_CASE("lifecycle: a lost peer fails after its grace period, unless it said bye", "[lifecycle]") {
  Mailbox box(3);
  PeerLifecycle life("test", 0, 3, box);
  std::vector<std::byte> buf(4);
  auto r = box.post(std::vector<int>{1}, userTag(), buf);
  life.noteLost(1);
  life.noteLost(2);
  life.onBye(2, 0);
  CHECK(life.expireLost(10.0).empty());
  CHECK_FALSE(r.test());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(life.expireLost(0.001) == std::vector<int>{1});
  CHECK_THROWS_AS(r.test(), gossamer::PeerFailure);
  CHECK_THROWS_WITH(life.throwGone(1, "unused"), Catch::Contains("without a goodbye"));
  CHECK(life.expireLost(0.0).empty());  // the verdict is given once
}

TEST_CASE("lifecycle: argument checks and statistics", "[lifecycle]") {
  Mailbox box(2);
  CHECK_THROWS_AS(PeerLifecycle("test", 2, 2, box), gossamer::InvalidArgument);
  PeerLifecycle life("test", 0, 2, box);
  CHECK_THROWS_AS(life.checkSend(2), gossamer::InvalidArgument);
  CHECK_THROWS_AS(life.checkSend(-1), gossamer::InvalidArgument);
  CHECK_NOTHROW(life.checkSend(1));
  CHECK_THROWS_AS(life.declareFailed(5, "x"), gossamer::InternalError);
  life.countSent(100);
  life.countReceived(40);
  life.countReceived(60, /*pulled=*/true);
  const auto s = life.stats();
  CHECK(s.bytesSent == 100);
  CHECK(s.messagesSent == 1);
  CHECK(s.bytesReceived == 100);
  CHECK(s.messagesReceived == 2);
  CHECK(s.messagesPulled == 1);
}

TEST_CASE(
    "single-copy ledger: a pull-done completes only its own peer's send, and a departed peer's sends fail",
    "[lifecycle][single_copy]") {
  gossamer::single_copy::Ledger ledger;
  auto a = std::make_shared<gossamer::detail::RequestState>();
  auto b = std::make_shared<gossamer::detail::RequestState>();
  auto c = std::make_shared<gossamer::detail::RequestState>();
  const auto ta = ledger.add(1, a, 10);
  const auto tb = ledger.add(2, b, 20);
  const auto tc = ledger.add(2, c, 30);
  CHECK(ta != tb);
  CHECK_FALSE(ledger.done(2, ta, false));  // rank 2 cannot complete rank 1's send
  CHECK(ledger.done(1, ta, false));
  CHECK(a->status == gossamer::detail::RequestState::Status::kDone);
  CHECK(a->bytes == 10);
  CHECK(ledger.ticketOf(*b) == tb);
  CHECK(ledger.destinationOf(tb) == 2);
  ledger.failOwedBy(2, std::make_exception_ptr(gossamer::PeerFailure(2, "gone")));
  CHECK(b->status == gossamer::detail::RequestState::Status::kFailed);
  CHECK(c->status == gossamer::detail::RequestState::Status::kFailed);
  CHECK(ledger.waitSettled(tc, 0));
  ledger.close(std::make_exception_ptr(gossamer::Cancelled("closed")));
  CHECK_THROWS_AS(ledger.add(1, a, 1), gossamer::Cancelled);
}

TEST_CASE("lifecycle: a failure verdict and a revive that race leave the lifecycle and the mailbox agreeing",
          "[lifecycle]") {
  // Each verdict and its Mailbox call happen under one lock with the
  // revive's: the mailbox used to end gone while the lifecycle had the
  // peer back (the revive between the verdict and its peerGone).
  CHECK_THROWS_AS(Mailbox(-1), gossamer::InvalidArgument);  // not std::length_error
  CHECK_THROWS_AS(Mailbox(0), gossamer::InvalidArgument);
  for (int i = 0; i < 5000; ++i) {
    Mailbox box(2);
    PeerLifecycle life("test", 0, 2, box);
    std::thread failer([&] { life.declareFailed(1, "lost"); });
    std::thread reviver([&] { life.revive(1); });
    failer.join();
    reviver.join();
    INFO("iteration " << i);
    REQUIRE(life.gone(1) == box.isGone(1));
    life.noteLost(1);
    std::thread expirer([&] { life.expireLost(0.0); });
    std::thread reviver2([&] { life.revive(1); });
    expirer.join();
    reviver2.join();
    REQUIRE(life.gone(1) == box.isGone(1));
  }
}

TEST_CASE("lifecycle: failedVerdict reports failures and aborts, not clean byes, until a revive",
          "[lifecycle]") {
  Mailbox box(4);
  PeerLifecycle life("test", 0, 4, box);
  CHECK_FALSE(life.failedVerdict(1));
  life.onBye(1, 0);  // a clean close: finished, not failed
  CHECK(life.gone(1));
  CHECK_FALSE(life.failedVerdict(1));
  life.onBye(2, PeerLifecycle::kByeAfterError);
  REQUIRE(life.failedVerdict(2));
  CHECK_THROWS_WITH(std::rethrow_exception(life.failedVerdict(2)), Catch::Contains("error of its own"));
  life.declareFailed(3, "connection lost");
  REQUIRE(life.failedVerdict(3));
  CHECK_THROWS_AS(std::rethrow_exception(life.failedVerdict(3)), gossamer::PeerFailure);
  life.revive(3);
  CHECK_FALSE(life.failedVerdict(3));
  CHECK_FALSE(life.failedVerdict(0));
  CHECK_FALSE(life.failedVerdict(-1));
  CHECK_FALSE(life.failedVerdict(4));
}
