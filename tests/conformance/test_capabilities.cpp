// TransportCapabilities: what each transport declares matches what it does,
// the old single-purpose query reads the struct, and a view forwards its
// parent's.
#include <catch2/catch.hpp>

#include "threads.hpp"

#include <memory>
#include <string>
#include <vector>

#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"

using namespace gossamer;

namespace {

/// Two ranks of `make(rank)` over one store, as threads; returns both.
template <typename Make>
std::vector<std::unique_ptr<Transport>> pair(Make make) {
  std::vector<std::unique_ptr<Transport>> t(2);
  gossamer::testing::onEveryRank(2, [&](int r) { t[static_cast<std::size_t>(r)] = make(r); });
  return t;
}

void checkViewForwards(Transport& parent) {
  SubTransport view(parent, {0, 1}, 0xF0);
  const TransportCapabilities a = parent.capabilities(), b = view.capabilities();
  CHECK(a.borrowedSends == b.borrowedSends);
  CHECK(a.receiveViews == b.receiveViews);
  CHECK(a.singleCopy == b.singleCopy);
  CHECK(a.checksumReuseMinBytes == b.checksumReuseMinBytes);
  CHECK(view.checksumReuseMinBytes() == parent.checksumReuseMinBytes());
}

}  // namespace

TEST_CASE("capabilities: inproc hands payloads over and copies no borrowed send",
          "[transport][capabilities]") {
  auto fabric = inproc::makeFabric(2);
  auto t = pair([&](int r) { return inproc::makeTransport(fabric, r, 5.0); });
  const auto c = t[0]->capabilities();
  CHECK(c.receiveViews);
  CHECK_FALSE(c.borrowedSends);
  CHECK_FALSE(c.singleCopy);
  CHECK(t[0]->checksumReuseMinBytes() == c.checksumReuseMinBytes);
  checkViewForwards(*t[0]);
  for (auto& x : t) x->close();
}

TEST_CASE("capabilities: zmq and socket over tcp lend borrowed sends, without single copy",
          "[transport][capabilities]") {
  for (const std::string kind : {"zmq", "socket"}) {
    INFO(kind);
    MemoryStore store;
    auto t = pair([&](int r) -> std::unique_ptr<Transport> {
      if (kind == "zmq") {
        zmq::Options o;
        o.rank = r;
        o.worldSize = 2;
        o.timeoutSeconds = 10;
        return zmq::makeTransport(o, store);
      }
      sock::Options o;
      o.rank = r;
      o.worldSize = 2;
      o.timeoutSeconds = 10;
      return sock::makeTransport(o, store);
    });
    const auto c = t[0]->capabilities();
    CHECK(c.borrowedSends);
    CHECK(c.receiveViews == (kind == "zmq"));
    CHECK_FALSE(c.singleCopy);  // tcp: no process_vm_readv
    CHECK(c.checksumReuseMinBytes == std::size_t{64} << 10);
    CHECK(t[0]->checksumReuseMinBytes() == c.checksumReuseMinBytes);
    checkViewForwards(*t[0]);
    gossamer::testing::onEveryRank(2, [&](int r) { t[static_cast<std::size_t>(r)]->close(); });
  }
}
