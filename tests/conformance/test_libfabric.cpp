// What the conformance suite does not cover for the libfabric transport:
// payloads split into pieces and reassembled, in order with small messages;
// provider selection and its errors (options and YAML); ranks with different
// frame sizes; a frame too large for the receiver's buffers (from a peer that
// lies about them), reported from the completion queue's error entry.
// The killed-peer case runs as real processes in multiproc/test_trainer.cpp.
#include <catch2/catch.hpp>

#include "registry.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include "cancel_race.hpp"
#include "process.hpp"
#include "threads.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"

#ifdef GOSSAMER_HAVE_LIBFABRIC
#include "gossamer/transports/libfabric.hpp"
#include "test_seam.hpp"  // the transport's private seam: a rank's next large payload with a bad checksum

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

/// Rank `r` of two over `provider`, with a linger of 0.2 s.
libfabric::Options rankOptions(int r, const std::string& provider) {
  libfabric::Options o;
  o.rank = r;
  o.worldSize = 2;
  o.provider = provider;
  o.timeoutSeconds = kTimeout;
  o.lingerSeconds = 0.2;
  return o;
}

/// Two ranks of `provider` meeting in `store`; `tweak(rank, options)` adjusts each rank's options.
template <typename Tweak>
std::vector<std::unique_ptr<Transport>> pairOf(const std::string& provider, Tweak tweak, Store& store) {
  std::vector<std::unique_ptr<Transport>> g(2);
  onEveryRank(2, [&](int r) {
    libfabric::Options o = rankOptions(r, provider);
    o.lingerSeconds = 2;
    tweak(r, o);
    g[static_cast<std::size_t>(r)] = libfabric::makeTransport(o, store);
  });
  return g;
}
template <typename Tweak>
std::vector<std::unique_ptr<Transport>> pairOf(const std::string& provider, Tweak tweak) {
  MemoryStore store;
  return pairOf(provider, tweak, store);
}

std::vector<std::byte> randomBytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xFF);
  return v;
}

}  // namespace

TEST_CASE("libfabric splits payloads into pieces and delivers them whole, in order with small messages",
          "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  auto g = pairOf(provider, [](int, libfabric::Options& o) {
    o.inlineBytes = 256;     // anything longer is announced and follows as pieces
    o.maxPieceBytes = 4096;  // of at most 4 KiB
  });
  const auto tag = Tag::make(Op::kUser, 1);
  // Same source and tag: they must come out in this order, whatever path each took.
  const std::vector<std::size_t> sizes{1, 100'003, 0, 256, 257, 4096, 4097, 3 * 4096, 1 << 20, 7};
  std::vector<std::vector<std::byte>> sent;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sent.push_back(randomBytes(sizes[i], static_cast<unsigned>(i)));
    g[0]->isend(1, tag, sent.back());
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {  // posted after everything arrived, or while it does
    std::vector<std::byte> got(sizes[i] + 10);
    auto r = g[1]->irecv(0, tag, got);
    r.wait(kTimeout);
    INFO("message " << i << " of " << sizes[i] << " bytes");
    REQUIRE(r.bytes() == sizes[i]);
    got.resize(sizes[i]);
    CHECK(got == sent[i]);
  }
  CHECK(g[1]->stats().messagesReceived == sizes.size());
  CHECK(g[1]->stats().bytesReceived == std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}));
  // Pieces below 4 KiB are refused: a receiver keeps one operation per piece.
  MemoryStore unused;
  libfabric::Options tiny;
  tiny.worldSize = 2;
  tiny.provider = provider;
  tiny.maxPieceBytes = 100;
  CHECK_THROWS_WITH(libfabric::makeTransport(tiny, unused), Catch::Contains("maxPieceBytes 100 below 4096"));
}

TEST_CASE("libfabric rejects a provider that is not there, listing those that are",
          "[transport][libfabric]") {
  MemoryStore store;
  libfabric::Options o;
  o.provider = "no-such-provider";
  try {
    libfabric::makeTransport(o, store);
    FAIL("a transport was made with provider " << o.provider);
  } catch (const libfabric::ProviderNotFound& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("no-such-provider") != std::string::npos);
    CHECK(what.find("shm") != std::string::npos);  // listed as available
    CHECK(what.find("tcp;ofi_rxm") != std::string::npos);
  }
  CHECK(libfabric::providerName("tcp") == "tcp;ofi_rxm");
  CHECK(libfabric::providerName("shm") == "shm");
  const auto available = libfabric::availableProviders();
  CHECK(std::find(available.begin(), available.end(), "shm") != available.end());
  // sockets is available but never the default.
  CHECK(libfabric::Options{}.provider == "tcp");
}

