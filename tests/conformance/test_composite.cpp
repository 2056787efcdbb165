// The composite transport beyond the conformance suite: receives from ranks
// on both sides under load and cancellation, job ranks in requests and
// errors of the local side, and its argument checks.
#include <catch2/catch.hpp>

#include "forwarding.hpp"
#include "threads.hpp"

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/composite.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

// An inner transport over `protocol` made by `make` from its Options.
template <typename Opts>
composite::InnerFactory inner(const char* protocol, std::unique_ptr<Transport> (*make)(const Opts&, Store&)) {
  return [=](int rank, int size, Store& s) {
    Opts o;
    o.rank = rank;
    o.worldSize = size;
    o.protocol = protocol;
    o.timeoutSeconds = kTimeout;
    o.lingerSeconds = 2;
    return make(o, s);
  };
}

// n ranks in two groups, the even and the odd ranks.
std::vector<std::unique_ptr<Transport>> evenOdd(int n) {
  MemoryStore store;
  std::vector<std::unique_ptr<Transport>> g(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    composite::Options o;
    o.rank = r;
    o.worldSize = n;
    o.timeoutSeconds = kTimeout;
    for (int q = r % 2; q < n; q += 2) o.localGroup.push_back(q);
    g[static_cast<std::size_t>(r)] = composite::makeTransport(o, store, inner("ipc", sock::makeTransport),
                                                              inner("tcp", zmq::makeTransport));
  });
  return g;
}

// n ranks in the even and odd groups over inproc inner transports: a message
// reaches the inner receive it matches inside isend, so which side of a
// receive from both sides holds what is known without waiting.
std::vector<std::unique_ptr<Transport>> evenOddInproc(int n) {
  MemoryStore store;
  const std::shared_ptr<inproc::Fabric> groups[] = {inproc::makeFabric((n + 1) / 2),
                                                    inproc::makeFabric(n / 2)};
  const auto all = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> g;
  for (int r = 0; r < n; ++r) {
    composite::Options o;
    o.rank = r;
    o.worldSize = n;
    o.timeoutSeconds = kTimeout;
    for (int q = r % 2; q < n; q += 2) o.localGroup.push_back(q);
    const auto local = groups[r % 2];
    g.push_back(composite::makeTransport(
        o, store, [local](int rank, int, Store&) { return inproc::makeTransport(local, rank, kTimeout); },
        [all](int rank, int, Store&) { return inproc::makeTransport(all, rank, kTimeout); }));
  }
  return g;
}

void sendInt(Transport& t, int dst, const Tag& tag, std::int32_t v) {
  t.isendOf<std::int32_t>(dst, tag, std::span<const std::int32_t>(&v, 1)).wait(kTimeout);
}

std::span<std::byte> bytesOf(std::int32_t& v) {
  return std::as_writable_bytes(std::span<std::int32_t>(&v, 1));
}

}  // namespace

TEST_CASE("composite: receives from both sides under cancellation lose and duplicate nothing, in order",
          "[composite][transport]") {
  // Rank 0's group is {0, 2, 4}; 1 and 3 are reached over zmq. Four senders
  // stream numbered messages under one tag while rank 0 receives from all of
  // them at once and cancels a third of its receives right after posting:
  // one that a side completed before the cancel completes with that message
  // (a second side's is kept for a later receive), one that none did is
  // cancelled; either way nothing is lost, repeated or out of order.
  const int n = 5;
  auto g = evenOdd(n);
  const int perSender = 400;
  const auto tag = Tag::make(Op::kGossip, 3);
  std::vector<std::thread> senders;
  for (int r = 1; r < n; ++r)
    senders.emplace_back([&, r] {
      for (std::int32_t i = 0; i < perSender; ++i) {
        const std::int32_t v[2] = {r, i};
        g[static_cast<std::size_t>(r)]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(v, 2));
      }
    });
  const int sources[] = {1, 2, 3, 4};
  std::map<int, std::int32_t> next;
  std::mt19937 rng(5);
  int received = 0;
  int cancels = 0;
  while (received < (n - 1) * perSender) {
    std::int32_t got[2] = {-1, -1};
    auto req = g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(got, 2)));
    if (rng() % 3 == 0) {
      ++cancels;
      req.cancel();
      bool completedFirst = false;  // a receive that completed before cancel() keeps its message
      try {
        completedFirst = req.test();
      } catch (const Cancelled&) {
      }
      if (!completedFirst) continue;
    }
    req.wait(kTimeout);
    REQUIRE(req.bytes() == sizeof got);
    REQUIRE(req.peer() == got[0]);
    REQUIRE(got[1] == next[got[0]]);  // per-source order, nothing skipped or repeated
    ++next[got[0]];
    ++received;
  }
  for (auto& t : senders) t.join();
  CHECK(cancels > 100);
  for (int r = 1; r < n; ++r) CHECK(next[r] == perSender);
  // Nothing is left over.
  std::int32_t extra[2];
  auto more = g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(extra, 2)));
  CHECK_FALSE(more.waitFor(0.2));
}

