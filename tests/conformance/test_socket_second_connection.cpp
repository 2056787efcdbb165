// The socket transport's second connection from a peer's process (two
// processes that started at once connect to each other, and each reads the
// other's connection as well as its own: admitLocked): when it breaks while
// the first is fine, that peer fails on both sides, at once, and no other
// peer does. The test stands in for the peer's process on the second
// connection: it reads the job's key and rank 1's incarnation from the
// rendezvous, says hello to rank 0 as rank 1, sends one message, and closes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/detail/byte_io.hpp"
#include "gossamer/kit/job_key.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transports/socket.hpp"
#include "threads.hpp"

using namespace gossamer;
using gossamer::testing::onEveryRank;

namespace {

constexpr double kTimeout = 10.0;

// A connected socket to the listener published as "tcp:HOST:PORT" or
// "ipc:NAME" (abstract namespace), blocking; -1 if the connect fails.
int connectToPublished(const std::string& address) {
  if (address.rfind("tcp:", 0) == 0) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    ::inet_pton(AF_INET, address.substr(4, address.rfind(':') - 4).c_str(), &a.sin_addr);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
  }
  const std::string name = address.substr(4);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), length) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

bool sendAll(int fd, std::span<const std::byte> bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Three ranks of the socket transport over `protocol`, on threads.
std::vector<std::unique_ptr<Transport>> startJob(MemoryStore& store, const std::string& protocol) {
  std::vector<std::unique_ptr<Transport>> g(3);
  onEveryRank(3, [&](int r) {
    sock::Options o;
    o.rank = r;
    o.worldSize = 3;
    o.protocol = protocol;
    o.timeoutSeconds = kTimeout;
    o.lingerSeconds = 0.2;
    o.singleCopy = false;
    g[static_cast<std::size_t>(r)] = sock::makeTransport(o, store);
  });
  return g;
}

// A second connection to rank 0 as rank 1's process (its incarnation, the
// job key's proof), the hello written: the socket, or -1.
int secondConnection(MemoryStore& store) {
  const std::string published0 = store.get("gossamer/sock/0", kTimeout);
  const std::string published1 = store.get("gossamer/sock/1", kTimeout);
  const std::uint64_t incarnation = std::stoull(published1.substr(published1.rfind(' ') + 1), nullptr, 16);
  const JobKey key = JobKey::fromStore(store, "gossamer/sock-job-key", false, kTimeout, "test");
  const int fd = connectToPublished(published0.substr(0, published0.rfind(' ')));
  if (fd < 0) return -1;
  std::array<std::byte, 16 + kHelloProofBytes> hello{};
  detail::put<std::uint32_t>(hello, 0, 0x4C485347u);  // "GSHL"
  detail::put<std::uint32_t>(hello, 4, 1);
  detail::put<std::uint64_t>(hello, 8, incarnation);
  const auto proof = key.proof(incarnation, 1);
  std::memcpy(hello.data() + 16, proof.data(), proof.size());
  if (sendAll(fd, hello)) return fd;
  ::close(fd);
  return -1;
}

}  // namespace