TEST_CASE("transport.provider comes from YAML, and a missing one is a ConfigError on that key",
          "[config][libfabric]") {
  Config c = gossamer::test::trainRegistry().parse(
      "world_size: 1\ntransport:\n  kind: libfabric\n  provider: shm\n", "run.yaml");
  CHECK(c.get<std::string>("transport.kind") == "libfabric");
  CHECK(c.get<std::string>("transport.provider") == "shm");
  CHECK(gossamer::test::trainRegistry().parse("world_size: 1\n").get<std::string>("transport.provider") ==
        "tcp");
  try {
    gossamer::test::trainRegistry().parse("transport:\n  kind: libfabric\n  provider: ''\n", "run.yaml");
    FAIL("an empty provider was accepted");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "transport.provider");
  }

  Registry registry;
  libfabric::registerWith(registry);
  c.set("transport.provider", std::string("no-such-provider"));
  c.sourceFile = "run.yaml";
  MemoryStore store;
  try {
    registry.transport("libfabric")(TransportContext{c, 0, store, &registry});
    FAIL("a transport was made with provider " << c.get<std::string>("transport.provider"));
  } catch (const ConfigError& e) {
    CHECK(e.key() == "transport.provider");
    CHECK(e.file() == "run.yaml");
    CHECK(std::string(e.what()).find("providers that do") != std::string::npos);
  }
  // World size 1 over shm: no peer, sends to itself.
  c.set("transport.provider", std::string("shm"));
  auto t = registry.transport("libfabric")(TransportContext{c, 0, store, &registry});
  CHECK(t->name() == "libfabric");
  const std::int32_t v = 9;
  std::int32_t got = 0;
  auto r = t->irecvOf<std::int32_t>(0, Tag::make(Op::kUser, 1), std::span<std::int32_t>(&got, 1));
  t->isendOf<std::int32_t>(0, Tag::make(Op::kUser, 1), std::span<const std::int32_t>(&v, 1));
  r.wait(kTimeout);
  CHECK(got == 9);
}

