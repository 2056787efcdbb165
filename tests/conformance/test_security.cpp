// The zmq transport under CURVE (`security:`): admitted peers talk; a peer
// with a key the job does not admit and a plaintext peer are refused, nothing
// they send is delivered, and each refusal is logged and counted. Without
// CURVE, a process that only reached a port (the rendezvous server's, or a
// rank's during set-up) cannot grow that process's memory without bound nor
// have its frames delivered.
#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
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

// Rank `rank` of `world` over zmq tcp on loopback, waiting at most `timeout` s.
gossamer::zmq::Options loopback(int rank, int world, double timeout) {
  gossamer::zmq::Options o;
  o.rank = rank;
  o.worldSize = world;
  o.protocol = "tcp";
  o.host = "127.0.0.1";
  o.timeoutSeconds = timeout;
  return o;
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
  const auto rankOf = [&](int r) { return gossamer::zmq::makeTransport(loopback(r, 2, 20), store); };
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

TEST_CASE("zmq: a set-up that fails after connecting to some peers throws instead of waiting on them",
          "[zmq]") {
  // Rank 0 of 3 connects to rank 1 (a port nothing listens on: its hello
  // stays queued) and then fails on rank 2's address. The connection to
  // rank 1 must not hold the constructor (ZeroMQ's default linger waits
  // forever for the queued hello). In a child, so that a hang is a failure:
  // a fresh process, as the body starts threads (zmq's), which a child only
  // forked from this process may not once it has others (ThreadSanitizer
  // kills it; see inFreshProcess).
  const std::string failed = gossamer::testing::inFreshProcess(
      [] {
        MemoryStore store;
        store.set("gossamer/zmq/1", "tcp://127.0.0.1:1");
        store.set("gossamer/zmq/2", "bogus://x");
        try {
          gossamer::zmq::makeTransport(loopback(0, 3, 5), store);
        } catch (const Error& e) {
          return std::string(std::string(e.what()).find("zmq rank 0") == std::string::npos ? e.what() : "");
        }
        return std::string("set up with a peer whose address is not one");
      },
      60);
  INFO(failed);
  CHECK(failed.empty());
}

TEST_CASE("zmq: hellos a stranger sends before the job's key is read do not make a rank deaf to its peer",
          "[zmq][security]") {
  // Rank 1 waits for the job's key (held back by the store here) while a
  // stranger says hello as rank 0 on 16 connections of its own; then the
  // real rank 0 starts and says hello, and only then rank 1 reads the key.
  // Rank 0's hello must not be dropped with the forged ones (it is never
  // sent again, and all it sends would be taken for a stranger's).
  struct HeldKey final : Store {
    MemoryStore& in;
    std::atomic<bool> open{false};
    explicit HeldKey(MemoryStore& s) : in(s) {}
    void set(const std::string& k, const std::string& v) override { in.set(k, v); }
    std::optional<std::string> tryGet(const std::string& k) override {
      if (k == "gossamer/zmq-job-key" && !open) return std::nullopt;
      return in.tryGet(k);
    }
    bool claim(const std::string& k, const std::string& v) override { return in.claim(k, v); }
  };
  MemoryStore store;
  HeldKey held(store);
  std::unique_ptr<Transport> rank0, rank1;
  std::thread setUp1([&] { rank1 = gossamer::zmq::makeTransport(loopback(1, 2, 20), held); });
  const std::string address = store.get("gossamer/zmq/1", 10.0);
  ::zmq::context_t ctx;
  std::vector<::zmq::socket_t> forgers;
  for (int i = 0; i < 16; ++i) {
    auto& s = forgers.emplace_back(ctx, ::zmq::socket_type::dealer);
    s.set(::zmq::sockopt::linger, 0);
    s.set(::zmq::sockopt::routing_id, "0." + std::to_string(2 * i + 1));
    s.connect(address);
    const auto hello = encodeHello(Hello{static_cast<std::uint64_t>(2 * i + 1), {}, "tcp://127.0.0.1:1"});
    const auto header =
        encodeFrameHeader(FrameKind::kHello, DType::kBytes, 0, Tag{Op::kControl, 0, 0}, hello);
    s.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
    s.send(::zmq::buffer(hello.data(), hello.size()), ::zmq::send_flags::none);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));      // the forged hellos arrive first
  rank0 = gossamer::zmq::makeTransport(loopback(0, 2, 20), store);  // draws the key, says hello to rank 1
  std::this_thread::sleep_for(std::chrono::milliseconds(300));      // rank 0's hello arrives before the key
  held.open = true;
  setUp1.join();
  REQUIRE(rank1 != nullptr);
  const double v = 5.0;
  double w = 0;
  auto r = rank1->irecvOf<double>(0, Tag::make(Op::kUser, 1), std::span<double>(&w, 1));
  rank0->isendOf<double>(1, Tag::make(Op::kUser, 1), std::span<const double>(&v, 1)).wait(10.0);
  CHECK(r.waitFor(10.0));
  CHECK(w == 5.0);
  forgers.clear();
  rank0->abort();
  rank1->abort();
}

