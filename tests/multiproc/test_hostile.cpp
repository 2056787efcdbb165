// A live training job under hostile input: an attacker on the same host
// sends 10,000 malformed frames (corrupted, truncated, oversized, wrong
// version, bad checksum, raw garbage, frames from a connection that is no
// peer's) to rank 0 of a 4-rank gossamer-train job, half while the job is
// starting and half while it trains. The job must finish, rank 0 must count
// every bad frame by kind (its summary's transport_stats), log a rate-limited
// summary instead of a line per frame, and grow by less than 1 MB of RSS.
//
// zmq: the attacker is a ZeroMQ DEALER (several routing ids, among them one
// that names rank 1 with a made-up incarnation) plus raw TCP connections.
// socket: the attacker opens raw TCP connections to rank 0's listener, which
// stays open while the job runs (restarted and joining ranks come in there):
// garbage, connect-and-close, partial hellos, and whole hellos that name rank
// 0 itself, a rank outside the job, or rank 1 with a proof made up.
// libfabric (tcp provider): the attacker is a libfabric endpoint of its own
// whose messages carry the frame channel's tag and an envelope naming rank 1
// (or rank 0 itself, or a rank outside the job), plus raw TCP connections to
// the provider's port. No message may fail rank 1 at rank 0.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <zmq.hpp>

#ifdef GOSSAMER_HAVE_LIBFABRIC
#include "fabric.hpp"  // the transport's own libfabric loader (private header)
#endif

#include "build_paths.hpp"
#include "dataset.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/store.hpp"
#include "job_config.hpp"
#include "process.hpp"

using gossamer::testing::readFile;
using gossamer::testing::smallConfig;
using gossamer::testing::spawn;
using gossamer::testing::TempDir;
using gossamer::testing::waitBounded;
using gossamer::testing::writeFile;

namespace {

using gossamer::FrameFault;
constexpr std::size_t kKinds = gossamer::kFrameFaultCount;
using Counts = std::array<std::uint64_t, kKinds>;

std::size_t at(FrameFault f) { return static_cast<std::size_t>(f); }

/// VmRSS of `pid`, kB (0 if unreadable).
long rssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  return 0;
}