TEST_CASE("ranks configured with different providers refuse to connect, naming both",
          "[transport][libfabric]") {
  MemoryStore store;
  std::vector<std::string> errors(2);
  onEveryRank(2, [&](int r) {
    libfabric::Options o;
    o.rank = r;
    o.worldSize = 2;
    o.provider = r == 0 ? "tcp" : "shm";
    o.timeoutSeconds = kTimeout;
    try {
      libfabric::makeTransport(o, store);
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (const auto& e : errors) {
    INFO(e);
    CHECK(e.find("tcp;ofi_rxm") != std::string::npos);
    CHECK(e.find("'shm'") != std::string::npos);
  }
}

TEST_CASE("ranks with different inlineBytes send each other frames their buffers take",
          "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  auto g = pairOf(provider, [](int r, libfabric::Options& o) { o.inlineBytes = r == 0 ? 65536 : 1024; });
  for (const std::size_t n : {1000, 1025, 20000, 70000}) {
    INFO(n << " bytes");
    for (int from : {0, 1}) {
      const auto tag = Tag::make(Op::kUser, n, static_cast<std::uint32_t>(from));
      const auto msg = randomBytes(n, static_cast<unsigned>(n));
      std::vector<std::byte> got(n);
      auto r = g[static_cast<std::size_t>(1 - from)]->irecv(from, tag, got);
      g[static_cast<std::size_t>(from)]->isend(1 - from, tag, msg);
      r.wait(kTimeout);
      CHECK(got == msg);
    }
  }
}

namespace {
/// A store that lies about rank 1: it claims rank 1's frame buffers take 1 MB,
/// as a misconfigured or malicious peer could.
class LyingStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::string v = value;
    if (key.size() > 12 && key.compare(key.size() - 12, 12, "/libfabric/1") == 0) {
      // "<provider>\n<incarnation>\n<frame bytes>\n...": the third line.
      const auto a = v.find('\n', v.find('\n') + 1), b = v.find('\n', a + 1);
      v = v.substr(0, a + 1) + "1000000" + v.substr(b);
    }
    inner_.set(key, v);
  }
  std::optional<std::string> tryGet(const std::string& key) override { return inner_.tryGet(key); }

 private:
  MemoryStore inner_;
};
}  // namespace

// tcp only: the shm provider of libfabric 1.17 deadlocks in its progress
// function on a truncated receive (docs/libfabric.md), which is why ranks tell
// each other what their buffers take. The provider's error entry for a
// truncated message does not say who sent it, and its envelope could be
// anyone's claim: so it fails no one by itself. The frame it was is then
// missing from its sender's stream, which fails that sender once later
// frames arrived for the peer timeout.
TEST_CASE(
    "a frame larger than the receiver's buffers is dropped and counted, and its sender fails once its next "
    "frame arrived without it",
    "[transport][libfabric]") {
  LyingStore store;
  auto g = pairOf(
      "tcp",
      [](int r, libfabric::Options& o) {
        o.lingerSeconds = 0.2;
        o.peerTimeoutSeconds = 1;
        o.inlineBytes = r == 0 ? 65536 : 1024;
      },
      store);
  const auto tag = Tag::make(Op::kUser, 3);
  std::vector<std::byte> got(1 << 16);
  auto r = g[1]->irecv(0, tag, got);
  g[0]->isend(1, tag, randomBytes(20000, 1));  // inside one frame: rank 0 believes rank 1 takes it
  g[0]->isend(1, tag, randomBytes(100, 2));    // fits, but comes after the one dropped
  try {
    r.wait(kTimeout);
    FAIL("the oversized frame was received");
  } catch (const ProtocolError& e) {
    INFO(e.what());
    CHECK(e.peer() == 0);
    CHECK(std::string(e.what()).find("frame 0 never arrived, while 1 later ones did") != std::string::npos);
    CHECK(std::string(e.what()).find("exceeded the largest frame this rank takes (1112 bytes)") !=
          std::string::npos);
  }
  const auto stats = g[1]->stats();
  CHECK(stats.rejectedFrames[static_cast<std::size_t>(FrameFault::kOversized)] == 1);
  CHECK(stats.rejectedFrameTotal() == 1);
  // Rank 0 is now failed for rank 1: nothing more is accepted from it.
  std::int32_t x = 0;
  auto r2 = g[1]->irecvOf<std::int32_t>(0, tag, std::span<std::int32_t>(&x, 1));
  CHECK_THROWS_AS(r2.wait(kTimeout), ProtocolError);
}

TEST_CASE("payloads received in place keep per-tag order, and a small receive buffer fails only its receive",
          "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  auto g = pairOf(provider, [](int, libfabric::Options& o) { o.maxPieceBytes = 64 << 10; });
  const auto tag = Tag::make(Op::kUser, 7);
  // Posted before anything is sent: the first payload is received straight
  // into its receive; the next ones, announced while an earlier one under
  // the same tag is still arriving, must not overtake it.
  const std::vector<std::size_t> sizes{3 << 20, 1 << 20, 300'000, 2 << 20};
  std::vector<std::vector<std::byte>> got;
  std::vector<Request> rs;
  for (std::size_t n : sizes) {
    got.emplace_back(n);
    rs.push_back(g[1]->irecv(0, tag, got.back()));
  }
  std::vector<std::byte> small(100);  // too small for what comes under its tag
  const auto tag2 = Tag::make(Op::kUser, 8);
  auto tooSmall = g[1]->irecv(0, tag2, small);
  std::vector<std::vector<std::byte>> sent;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sent.push_back(randomBytes(sizes[i], static_cast<unsigned>(10 + i)));
    g[0]->isend(1, tag, sent.back());
  }
  const auto big = randomBytes(1 << 20, 99);
  g[0]->isend(1, tag2, big);
  g[0]->isend(1, tag2, sent[2]);  // the next receive under tag2 gets this one
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    rs[i].wait(kTimeout);
    INFO("message " << i);
    CHECK(rs[i].bytes() == sizes[i]);
    CHECK(got[i] == sent[i]);
    REQUIRE(rs[i].payloadChecksum().has_value());
    CHECK(*rs[i].payloadChecksum() == crc32c(sent[i]));
  }
  CHECK_THROWS_AS(tooSmall.wait(kTimeout), ProtocolError);
  std::vector<std::byte> next(sent[2].size());
  auto r = g[1]->irecv(0, tag2, next);
  r.wait(kTimeout);
  CHECK(next == sent[2]);
}

