// The stall report (transports/run): which waits it reports, once, with
// the peer, the operation and how long; and what it leaves alone.
#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <new>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/stall.hpp"

using namespace gossamer;

namespace {

struct Reports {
  std::mutex mu;
  std::vector<stall::StallReport> got;
  std::size_t size() {
    std::lock_guard<std::mutex> lk(mu);
    return got.size();
  }
};

// Rank 0 of a 2-rank inproc fabric, watched with a threshold of `threshold`
// seconds.
std::unique_ptr<Transport> watched(const std::shared_ptr<inproc::Fabric>& fabric, Reports& reports,
                                   double threshold = 0.2) {
  stall::Options o;
  o.thresholdSeconds = threshold;
  o.onStall = [&reports](const stall::StallReport& r) {
    std::lock_guard<std::mutex> lk(reports.mu);
    reports.got.push_back(r);
  };
  return stall::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
}

}  // namespace

TEST_CASE("the stall report names the peer and operation of a wait past the threshold, once", "[stall]") {
  auto fabric = inproc::makeFabric(2);
  auto peer = inproc::makeTransport(fabric, 1, 10.0);
  Reports reports;
  auto t = watched(fabric, reports);
  std::int32_t got = 0;
  const auto tag = Tag::make(Op::kAllreduce, 41, 3);
  auto r = t->irecvOf<std::int32_t>(1, tag, std::span<std::int32_t>(&got, 1));
  // The thread waits past the threshold (until the report, at most 30 s).
  for (int i = 0; i < 300 && reports.size() == 0; ++i) CHECK_FALSE(r.waitFor(0.1));
  REQUIRE(reports.size() == 1);
  {
    const auto& s = reports.got[0];
    CHECK(s.rank == 0);
    CHECK(s.peers == std::vector<int>{1});
    CHECK_FALSE(s.send);
    CHECK(s.tag == tag);
    CHECK(s.waitedSeconds >= 0.2);
    const std::string text = stall::describe(s);
    INFO(text);
    CHECK(text.find("stall: rank 0 has waited") == 0);
    CHECK(text.find("a receive from rank 1: allreduce, step 41, segment 3") != std::string::npos);
  }
  // Still stalled: not reported again.
  CHECK_FALSE(r.waitFor(0.5));
  CHECK(reports.size() == 1);
  const std::int32_t v = 7;
  peer->isendOf<std::int32_t>(0, tag, std::span<const std::int32_t>(&v, 1)).wait(10.0);
  r.wait(10.0);
  CHECK(got == 7);
  t->close();
  peer->close();
}

TEST_CASE("the stall report leaves alone requests nobody waits on, quick waits and membership traffic",
          "[stall]") {
  auto fabric = inproc::makeFabric(2);
  auto peer = inproc::makeTransport(fabric, 1, 10.0);
  Reports reports;
  auto t = watched(fabric, reports);
  std::int32_t a = 0, b = 0;
  // Posted and left pending (overlapped with computation): not a stall.
  auto pending = t->irecvOf<std::int32_t>(1, Tag::make(Op::kGossip, 0, 1), std::span<std::int32_t>(&a, 1));
  // A heartbeat receive waits by design, however long.
  auto heartbeat =
      t->irecvOf<std::int32_t>(1, Tag::make(Op::kMembership, 0, 1), std::span<std::int32_t>(&b, 1));
  CHECK_FALSE(heartbeat.waitFor(0.6));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(reports.size() == 0);
  CHECK(pending.valid());
  t->close();
  peer->close();
}

TEST_CASE("the stall report leaves alone a wait that ends before the threshold", "[stall]") {
  auto fabric = inproc::makeFabric(2);
  auto peer = inproc::makeTransport(fabric, 1, 10.0);
  Reports reports;
  // A 50 ms wait against a 5 s threshold: however loaded the machine, it
  // ends well before.
  auto t = watched(fabric, reports, 5.0);
  std::int32_t c = 0;
  auto quick = t->irecvOf<std::int32_t>(1, Tag::make(Op::kUser, 0, 2), std::span<std::int32_t>(&c, 1));
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::int32_t v = 1;
    peer->isendOf<std::int32_t>(0, Tag::make(Op::kUser, 0, 2), std::span<const std::int32_t>(&v, 1))
        .wait(10.0);
  });
  quick.wait(10.0);
  sender.join();
  CHECK(c == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the watcher looked again (every 1.25 s)
  CHECK(reports.size() == 0);
  t->close();
  peer->close();
}

TEST_CASE("a stall report whose subscriber throws is dropped, and the watching goes on", "[stall]") {
  // An exception leaving the watcher thread would terminate the process.
  auto fabric = inproc::makeFabric(2);
  auto peer = inproc::makeTransport(fabric, 1, 10.0);
  Reports reports;
  stall::Options o;
  o.thresholdSeconds = 0.2;
  o.onStall = [&reports](const stall::StallReport& r) {
    {
      std::lock_guard<std::mutex> lk(reports.mu);
      reports.got.push_back(r);
    }
    throw std::bad_alloc();  // as a metrics record that cannot be made
  };
  auto t = stall::wrap(inproc::makeTransport(fabric, 0, 10.0), o);
  std::int32_t a = 0, b = 0;
  auto first = t->irecvOf<std::int32_t>(1, Tag::make(Op::kUser, 1), std::span<std::int32_t>(&a, 1));
  for (int i = 0; i < 300 && reports.size() == 0; ++i) CHECK_FALSE(first.waitFor(0.1));
  REQUIRE(reports.size() == 1);
  auto second = t->irecvOf<std::int32_t>(1, Tag::make(Op::kUser, 2), std::span<std::int32_t>(&b, 1));
  for (int i = 0; i < 300 && reports.size() == 1; ++i) CHECK_FALSE(second.waitFor(0.1));
  REQUIRE(reports.size() == 2);  // the watcher outlived the first throw
  CHECK(reports.got[1].tag == Tag::make(Op::kUser, 2));
  t->close();
  peer->close();
}

TEST_CASE("the stall report rejects a threshold that is not positive", "[stall]") {
  auto fabric = inproc::makeFabric(1);
  stall::Options o;
  o.thresholdSeconds = 0;
  CHECK_THROWS_AS(stall::wrap(inproc::makeTransport(fabric, 0, 1.0), o), InvalidArgument);
  CHECK_THROWS_AS(stall::wrap(nullptr, stall::Options{}), InvalidArgument);
}