TEST_CASE("composite: a message kept from one receive from both sides reaches one already waiting",
          "[composite][transport]") {
  // Rank 0's group is {0, 2}; rank 1 is remote. Two receives from {1, 2}
  // wait; one message from each side arrives, both for the first receive's
  // sides: it takes one and keeps the other, which the second receive
  // (waiting already) gets.
  auto g = evenOdd(3);
  const auto tag = Tag::make(Op::kGossip, 4);
  const int sources[] = {1, 2};
  std::int32_t a = -1, b = -1;
  Request first = g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(&a, 1)));
  Request second = g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(&b, 1)));
  const std::int32_t fromOne = 11, fromTwo = 22;
  g[1]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&fromOne, 1)).wait(kTimeout);
  g[2]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&fromTwo, 1)).wait(kTimeout);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (mostly) both there before a look
  first.wait(kTimeout);
  REQUIRE(second.waitFor(kTimeout));
  CHECK(std::min(a, b) == 11);
  CHECK(std::max(a, b) == 22);
  for (auto& t : g) t->close();
}

TEST_CASE("composite: a receive from both sides cancelled after its message came keeps per-source order",
          "[composite][transport]") {
  // A receive from {1, 2}, then one from 2 alone; rank 2 sends 1, the first
  // receive is cancelled, rank 2 sends 2. Whether 1 reached the first
  // receive before the cancel (it then completes with it) or not (the
  // receive from 2 gets it), 1 is received before 2.
  auto g = evenOdd(3);
  const auto tag = Tag::make(Op::kGossip, 5);
  const int sources[] = {1, 2};
  std::int32_t a = -1, b = -1, c = -1;
  Request both = g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(&a, 1)));
  Request two = g[0]->irecv(2, tag, std::as_writable_bytes(std::span<std::int32_t>(&b, 1)));
  const std::int32_t m1 = 1, m2 = 2;
  g[2]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&m1, 1)).wait(kTimeout);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (mostly) there before the cancel
  both.cancel();
  bool completed = false;
  try {
    completed = both.test();
  } catch (const Cancelled&) {
  }
  g[2]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&m2, 1)).wait(kTimeout);
  two.wait(kTimeout);
  if (completed) {
    CHECK(a == 1);
    CHECK(b == 2);
  } else {
    CHECK(b == 1);
    Request next = g[0]->irecv(2, tag, std::as_writable_bytes(std::span<std::int32_t>(&c, 1)));
    next.wait(kTimeout);
    CHECK(c == 2);
  }
  std::int32_t extra = -1;
  CHECK_FALSE(
      g[0]->irecv(sources, tag, std::as_writable_bytes(std::span<std::int32_t>(&extra, 1))).waitFor(0.2));
  for (auto& t : g) t->close();
}