TEST_CASE(
    "a receive cancelled while its payload arrives in place is left alone, and the message goes to the next",
    "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  // Many small pieces, so that the payload takes a while to arrive.
  auto g = pairOf(provider, [](int, libfabric::Options& o) { o.maxPieceBytes = 32 << 10; });
  constexpr std::size_t kBytes = std::size_t{24} << 20;
  constexpr auto kUntouched = std::byte{0xA5};
  int midway = 0;
  // Only shm receives in place; over tcp the payload lands in the
  // transport's memory and is copied into the receive whole (tcp;ofi_rxm
  // cannot take back a piece under way). Four rounds, and with shm more (at
  // most 40) until one cancel came midway: a loaded machine may run the
  // cancel late.
  const bool inPlace = provider == "shm";
  for (int round = 0; round < 4 || (inPlace && midway == 0 && round < 40); ++round) {
    INFO("round " << round);
    const auto tag = Tag::make(Op::kUser, 100 + static_cast<std::uint64_t>(round));
    auto sent = randomBytes(kBytes, static_cast<unsigned>(round));
    sent.front() = std::byte{0x00};  // differs from kUntouched: shows the first piece arrived
    std::vector<std::byte> first(kBytes, kUntouched);
    auto r1 = g[1]->irecv(0, tag, first);
    g[0]->isend(1, tag, sent);
    if (inPlace) {  // cancel once the first piece is there (bounded wait)
      const std::atomic_ref<std::byte> head(first.front());
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (head.load(std::memory_order_relaxed) == kUntouched && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    } else {
      // Not peeked at: over tcp the first byte changes only when the checksum
      // thread copies the whole payload in, and a read then races with that
      // copy (ThreadSanitizer reported it). The pieces are still arriving a
      // few milliseconds after the send: each round cancels a little later.
      std::this_thread::sleep_for(std::chrono::milliseconds(2 * round));
    }
    r1.cancel();
    bool cancelled = false;
    try {
      r1.wait(kTimeout);
    } catch (const Cancelled&) {
      cancelled = true;
    }
    const auto snapshot = first;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(first == snapshot);  // nothing written after cancel() returned
    if (!cancelled) {          // it had all arrived before the cancel
      CHECK(first == sent);
      continue;
    }
    if (first.front() != kUntouched && std::count(first.begin(), first.end(), kUntouched) > 1000) ++midway;
    std::vector<std::byte> second(kBytes);
    auto r2 = g[1]->irecv(0, tag, second);
    r2.wait(kTimeout);
    CHECK(second == sent);  // nothing lost
  }
  // The payload arrives over several milliseconds; the cancel comes right
  // after its first piece. (Not received in place, it is never seen half.)
  if (inPlace)
    CHECK(midway >= 1);
  else
    CHECK(midway == 0);
}

TEST_CASE("a receive cancelled while its payload's announcement is being claimed loses nothing",
          "[transport][libfabric]") {
  // The cancel lands at random moments around the claim of the receive by the
  // progress thread: a cancel between the claim and its registration must not
  // let the payload into the cancelled buffer, nor lose it.
  const std::string provider = GENERATE(as<std::string>{}, "shm", "tcp");
  INFO("provider " << provider);
  auto g = pairOf(provider, [](int, libfabric::Options& o) { o.maxPieceBytes = 64 << 10; });
  const auto sent = randomBytes(std::size_t{512} << 10, 1);
  const int cancelled = gossamer::testing::cancelAtRandomMoments(
      *g[0], *g[1], sent, 1500, std::chrono::microseconds(120), 1000, kTimeout);
  CHECK(cancelled > 0);
}

TEST_CASE("close() while payload pieces are still arriving returns cleanly", "[transport][libfabric]") {
  // tcp;ofi_rxm of libfabric 1.17 crashes inside fi_close(ep) when the
  // endpoint closes with a piece under way; the transport takes its pieces
  // back first (drainBulk), and leaves the endpoint open if it cannot
  // (abandonEndpoint).
  const bool posted = GENERATE(false, true);
  INFO("receive posted: " << posted);
  auto g = pairOf("tcp", [](int, libfabric::Options& o) { o.lingerSeconds = 0.2; });
  // Over tcp the pieces land in the transport's buffer (posted or not; a
  // posted receive gets its copy once all are in), and most of 384 or 256
  // MiB are still arriving 150 ms after the send. Whether close() takes the
  // pieces back (drainBulk) or leaves the endpoint open (abandonEndpoint)
  // depends on the timing; either way it returns. Both runs send from one
  // buffer: a fresh 384 MiB costs over a second of page faults here.
  const std::size_t kBytes = std::size_t{posted ? 256u : 384u} << 20;
  static const std::vector<std::byte> source(std::size_t{384} << 20, std::byte{0x11});
  const std::span<const std::byte> big(source.data(), kBytes);
  std::vector<std::byte> got(posted ? kBytes : 0, std::byte{0xA5});
  std::optional<Request> r;
  if (posted) r = g[1]->irecv(0, Tag::make(Op::kUser, 1), got);
  g[0]->isend(1, Tag::make(Op::kUser, 1), big);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the pieces take a few hundred ms to arrive
  g[1]->close();
  if (r) {
    // Either it all arrived in time, or the receive ends cancelled; it never hangs.
    try {
      r->wait(kTimeout);
      CHECK(std::equal(got.begin(), got.end(), big.begin(), big.end()));
    } catch (const Cancelled&) {
    }
  }
  g[0]->close();
}

namespace {

/// The id of a process that has exited and been reaped.
pid_t deadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return child;
}

/// Names of /dev/shm files that start with `prefix`.
std::vector<std::string> shmFiles(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  }
  return out;
}

}  // namespace