TEST_CASE("socket: a peer's second connection that breaks fails that peer on both sides at once and no other",
          "[socket][failure]") {
  const std::string protocol = GENERATE(as<std::string>{}, "tcp", "ipc");
  INFO("protocol " << protocol);
  MemoryStore store;
  auto g = startJob(store, protocol);
  // Rank 1 waits for a message from rank 0 that rank 0 will never send.
  double never = 0;
  auto waiting = g[1]->irecvOf<double>(0, Tag::make(Op::kUser, 99), std::span<double>(&never, 1));

  // The second connection: rank 1's incarnation, the job key's proof, one message.
  const int fd = secondConnection(store);
  REQUIRE(fd >= 0);
  const auto tag = Tag::make(Op::kUser, 5);
  const double sent = 42.0;
  const auto payload = std::as_bytes(std::span<const double>(&sent, 1));
  const HeaderBytes header = encodeFrameHeader(FrameKind::kData, DType::kFloat64, 1, tag, payload);
  CHECK(sendAll(fd, header));
  CHECK(sendAll(fd, payload));
  // Rank 0 took it in: the message on it arrives as rank 1's.
  double got = 0;
  g[0]->irecvOf<double>(1, tag, std::span<double>(&got, 1)).wait(kTimeout);
  CHECK(got == sent);

  // It breaks (no goodbye) while rank 1's first connection is fine.
  ::close(fd);
  const auto broke = std::chrono::steady_clock::now();
  // Rank 1 learns at once that rank 0 counts it failed: its receive fails
  // with PeerFailure naming rank 0 instead of running to its timeout.
  CHECK_THROWS_AS(waiting.wait(kTimeout / 2), PeerFailure);
  CHECK(since(broke) < kTimeout / 4);
  double x = 1;
  CHECK_THROWS_AS(g[0]->irecvOf<double>(1, tag, std::span<double>(&x, 1)).wait(kTimeout), PeerFailure);
  CHECK_THROWS_AS(g[0]->isendOf<double>(1, tag, std::span<const double>(&x, 1)).wait(kTimeout), PeerFailure);
  // Rank 2 still talks to both, both ways.
  for (const int p : {0, 1}) {
    const double there = 20.0 + p, back = 30.0 + p;
    double a = 0, b = 0;
    g[2]->isendOf<double>(p, tag, std::span<const double>(&there, 1)).wait(kTimeout);
    g[static_cast<std::size_t>(p)]->irecvOf<double>(2, tag, std::span<double>(&a, 1)).wait(kTimeout);
    CHECK(a == there);
    g[static_cast<std::size_t>(p)]->isendOf<double>(2, tag, std::span<const double>(&back, 1)).wait(kTimeout);
    g[2]->irecvOf<double>(p, tag, std::span<double>(&b, 1)).wait(kTimeout);
    CHECK(b == back);
  }
  for (auto& t : g) t->abort();
}

TEST_CASE("socket: a peer's connection cut in the middle of a frame fails it with where the frame was cut",
          "[socket][failure]") {
  // The cut comes in the header (20 of its bytes) or in the payload (the
  // header and 10 bytes of a 1000-byte payload): PeerFailure names the
  // offset, and the frame counts as truncated (TransportStats).
  const bool inHeader = GENERATE(false, true);
  INFO((inHeader ? "in the header" : "in the payload"));
  MemoryStore store;
  auto g = startJob(store, "tcp");
  const int fd = secondConnection(store);
  REQUIRE(fd >= 0);
  const auto tag = Tag::make(Op::kUser, 6);
  const std::vector<std::byte> payload(1000, std::byte{5});
  const HeaderBytes header = encodeFrameHeader(FrameKind::kData, DType::kBytes, 1, tag, payload);
  const std::size_t cut = inHeader ? 20 : kFrameHeaderBytes + 10;
  std::vector<std::byte> bytes(header.begin(), header.end());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  CHECK(sendAll(fd, std::span<const std::byte>(bytes.data(), cut)));
  ::close(fd);
  std::vector<std::byte> got(payload.size());
  std::string why;
  try {
    g[0]->irecv(1, tag, got).wait(kTimeout);
  } catch (const PeerFailure& e) {
    why = e.what();
  }
  INFO("rank 0: " << why);
  const std::string where =
      inHeader ? "cut 20 bytes in (of its " + std::to_string(kFrameHeaderBytes) + "-byte header)"
               : "cut " + std::to_string(cut) + " bytes in (of " +
                     std::to_string(kFrameHeaderBytes + payload.size()) + ")";
  CHECK(why.find(where) != std::string::npos);
  CHECK(g[0]->stats().rejectedFrames[static_cast<std::size_t>(FrameFault::kTruncated)] == 1);
  for (auto& t : g) t->abort();
}
