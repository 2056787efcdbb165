// The composite transport beyond the conformance suite: receives from ranks
// on both sides under load and cancellation, job ranks in requests and
// errors of the local side, and its argument checks.
#include <catch2/catch.hpp>

#include "threads.hpp"

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/composite.hpp"
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