TEST_CASE(
    "composite: a receive from one rank posted behind a receive from both sides gets its messages in order",
    "[composite][transport]") {
  // Rank 0's group is {0, 2}; rank 1 is remote. A receive from {1, 2} waits,
  // then one from 1 alone (and a view receive from 1). Rank 2 sends 100,
  // rank 1 sends 1, 2 and 3: the first receive's remote side holds 1 and its
  // local side 100. It takes 100 and keeps 1, which the receives from 1
  // alone, posted after it, must get before 2 and 3.
  auto g = evenOddInproc(3);
  const auto tag = Tag::make(Op::kGossip, 6);
  const int sources[] = {1, 2};
  std::int32_t a = -1, b = -1, c = -1, d = -1;
  Request both = g[0]->irecv(sources, tag, bytesOf(a));
  Request one = g[0]->irecv(1, tag, bytesOf(b));
  Request view = g[0]->irecvView(1, tag, bytesOf(c));
  sendInt(*g[2], 0, tag, 100);
  for (std::int32_t v : {1, 2, 3}) sendInt(*g[1], 0, tag, v);
  one.wait(kTimeout);
  view.wait(kTimeout);
  both.wait(kTimeout);
  CHECK(a == 100);
  CHECK(both.peer() == 2);
  CHECK(b == 1);
  CHECK(one.peer() == 1);
  std::memcpy(&c, view.received(bytesOf(c)).data(), sizeof c);
  CHECK(c == 2);
  Request next = g[0]->irecv(1, tag, bytesOf(d));
  REQUIRE(next.waitFor(kTimeout));
  CHECK(d == 3);
  CHECK_FALSE(g[0]->irecv(sources, tag, bytesOf(d)).waitFor(0.05));
  for (auto& t : g) t->close();
}

TEST_CASE("composite: receives from both sides settled out of posting order keep per-source order",
          "[composite][transport]") {
  // Two receives from {1, 2}; rank 1 sends 1 and 2 (one to each receive's
  // remote side), rank 2 sends 100 (to the first one's local side). The
  // second is waited on first: it must not complete with 2 while the first,
  // which takes 100, keeps 1 for a later receive. And a cancel of the second
  // after its side completed must not either.
  for (const bool cancelSecond : {false, true}) {
    auto g = evenOddInproc(3);
    const auto tag = Tag::make(Op::kGossip, 7);
    const int sources[] = {1, 2};
    std::int32_t a = -1, b = -1, c = -1;
    Request first = g[0]->irecv(sources, tag, bytesOf(a));
    Request second = g[0]->irecv(sources, tag, bytesOf(b));
    sendInt(*g[1], 0, tag, 1);
    sendInt(*g[1], 0, tag, 2);
    sendInt(*g[2], 0, tag, 100);
    if (cancelSecond) {
      second.cancel();
      CHECK(second.test());  // a side had completed: cancel() lost the race
    } else {
      second.wait(kTimeout);
    }
    first.wait(kTimeout);
    std::map<int, std::vector<std::int32_t>> bySource;  // in posting order
    bySource[first.peer()].push_back(a);
    bySource[second.peer()].push_back(b);
    Request next = g[0]->irecv(sources, tag, bytesOf(c));
    REQUIRE(next.waitFor(kTimeout));
    bySource[next.peer()].push_back(c);
    CHECK(bySource[1] == std::vector<std::int32_t>{1, 2});
    CHECK(bySource[2] == std::vector<std::int32_t>{100});
    for (auto& t : g) t->close();
  }
}

TEST_CASE(
    "composite: a receive behind a receive from both sides that no thread waits on still gets its message",
    "[composite][transport]") {
  // As the inner transports match: the receive from {1, 2} takes rank 2's
  // 100 (it came first), so rank 1's 1 is for the receive from 1 posted
  // after it, which must get it without anyone looking at the first.
  auto g = evenOddInproc(3);
  const auto tag = Tag::make(Op::kGossip, 8);
  const int sources[] = {1, 2};
  std::int32_t a = -1, b = -1;
  Request both = g[0]->irecv(sources, tag, bytesOf(a));
  Request one = g[0]->irecv(1, tag, bytesOf(b));
  sendInt(*g[2], 0, tag, 100);
  sendInt(*g[1], 0, tag, 1);
  REQUIRE(one.waitFor(kTimeout));
  CHECK(b == 1);
  REQUIRE(both.test());
  CHECK(a == 100);
  for (auto& t : g) t->close();
}

TEST_CASE("composite: close drops kept messages: a receive after it is refused, as on the inner transports",
          "[composite][transport]") {
  // The first receive from {1, 2} takes 100 and keeps rank 1's 1.
  auto g = evenOddInproc(3);
  const auto tag = Tag::make(Op::kGossip, 9);
  const int sources[] = {1, 2};
  std::int32_t a = -1, b = -1;
  {
    Request both = g[0]->irecv(sources, tag, bytesOf(a));
    sendInt(*g[2], 0, tag, 100);
    Request other = g[0]->irecv(sources, tag, bytesOf(b));  // no side of it holds anything
    sendInt(*g[1], 0, tag, 1);
    both.wait(kTimeout);
    CHECK(a == 100);
  }
  g[0]->close();
  CHECK_THROWS_AS(g[0]->irecv(1, tag, bytesOf(b)), Cancelled);
  CHECK_THROWS_AS(g[0]->irecv(sources, tag, bytesOf(b)), Cancelled);
  for (auto& t : g) t->close();
}