/// Waits (bounded) until `file` exists and is not empty; returns its text.
std::string waitForFile(const std::string& file, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    const std::string s = readFile(file);
    if (!s.empty()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

/// Port of "tcp://127.0.0.1:PORT" or "tcp:127.0.0.1:PORT".
int portOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

/// A TCP connection to 127.0.0.1:port, or -1 when it is refused.
int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const timeval bound{2, 0};  // a full backlog makes connect() wait: at most 2 s
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
  // From 127.0.0.2: thousands of short connections then hold no port of
  // 127.0.0.1 that a test running beside this one may bind.
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<std::byte> randomBytes(std::mt19937& g, std::size_t n) {
  std::vector<std::byte> b(n);
  for (auto& x : b) x = std::byte(g() & 0xFF);
  return b;
}

/// One bad zmq message (header part, payload part of `payloadBytes`; one part
/// for a malformed one) of kind `f`, as the transport must classify it.
std::vector<std::vector<std::byte>> badMessage(FrameFault f, std::mt19937& g, std::size_t payloadBytes) {
  using namespace gossamer;
  std::vector<std::byte> payload = randomBytes(g, payloadBytes);
  const Tag tag{Op::kGossip, 0, g() % 1000};
  const auto valid = encodeFrameHeader(FrameKind::kData, DType::kBytes, 1, tag, payload);
  std::vector<std::byte> header(valid.begin(), valid.end());
  auto put16 = [&](std::size_t off, std::uint16_t v) { std::memcpy(header.data() + off, &v, 2); };
  auto put64 = [&](std::size_t off, std::uint64_t v) { std::memcpy(header.data() + off, &v, 8); };
  switch (f) {
    case FrameFault::kGarbage:
      header = randomBytes(g, kFrameHeaderBytes);
      header[0] = std::byte{0x00};  // never the magic's first byte
      break;
    case FrameFault::kVersion:
      put16(frame_offset::kVersion, kProtocolVersion + 1 + static_cast<std::uint16_t>(g() % 100));
      break;
    case FrameFault::kMalformed:
      if (g() % 2) return {randomBytes(g, 1 + g() % 100)};  // one part only
      header[frame_offset::kReserved1] = std::byte{1};
      break;
    case FrameFault::kOversized:
      put64(frame_offset::kPayloadBytes, kMaxPayloadBytes + 1 + g() % 1000000);
      put64(frame_offset::kCount, kMaxPayloadBytes + 1);
      break;
    case FrameFault::kTruncated:
      if (g() % 2) {
        header.resize(g() % kFrameHeaderBytes);
      } else {
        payload.resize(g() % payload.size());
      }
      break;
    case FrameFault::kChecksum:
      payload[g() % payload.size()] ^= std::byte{0x40};
      break;
    case FrameFault::kStranger:
      break;  // well formed: it is the connection that is wrong
  }
  return {header, payload};
}

/// Sends `n` bad frames (payloads of `payloadBytes`) to the zmq ROUTER at
/// `endpoint`, round robin over the kinds, from DEALERs with made-up routing
/// ids; then n / 50 raw TCP connections, half of them garbage and half
/// connect-and-close. Returns the frames sent by kind.
Counts floodZmq(const std::string& endpoint, int n, std::uint32_t seed, std::size_t payloadBytes) {
  std::mt19937 g(seed);
  Counts sent{};
  ::zmq::context_t ctx(1);
  std::vector<::zmq::socket_t> dealers;
  for (const char* id : {"", "attacker", "1.12345", "9.1", "0"}) {
    dealers.emplace_back(ctx, ::zmq::socket_type::dealer);
    auto& d = dealers.back();
    if (*id) d.set(::zmq::sockopt::routing_id, std::string(id));
    d.set(::zmq::sockopt::linger, 5000);
    d.set(::zmq::sockopt::sndtimeo, 5000);
    d.connect(endpoint);
  }
  for (int i = 0; i < n; ++i) {
    const auto f = FrameFault(static_cast<std::size_t>(i) % kKinds);
    const auto parts = badMessage(f, g, payloadBytes);
    auto& d = dealers[static_cast<std::size_t>(i) % dealers.size()];
    bool ok = true;
    for (std::size_t k = 0; k < parts.size() && ok; ++k)
      ok = d.send(::zmq::buffer(parts[k].data(), parts[k].size()),
                  k + 1 < parts.size() ? ::zmq::send_flags::sndmore : ::zmq::send_flags::none)
               .has_value();
    if (ok) ++sent[at(f)];
  }
  const int port = portOf(endpoint);
  for (int i = 0; i < std::max(2, n / 50); ++i) {
    const int fd = connectTo(port);
    if (fd < 0) continue;
    if (i % 2 == 0) {
      const auto junk = randomBytes(g, 256);
      (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
  }
  for (auto& d : dealers) d.close();  // lingers until the frames are written
  return sent;
}

/// Opens `n` raw TCP connections to a socket-transport listener, each a
/// kind of stray: garbage, connect-and-close, a partial hello, a whole
/// 48-byte hello ([magic][rank][incarnation][proof]) that names rank 0
/// itself, a rank outside the job, or rank 1 with a made-up proof. Returns
/// them by kind.
Counts floodSocket(int port, int n, std::uint32_t seed) {
  std::mt19937 g(seed);
  Counts sent{};
  constexpr std::uint32_t kHelloMagic = 0x4C485347u;  // the socket transport's hello ("GSHL")
  for (int i = 0; i < n; ++i) {
    const int fd = connectTo(port);
    if (fd < 0) continue;
    FrameFault f = FrameFault::kGarbage;
    std::vector<std::byte> bytes;
    switch (i % 4) {
      case 0:  // random bytes, never starting like the magic
        bytes = randomBytes(g, 1 + g() % 128);
        bytes[0] = std::byte{0x00};
        break;
      case 1:  // a port scanner or health check: connect and close
        f = FrameFault::kTruncated;
        break;
      case 2: {  // the magic and part of the rest, then close
        f = FrameFault::kTruncated;
        bytes.resize(4 + g() % 44);
        std::memcpy(bytes.data(), &kHelloMagic, 4);
        break;
      }
      default: {  // a hello from rank 0 itself, a rank outside the job, or rank 1 with a forged proof
        f = FrameFault::kStranger;
        bytes = randomBytes(g, 48);
        const std::uint32_t rank =
            std::array<std::uint32_t, 3>{0, static_cast<std::uint32_t>(1000 + g() % 1000), 1}[i / 4 % 3];
        std::memcpy(bytes.data(), &kHelloMagic, 4);
        std::memcpy(bytes.data() + 4, &rank, 4);
      }
    }
    if (!bytes.empty()) (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::close(fd);
    ++sent[at(f)];
  }
  return sent;
}

/// Opens `n` raw TCP connections, half of them sending garbage, half
/// connecting and closing: what a port scanner or a confused client does to
/// a libfabric tcp endpoint. Returns how many connected.
int floodRaw(int port, int n, std::uint32_t seed) {
  std::mt19937 g(seed);
  int connected = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = connectTo(port);
    if (fd < 0) continue;
    ++connected;
    if (i % 2 == 0) {
      const auto junk = randomBytes(g, 1 + g() % 256);
      (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
  }
  return connected;
}

/// The raw endpoint address in a libfabric store entry (its fifth line, in
/// hex: "provider\nincarnation\nbytes\npid\nADDRESS"); empty if it has fewer lines.
std::string libfabricAddress(const std::string& entry) {
  std::size_t at = 0;
  for (int k = 0; k < 4; ++k) {
    at = entry.find('\n', at);
    if (at == std::string::npos) return {};
    ++at;
  }
  const std::string hex = entry.substr(at);
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

/// The TCP port in a libfabric store entry: the tcp provider's address is a
/// sockaddr_in (family, port in network order, address).
int libfabricPort(const std::string& entry) {
  const std::string a = libfabricAddress(entry);
  if (a.size() < 4) return -1;
  return (static_cast<unsigned char>(a[2]) << 8) | static_cast<unsigned char>(a[3]);
}

#ifdef GOSSAMER_HAVE_LIBFABRIC
/// A tcp;ofi_rxm endpoint outside the job that sends frame-channel messages
/// to one address: what an attacker who learnt a rank's address can do.
class FabricAttacker {
 public:
  explicit FabricAttacker(const std::string& address) {
    const auto& fabric = gossamer::libfabric::detail::api();
    fi_info* hints = fabric.dupinfo(nullptr);  // fi_allocinfo()
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    const int rc = fabric.getinfo(FI_VERSION(1, 9), "127.0.0.1", nullptr, FI_SOURCE, hints, &info_);
    fabric.freeinfo(hints);
    REQUIRE(rc == 0);
    REQUIRE(fabric.fabric(info_->fabric_attr, &fabric_, nullptr) == 0);
    REQUIRE(fi_domain(fabric_, info_, &domain_, nullptr) == 0);
    fi_cq_attr cq{};
    cq.format = FI_CQ_FORMAT_TAGGED;
    REQUIRE(fi_cq_open(domain_, &cq, &cq_, nullptr) == 0);
    fi_av_attr av{};
    av.type = FI_AV_TABLE;
    REQUIRE(fi_av_open(domain_, &av, &av_, nullptr) == 0);
    REQUIRE(fi_endpoint(domain_, info_, &ep_, nullptr) == 0);
    REQUIRE(fi_ep_bind(ep_, &av_->fid, 0) == 0);
    REQUIRE(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0);
    REQUIRE(fi_enable(ep_) == 0);
    REQUIRE(fi_av_insert(av_, address.data(), 1, &peer_, 0, nullptr) == 1);
  }
  ~FabricAttacker() {
    if (ep_) fi_close(&ep_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) gossamer::libfabric::detail::api().freeinfo(info_);
  }
  FabricAttacker(const FabricAttacker&) = delete;
  FabricAttacker& operator=(const FabricAttacker&) = delete;

  /// Sends `bytes` with the frame channel's tag; false if it could not be
  /// handed to the provider within 5 s.
  bool send(std::vector<std::byte> bytes) {
    constexpr std::uint64_t kFrameTag = std::uint64_t{1} << 56;  // the transport's frame channel
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    buffers_.push_back(std::move(bytes));
    auto& b = buffers_.back();
    auto& ctx = contexts_.emplace_back();
    while (true) {
      const ssize_t rc = fi_tsend(ep_, b.data(), b.size(), nullptr, peer_, kFrameTag, &ctx);
      if (rc == 0) {
        ++posted_;
        break;
      }
      if (rc != -FI_EAGAIN || std::chrono::steady_clock::now() > until) return false;
      progress();
    }
    progress();
    return true;
  }

  /// Reads completions until every send completed (at most `seconds`).
  void drain(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (completed_ < posted_ && std::chrono::steady_clock::now() < until) {
      progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  void progress() {
    std::array<fi_cq_tagged_entry, 64> e{};
    const ssize_t n = fi_cq_read(cq_, e.data(), e.size());
    if (n > 0) completed_ += static_cast<std::size_t>(n);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) > 0) ++completed_;
    }
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::deque<std::vector<std::byte>> buffers_;  // kept until the endpoint closes
  std::deque<fi_context2> contexts_;
  std::size_t posted_ = 0, completed_ = 0;
};

/// Sends `n` bad frame-channel messages to the libfabric endpoint at
/// `address`, round robin over the kinds, each [envelope][frame] with an
/// envelope naming rank 1 (most), rank 0 itself or rank 9. Returns the
/// messages sent by kind.
Counts floodFabric(const std::string& address, int n, std::uint32_t seed, std::size_t payloadBytes) {
  std::mt19937 g(seed);
  Counts sent{};
  FabricAttacker attacker(address);
  for (int i = 0; i < n; ++i) {
    const auto f = FrameFault(static_cast<std::size_t>(i) % kKinds);
    auto parts = badMessage(f, g, payloadBytes);
    // One message holds the whole frame: a malformed one is a header
    // field out of range, and a truncated header ends the message.
    while (f == FrameFault::kMalformed && parts.size() == 1) parts = badMessage(f, g, payloadBytes);
    if (parts[0].size() < gossamer::kFrameHeaderBytes) parts.resize(1);
    const std::uint64_t named = i % 10 == 0 ? 0 : i % 10 == 1 ? 9 : 1;
    const std::uint64_t envelope = (std::uint64_t{1} << 56) | (named << 40) | (g() % 4);
    std::vector<std::byte> msg(8);
    std::memcpy(msg.data(), &envelope, 8);
    for (const auto& p : parts) msg.insert(msg.end(), p.begin(), p.end());
    if (!attacker.send(std::move(msg))) break;  // rank 0 takes nothing more: the test fails on the count
    ++sent[at(f)];
  }
  attacker.drain(10);
  return sent;
}
#endif

/// The hostile-frames job over `transport` ("zmq", "socket" or
/// "libfabric-tcp"): see the top of this file.
void hostileJob(const std::string& transport) {
  gossamer::testing::requireFashionMnist();
  const bool fabric = transport == "libfabric-tcp";
  INFO("transport " << transport);
  // The job trains until the flood is over (the stop file ends it): a fast
  // transport must not finish first.
  const int n = 4, epochs = 100000, half = 5000;
  TempDir dir;
  writeFile(dir / "job.yaml", smallConfig(transport, "crossover_sgd", n, epochs, 20));
  std::vector<pid_t> pids(n, -1);
  struct Reap {
    std::vector<pid_t>& pids;
    ~Reap() {
      for (pid_t p : pids)
        if (p > 0) waitBounded(p, 0);
    }
  } reap{pids};
  auto start = [&](int r) {
    pids[static_cast<std::size_t>(r)] =
        spawn({gossamer::testing::trainExe(), "--config", dir / "job.yaml", "--rank", std::to_string(r),
               "--rendezvous", dir / "rdv", "--summary-json", dir / ("summary" + std::to_string(r)), "--set",
               "training.stop_file=" + (dir / "stop")},
              dir / ("out" + std::to_string(r)), dir / ("err" + std::to_string(r)));
  };
  // Start-up: rank 0 alone, waiting for its peers, takes the first half.
  start(0);
  const std::string key = transport == "zmq" ? "gossamer/zmq/0"
                          : fabric           ? "gossamer/libfabric/0"
                                             : "gossamer/sock/0";
  const std::string address = waitForFile(gossamer::FileStore::fileOf(dir / "rdv", key), 60);
  REQUIRE(!address.empty());
  const int port = fabric ? libfabricPort(address) : portOf(address);
  REQUIRE(port > 0);
  // The first frames grow malloc's pools to their working size: libzmq's
  // I/O thread allocates from an arena of its own, which the flood's
  // connections and queued messages grow to about 2.4 MB mapped while the
  // bytes in use grow by 62 kB (malloc_stats, 20,000 start-up frames).
  // Anonymous RSS is measured from after the first frames, so that it shows
  // whether frames are kept rather than where the arena's high-water mark
  // lies; the value before any frame is reported too. (libfabric: raw
  // connections wait in a backlog of 128 at start-up, so fewer.)
  const int warmUp = fabric ? 70 : 500;
  // libfabric's tcp provider reads and drops what a stray connection sends
  // before any of it reaches the transport: nothing to count by kind there.
  // The frames come from a libfabric endpoint instead (floodFabric).
  int rawConnections = 0;
  auto flood = [&](int frames, std::uint32_t seed, std::size_t payloadBytes) {
#ifdef GOSSAMER_HAVE_LIBFABRIC
    if (fabric) {
      rawConnections += floodRaw(port, frames == warmUp ? warmUp : 100, seed);
      return frames == warmUp ? Counts{} : floodFabric(libfabricAddress(address), frames, seed, payloadBytes);
    }
#endif
    return transport == "zmq" ? floodZmq(address, frames, seed, payloadBytes)
                              : floodSocket(port, frames, seed);
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long rssStart = rssKb(pids[0]);
  Counts sent = flood(warmUp, 1, 64);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long rssBefore = rssKb(pids[0]);
  // libfabric's tcp provider accepts connections only once its progress
  // runs (after set-up): until then they wait in the kernel's backlog, so
  // its whole flood comes during training.
  if (!fabric) {
    const Counts rest = flood(half - warmUp, 2, 64);
    for (std::size_t k = 0; k < kKinds; ++k) sent[k] += rest[k];
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long rssAfterStartUp = rssKb(pids[0]);
  for (int r = 1; r < n; ++r) start(r);
  // Training: the second half once rank 0 has finished an epoch.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (readFile(dir / "out0").find("epoch 1/") == std::string::npos &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  INFO("rank 0's stderr: " << readFile(dir / "err0").substr(0, 3000)
                           << "\nrank 1's: " << readFile(dir / "err1").substr(0, 3000));
  REQUIRE(readFile(dir / "out0").find("epoch 1/") != std::string::npos);
  // Training allocates too (evaluation, buffers that grow to their
  // working size): rank 1, which trains alike but is not flooded, is the
  // control, and what rank 0 grows beyond it is the flood's. The training
  // flood comes in three rounds of frames with 1 kB payloads (libfabric:
  // two, of 5,000 each, the second measured): the first
  // takes what a flood costs once (the attacker's connection, malloc's
  // pools at the high-water mark of messages in flight while rank 0 is
  // busy); the second and third, twice its size, are measured: kept, each
  // round's frames would add 2 MB or more. A round in which rank 0 is
  // busier than before raises that high-water mark once more (1.4 MB seen
  // under a loaded CI), so it is the smaller growth of the two that must be
  // small.
  const long rssTraining = rssKb(pids[0]);
  std::vector<long> rss{rssTraining}, control{rssKb(pids[1])};  // after each round
  double floodSeconds = 0;
  {
    // libfabric: two rounds of 5,000 (each round also opens 100 raw
    // connections, and more of them overrun the provider's backlog).
    const std::vector<int> rounds = fabric ? std::vector<int>{half, half}
                                           : std::vector<int>{half / 5, 2 * half / 5, half - 3 * (half / 5)};
    const auto floodStart = std::chrono::steady_clock::now();
    for (std::uint32_t r = 0; r < rounds.size(); ++r) {
      const Counts c = flood(rounds[r], 3 + r, 1024);
      for (std::size_t k = 0; k < kKinds; ++k) sent[k] += c[k];
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      rss.push_back(rssKb(pids[0]));
      control.push_back(rssKb(pids[1]));
    }
    floodSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - floodStart).count();
  }
  // Rank 0's growth over round k beyond the control's, kB.
  const auto growth = [&](std::size_t k) {
    return (rss[k] - rss[k - 1]) - std::max(0L, control[k] - control[k - 1]);
  };
  INFO("the training flood took " << floodSeconds << " s");
  // Rank 0 trained through the whole flood; now every rank stops after its epoch under way.
  REQUIRE(::waitpid(pids[0], nullptr, WNOHANG) == 0);
  std::size_t epochsDuringFlood = 0;  // rank 0's "epoch E/100000  loss ..." lines
  const std::string out0 = readFile(dir / "out0"), line = "/" + std::to_string(epochs) + "  loss";
  for (std::size_t at = 0; (at = out0.find(line, at)) != std::string::npos; ++at) ++epochsDuringFlood;
  writeFile(dir / "stop", "");

  for (int r = 0; r < n; ++r) {
    const auto status = waitBounded(pids[static_cast<std::size_t>(r)], 180);
    pids[static_cast<std::size_t>(r)] = -1;
    INFO("rank " << r << " stderr:\n" << readFile(dir / ("err" + std::to_string(r))).substr(0, 4000));
    REQUIRE(status.has_value());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 0);
  }
  const auto s = nlohmann::json::parse(readFile(dir / "summary0"));
  const auto& ts = s["transport_stats"];
  INFO("rank 0's transport stats: " << ts.dump());
  CHECK(s["history"].size() >= std::max<std::size_t>(epochsDuringFlood, 2));
  // No frame, whatever rank it names, failed a peer: no rank was lost.
  CHECK(s["lost"].empty());
  CHECK(s["test_accuracy"].get<double>() > 0.6);
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < kKinds; ++k) {
    const char* name = gossamer::toString(FrameFault(k));
    INFO("kind " << name << ": sent " << sent[k]);
    CHECK(ts["rejected_frames"][name].get<std::uint64_t>() >= sent[k]);
    total += sent[k];
  }
  if (fabric) CHECK(rawConnections == warmUp + 200);  // 100 a round
  CHECK(total >= static_cast<std::uint64_t>(2 * half));
  if (transport == "socket") CHECK(ts["refused_connections"].get<std::uint64_t>() >= total);
  // A few lines a second, not one per frame.
  const std::string err0 = readFile(dir / "err0");
  INFO("rank 0's stderr, " << err0.size() << " bytes:\n" << err0.substr(0, 3000));
  CHECK(err0.size() < 32 * 1024);
  if (!fabric) CHECK(err0.find("not logged") != std::string::npos);
  // Memory: the frames are dropped, not kept.
  INFO("RSS kB: rank 0 before any frame "
       << rssStart << ", after " << warmUp << " frames " << rssBefore << ", after the start-up flood "
       << rssAfterStartUp << ", in training " << rssTraining << ", after each training round "
       << nlohmann::json(rss).dump() << "; rank 1 (control) " << nlohmann::json(control).dump());
  CHECK(rssAfterStartUp - rssBefore < 1024);
  if (fabric) {
    CHECK(growth(2) < 1024);
  } else {
    CHECK(std::min(growth(2), growth(3)) < 1024);
    CHECK(growth(2) + growth(3) < 3072);  // kept frames: 4 MB or more
  }
}

}  // namespace

TEST_CASE(
    "10,000 hostile frames to a peer while its job starts and trains are counted, logged briefly, and "
    "training goes on: zmq",
    "[multiproc][security][hostile]") {
  hostileJob("zmq");
}
TEST_CASE(
    "10,000 hostile frames to a peer while its job starts and trains are counted, logged briefly, and "
    "training goes on: socket",
    "[multiproc][security][hostile]") {
  hostileJob("socket");
}
#ifdef GOSSAMER_HAVE_LIBFABRIC
TEST_CASE(
    "10,000 hostile frames to a peer while its job starts and trains are counted, logged briefly, and "
    "training goes on: libfabric tcp",
    "[multiproc][security][hostile]") {
  hostileJob("libfabric-tcp");
}
#endif
