// The network transports report what they cannot throw through the log hook
// (gossamer/log.hpp), never on stderr directly: an embedding application that
// installs a sink sees a peer's malformed frame there, and the receive waiting
// on that peer still fails rather than hanging.
//
// The "peer" is a bare ZeroMQ DEALER (C API) posing as rank 1: it publishes an
// endpoint for rank 0 to connect to, then sends rank 0 a frame with a bad
// header.
#include <zmq.h>
#include <catch2/catch.hpp>

#include "log_capture.hpp"

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/zmq.hpp"

namespace {

using Capture = gossamer::testing::LogCapture;

/// A zmq context and sockets closed in reverse order, whatever the test does.
struct FakePeer {
  void* ctx = zmq_ctx_new();
  void* router = nullptr;
  void* dealer = nullptr;
  ~FakePeer() {
    const int zero = 0;
    for (void* s : {dealer, router})
      if (s) {
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(s);
      }
    zmq_ctx_term(ctx);
  }
};

}  // namespace

TEST_CASE("zmq: a peer's malformed frame is reported through the log sink and fails its receives",
          "[log][zmq]") {
  Capture capture;
  gossamer::MemoryStore store;
  FakePeer fake;
  REQUIRE(fake.ctx);
  // Rank 1's ROUTER: only so that rank 0 has an endpoint to connect to.
  fake.router = zmq_socket(fake.ctx, ZMQ_ROUTER);
  REQUIRE(zmq_bind(fake.router, "tcp://127.0.0.1:*") == 0);
  char endpoint[256];
  std::size_t len = sizeof endpoint;
  REQUIRE(zmq_getsockopt(fake.router, ZMQ_LAST_ENDPOINT, endpoint, &len) == 0);
  store.set("logtest/zmq/1", endpoint);

  gossamer::zmq::Options o;
  o.rank = 0;
  o.worldSize = 2;
  o.timeoutSeconds = 5;
  o.lingerSeconds = 0.1;
  o.storePrefix = "logtest";
  auto t = gossamer::zmq::makeTransport(o, store);

  // Rank 1's DEALER, identified as "1" (a real rank's is "1.INCARNATION"): a two-part message
  // whose 48-byte header is all zeros (no magic).
  fake.dealer = zmq_socket(fake.ctx, ZMQ_DEALER);
  REQUIRE(zmq_setsockopt(fake.dealer, ZMQ_ROUTING_ID, "1", 1) == 0);
  const std::string rank0 = store.get("logtest/zmq/0", 5);
  REQUIRE(zmq_connect(fake.dealer, rank0.c_str()) == 0);
  std::vector<char> header(48, 0);
  REQUIRE(zmq_send(fake.dealer, header.data(), header.size(), ZMQ_SNDMORE) == 48);
  REQUIRE(zmq_send(fake.dealer, nullptr, 0, 0) == 0);

  std::vector<std::byte> buffer(16);
  auto r = t->irecv(1, gossamer::Tag::make(gossamer::Op::kUser, 0), buffer);
  CHECK_THROWS_AS(r.wait(5), gossamer::Error);  // ProtocolError or PeerFailure, never a hang

  const auto lines = capture.lines();
  bool seen = false;
  for (const auto& [level, text] : lines) {
    INFO(text);
    if (level == gossamer::LogLevel::kWarning && text.find("zmq rank 0") != std::string::npos &&
        text.find("peer 1") != std::string::npos)
      seen = true;
  }
  CHECK(seen);
  t->abort();
}