TEST_CASE("composite: the local side reports job ranks in requests and failures", "[composite][transport]") {
  auto g = evenOdd(4);  // groups {0, 2} and {1, 3}: job rank 2 is rank 1 of rank 0's local transport
  const auto tag = Tag::make(Op::kUser, 1);
  const std::int32_t v = 42;
  std::int32_t got = 0;
  auto recv = g[0]->irecvOf<std::int32_t>(2, tag, std::span<std::int32_t>(&got, 1));
  auto send = g[2]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1));
  send.wait(kTimeout);
  recv.wait(kTimeout);
  CHECK(got == 42);
  CHECK(recv.peer() == 2);
  CHECK(send.peer() == 0);
  // A receive from both sides names the sender's job rank too.
  const int both[] = {2, 3};
  auto mixed = g[0]->irecv(both, tag, std::as_writable_bytes(std::span<std::int32_t>(&got, 1)));
  g[3]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1)).wait(kTimeout);
  mixed.wait(kTimeout);
  CHECK(mixed.peer() == 3);

  g[2]->close();
  auto gone = g[0]->irecvOf<std::int32_t>(2, tag, std::span<std::int32_t>(&got, 1));
  try {
    gone.wait(kTimeout);
    FAIL("a receive from a closed peer completed");
  } catch (const PeerFailure& e) {
    CHECK(e.peer() == 2);
    CHECK(std::string(e.what()).find("peer 2 failed") != std::string::npos);
  }
  // With rank 2 gone, a receive from {2, 3} still takes rank 3's message.
  auto rest = g[0]->irecv(both, tag, std::as_writable_bytes(std::span<std::int32_t>(&got, 1)));
  g[3]->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1)).wait(kTimeout);
  rest.wait(kTimeout);
  CHECK(rest.peer() == 3);
  // And once rank 3 is gone as well it fails, naming a job rank.
  g[3]->close();
  auto none = g[0]->irecv(both, tag, std::as_writable_bytes(std::span<std::int32_t>(&got, 1)));
  try {
    none.wait(kTimeout);
    FAIL("a receive from closed peers completed");
  } catch (const PeerFailure& e) {
    CHECK((e.peer() == 2 || e.peer() == 3));
  }
}

TEST_CASE("composite: bad local groups are rejected before anything connects", "[composite]") {
  MemoryStore store;
  std::atomic<int> built{0};
  const composite::InnerFactory never = [&](int, int, Store&) -> std::unique_ptr<Transport> {
    ++built;
    return nullptr;
  };
  const auto make = [&](int rank, int world, std::vector<int> group) {
    composite::Options o;
    o.rank = rank;
    o.worldSize = world;
    o.localGroup = std::move(group);
    return composite::makeTransport(o, store, never, never);
  };
  CHECK_THROWS_AS(make(0, 4, {}), InvalidArgument);
  CHECK_THROWS_AS(make(0, 4, {2, 0}), InvalidArgument);
  CHECK_THROWS_AS(make(0, 4, {0, 0, 1}), InvalidArgument);
  CHECK_THROWS_AS(make(0, 4, {0, 4}), InvalidArgument);
  CHECK_THROWS_AS(make(1, 4, {0, 2}), InvalidArgument);
  CHECK_THROWS_AS(make(4, 4, {4}), InvalidArgument);
  CHECK(built == 0);
}

TEST_CASE("composite: ranks of one host and network namespace find each other through the store",
          "[composite]") {
  MemoryStore store;
  std::vector<std::vector<int>> groups(3);
  onEveryRank(3, [&](int r) {
    groups[static_cast<std::size_t>(r)] = composite::sameHostRanks(r, 3, store, "t/", kTimeout);
  });
  for (const auto& g : groups) CHECK(g == std::vector<int>{0, 1, 2});
  // A rank that says it is elsewhere is not in the group.
  MemoryStore other;
  other.set("t/host/1", "another-boot/1/elsewhere");
  other.set("t/host/2", composite::hostIdentity());
  CHECK(composite::sameHostRanks(0, 3, other, "t/", kTimeout) == std::vector<int>{0, 2});
  CHECK_THROWS_AS(composite::sameHostRanks(0, 2, *std::make_unique<MemoryStore>(), "t/", 0.05), TimeoutError);
}

