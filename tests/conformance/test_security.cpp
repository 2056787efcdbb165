// The zmq transport under CURVE (`security:`): admitted peers talk; a peer
// with a key the job does not admit and a plaintext peer are refused, nothing
// they send is delivered, and each refusal is logged and counted. Without
// CURVE, a process that only reached a port (the rendezvous server's, or a
// rank's during set-up) cannot grow that process's memory without bound nor
// have its frames delivered.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "gossamer/errors.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/zmq.hpp"
#include "log_capture.hpp"
#include "process.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::LogCapture;
using gossamer::testing::onEveryRank;
using gossamer::testing::TempDir;

namespace {

// A data frame as rank `source` sends it over zmq: header, then payload.
void sendFrame(::zmq::socket_t& s, std::uint32_t source, const Tag& tag,
               const std::vector<std::byte>& payload) {
  const auto h = encodeFrameHeader(FrameKind::kData, DType::kBytes, source, tag, payload);
  s.send(::zmq::buffer(h.data(), h.size()), ::zmq::send_flags::sndmore);
  s.send(::zmq::buffer(payload.data(), payload.size()), ::zmq::send_flags::none);
}

bool logged(LogCapture& log, const std::string& needle) {
  for (const auto& [level, text] : log.lines())
    if (text.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("zmq under CURVE: a peer with an unknown key and a plaintext peer are refused, logged and counted",
          "[zmq][security]") {
  LogCapture log;
  TempDir dir;
  std::vector<std::string> pubs;
  for (const std::string name : {"rank0", "rank1"}) {
    const auto [pub, sec] = gossamer::zmq::newCurveKeyPair();
    writeCertificates(dir / name, pub, sec, false);
    pubs.push_back(pub);
  }
  const auto [intruderPub, intruderSec] = gossamer::zmq::newCurveKeyPair();  // not admitted
  MemoryStore store;
  std::vector<std::unique_ptr<Transport>> g(2);
  onEveryRank(2, [&](int r) {
    gossamer::zmq::Options o;
    o.rank = r;
    o.worldSize = 2;
    o.timeoutSeconds = 10;
    o.lingerSeconds = 0.5;
    // A directory of admitted public keys: the secret certificates in it are skipped.
    o.curve = loadCurveKeys(dir / ("rank" + std::to_string(r)), dir.path());
    g[static_cast<std::size_t>(r)] = gossamer::zmq::makeTransport(o, store);
  });
  const std::string endpoint = *store.tryGet("gossamer/zmq/0");

  // Both intruders pose as rank 1 and send a data frame with the tag rank 0
  // is about to receive on.
  const auto tag = Tag::make(Op::kUser, 7);
  const std::vector<std::byte> forged(16, std::byte{0x66});
  ::zmq::context_t ctx;
  ::zmq::socket_t stranger(ctx, ::zmq::socket_type::dealer), plain(ctx, ::zmq::socket_type::dealer);
  stranger.set(::zmq::sockopt::linger, 0);
  plain.set(::zmq::sockopt::linger, 0);
  stranger.set(::zmq::sockopt::routing_id, "1.99");
  plain.set(::zmq::sockopt::routing_id, "1.98");
  stranger.set(::zmq::sockopt::curve_serverkey, pubs[0]);
  stranger.set(::zmq::sockopt::curve_publickey, intruderPub);
  stranger.set(::zmq::sockopt::curve_secretkey, intruderSec);
  stranger.connect(endpoint);
  plain.connect(endpoint);
  sendFrame(stranger, 1, tag, forged);
  sendFrame(plain, 1, tag, forged);

  std::vector<std::byte> got(16);
  auto recv = g[0]->irecv(1, tag, got);
  CHECK_THROWS_AS(recv.wait(2.0), TimeoutError);  // nothing of theirs arrived
  recv.cancel();

  // The admitted peer still gets through, encrypted.
  const std::vector<std::byte> real(16, std::byte{0x11});
  g[1]->isend(0, tag, real).wait(10);
  auto ok = g[0]->irecv(1, tag, got);
  ok.wait(10);
  CHECK(got == real);

  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g[0]->stats().refusedConnections < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(g[0]->stats().refusedConnections >= 2);
  CHECK(logged(log, "public key " + intruderPub + " is not admitted"));
  CHECK(logged(log, "the CURVE handshake failed"));
  onEveryRank(2, [&](int r) { g[static_cast<std::size_t>(r)]->close(); });
}

TEST_CASE("zmq under CURVE: a key file whose public key is not its secret key's half is refused at start",
          "[zmq][security]") {
  TempDir dir;
  const auto [pub, sec] = gossamer::zmq::newCurveKeyPair();
  const auto [otherPub, otherSec] = gossamer::zmq::newCurveKeyPair();
  (void)otherSec;
  writeCertificates(dir / "mixed", otherPub, sec, false);  // another pair's public key
  writeCertificates(dir / "pub", pub, sec, false);
  MemoryStore store;
  gossamer::zmq::Options o;
  o.rank = 0;
  o.worldSize = 1;
  o.timeoutSeconds = 5;
  o.curve = loadCurveKeys(dir / "mixed", dir.path());  // both public halves admitted
  CHECK_THROWS_WITH(gossamer::zmq::makeTransport(o, store),
                    Catch::Contains("is not the public half of its secret-key") && Catch::Contains(pub));
  o.curve = loadCurveKeys(dir / "pub", dir.path());  // the pair as written: it starts
  auto t = gossamer::zmq::makeTransport(o, store);
  t->close();
}

TEST_CASE("zmq under CURVE: a rendezvous entry with a key that is not admitted is not connected to",
          "[zmq][security]") {
  TempDir dir;
  const auto [pub, sec] = gossamer::zmq::newCurveKeyPair();
  writeCertificates(dir / "rank0", pub, sec, false);
  const auto [otherPub, otherSec] = gossamer::zmq::newCurveKeyPair();
  (void)otherSec;
  MemoryStore store;
  // Rank 1's entries as an attacker who can write to the store would set them.
  store.set("gossamer/zmq/1", "tcp://127.0.0.1:9");
  store.set("gossamer/zmq-key/1", otherPub);
  gossamer::zmq::Options o;
  o.rank = 0;
  o.worldSize = 2;
  o.timeoutSeconds = 5;
  o.curve = loadCurveKeys(dir / "rank0", dir / "rank0.pub");
  CHECK_THROWS_WITH(gossamer::zmq::makeTransport(o, store), Catch::Contains("not admitted"));
}

TEST_CASE("a client that reached the rendezvous port cannot grow rank 0's server without bound",
          "[store][zmq][security]") {
  gossamer::zmq::StoreServer server("tcp://127.0.0.1:*");
  gossamer::zmq::RemoteStore a(server.endpoint(), 5.0), b(server.endpoint(), 5.0);
  a.set("job/x", "kept");
  // A frame above the longest request part drops its connection unread ...
  {
    ::zmq::context_t ctx;
    ::zmq::socket_t raw(ctx, ::zmq::socket_type::req);
    raw.set(::zmq::sockopt::linger, 0);
    raw.connect(server.endpoint());
    const std::string huge(std::size_t{2} << 20, 'x');
    raw.send(::zmq::buffer(std::string("set")), ::zmq::send_flags::sndmore);
    raw.send(::zmq::buffer(std::string("job/huge")), ::zmq::send_flags::sndmore);
    raw.send(::zmq::buffer(huge), ::zmq::send_flags::none);
    ::zmq::pollitem_t item{raw.handle(), 0, ZMQ_POLLIN, 0};
    CHECK(::zmq::poll(&item, 1, std::chrono::milliseconds(500)) == 0);  // no answer
    CHECK_FALSE(b.tryGet("job/huge").has_value());
  }
  // ... and the values it keeps add up to at most 256 MiB.
  const std::string mib((std::size_t{1} << 20) - 64, 'v');
  int kept = 0;
  try {
    for (; kept < 300; ++kept) a.set("job/fill/" + std::to_string(kept), mib);
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("the rendezvous store holds"));
  }
  CHECK(kept >= 250);
  CHECK(kept < 300);
  a.set("job/fill/0", "small");  // a value replaced frees its bytes
  a.set("job/fill/" + std::to_string(kept), mib);
  CHECK(b.get("job/x", 5.0) == "kept");
}

TEST_CASE("zmq: during set-up nothing is kept from a connection whose hello does not verify",
          "[zmq][security]") {
  // Rank 0 waits for rank 1 to start. Meanwhile a process that only reached
  // its port says hello as rank 1 with a made-up proof and sends 50 frames:
  // all are refused as they arrive (once they were kept until set-up ended,
  // without bound, and the frames went to the real rank 1's receives).
  LogCapture log;
  MemoryStore store;
  const auto rankOf = [&](int r) {
    gossamer::zmq::Options o;
    o.rank = r;
    o.worldSize = 2;
    o.protocol = "tcp";
    o.host = "127.0.0.1";
    o.timeoutSeconds = 20;
    return gossamer::zmq::makeTransport(o, store);
  };
  std::unique_ptr<Transport> rank0;
  std::thread setUp([&] { rank0 = rankOf(0); });
  const std::string address = store.get("gossamer/zmq/0", 10.0);
  store.get("gossamer/zmq-job-key", 10.0);  // rank 0 drew it: it checks hellos from now on
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    ::zmq::context_t ctx;
    ::zmq::socket_t forger(ctx, ::zmq::socket_type::dealer);
    forger.set(::zmq::sockopt::routing_id, std::string("1.5"));
    // Its frames all leave before the socket goes (at most 10 s), however
    // slowly a loaded machine sends them.
    forger.set(::zmq::sockopt::linger, 10000);
    forger.connect(address);
    const auto hello = encodeHello(Hello{5, {}, "tcp://127.0.0.1:1"});
    const auto helloHeader = encodeFrameHeader(FrameKind::kHello, DType::kBytes, 1, Tag{}, hello);
    forger.send(::zmq::buffer(helloHeader.data(), helloHeader.size()), ::zmq::send_flags::sndmore);
    forger.send(::zmq::buffer(hello.data(), hello.size()), ::zmq::send_flags::none);
    const std::vector<std::byte> payload(4096, std::byte{7});
    const auto header =
        encodeFrameHeader(FrameKind::kData, DType::kBytes, 1, Tag::make(Op::kUser, 9), payload);
    for (int i = 0; i < 50; ++i) {
      forger.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      forger.send(::zmq::buffer(payload.data(), payload.size()), ::zmq::send_flags::none);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // read by rank 0's progress thread meanwhile
  }
  auto rank1 = rankOf(1);
  setUp.join();
  REQUIRE(rank0 != nullptr);
  // Every data frame refused, during set-up or (read late) after it.
  const auto strangers = [&] {
    return rank0->stats().rejectedFrames[static_cast<std::size_t>(FrameFault::kStranger)];
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (strangers() < 50 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(strangers() >= 50);
  // The hello was refused as it arrived, during set-up.
  const auto lines = log.lines();
  CHECK(std::any_of(lines.begin(), lines.end(), [](const auto& l) {
    return l.second.find("a hello whose proof does not verify under the job's key") != std::string::npos;
  }));
  std::array<std::byte, 4096> got{};
  const std::vector<int> one{1};
  CHECK_FALSE(rank0->irecv(one, Tag::make(Op::kUser, 9), got).waitFor(0.3));  // nothing of the forger's
  // The real rank 1 is heard.
  const double v = 3.0;
  double w = 0;
  rank1->isendOf<double>(0, Tag::make(Op::kUser, 10), std::span<const double>(&v, 1)).wait(10.0);
  rank0->irecvOf<double>(1, Tag::make(Op::kUser, 10), std::span<double>(&w, 1)).wait(10.0);
  CHECK(w == 3.0);
  rank1->close();
  rank0->close();
}