// shm names an endpoint's /dev/shm file after the process id by default, so a
// killed process's leftover file makes a later process with the same (reused)
// id fail with "fi_enable: Device or resource busy".
TEST_CASE("shm endpoints get names of their own, and files of killed processes are removed",
          "[transport][libfabric]") {
  const std::string self = "gossamer-" + std::to_string(::getpid()) + '-';
  const std::string dead = "gossamer-" + std::to_string(deadPid()) + "-00000000000000ff:0:0";
  const std::string live = self + "test-live-file:0:0";
  // What the provider's default name for this process would be, with a live
  // owner recorded in it: fi_enable of a default-named endpoint fails on it.
  const std::string squatter = std::to_string(::getpid()) + ":0:0";
  for (const auto& n : {dead, live}) std::ofstream("/dev/shm/" + n) << "left behind";
  const bool squatted = !std::filesystem::exists("/dev/shm/" + squatter);
  if (squatted) std::ofstream("/dev/shm/" + squatter) << std::string(4096, '\0');  // version 0: "in use"

  auto g = pairOf("shm", [](int, libfabric::Options&) {});
  CHECK_FALSE(std::filesystem::exists("/dev/shm/" + dead));
  CHECK(std::filesystem::exists("/dev/shm/" + live));
  // This process's two endpoints, under their own names.
  const auto mine = shmFiles(self);
  CHECK(std::count_if(mine.begin(), mine.end(), [&](const std::string& n) { return n != live; }) == 2);
  // And they work.
  std::vector<std::byte> out(100, std::byte{7}), in(100);
  auto r = g[1]->irecv(0, Tag::make(Op::kUser, 1), in);
  g[0]->isend(1, Tag::make(Op::kUser, 1), out).wait(kTimeout);
  r.wait(kTimeout);
  CHECK(in == out);
  for (auto& t : g) t->close();
  g.clear();
  CHECK(shmFiles(self) == std::vector<std::string>{live});
  std::filesystem::remove("/dev/shm/" + live);
  if (squatted) std::filesystem::remove("/dev/shm/" + squatter);
}