namespace {
// An inproc transport whose peer `bad` can be marked as having sent a bad
// frame, as the socket and zmq transports treat one: `bad` then has a
// ProtocolError verdict, a receive from it alone fails with that error, and a
// receive from several ranks waits for the others.
class BadFrameFrom final : public testing::Forwarding {
 public:
  BadFrameFrom(std::unique_ptr<Transport> inner, int bad) : Forwarding(std::move(inner)), bad_(bad) {}
  void markBad() {
    error_ = std::make_exception_ptr(
        ProtocolError(bad_, kFrameHeaderBytes, "payload checksum mismatch (test)", FrameFault::kChecksum));
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    std::vector<int> rest;
    for (int s : sources)
      if (!(error_ && s == bad_)) rest.push_back(s);
    if (rest.empty()) {
      auto failed = std::make_shared<detail::RequestState>();
      failed->fail(error_);
      return Request(failed);
    }
    return Forwarding::irecv(rest, tag, buffer);
  }
  std::exception_ptr peerFailure(int r) const override {
    return error_ && r == bad_ ? error_ : Forwarding::peerFailure(r);
  }

 private:
  int bad_;
  std::exception_ptr error_;
};
}  // namespace

// A plain transport keeps a receive from several ranks for those alive when
// one of them sent a bad frame; so does the composite when that rank is the
// only one of the receive on its side. A message too long for the buffer
// drops no one, and still fails the receive.
TEST_CASE(
    "composite: a bad frame from the only rank of one side leaves a receive from both sides to the other",
    "[composite][transport]") {
  MemoryStore store;
  const auto local = inproc::makeFabric(2);  // job ranks 0 and 1; rank 2 is alone on its host
  const auto alone = inproc::makeFabric(1);
  const auto all = inproc::makeFabric(3);
  BadFrameFrom* rank0Local = nullptr;
  std::vector<std::unique_ptr<Transport>> g;
  for (int r = 0; r < 3; ++r) {
    composite::Options o;
    o.rank = r;
    o.worldSize = 3;
    o.timeoutSeconds = kTimeout;
    o.localGroup = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2};
    const auto fabric = r < 2 ? local : alone;
    g.push_back(composite::makeTransport(
        o, store,
        [&, fabric](int rank, int, Store&) -> std::unique_ptr<Transport> {
          auto t = inproc::makeTransport(fabric, rank, kTimeout);
          if (fabric != local || rank != 0) return t;
          auto wrapped = std::make_unique<BadFrameFrom>(std::move(t), 1);
          rank0Local = wrapped.get();
          return wrapped;
        },
        [all](int rank, int, Store&) { return inproc::makeTransport(all, rank, kTimeout); }));
  }
  REQUIRE(rank0Local != nullptr);
  const auto tag = Tag::make(Op::kUser, 3);
  const int both[] = {1, 2};
  std::int32_t got = 0;
  SECTION("a checksum error") {
    auto before = g[0]->irecv(both, tag, bytesOf(got));
    rank0Local->markBad();
    auto after = g[0]->irecv(both, tag, bytesOf(got));  // (its local side fails at once)
    CHECK_FALSE(after.waitFor(0.05));                   // and it waits for rank 2
    sendInt(*g[2], 0, tag, 7);
    sendInt(*g[2], 0, tag, 8);
    before.wait(kTimeout);
    CHECK(before.peer() == 2);
    CHECK(got == 7);
    after.wait(kTimeout);
    CHECK(after.peer() == 2);
    CHECK(got == 8);
  }
  SECTION("a message too long for the buffer") {
    auto r = g[0]->irecv(both, tag, std::as_writable_bytes(std::span<std::int32_t>(&got, 1)).first(2));
    sendInt(*g[1], 0, tag, 9);
    sendInt(*g[2], 0, tag, 10);
    CHECK_THROWS_WITH(r.wait(kTimeout), Catch::Contains("does not fit"));
  }
  for (auto& t : g) t->abort();
}