TEST_CASE("zmq: a routing id that spells a peer's rank another way does not speak for it",
          "[zmq][security]") {
  // A client that learnt rank 1's routing id ("1.<incarnation>", sent in
  // the clear without CURVE) connects to rank 0 as "01.<incarnation>" and
  // sends a data frame as rank 1 without a hello: it is dropped as a
  // stranger's, not delivered as rank 1's.
  MemoryStore store;
  ::zmq::context_t ctx;
  ::zmq::socket_t spy(ctx, ::zmq::socket_type::router);
  spy.set(::zmq::sockopt::linger, 0);
  spy.bind("tcp://127.0.0.1:*");
  store.set("gossamer/zmq/2", spy.get(::zmq::sockopt::last_endpoint));  // rank 2: this test
  std::unique_ptr<Transport> rank0, rank1;
  std::thread setUp0([&] { rank0 = gossamer::zmq::makeTransport(loopback(0, 3, 10), store); });
  std::thread setUp1([&] { rank1 = gossamer::zmq::makeTransport(loopback(1, 3, 10), store); });
  setUp0.join();
  setUp1.join();
  REQUIRE(rank0 != nullptr);
  REQUIRE(rank1 != nullptr);
  // Rank 1's routing id, from its hello to "rank 2".
  std::string id1;
  ::zmq::pollitem_t item{spy.handle(), 0, ZMQ_POLLIN, 0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (id1.rfind("1.", 0) != 0 && std::chrono::steady_clock::now() < until) {
    if (::zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    ::zmq::message_t id;
    if (!spy.recv(id)) continue;
    for (bool more = id.more(); more;) {  // the rest of the frame
      ::zmq::message_t part;
      if (!spy.recv(part)) break;
      more = part.more();
    }
    id1 = id.to_string();
  }
  REQUIRE(id1.rfind("1.", 0) == 0);
  const auto strangersBefore = rank0->stats().rejectedFrames[static_cast<std::size_t>(FrameFault::kStranger)];
  ::zmq::socket_t alias(ctx, ::zmq::socket_type::dealer);
  alias.set(::zmq::sockopt::linger, 0);
  alias.set(::zmq::sockopt::routing_id, "0" + id1);
  alias.connect(*store.tryGet("gossamer/zmq/0"));
  std::array<std::byte, 8> got{};
  auto r = rank0->irecv(std::vector<int>{1}, Tag::make(Op::kUser, 7), got);
  sendFrame(alias, 1, Tag::make(Op::kUser, 7), std::vector<std::byte>(8, std::byte{'E'}));
  const auto strangers = [&] {
    return rank0->stats().rejectedFrames[static_cast<std::size_t>(FrameFault::kStranger)];
  };
  const auto dropBy = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (strangers() == strangersBefore && !r.test() && std::chrono::steady_clock::now() < dropBy)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(strangers() > strangersBefore);
  CHECK_FALSE(r.test());
  r.cancel();
  rank0->abort();
  rank1->abort();
}