namespace {

/// Rank 1 sends one double to rank 0, which must receive it (a restarted
/// rank 1 is taken in on its hello: PeerFailures for the old one are retried,
/// bounded).
bool reaches(std::vector<std::unique_ptr<Transport>>& g, double x) {
  const auto tag = Tag::make(Op::kUser, 1);
  g[1]->isendOf<double>(0, tag, std::span<const double>(&x, 1));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    double y = 0;
    try {
      g[0]->irecvOf<double>(1, tag, std::span<double>(&y, 1)).wait(kTimeout);
      return y == x;
    } catch (const PeerFailure&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return false;
}

}  // namespace

// Each restart of a peer used to leave its old address in the survivor's
// address vector (and, with shm, its pidfd open): shm's address vector holds
// 256 peers, so the 255th restart was refused ("fi_av_insert ... (0
// inserted)"). The old process's entry and pidfd are released once nothing
// posted to or from it is left.
TEST_CASE("a peer restarted 40 times is taken in every time, and the survivor keeps no fd for the old ones",
          "[transport][libfabric]") {
  MemoryStore store;
  auto g = pairOf(
      "shm", [](int, libfabric::Options& o) { o.lingerSeconds = 0.2; }, store);
  REQUIRE(reaches(g, 1));
  const long before = gossamer::testing::openDescriptors();
  for (int i = 0; i < 40; ++i) {
    INFO("restart " << i);
    g[1]->abort();
    g[1].reset();
    g[1] = libfabric::makeTransport(rankOptions(1, "shm"), store);
    REQUIRE(reaches(g, 2 + i));
  }
  // The old processes' pidfds are closed after a grace period (bounded wait).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (gossamer::testing::openDescriptors() > before && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(gossamer::testing::openDescriptors() <= before);
  for (auto& t : g) t->abort();
}

// A hello (a restarted or joining process's first frame) carries an address
// of up to kMaxHelloEndpoint bytes: frame buffers sized for inlineBytes alone
// truncated it, and the new process was never taken in.
TEST_CASE("a survivor with inlineBytes 0 takes in a restarted peer", "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  MemoryStore store;
  auto g = pairOf(
      provider, [](int r, libfabric::Options& o) { o.inlineBytes = r == 0 ? 0 : 8192; }, store);
  REQUIRE(reaches(g, 1));
  for (int i = 0; i < 3; ++i) {
    g[1]->abort();
    g[1].reset();
    g[1] = libfabric::makeTransport(rankOptions(1, provider), store);
    CHECK(reaches(g, 2 + i));
  }
  CHECK(g[0]->stats().rejectedFrames[static_cast<std::size_t>(FrameFault::kOversized)] == 0);
  for (auto& t : g) t->abort();
}

// libfabric 1.17's shm provider reaches an endpoint of the same process
// through that endpoint's own mapping of its region, unmapped when it closes:
// a rank that posted a send to a peer of its own process just after the peer
// closed (a restart inside one process: the test above, under load, crashed
// about once in 15 runs) wrote into unmapped memory. A closed shm transport's
// endpoint, and its region, stay until the process's last shm transport closes.
TEST_CASE("a closed shm transport's region stays until the process's last shm transport closes",
          "[transport][libfabric]") {
  const std::string self = "gossamer-" + std::to_string(::getpid()) + '-';
  const auto before = shmFiles(self).size();
  MemoryStore store;
  auto g = pairOf(
      "shm", [](int, libfabric::Options&) {}, store);
  REQUIRE(reaches(g, 1));
  REQUIRE(shmFiles(self).size() == before + 2);
  g[1]->abort();
  g[1].reset();
  CHECK(shmFiles(self).size() == before + 2);  // parked, its region still there
  // A transport opened meanwhile and closed is parked too; the last one to
  // close closes them all.
  auto o = rankOptions(1, "shm");
  o.worldSize = 1;
  o.rank = 0;
  o.storePrefix = "alone";
  auto alone = libfabric::makeTransport(o, store);
  CHECK(shmFiles(self).size() == before + 3);
  alone->close();
  alone.reset();
  CHECK(shmFiles(self).size() == before + 3);
  g[0]->close();
  g[0].reset();
  CHECK(shmFiles(self).size() == before);
}

// libfabric 1.17 keeps a closed endpoint's name, with its unmapped region, in
// its process-wide list: a restarted rank that inserted the address of its
// peer, in the same process and closed since, was handed that region and
// crashed inside fi_av_insert. The peer is now failed instead.
TEST_CASE("a restarted shm rank fails its peer in this process that closed rather than insert it",
          "[transport][libfabric]") {
  MemoryStore store;
  auto g = pairOf(
      "shm", [](int, libfabric::Options&) {}, store);
  REQUIRE(reaches(g, 1));
  g[1]->abort();
  g[1].reset();
  g[0]->abort();  // the last shm transport of the process: both endpoints close
  g[0].reset();
  auto again = libfabric::makeTransport(rankOptions(1, "shm"), store);
  const auto why = again->peerFailure(0);
  REQUIRE(why);
  CHECK_THROWS_WITH(std::rethrow_exception(why),
                    Catch::Contains("its shm endpoint, in this process, was closed"));
  const double x = 1;
  CHECK_THROWS_AS(
      again->isendOf<double>(0, Tag::make(Op::kUser, 1), std::span<const double>(&x, 1)).wait(kTimeout),
      PeerFailure);
  again->abort();
}

namespace {
/// A store that corrupts rank 1's published address: one byte more.
class LongAddressStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    const bool rank1 = key.size() > 12 && key.compare(key.size() - 12, 12, "/libfabric/1") == 0;
    inner_.set(key, rank1 ? value + "00" : value);
  }
  std::optional<std::string> tryGet(const std::string& key) override { return inner_.tryGet(key); }

 private:
  MemoryStore inner_;
};
}  // namespace

TEST_CASE("a published address of the wrong length is refused before fi_av_insert reads it",
          "[transport][libfabric]") {
  LongAddressStore store;
  const long before = gossamer::testing::openDescriptors();
  std::vector<std::string> errors(2);
  onEveryRank(2, [&](int r) {
    try {
      auto o = rankOptions(r, "tcp");
      o.timeoutSeconds = 5;
      auto t = libfabric::makeTransport(o, store);
      t->abort();
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  INFO(errors[0]);
  CHECK(errors[0].find("rank 1 published an address of") != std::string::npos);
  CHECK(gossamer::testing::openDescriptors() <=
        before + 4);  // (rank 1 may still hold its endpoint's sockets briefly)
}

// tcp;ofi_rxm cannot take back a payload piece whose transfer began: a sender
// stopped mid-payload (SIGSTOP) that resumed later had the provider write into
// the receive's buffer after the receive failed and after cancel() returned.
// Over tcp payloads are not received in place: the receive fails with the
// peer's PeerFailure (heartbeats), cancel() returns, and the buffer is never
// written again.
TEST_CASE(
    "a receive from a peer stopped mid-payload fails with PeerFailure, and nothing writes into it later",
    "[transport][libfabric]") {
  gossamer::testing::TempDir dir;
  REQUIRE(!dir.path().empty());
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  const auto go = Tag::make(Op::kUser, 1), big = Tag::make(Op::kUser, 2);
  const auto options = [](int r) {
    auto o = rankOptions(r, "tcp");
    o.timeoutSeconds = 8;
    o.peerTimeoutSeconds = 1;
    return o;
  };
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      FileStore store(dir.path());
      auto t = libfabric::makeTransport(options(1), store);
      std::byte b{};
      t->irecv(std::vector<int>{0}, go, std::span<std::byte>(&b, 1)).wait(20);
      std::vector<std::byte> data(kBytes, std::byte{0x55});
      t->isend(0, big, data, DType::kBytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
      ::raise(SIGSTOP);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      t->abort();
    } catch (...) {
    }
    ::_exit(0);
  }
  FileStore store(dir.path());
  auto t = libfabric::makeTransport(options(0), store);
  std::vector<std::byte> buf(kBytes, std::byte{0xAA});
  auto r = t->irecv(std::vector<int>{1}, big, buf);
  std::byte b{1};
  t->isend(1, go, std::span<const std::byte>(&b, 1), DType::kBytes);
  bool completed = false;
  try {
    r.wait(30);
    completed = true;  // (all of it arrived before the stop: a very fast machine)
  } catch (const PeerFailure& e) {
    INFO(e.what());
    CHECK(e.peer() == 1);
  }
  r.cancel();
  if (completed) CHECK(std::all_of(buf.begin(), buf.end(), [](std::byte x) { return x == std::byte{0x55}; }));
  std::fill(buf.begin(), buf.end(), std::byte{0xAA});
  // Let the sender stream the rest (bounded: it stops once it is done).
  ::kill(child, SIGCONT);
  const auto status = gossamer::testing::waitBounded(child, 30);
  CHECK(status.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(std::all_of(buf.begin(), buf.end(), [](std::byte x) { return x == std::byte{0xAA}; }));
  t->abort();
}

// The socket and zmq transports run this as the conformance case "a bad
// checksum from one rank leaves a receive from several ranks to the others";
// libfabric puts no caller's checksum on the wire, so the bad one comes from
// the transport's test seam. A payload of 256 KiB or more is checked on the
// checksum thread, which used to copy it into the oldest matching receive
// even when that one also waits on other ranks: a bad checksum then failed
// that receive, its buffer overwritten, though rank 1 could still fill it.
TEST_CASE(
    "a bad checksum on a large payload fails its sender and leaves a receive from several ranks to the "
    "others",
    "[transport][libfabric]") {
  const std::string provider = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("provider " << provider);
  struct Disarm {  // the seam is the process's: no later case may find it set
    ~Disarm() { libfabric::impl::corruptNextLargeChecksumOf = -1; }
  } disarm;
  MemoryStore store;
  std::vector<std::unique_ptr<Transport>> g(3);
  onEveryRank(3, [&](int r) {
    libfabric::Options o = rankOptions(r, provider);
    o.worldSize = 3;
    g[static_cast<std::size_t>(r)] = libfabric::makeTransport(o, store);
  });
  constexpr auto kUntouched = std::byte{0xA5};
  const auto bad = randomBytes(std::size_t{512} << 10, 1), good = randomBytes(bad.size(), 2);
  std::vector<std::byte> got(bad.size(), kUntouched);
  const auto tag = Tag::make(Op::kGossip, 78);
  const int sources[] = {0, 1};
  // Posted first: the payload finds it (and shm does not receive it in place).
  auto r = g[2]->irecv(sources, tag, got);
  // Fails once rank 2 has checked rank 0's payload and failed rank 0 for it.
  std::byte probeByte{};
  auto probe = g[2]->irecv(0, Tag::make(Op::kUser, 79), std::span<std::byte>(&probeByte, 1));
  libfabric::impl::corruptNextLargeChecksumOf = 0;
  g[0]->isend(2, tag, bad);
  try {
    probe.wait(kTimeout);
    FAIL("a receive from the rank that sent a bad payload completed");
  } catch (const ProtocolError& e) {
    INFO(e.what());
    CHECK(e.peer() == 0);
    CHECK(e.offset() == frame_offset::kChecksum);
  }
  // (The seam was used.)
  CHECK(libfabric::impl::corruptNextLargeChecksumOf == -1);
  CHECK_FALSE(r.test());  // still posted: rank 1 lives
  // (and not written: rank 0's bytes were copied into it before)
  CHECK(std::count(got.begin(), got.end(), kUntouched) == static_cast<std::ptrdiff_t>(got.size()));
  g[1]->isend(2, tag, good);
  r.wait(kTimeout);
  CHECK(r.peer() == 1);
  CHECK(r.bytes() == good.size());
  CHECK(got == good);
  REQUIRE(r.payloadChecksum().has_value());
  CHECK(*r.payloadChecksum() == crc32c(good));
  // A receive from the sender alone is still filled by the checksum thread,
  // and fails with its sender.
  const auto tag2 = Tag::make(Op::kGossip, 80);
  auto alone = g[2]->irecv(1, tag2, got);
  libfabric::impl::corruptNextLargeChecksumOf = 1;
  g[1]->isend(2, tag2, good);
  try {
    alone.wait(kTimeout);
    FAIL("a receive of a bad payload completed");
  } catch (const ProtocolError& e) {
    INFO(e.what());
    CHECK(e.peer() == 1);
  }
}

#endif  // GOSSAMER_HAVE_LIBFABRIC
