// Native socket transport (see socket.hpp for why and how it differs from zmq).
//
// One non-blocking stream socket per pair of ranks carries frames
// [48-byte header (wire.hpp)][payload]. All connection state lives in Engine
// and is guarded by ProgressEngine::exclusive; whichever thread holds it reads
// and writes the sockets ("progress"). Reading: bytes come through a small
// per-connection staging buffer, so one recv(2) can pick up several small
// frames; once a header is known the payload goes straight into the posted
// receive buffer (Mailbox::claim) or, if none is posted yet, into an owned
// buffer handed to the Mailbox as an unexpected message. Long payloads are
// read directly from the socket into that destination. Writing: isend writes
// header and payload with one sendmsg(2) from the caller's memory; only what
// the kernel does not take at once is copied and queued, and flushed by later
// progress (also from a thread waiting for something else). A queue holds at
// most Options::sendQueueBytes: a send that would copy more first progresses
// until the peer took enough (awaitRoomLocked), so a slow peer costs bounded
// memory and is failed if it takes too little within the timeout.
//
// Failure: a peer that closes sends a bye after its last frame (in order on
// the same stream) and gets a bye-ack; end-of-stream or a reset without a bye
// means the peer died: receives waiting only on it fail with PeerFailure at
// once. A malformed frame fails that peer with the ProtocolError (peer, byte
// offset) and drops its connection. Every wait is bounded by its deadline.
//
// Restarts and joins: the listener stays open for the job's life. A process
// started once the job runs (in place of a failed rank, or a rank beyond the
// world size that joins: Options::maxWorldSize) connects to every rank
// published in the store and says hello (48 bytes: rank, incarnation, and a
// MAC of both under the job's key, kit/job_key.hpp). A peer takes it in when
// the proof verifies: a new incarnation replaces the rank's old connection
// (what was queued or being received on it fails with PeerFailure) and the
// rank is back (PeerLifecycle::revive); a second connection from the process
// already there (two that started at once connected to each other) is read
// like the first; should either of the two fail, the other is shut down
// with it, so that the peer learns at once. Hellos that do not verify are
// counted and dropped.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/detail/byte_io.hpp"
#include "gossamer/kit/job_key.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/peer_lifecycle.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/kit/single_copy.hpp"
#include "gossamer/log.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/transports/socket.hpp"

namespace gossamer::sock {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kHelloMagic = 0x4C485347u;  // "GSHL"
constexpr std::size_t kStageBytes = std::size_t{64} << 10;
constexpr std::size_t kDirectReadBytes = std::size_t{16} << 10;  // longer remainders skip the stage
// Data frames from this size on carry their payload checksum in a trailer
// (FrameKind::kDataTrailing), so each end checksums the bytes in cache-sized
// windows right next to the kernel's copy of them; smaller ones are in cache
// anyway and keep the checksum in the header.
constexpr std::size_t kTrailingMinBytes = std::size_t{64} << 10;
// Sends smaller than this are queued whatever the queue holds (a heartbeat
// or control message must not wait behind data): Options::sendQueueBytes.
constexpr std::size_t kHeldBackMinBytes = std::size_t{64} << 10;
// Window of a payload checksummed just before writing it, and the largest
// direct read checksummed right after it: well inside the L2 cache.
constexpr std::size_t kHotBytes = std::size_t{256} << 10;
constexpr double kAbortByeSeconds = 0.2;  // abort(): bound on delivering the bye, seconds
// How long an accepted connection may take to send its 48-byte hello
// (seconds), and how many may wait for theirs at once.
constexpr double kHelloSeconds = 5.0;
constexpr std::size_t kMaxIncoming = 64;
// A process that starts once the job runs: how long it tries to reach each
// published peer before it counts that one gone, seconds.
constexpr double kLateConnectSeconds = 5.0;

std::string errnoText(int err) { return std::strerror(err); }

int millisLeft(Clock::time_point deadline, int cap) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>((left + 999) / 1000, cap));
}

void setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw Error("cannot make a socket non-blocking: " + errnoText(errno));
}

// --- addresses -------------------------------------------------------------

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
};

SockAddr tcpAddress(const std::string& host, std::uint16_t port) {
  SockAddr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1)
    throw InvalidArgument("socket transport: '" + host + "' is not an IPv4 address");
  a.length = sizeof(sockaddr_in);
  a.family = AF_INET;
  return a;
}

// Abstract-namespace Unix address: no file to clean up, private to the host.
SockAddr unixAddress(const std::string& name) {
  SockAddr a;
  auto* un = reinterpret_cast<sockaddr_un*>(&a.storage);
  un->sun_family = AF_UNIX;
  GOSSAMER_ENFORCE(name.size() + 1 < sizeof(un->sun_path), "unix socket name too long: " << name);
  un->sun_path[0] = '\0';
  std::memcpy(un->sun_path + 1, name.data(), name.size());
  a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  a.family = AF_UNIX;
  return a;
}

// Published form: "tcp:HOST:PORT" or "ipc:NAME".
SockAddr parseAddress(const std::string& s, int peer) {
  if (s.rfind("tcp:", 0) == 0) {
    const auto colon = s.rfind(':');
    if (colon <= 4) throw ProtocolError(peer, 0, "bad socket address in the store: '" + s + "'");
    const std::string host = s.substr(4, colon - 4);
    const std::string port = s.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) > 65535)
      throw ProtocolError(peer, 0, "bad port in socket address '" + s + "'");
    return tcpAddress(host, static_cast<std::uint16_t>(std::stoi(port)));
  }
  if (s.rfind("ipc:", 0) == 0 && s.size() > 4) return unixAddress(s.substr(4));
  throw ProtocolError(peer, 0, "bad socket address in the store: '" + s + "'");
}

class FdGuard {
 public:
  explicit FdGuard(int fd = -1) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  FdGuard(FdGuard&& other) noexcept : fd_(other.release()) {}
  FdGuard& operator=(FdGuard&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = other.release();
    }
    return *this;
  }
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void tuneConnection(int fd, int family) {
  setNonBlocking(fd);
  const int one = 1;
  if (family == AF_INET) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (family == AF_UNIX) {  // Unix sockets do not autotune: give them room for pipelined pieces
    const int bytes = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
}

// Writes exactly n bytes on a non-blocking socket before `deadline`.
void writeAll(int fd, const void* data, std::size_t n, Clock::time_point deadline, int peer) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      if (::poll(&pfd, 1, millisLeft(deadline, 1000)) == 0 && Clock::now() >= deadline)
        throw TimeoutError("socket transport: timed out writing the hello to rank " + std::to_string(peer));
      continue;
    }
    throw PeerFailure(peer, "cannot write the hello: " + errnoText(errno));
  }
}

// --- hellos ----------------------------------------------------------------

// Every connection starts with the connecting process's hello, 48 bytes
// (little-endian): [magic u32 "GSHL"][rank u32][incarnation u64][proof: 32
// bytes, JobKey::proof(incarnation, rank)]. The incarnation tells a process
// started in place of a failed rank apart from the one it replaces; the proof
// shows that the process read the job's rendezvous.
constexpr std::size_t kHelloBytes = 16 + kHelloProofBytes;

std::array<std::byte, kHelloBytes> encodeHello(int rank, std::uint64_t incarnation, const JobKey& key) {
  std::array<std::byte, kHelloBytes> out{};
  detail::put(out, 0, kHelloMagic);
  detail::put(out, 4, static_cast<std::uint32_t>(rank));
  detail::put(out, 8, incarnation);
  const auto proof = key.proof(incarnation, rank);
  std::memcpy(out.data() + 16, proof.data(), proof.size());
  return out;
}

// A connection whose hello was read and verified.
struct Greeted {
  FdGuard fd;
  int rank = -1;
  std::uint64_t incarnation = 0;
};

// This rank's listening socket and the connections accepted from it that
// have not finished their hello. Connections wait for their hello side by
// side, so one that says nothing holds up no other: a connection whose first
// bytes are not a hello, that closes or stays silent for kHelloSeconds, that
// names this rank or one beyond the job's capacity, or whose proof does not
// verify under the job's key, is dropped and counted (refused(), rejected()),
// and the wait goes on as if it never came. Used by set-up and, once the job
// runs, by the engine (under ProgressEngine::exclusive), where it takes in
// restarted and joining ranks.
class HelloGate {
 public:
  HelloGate(const Options& o, int capacity, FdGuard listener, JobKey key)
      : rank_(o.rank),
        family_(o.protocol == "tcp" ? AF_INET : AF_UNIX),
        capacity_(capacity),
        listener_(std::move(listener)),
        key_(key) {}

  // Appends the listener and every connection waiting for its hello (POLLIN).
  // (The listener without POLLIN while accepting is paused: see acceptSome.)
  void pollSet(std::vector<pollfd>& pfds) const {
    pfds.push_back({listener_.get(), static_cast<short>(Clock::now() < acceptPausedUntil_ ? 0 : POLLIN), 0});
    for (const auto& in : incoming_) pfds.push_back({in.fd.get(), POLLIN, 0});
  }
  // Entries pollSet() appends.
  std::size_t pollCount() const { return 1 + incoming_.size(); }

  // Reads what the entries pollSet() appended (polled since, in that order)
  // report, accepts new connections and returns the hellos completed.
  std::vector<Greeted> service(std::span<const pollfd> polled) {
    std::vector<Greeted> done;
    for (std::size_t i = incoming_.size(); i-- > 0;)
      if (i + 1 < polled.size()) readHello(i, polled[i + 1].revents, done);
    if (!polled.empty() && (polled[0].revents & POLLIN)) acceptSome();
    return done;
  }

  // A verified hello the caller does not take (a rank already connected at
  // set-up): closes it and counts it as refused.
  void refuse(Greeted&& g, const std::string& why) {
    countRefused(FrameFault::kStranger, "hello from rank " + std::to_string(g.rank) + " " + why);
    g.fd = FdGuard();
  }

  void flushLog() { strays_.flush(); }
  std::uint64_t refused() const { return refused_.load(); }
  std::uint64_t rejected(std::size_t kind) const { return rejected_[kind].load(); }

 private:
  static constexpr auto kAcceptPause = std::chrono::milliseconds(100);

  // accept(2)'s errors that belong to the one connection it took.
  static bool connectionError(int err) {
    switch (err) {
      case ECONNABORTED:
      case EPROTO:
      case EPERM:
      case ENETDOWN:
      case ENOPROTOOPT:
      case EHOSTDOWN:
      case ENONET:
      case EHOSTUNREACH:
      case EOPNOTSUPP:
      case ENETUNREACH:
        return true;
      default:
        return false;
    }
  }

  struct Incoming {
    FdGuard fd;
    std::array<std::byte, kHelloBytes> hello{};
    std::size_t got = 0;  // bytes of the hello read so far
    Clock::time_point since;
  };

  void countRefused(FrameFault fault, const std::string& why) {
    ++refused_;
    ++rejected_[static_cast<std::size_t>(fault)];
    strays_([&] { return "socket rank " + std::to_string(rank_) + ": dropped a connection: " + why; });
  }
  void drop(std::size_t i, FrameFault fault, const std::string& why) {
    countRefused(fault, why);
    incoming_.erase(incoming_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void readHello(std::size_t i, short revents, std::vector<Greeted>& done) {
    auto& in = incoming_[i];
    if (revents == 0) {
      if (std::chrono::duration<double>(Clock::now() - in.since).count() > kHelloSeconds)
        drop(i, FrameFault::kTruncated, "no hello within " + std::to_string(kHelloSeconds) + " s");
      return;
    }
    const ssize_t r = ::recv(in.fd.get(), in.hello.data() + in.got, kHelloBytes - in.got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) {
      drop(i, FrameFault::kTruncated,
           r == 0 ? "closed after " + std::to_string(in.got) + " bytes, before its hello ended"
                  : "reading its hello: " + errnoText(errno));
      return;
    }
    in.got += static_cast<std::size_t>(r);
    const std::size_t m = std::min<std::size_t>(in.got, 4);
    std::array<std::byte, 4> magic{};
    detail::put(magic, 0, kHelloMagic);
    if (std::memcmp(in.hello.data(), magic.data(), m) != 0) {
      drop(i, FrameFault::kGarbage, "connection without the Gossamer hello (bad magic at byte offset 0)");
      return;
    }
    if (in.got < kHelloBytes) return;
    const std::uint64_t rank = detail::get<std::uint32_t>(in.hello, 4);
    const auto incarnation = detail::get<std::uint64_t>(in.hello, 8);
    if (rank >= static_cast<std::uint64_t>(capacity_) || rank == static_cast<std::uint64_t>(rank_)) {
      drop(i, FrameFault::kStranger,
           "hello from rank " + std::to_string(rank) + ", which is not a peer of rank " +
               std::to_string(rank_) + " in a job of at most " + std::to_string(capacity_) +
               " ranks (byte offset 4)");
      return;
    }
    std::array<std::byte, kHelloProofBytes> proof{};
    std::memcpy(proof.data(), in.hello.data() + 16, proof.size());
    if (!key_.verify(incarnation, static_cast<int>(rank), proof)) {
      drop(i, FrameFault::kStranger,
           "hello claiming rank " + std::to_string(rank) +
               " whose proof does not verify under the job's key (byte offset 16): the process did not "
               "read this job's rendezvous");
      return;
    }
    done.push_back(Greeted{FdGuard(in.fd.release()), static_cast<int>(rank), incarnation});
    incoming_.erase(incoming_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // Accepts what waits on the listener; when kMaxIncoming connections already
  // wait for their hello (a flood), the oldest is dropped. Out of
  // descriptors or memory, accepting pauses for kAcceptPause (the listener
  // stays readable meanwhile, and pollers would wake at once). A network
  // error pending on the new connection (accept(2): Linux reports it from
  // accept) or a firewall's EPERM is that connection's, not the listener's:
  // the next one is taken.
  void acceptSome() {
    if (Clock::now() < acceptPausedUntil_) return;
    for (int k = 0; k < 16; ++k) {
      FdGuard fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd.get() < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          strays_("socket rank " + std::to_string(rank_) + ": accept(): " + errnoText(err));
          acceptPausedUntil_ = Clock::now() + kAcceptPause;
          return;
        }
        if (connectionError(err)) continue;
        throw Error("socket transport: accept(): " + errnoText(err));
      }
      if (incoming_.size() >= kMaxIncoming)
        drop(0, FrameFault::kTruncated,
             "more than " + std::to_string(kMaxIncoming) + " connections without a hello");
      tuneConnection(fd.get(), family_);
      incoming_.push_back(Incoming{std::move(fd), {}, 0, Clock::now()});
    }
  }

  int rank_;
  int family_;
  int capacity_;
  FdGuard listener_;
  JobKey key_;
  std::vector<Incoming> incoming_;
  Clock::time_point acceptPausedUntil_{};  // out of descriptors: accept nothing until then
  std::atomic<std::uint64_t> refused_{0};
  std::array<std::atomic<std::uint64_t>, kFrameFaultCount> rejected_{};
  LogLimiter strays_{LogLevel::kWarning, 10, "stray connections"};
};

// What connection set-up hands the engine, by peer rank (global ranks
// 0..capacity-1).
struct Links {
  std::vector<int> fds;                     // -1: no connection (this rank, a rank not joined or not reached)
  std::vector<std::uint64_t> incarnations;  // of the process each connection reached
  std::vector<std::string> why;             // for a rank without a connection: why (empty: this rank)
  std::vector<bool> pullTo;                 // single copy towards this peer (it can read our memory)
  std::vector<std::uint32_t> pids;
  std::uint64_t incarnation = 0;    // this process's
  std::shared_ptr<HelloGate> gate;  // the listener, from now on the engine's
  std::vector<Greeted> later;       // hellos of processes that started once the job ran
};

// --- the engine ------------------------------------------------------------

struct TxItem {
  HeaderBytes header;
  std::span<const std::byte> data;  // into `owned`, or the caller's memory (borrowed)
  std::vector<std::byte> owned;
  std::size_t offset = 0;                     // bytes of header + data (+ trailer) already written
  std::shared_ptr<detail::RequestState> req;  // borrowed: completes once written
  // kDataTrailing: data[0, summed) is in `crc`; the trailer is filled in once
  // summed == data.size(). Only checksummed bytes are written.
  bool trailing = false;
  std::size_t summed = 0;
  Crc32c crc;
  std::array<std::byte, kFrameTrailerBytes> trailer{};
  std::size_t held = 0;  // of its bytes not yet written, those copied (its part of queuedBytes)

  std::size_t total() const { return kFrameHeaderBytes + data.size() + (trailing ? kFrameTrailerBytes : 0); }

  // The whole payload's CRC-32C is `v` (the caller's, or once summed).
  void knowSum(std::uint32_t v) {
    summed = data.size();
    for (std::size_t b = 0; b < kFrameTrailerBytes; ++b) trailer[b] = std::byte((v >> (8 * b)) & 0xFF);
  }

  // Keeps a copy of the data not yet written and forgets the caller's memory.
  void keepRest() {
    const std::size_t done =
        offset > kFrameHeaderBytes ? std::min(offset - kFrameHeaderBytes, data.size()) : 0;
    std::vector<std::byte> rest(data.begin() + static_cast<std::ptrdiff_t>(done), data.end());
    owned = std::move(rest);
    data = std::span<const std::byte>(owned.data(), owned.size());
    offset -= done;
    summed = summed > done ? summed - done : 0;
  }
};

// Reusable buffers for messages that arrive before their receive is posted:
// large ones would otherwise be allocated (and page-faulted) per message.
class PayloadPool : public std::enable_shared_from_this<PayloadPool> {
 public:
  static constexpr std::size_t kMinPooledBytes = std::size_t{64} << 10;
  static constexpr std::size_t kMaxKept = 8;

  std::shared_ptr<std::byte> get(std::size_t n) {
    if (n < kMinPooledBytes)
      return std::shared_ptr<std::byte>(new std::byte[std::max<std::size_t>(n, 1)],
                                        std::default_delete<std::byte[]>());
    std::unique_ptr<std::byte[]> buf;
    std::size_t cap = n;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second >= n && it->second <= 2 * n) {
          buf = std::move(it->first);
          cap = it->second;
          free_.erase(it);
          break;
        }
      }
    }
    if (!buf) buf.reset(new std::byte[n]);
    auto self = shared_from_this();
    return std::shared_ptr<std::byte>(buf.release(), [self, cap](std::byte* p) { self->put(p, cap); });
  }

 private:
  void put(std::byte* p, std::size_t cap) {
    std::unique_ptr<std::byte[]> buf(p);
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.size() < kMaxKept) free_.emplace_back(std::move(buf), cap);
  }
  std::mutex mu_;  // a leaf lock
  std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> free_;
};

struct Conn {
  int peer = -1;
  int fd = -1;
  std::uint64_t incarnation = 0;  // of the peer's process on this connection
  bool gone = false;              // connection closed (failed, or after a bye)
  std::exception_ptr failure;     // why the connection is gone, if it failed
  std::uint32_t pid = 0;          // the peer's process id (ipc)
  // Receive side.
  std::vector<std::byte> stage = std::vector<std::byte>(kStageBytes);
  std::size_t stageBegin = 0, stageEnd = 0;
  bool inPayload = false;
  HeaderBytes header{};
  FrameHeader frame;
  std::span<std::byte> dst;  // where the payload goes (empty when discarding)
  std::size_t got = 0;
  std::shared_ptr<detail::RequestState> claimed;  // posted receive being filled in place
  std::shared_ptr<std::byte> owned;               // or an unexpected message's own buffer
  bool discard = false;
  StreamFrameVerifier verifier;                         // checksums the payload as it lands
  std::array<std::byte, kFrameTrailerBytes> trailer{};  // kDataTrailing: read after the payload
  // Send side.
  std::deque<TxItem> txq;
  std::size_t queuedBytes = 0;  // copied bytes in txq not yet written (Options::sendQueueBytes)
  // When the socket last took bytes, or txq last became non-empty: a peer
  // that takes none of what waits for timeoutSeconds is failed (stalled).
  Clock::time_point writtenAt{};
};

class Engine final : public detail::ProgressEngine, public std::enable_shared_from_this<Engine> {
 public:
  Engine(const Options& o, Links links)
      : opt_(o),
        capacity_(static_cast<int>(links.fds.size())),
        box_(capacity_),
        life_("socket", o.rank, capacity_, box_),
        gate_(std::move(links.gate)),
        replaced_(static_cast<std::size_t>(capacity_)) {
    conns_.resize(static_cast<std::size_t>(capacity_));
    pullTo_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(capacity_));
    for (int p = 0; p < capacity_; ++p) {
      auto& c = conns_[static_cast<std::size_t>(p)];
      c.peer = p;
      c.fd = links.fds[static_cast<std::size_t>(p)];
      c.incarnation = links.incarnations[static_cast<std::size_t>(p)];
      pullTo_[static_cast<std::size_t>(p)] = links.pullTo[static_cast<std::size_t>(p)];
      c.pid = links.pids[static_cast<std::size_t>(p)];
      c.gone = c.fd < 0;
      if (c.fd < 0) c.stage.clear();
      if (c.fd < 0 && p != o.rank) (void)life_.declareFailed(p, links.why[static_cast<std::size_t>(p)]);
    }
    try {
      wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (wakeFd_ < 0) throw Error("socket transport: eventfd: " + errnoText(errno));
      spin_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.spinSeconds));
      lastActivity_ = Clock::now();
      for (auto& g : links.later) admitLocked(std::move(g));  // (no other thread yet)
      background_ =
          std::thread([this] { survivePass("socket background progress", [this] { backgroundLoop(); }); });
    } catch (...) {
      closeDescriptors();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~Engine() override {
    stopBackground();
    closeDescriptors();
  }

  // Every descriptor the engine owns: the connections, the retired ones and
  // the wake-up eventfd.
  void closeDescriptors() noexcept {
    for (auto& c : conns_)
      if (c.fd >= 0) ::close(std::exchange(c.fd, -1));
    for (auto& c : extras_)
      if (c.fd >= 0) ::close(std::exchange(c.fd, -1));
    for (const auto& r : retired_) ::close(r.fd);
    retired_.clear();
    if (wakeFd_ >= 0) ::close(std::exchange(wakeFd_, -1));
  }

  /// Global ranks this transport can address: worldSize and the ranks that may join.
  int capacity() const noexcept { return capacity_; }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Options& options() const { return opt_; }

  // Smallest borrowed send that uses a caller's checksum: a trailing frame
  // does, a single-copy pull (ipc, no payload CRC by default) does not, so
  // with pulls towards any peer no size is promised.
  std::size_t checksumReuseMinBytes() const noexcept {
    return pullsToAnyPeer() ? std::numeric_limits<std::size_t>::max() : kTrailingMinBytes;
  }

  /// Whether single-copy pulls go to at least one peer (ipc, probe passed).
  bool pullsToAnyPeer() const noexcept {
    for (int p = 0; p < capacity_; ++p)
      if (pullTo_[static_cast<std::size_t>(p)].load(std::memory_order_relaxed)) return true;
    return false;
  }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype, bool borrowed = false,
                std::optional<std::uint32_t> checksum = {}) {
    life_.checkSend(dst);
    if (borrowed && pullTo_[static_cast<std::size_t>(dst)].load(std::memory_order_relaxed) &&
        data.size() >= opt_.singleCopyMinBytes) {
      // Size and dtype checked (InvalidArgument) as for any data frame.
      (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag,
                              data.size(), 0u);
      if (auto pulled = sendPull(dst, tag, data)) return std::move(*pulled);
    }
    const bool trailing = dst != opt_.rank && data.size() >= kTrailingMinBytes;
    const auto header = encodeFrameHeader(trailing ? FrameKind::kDataTrailing : FrameKind::kData, dtype,
                                          static_cast<std::uint32_t>(opt_.rank), tag, data);
    if (dst == opt_.rank) {
      auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
      box_.deliver(dst, tag, InboundPayload{owned, std::span<const std::byte>(owned->data(), owned->size())});
      if (sleepers_ > 0) wake();  // another thread may sleep waiting for this
    } else {
      // Declared before the lock so that it outlives it: the engine (and its
      // mutex) stay alive should another thread drop the transport meanwhile.
      std::shared_ptr<Engine> self;
      std::lock_guard<std::mutex> lk(exclusive);
      auto& c = conns_[static_cast<std::size_t>(dst)];
      if (!borrowed && data.size() >= kHeldBackMinBytes && !c.gone && c.queuedBytes >= opt_.sendQueueBytes) {
        self = shared_from_this();
        awaitRoomLocked(c);
        life_.checkSend(dst);  // closed meanwhile: as for a send that comes after the close
      }
      if (c.gone) {
        if (c.failure) std::rethrow_exception(c.failure);
        throw PeerFailure(dst, life_.leaving(dst) ? "cannot send: peer closed its transport"
                                                  : "cannot send: this transport is closing");
      }
      // Its bye was read (the connection may still be open): it reads
      // nothing more, so the send is refused rather than dropped.
      if (life_.leaving(dst)) life_.throwGone(dst, "cannot send: peer closed its transport");
      auto req = sendLocked(c, header, data, borrowed, trailing, checksum);
      lastActivity_ = Clock::now();
      life_.countSent(data.size());
      if (req) {
        req->what = "send to rank " + std::to_string(dst) + " " + toString(tag);
        return Request(std::move(req));
      }
      return Request(detail::completedRequest(dst, data.size()));
    }
    life_.countSent(data.size());
    return Request(detail::completedRequest(dst, data.size()));
  }

  // Single copy (ipc): sends a pull frame naming `data`; the request completes
  // when the peer's pull-done for its ticket arrives. Nullopt when single
  // copy to dst went off meanwhile (a new process took its place): the
  // caller sends a copy instead.
  std::optional<Request> sendPull(int dst, const Tag& tag, std::span<const std::byte> data) {
    PullDescriptor d;
    d.address = reinterpret_cast<std::uintptr_t>(data.data());
    d.bytes = data.size();
    d.crc = opt_.checksumPulls ? crc32c(data) : 0;
    d.pid = static_cast<std::uint32_t>(::getpid());
    std::lock_guard<std::mutex> lk(exclusive);
    auto& c = conns_[static_cast<std::size_t>(dst)];
    if (c.gone) {
      if (c.failure) std::rethrow_exception(c.failure);
      throw PeerFailure(dst, "cannot send: peer closed its transport");
    }
    if (life_.leaving(dst)) life_.throwGone(dst, "cannot send: peer closed its transport");
    if (!pullTo_[static_cast<std::size_t>(dst)].load(std::memory_order_relaxed)) return std::nullopt;
    auto req = std::make_shared<detail::RequestState>();
    req->engine = shared_from_this();
    req->what = "send to rank " + std::to_string(dst) + " " + toString(tag) + " (waiting for its pull)";
    d.ticket = pulls_.add(dst, req, data.size());
    const auto wire = single_copy::encode(d);
    const auto header =
        encodeFrameHeader(FrameKind::kPull, DType::kBytes, static_cast<std::uint32_t>(opt_.rank), tag,
                          std::span<const std::byte>(wire));
    sendLocked(c, header, std::span<const std::byte>(wire));
    lastActivity_ = Clock::now();
    life_.countSent(data.size());
    return Request(std::move(req));
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) {
    life_.checkOpen("irecv");
    return box_.post(sources, tag, buffer, shared_from_this());
  }

  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) { return box_.discard(stale); }

  /// Transport::peerFailure: the lifecycle's verdict if `rank` failed.
  std::exception_ptr peerFailure(int rank) const { return life_.failedVerdict(rank); }

  void waitUntil(detail::RequestState& state, Clock::time_point deadline) override {
    ++activeWaiters_;
    struct Leave {
      Engine& e;
      ~Leave() {
        e.lastActivity_ = Clock::now();
        --e.activeWaiters_;
      }
    } leave{*this};
    auto spinEnd = Clock::now() + spin_;
    std::vector<pollfd> pfds;
    std::size_t gateFrom = 0;
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(exclusive);
        if (stopped_) return;
        progressLocked();
        if (!state.pending()) return;
        const auto now = Clock::now();
        if (now >= deadline) return;
        if (now < spinEnd) {
          std::this_thread::yield();  // let the peers (maybe on this core) run
          continue;
        }
        gateFrom = pollSetLocked(pfds);
        ++sleepers_;  // before unlocking: a sender queueing bytes now must wake us
      }
      sleepOnSockets(pfds, gateFrom, deadline);
      spinEnd = Clock::now() + spin_;
    }
  }

  void poke() override {
    std::unique_lock<std::mutex> lk(exclusive, std::try_to_lock);
    if (lk.owns_lock() && !stopped_) progressLocked();
  }

  void close(bool abort) {
    if (!life_.beginClose()) return;
    // abort(): what is queued is dropped, but the bye saying "stopped after an
    // error" still goes out (briefly bounded), so peers report the cause
    // rather than a lost connection.
    const auto deadline =
        deadlineAfter<Clock>(abort ? std::min(opt_.lingerSeconds, kAbortByeSeconds) : opt_.lingerSeconds);
    {
      std::lock_guard<std::mutex> lk(exclusive);
      for (auto& c : conns_) {
        if (c.gone || life_.leaving(c.peer)) continue;
        if (abort) dropUnstarted(c);
        sendControlLocked(c, FrameKind::kBye, PeerLifecycle::byeSegment(abort));
      }
    }
    // Deliver what is queued and collect the acknowledgements, within linger.
    std::vector<pollfd> pfds;
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(exclusive);
        progressLocked();
        const auto done = [&](const Conn& c) { return c.gone || (life_.settled(c.peer) && c.txq.empty()); };
        const bool settled = std::all_of(conns_.begin(), conns_.end(), done) &&
                             std::all_of(extras_.begin(), extras_.end(), done);
        if (settled || Clock::now() >= deadline) break;
        pollSetLocked(pfds);
      }
      ::poll(pfds.data(), pfds.size(), millisLeft(deadline, 100));
    }
    {
      std::lock_guard<std::mutex> lk(exclusive);
      stopped_ = true;
      const auto stop = [](Conn& c) {
        if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);  // fds close in the destructor: pollers may hold them
        if (c.claimed) c.claimed->fail(std::make_exception_ptr(Cancelled("transport closed")));
        c.claimed.reset();
        c.owned.reset();
        dropQueue(c, std::make_exception_ptr(Cancelled("transport closed before the send was written")));
        c.gone = true;
      };
      for (auto& c : conns_) stop(c);
      for (auto& c : extras_) stop(c);
      failPulls(-1,
                std::make_exception_ptr(Cancelled("transport closed before the peer pulled the message")));
    }
    stopBackground();
    box_.close();
  }

  TransportStats stats() const {
    TransportStats s = life_.stats();
    s.refusedConnections = gate_->refused();
    for (std::size_t i = 0; i < kFrameFaultCount; ++i)
      s.rejectedFrames[i] = rejected_[i].load() + gate_->rejected(i);
    return s;
  }

 private:
  // Moves messages while no application thread does: while one is waiting or
  // was active within the last millisecond, this thread only ticks (1 ms);
  // once the application is busy elsewhere (computing), it sleeps on the
  // sockets and progresses them, so sends that did not fit the kernel's
  // buffers drain and incoming bytes are taken off the wire. An application
  // that only sends (active, but never waiting) still gets a pass every
  // kProgressGap: incoming bytes are read, and a peer that stopped reading is
  // failed at its timeout, as when it waits.
  void backgroundLoop() {
    constexpr auto kProgressGap = std::chrono::milliseconds(5);
    std::vector<pollfd> pfds;
    std::size_t gateFrom = 0;
    for (;;) {
      bool idle;
      {
        std::lock_guard<std::mutex> lk(exclusive);
        if (stopped_) return;
        const auto now = Clock::now();
        idle = activeWaiters_ == 0 && (now - lastActivity_.load() > std::chrono::milliseconds(1) ||
                                       now - lastProgress_ > kProgressGap);
        if (idle) {
          try {
            progressLocked();
            gateFrom = pollSetLocked(pfds);
          } catch (const std::exception& e) {  // never out of this thread (std::terminate)
            pfds.clear();                      // (this pass only sleeps, as long as an idle one)
            const auto n = ++backgroundErrors_;
            if (n <= 3 || (n & (n - 1)) == 0)  // the 1st, 2nd, 3rd, 4th, 8th, ...
              GOSSAMER_LOG(kError, "socket rank " << opt_.rank << ": background progress (" << n
                                                  << " errors so far): " << e.what());
          }
          if (!pfds.empty())
            ++sleepers_;  // before unlocking: a send queued meanwhile wakes it to add POLLOUT
        }
      }
      if (!idle || pfds.empty()) {
        // Ticking: wakeFd_ is left to the waiters (read here, a wake meant
        // for one about to sleep would be lost to it); stopBackground's
        // wake is seen within the tick.
        std::this_thread::sleep_for(std::chrono::milliseconds(idle ? 50 : 1));
        continue;
      }
      ::poll(pfds.data(), pfds.size(), 50);
      --sleepers_;
      noteGate(pfds, gateFrom);
      if (pfds.back().revents & POLLIN) {
        std::uint64_t v;
        (void)!::read(wakeFd_, &v, sizeof v);
      }
    }
  }

  void stopBackground() {
    {
      std::lock_guard<std::mutex> lk(exclusive);
      stopped_ = true;
    }
    wake();
    if (!background_.joinable()) return;
    if (background_.get_id() == std::this_thread::get_id())
      background_.detach();  // the last owner let go on this thread: it returns right after
    else
      background_.join();
  }

  void wake() {
    const std::uint64_t one = 1;
    (void)!::write(wakeFd_, &one, sizeof one);
  }

  // Caller holds exclusive. The poll set for sleeping: every live connection
  // (POLLOUT too where bytes wait), the hello gate's sockets, then wakeFd_ last.
  std::size_t pollSetLocked(std::vector<pollfd>& pfds) const {
    pfds.clear();
    const auto add = [&](const Conn& c) {
      if (!c.gone) pfds.push_back({c.fd, static_cast<short>(POLLIN | (c.txq.empty() ? 0 : POLLOUT)), 0});
    };
    for (const auto& c : conns_) add(c);
    for (const auto& c : extras_) add(c);
    const std::size_t gateFrom = pfds.size();
    if (!life_.closed()) gate_->pollSet(pfds);
    pfds.push_back({wakeFd_, POLLIN, 0});
    return gateFrom;
  }

  // After sleeping on pollSetLocked's set: if the gate's sockets have
  // something, the next progress pass serves them.
  void noteGate(const std::vector<pollfd>& pfds, std::size_t from) {
    for (std::size_t i = from; i + 1 < pfds.size(); ++i)
      if (pfds[i].revents != 0) {
        gateDue_ = true;
        return;
      }
  }

  // --- sending ---

  // Writes what the socket takes now and queues the rest: copied, or with
  // `borrowed` referenced, in which case the returned request completes once
  // it is written (null: nothing is left to write).
  std::shared_ptr<detail::RequestState> sendLocked(Conn& c, const HeaderBytes& header,
                                                   std::span<const std::byte> data, bool borrowed = false,
                                                   bool trailing = false,
                                                   std::optional<std::uint32_t> checksum = {}) {
    TxItem item;
    item.header = header;
    item.data = data;
    item.trailing = trailing;
    if (trailing && checksum) item.knowSum(*checksum);
    // What waits is written first (a sender that never waits keeps it moving).
    if (!c.txq.empty()) flushLocked(c);
    if (c.txq.empty() && !c.gone) writeSome(c, item);
    if (c.gone)
      std::rethrow_exception(
          c.failure ? c.failure
                    : std::make_exception_ptr(PeerFailure(c.peer, "the connection broke while sending")));
    if (item.offset == item.total()) return nullptr;
    if (borrowed) {
      item.req = std::make_shared<detail::RequestState>();
      item.req->engine = shared_from_this();
      auto req = item.req;
      enqueue(c, std::move(item));
      return req;
    }
    item.keepRest();
    enqueue(c, std::move(item));
    return nullptr;
  }

  void enqueue(Conn& c, TxItem&& item) {
    if (c.txq.empty()) c.writtenAt = Clock::now();
    item.held = item.req ? 0 : item.total() - item.offset;  // (a borrowed frame is the caller's memory)
    c.queuedBytes += item.held;
    c.txq.push_back(std::move(item));
    if (sleepers_ > 0) wake();  // a sleeping waiter must add POLLOUT for this socket
  }

  // Removes *it from c's queue; returns the next one.
  static std::deque<TxItem>::iterator dequeue(Conn& c, std::deque<TxItem>::iterator it) {
    c.queuedBytes -= it->held;
    return c.txq.erase(it);
  }

  // A copy would go on a queue that holds Options::sendQueueBytes or more:
  // moves messages until the peer took enough that it holds less. A peer
  // that takes nothing for timeoutSeconds is failed by failStalledLocked (in
  // every pass); one that reads, but so slowly that there is no room within
  // kRoomTimeouts timeouts, is failed here. The caller then finds c gone. A
  // peer replaced by a new process meanwhile fails the send (its queue was
  // dropped; this message was for the old one).
  void awaitRoomLocked(Conn& c) {
    constexpr int kRoomTimeouts = 10;
    const std::uint64_t incarnation = c.incarnation;
    const std::size_t before = c.queuedBytes;
    const auto room = [&] {
      return c.gone || c.incarnation != incarnation || life_.closed() || c.queuedBytes < opt_.sendQueueBytes;
    };
    if (pumpLocked(room, deadlineAfter<Clock>(kRoomTimeouts * opt_.timeoutSeconds)) || stopped_) {
      if (!c.gone && c.incarnation != incarnation)
        throw PeerFailure(c.peer, "was replaced by a new process while a send to it waited for room");
      return;
    }
    std::ostringstream why;
    why << "took too little of the " << before << " bytes queued for it within " << kRoomTimeouts << " x "
        << opt_.timeoutSeconds << " s for a send to find room (" << c.queuedBytes
        << " bytes still queued; a send waits while " << opt_.sendQueueBytes
        << " are: a peer that reads slower than it is sent to?)";
    GOSSAMER_LOG(kWarning, "socket rank " << opt_.rank << ": rank " << c.peer << " " << why.str());
    failPeer(c, std::make_exception_ptr(PeerFailure(c.peer, why.str())));
  }

  void sendControlLocked(Conn& c, FrameKind kind, std::uint32_t detailCode = 0, std::uint64_t step = 0) {
    const auto h = encodeFrameHeader(kind, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                     Tag{Op::kControl, detailCode, step}, {});
    try {
      sendLocked(c, h, {});
    } catch (const PeerFailure&) {
      // Control frames are a courtesy: a peer that is gone needs no goodbye.
    }
  }

  // Writes what the socket takes now of item (header, data, and for a
  // trailing frame the trailer), advancing item.offset; a trailing frame's
  // data is checksummed a window ahead of what is written. Marks the
  // connection lost on a hard error.
  void writeSome(Conn& c, TxItem& item) {
    const std::size_t n = item.data.size(), total = item.total(), from = item.offset;
    while (item.offset < total) {
      const std::size_t dataOff = item.offset > kFrameHeaderBytes ? item.offset - kFrameHeaderBytes : 0;
      if (item.trailing && item.summed < n && item.summed < dataOff + kHotBytes) {
        const std::size_t upto = std::min(n, dataOff + kHotBytes);
        item.crc.update(item.data.subspan(item.summed, upto - item.summed));
        item.summed = upto;
        if (upto == n) item.knowSum(item.crc.value());
      }
      iovec iov[3];
      int k = 0;
      if (item.offset < kFrameHeaderBytes)
        iov[k++] = {const_cast<std::byte*>(item.header.data() + item.offset),
                    kFrameHeaderBytes - item.offset};
      const std::size_t ready = item.trailing ? item.summed : n;
      if (dataOff < ready) iov[k++] = {const_cast<std::byte*>(item.data.data() + dataOff), ready - dataOff};
      if (item.trailing && item.summed == n) {
        const std::size_t t = item.offset > kFrameHeaderBytes + n ? item.offset - kFrameHeaderBytes - n : 0;
        iov[k++] = {item.trailer.data() + t, kFrameTrailerBytes - t};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<std::size_t>(k);
      const ssize_t r = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        item.offset += static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      lost(c, errno);  // (c's queue is dropped: item may be gone)
      return;
    }
    // Progress on a queue (a first write, from sendLocked, has none yet:
    // pushing its rest starts the clock).
    if (item.offset > from && !c.txq.empty()) c.writtenAt = Clock::now();
  }

  void flushLocked(Conn& c) {
    while (!c.gone && !c.txq.empty()) {
      auto& item = c.txq.front();
      const std::size_t from = item.offset;
      writeSome(c, item);
      if (c.gone) return;  // (the queue was dropped with item)
      const std::size_t took = std::min(item.held, item.offset - from);
      item.held -= took;
      c.queuedBytes -= took;
      if (item.offset < item.total()) return;
      if (item.req) item.req->complete(c.peer, item.data.size());
      dequeue(c, c.txq.begin());
    }
  }

  // Drops the queued frames of which nothing was written yet (a partly
  // written one must finish: the stream cannot skip it).
  static void dropUnstarted(Conn& c) {
    const auto cancelled =
        std::make_exception_ptr(Cancelled("transport aborted before the send was written"));
    for (auto it = c.txq.begin(); it != c.txq.end();) {
      if (it->offset == 0) {
        if (it->req) it->req->fail(cancelled);
        it = dequeue(c, it);
      } else {
        ++it;
      }
    }
  }

  // Fails the borrowed sends still queued on c and empties its queue.
  static void dropQueue(Conn& c, const std::exception_ptr& error) {
    for (auto& item : c.txq)
      if (item.req) item.req->fail(error);
    c.txq.clear();
    c.queuedBytes = 0;
  }

  // A borrowed send is cancelled: forget the caller's buffer. A frame not
  // started is dropped; one partly written is finished from a copy (the
  // stream cannot skip the rest of a frame). A receive being filled in place
  // is cancelled: what arrived so far moves to a buffer of our own, where the
  // rest follows, and the message goes to the next receive (nothing is lost;
  // the caller's buffer is not touched once cancel() returns).
  //
  // Request::cancel is noexcept: nothing here throws. What cannot be done
  // without memory (the copy of a partly written frame's rest, the wait for
  // a lent buffer's pull) shuts the connection down instead, so that no
  // byte of the caller's buffer is read once this returns, and the next
  // progress pass fails that peer (PeerFailure) as if it hung up.
  void cancelLocked(detail::RequestState& state) override {
    if (Conn* c = claimedBy(state)) {
      c->claimed.reset();
      const std::size_t n = c->frame.payloadBytes;
      try {
        auto owned = pool_->get(n);
        if (c->got > 0) std::memcpy(owned.get(), c->dst.data(), c->got);
        c->owned = std::move(owned);
        c->dst = std::span<std::byte>(c->owned.get(), n);
      } catch (const std::exception&) {  // out of memory: the message is dropped
        c->discard = true;
        c->dst = {};
      }
      return;
    }
    if (const auto ticket = pulls_.ticketOf(state)) {
      withdrawPullLocked(*ticket);
      return;
    }
    for (auto& c : conns_) {
      for (auto it = c.txq.begin(); it != c.txq.end(); ++it) {
        if (it->req.get() != &state) continue;
        if (it->offset == 0) {
          dequeue(c, it);
          return;
        }
        try {
          it->keepRest();
          it->req.reset();
          it->held = it->total() - it->offset;  // ours now
          c.queuedBytes += it->held;
        } catch (const std::exception&) {
          // Out of memory: the rest cannot be copied, and the stream cannot
          // skip it. The frame is dropped half written and the connection
          // shut down (the peer reads a cut frame and fails this rank).
          ::shutdown(c.fd, SHUT_RDWR);
          dequeue(c, it);
        }
        return;
      }
    }
  }

  // The connection (a peer's first or second) whose receive in place is
  // `state`'s, or null.
  Conn* claimedBy(const detail::RequestState& state) {
    for (auto& c : conns_)
      if (c.claimed.get() == &state) return &c;
    for (auto& c : extras_)
      if (c.claimed.get() == &state) return &c;
    return nullptr;
  }

  // A lent send is cancelled: the peer may be reading the buffer right now;
  // let it finish (bounded by the timeout), then forget the loan. A peer
  // that did not pull it is failed (cancelLocked: throws nothing).
  void withdrawPullLocked(std::uint64_t ticket) {
    try {
      pumpLocked([&] { return pulls_.destinationOf(ticket) < 0; }, deadlineAfter<Clock>(opt_.timeoutSeconds));
    } catch (const std::exception&) {  // out of memory or a failed pass: the peer is failed below
    }
    const int owed = pulls_.destinationOf(ticket);
    pulls_.forget(ticket);
    // Unanswered (a stopped peer): it may still read the buffer once it
    // runs again, after the caller reused it. Its connection is shut down
    // before cancel() returns, and a receiver checks its connection after
    // every pull (pullLocked): a read that may overlap the reuse is thrown
    // away there, never delivered.
    if (owed < 0 || conns_[static_cast<std::size_t>(owed)].gone) return;
    Conn& c = conns_[static_cast<std::size_t>(owed)];
    try {
      GOSSAMER_LOG(kWarning, "socket rank "
                                 << opt_.rank << ": rank " << owed
                                 << " did not pull a cancelled send within the timeout; it is failed");
      failPeer(c, std::make_exception_ptr(PeerFailure(owed, "did not pull a message lent to it within " +
                                                                std::to_string(opt_.timeoutSeconds) +
                                                                " s, and its sender withdrew it")));
    } catch (const std::exception&) {
      ::shutdown(c.fd, SHUT_RDWR);  // out of memory: the next pass fails it
    }
  }

  // Caller holds exclusive, locked by a frame further out that unlocks it at
  // its end. Moves messages until done() holds, `deadline` passes or the
  // transport stops; returns done(). It sleeps in poll(2) without the lock,
  // as waitUntil does, so that other threads send, receive and wait
  // meanwhile (a wait here may last the timeout): what the caller looked at
  // before may have changed on return (a Conn of conns_ stays where it is,
  // but may have failed, or been taken over by a restarted peer's process).
  template <class Done>
  bool pumpLocked(Done&& done, Clock::time_point deadline) {
    ++activeWaiters_;
    struct Leave {
      Engine& e;
      ~Leave() { --e.activeWaiters_; }
    } leave{*this};
    std::vector<pollfd> pfds;
    for (;;) {
      progressLocked();
      if (done()) return true;
      if (stopped_ || Clock::now() >= deadline) return false;
      const std::size_t gateFrom = pollSetLocked(pfds);
      ++sleepers_;  // before unlocking: a sender queueing bytes now must wake us
      exclusive.unlock();
      sleepOnSockets(pfds, gateFrom, deadline);
      exclusive.lock();
    }
  }

  // Without the lock, after counting itself in sleepers_ under it: sleeps on
  // pollSetLocked's set until a socket is ready, a sender queued bytes
  // (wakeFd_), `deadline` or 100 ms, whichever comes first.
  void sleepOnSockets(std::vector<pollfd>& pfds, std::size_t gateFrom, Clock::time_point deadline) {
    ::poll(pfds.data(), pfds.size(), millisLeft(deadline, 100));
    --sleepers_;
    noteGate(pfds, gateFrom);
    if (pfds.back().revents & POLLIN) {
      std::uint64_t v;
      (void)!::read(wakeFd_, &v, sizeof v);
    }
  }

  // --- receiving ---

  // Caller holds exclusive. One non-blocking pass: poll(0), then read and write
  // whatever is ready.
  void progressLocked() {
    pollScratch_.clear();
    pollConn_.clear();
    const auto add = [&](Conn& c) {
      if (c.gone) return;
      pollScratch_.push_back({c.fd, static_cast<short>(POLLIN | (c.txq.empty() ? 0 : POLLOUT)), 0});
      pollConn_.push_back(&c);
    };
    for (auto& c : conns_) add(c);
    for (auto& c : extras_) add(c);
    if (!pollScratch_.empty() && ::poll(pollScratch_.data(), pollScratch_.size(), 0) > 0) {
      for (std::size_t i = 0; i < pollScratch_.size(); ++i) {
        const short ev = pollScratch_[i].revents;
        Conn& c = *pollConn_[i];
        if (ev & POLLOUT) flushLocked(c);
        if (ev & (POLLIN | POLLHUP | POLLERR)) readLocked(c);
      }
    }
    failStalledLocked();
    gateLocked();
    if (!retired_.empty()) closeRetiredLocked();
    lastProgress_ = Clock::now();
  }

  // A peer whose socket took none of the bytes queued for it for
  // timeoutSeconds (a stopped or hung process, a link that is down) is
  // failed: its queue would otherwise grow with every send, and the peer
  // never count as failed while its connection stays open.
  void failStalledLocked() {
    const auto now = Clock::now();
    const auto limit = std::chrono::duration<double>(opt_.timeoutSeconds);
    for (auto& c : conns_) {
      if (c.gone || c.txq.empty() || now - c.writtenAt <= limit) continue;
      flushLocked(c);  // once more: this pass's poll may not have offered it (EINTR), or we were stopped
      if (c.gone || c.txq.empty() || Clock::now() - c.writtenAt <= limit) continue;
      std::size_t queued = 0;
      for (const auto& item : c.txq) queued += item.total() - item.offset;
      std::ostringstream why;
      why << "took none of the " << queued << " bytes queued for it in " << opt_.timeoutSeconds
          << " s (a stopped or hung process?)";
      GOSSAMER_LOG(kWarning, "socket rank " << opt_.rank << ": rank " << c.peer << " " << why.str());
      failPeer(c, std::make_exception_ptr(PeerFailure(c.peer, why.str())));
    }
  }

  // Every connection: one per peer, then the extra ones.
  std::vector<Conn*> allConnsLocked() {
    std::vector<Conn*> all;
    for (auto& c : conns_) all.push_back(&c);
    for (auto& c : extras_) all.push_back(&c);
    return all;
  }

  // --- restarts and joins ---

  // Serves the hello gate (the listener and the connections accepted from
  // it) when a sleeper saw it ready, while connections wait for their hello,
  // and every 32nd pass otherwise: a new process waits a few progress passes
  // at most, and the hot path pays one poll(2) of one socket in 32.
  void gateLocked() {
    if (life_.closed()) return;  // (closing: no one is taken in any more)
    // (A plain load first: the exchange, a locked instruction, only when a sleeper set it.)
    const bool due = gateDue_.load(std::memory_order_relaxed) && gateDue_.exchange(false);
    if (!due && (++gatePasses_ & 31) != 0 && gate_->pollCount() == 1) return;
    gateScratch_.clear();
    gate_->pollSet(gateScratch_);
    if (::poll(gateScratch_.data(), gateScratch_.size(), 0) < 0) return;
    try {
      for (auto& g : gate_->service(gateScratch_)) admitLocked(std::move(g));
    } catch (const Error& e) {  // accept() failed: the job goes on with the peers it has
      GOSSAMER_LOG(kWarning, "socket rank " << opt_.rank << ": taking in a connection: " << e.what());
    }
    // Extra connections whose peer left are dropped.
    for (auto it = extras_.begin(); it != extras_.end();) {
      if (it->gone && !it->claimed) {
        retireLocked(std::exchange(it->fd, -1));
        it = extras_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The fd of a replaced or dropped connection: closed a while later
  // (closeRetiredLocked), not now, since a thread sleeping in poll may have
  // it in its set (built under `exclusive`, polled without it, for at most
  // 100 ms). Closed at once, its number could go to a new connection, and
  // that poller would merely wake early; kept until the destructor, a job
  // whose peers restart would run out of descriptors.
  void retireLocked(int fd) {
    if (fd >= 0) retired_.push_back(Retired{fd, Clock::now()});
  }

  void closeRetiredLocked() {
    constexpr auto kGrace = std::chrono::seconds(1);  // ten times the longest poll
    const auto now = Clock::now();
    std::erase_if(retired_, [&](const Retired& r) {
      if (now - r.at < kGrace) return false;
      ::close(r.fd);
      return true;
    });
  }

  // A connection whose hello verified (gate or set-up). From the process
  // this rank talks to as rank p: a second connection (two processes that
  // started at once connected to each other), read like the first, while
  // sends keep to the first. From another process (one started in place of
  // p, or a rank that joins): p's old connection and what was queued or
  // being received on it fail with PeerFailure, and p is taken back
  // (PeerLifecycle::revive) on the new one. Hellos of an incarnation already
  // replaced are refused.
  void admitLocked(Greeted g) {
    const int p = g.rank;
    auto& c = conns_[static_cast<std::size_t>(p)];
    auto& old = replaced_[static_cast<std::size_t>(p)];
    if (std::find(old.begin(), old.end(), g.incarnation) != old.end() ||
        (c.gone && c.incarnation == g.incarnation)) {
      gate_->refuse(std::move(g), "from a process this rank no longer talks to");
      return;
    }
    if (!c.gone && c.incarnation == g.incarnation) {
      Conn& extra = extras_.emplace_back();
      extra.peer = p;
      extra.fd = g.fd.release();
      extra.incarnation = g.incarnation;
      return;
    }
    const bool joined = c.incarnation == 0 && p >= opt_.worldSize;
    const std::string why = "a new process took its place";
    auto error = std::make_exception_ptr(PeerFailure(p, why));
    if (!c.gone) failPeer(c, error);
    for (auto& e : extras_)
      if (e.peer == p && !e.gone) failPeer(e, error);
    (void)life_.declareFailed(p, error);
    failPulls(p, error);
    if (c.incarnation != 0) old.push_back(c.incarnation);
    retireLocked(c.fd);
    c = Conn{};
    pullTo_[static_cast<std::size_t>(p)] = false;  // (a new process: no single copy towards it)
    c.peer = p;
    c.fd = g.fd.release();
    c.incarnation = g.incarnation;
    life_.revive(p);
    GOSSAMER_LOG(kInfo, "socket rank " << opt_.rank << ": rank " << p << (joined ? " joined" : " restarted")
                                       << " (incarnation " << std::hex << g.incarnation << std::dec << ")");
    if (sleepers_ > 0) wake();  // a sleeper must add the new connection to its poll set
  }

  // Reads into the stage; false when nothing more is there now (or the
  // connection ended, which lost() has handled).
  bool fillStage(Conn& c) {
    if (c.stageBegin == c.stageEnd) {
      c.stageBegin = c.stageEnd = 0;
    } else if (c.stageBegin > 0 && c.stage.size() - c.stageEnd < kFrameHeaderBytes) {
      std::memmove(c.stage.data(), c.stage.data() + c.stageBegin, c.stageEnd - c.stageBegin);
      c.stageEnd -= c.stageBegin;
      c.stageBegin = 0;
    }
    const std::size_t k = recvSome(c, c.stage.data() + c.stageEnd, c.stage.size() - c.stageEnd);
    c.stageEnd += k;
    return k > 0;
  }

  // One non-blocking recv; returns the bytes read, 0 when nothing is there now
  // or the connection ended (which lost() has handled).
  std::size_t recvSome(Conn& c, std::byte* dst, std::size_t n) {
    for (;;) {
      const ssize_t r = ::recv(c.fd, dst, n, MSG_DONTWAIT);
      if (r > 0) return static_cast<std::size_t>(r);
      if (r == 0) {
        lost(c, 0);
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost(c, errno);
      return 0;
    }
  }

  void readLocked(Conn& c) {
    try {
      while (!c.gone) {
        if (!c.inPayload) {
          while (!c.gone && c.stageEnd - c.stageBegin < kFrameHeaderBytes)
            if (!fillStage(c)) return;
          if (c.gone) return;
          std::memcpy(c.header.data(), c.stage.data() + c.stageBegin, kFrameHeaderBytes);
          c.stageBegin += kFrameHeaderBytes;
          startFrame(c);
        }
        if (!readPayload(c)) return;
        finishFrame(c);
      }
    } catch (const ProtocolError& e) {
      // The peer misbehaves: say why before its traffic fails with the error.
      ++rejected_[static_cast<std::size_t>(e.fault())];
      GOSSAMER_LOG(kWarning, "socket rank " << opt_.rank << ": " << e.what());
      failPeer(c, std::current_exception());
    }
  }

  void startFrame(Conn& c) {
    c.frame = decodeFrameHeader(c.header, c.peer, capacity_);
    if (static_cast<int>(c.frame.source) != c.peer)
      throw ProtocolError(c.peer, frame_offset::kSource,
                          "frame claims source rank " + std::to_string(c.frame.source) +
                              " but arrived on the connection of rank " + std::to_string(c.peer));
    c.verifier.begin(c.header, c.frame, c.peer);  // throws ProtocolError for a bad kDataTrailing header
    const std::size_t n = c.frame.payloadBytes;
    // A plain data frame's header is checked only with its payload: the
    // sender checksums a payload of kTrailingMinBytes or more in a trailer,
    // after a header checked on its own, so nothing is allocated for a
    // large payload whose header may be corrupt.
    if (c.frame.kind == FrameKind::kData && n >= kTrailingMinBytes)
      throw ProtocolError(c.peer, frame_offset::kPayloadBytes,
                          "a plain data frame of " + std::to_string(n) + " bytes (one of " +
                              std::to_string(kTrailingMinBytes) +
                              " bytes or more carries its checksum in a trailer)",
                          FrameFault::kOversized);
    c.inPayload = true;
    c.got = 0;
    c.discard = false;
    c.dst = {};
    if (c.frame.kind == FrameKind::kData || c.frame.kind == FrameKind::kDataTrailing) {
      // (Not a receive from several ranks: should this peer's connection
      // break mid-payload, that receive must stay pending for the others.)
      auto claim = box_.claim(c.peer, c.frame.tag, /*singleSourceOnly=*/true);
      if (claim.state) {
        if (!claim.fits(c.peer, n)) {
          c.discard = true;
        } else {
          c.claimed = std::move(claim.state);
          c.dst = claim.buffer.first(n);
        }
        return;
      }
    }
    try {
      c.owned = pool_->get(n);
    } catch (const std::bad_alloc&) {
      // This process is out of memory: the peer's traffic fails with a
      // reason (failPeer), the process stays up.
      throw ProtocolError(c.peer, frame_offset::kPayloadBytes,
                          "no memory for the " + std::to_string(n) + "-byte payload of its frame",
                          FrameFault::kOversized);
    }
    c.dst = std::span<std::byte>(c.owned.get(), n);
  }

  // Moves payload bytes into c.dst; true once the whole payload is there.
  bool readPayload(Conn& c) {
    const std::size_t n = c.frame.payloadBytes;
    if (c.claimed && !c.claimed->pending()) {  // cancelled (cancel() waited for exclusive)
      c.claimed.reset();
      c.discard = true;
    }
    while (c.got < n) {
      const std::size_t need = n - c.got;
      const std::size_t staged = c.stageEnd - c.stageBegin;
      if (staged > 0) {
        const std::size_t k = std::min(staged, need);
        if (!c.discard) {
          std::memcpy(c.dst.data() + c.got, c.stage.data() + c.stageBegin, k);
          c.verifier.update(std::span<const std::byte>(c.dst.data() + c.got, k));
        } else {  // checked all the same: a corrupted tag may be why it is thrown away
          c.verifier.update(std::span<const std::byte>(c.stage.data() + c.stageBegin, k));
        }
        c.stageBegin += k;
        c.got += k;
        continue;
      }
      if (c.discard || need < kDirectReadBytes) {
        if (!fillStage(c)) return false;
        continue;
      }
      // Checksummed right after the kernel's copy, while in cache.
      const std::size_t k = recvSome(c, c.dst.data() + c.got, std::min(need, kHotBytes));
      if (k == 0) return false;
      c.verifier.update(std::span<const std::byte>(c.dst.data() + c.got, k));
      c.got += k;
    }
    if (c.frame.kind == FrameKind::kDataTrailing) {
      while (!c.gone && c.stageEnd - c.stageBegin < kFrameTrailerBytes)
        if (!fillStage(c)) return false;
      if (c.gone) return false;
      std::memcpy(c.trailer.data(), c.stage.data() + c.stageBegin, kFrameTrailerBytes);
      c.stageBegin += kFrameTrailerBytes;
    }
    return true;
  }

  void finishFrame(Conn& c) {
    c.inPayload = false;
    auto claimed = std::move(c.claimed);
    auto owned = std::move(c.owned);
    const std::size_t n = c.frame.payloadBytes;
    if (c.discard) {
      // A frame thrown away (no room for it, cancelled, out of memory) is
      // checked as well: a bad one fails the peer (ProtocolError).
      c.verifier.finish(c.trailer);
      return;
    }
    const std::span<const std::byte> payload(c.dst.data(), n);
    try {
      c.verifier.finish(c.trailer);
    } catch (const ProtocolError&) {
      // The receive it was claimed for fails with the cause (then the peer).
      if (claimed) claimed->fail(std::current_exception());
      throw;
    }
    std::optional<std::uint32_t> checksum;  // verified: what the collectives may forward
    if (c.frame.kind == FrameKind::kDataTrailing) checksum = c.verifier.payloadChecksum();
    switch (c.frame.kind) {
      case FrameKind::kData:
      case FrameKind::kDataTrailing:
        life_.countReceived(n);
        if (sleepers_ > 0)
          wake();  // the request's owner may be asleep in poll (another thread read its bytes)
        if (claimed)
          claimed->complete(c.peer, n, checksum);
        else
          box_.deliver(c.peer, c.frame.tag, InboundPayload{owned, payload, checksum});
        return;
      case FrameKind::kBye:
        life_.onBye(c.peer, c.frame.tag.segment);
        sendControlLocked(c, FrameKind::kByeAck);
        if (sleepers_ > 0) wake();  // a receive it failed may belong to a thread asleep in poll
        return;
      case FrameKind::kByeAck:
        life_.onByeAck(c.peer);
        return;
      case FrameKind::kPull:
        pullLocked(c, single_copy::decode(payload, c.peer));
        return;
      case FrameKind::kPullDone: {
        (void)pulls_.done(c.peer, c.frame.tag.step, /*failed=*/false);  // (not recorded: cancelled)
        if (sleepers_ > 0) wake();  // the send's owner may be asleep in poll
        return;
      }
      case FrameKind::kHello:  // zmq's
        throw ProtocolError(c.peer, frame_offset::kKind,
                            "a hello frame is not used over the socket transport");
    }
  }

  // Receiver side of a pull frame: read the message from the sender's memory
  // into the posted receive (or a pooled buffer), check its CRC, acknowledge.
  void pullLocked(Conn& c, const PullDescriptor& d) {
    const Tag tag = c.frame.tag;
    if (d.pid != c.pid)
      throw ProtocolError(c.peer, kFrameHeaderBytes + 20,
                          "pull frame names process " + std::to_string(d.pid) + ", but rank " +
                              std::to_string(c.peer) + " is process " + std::to_string(c.pid));
    auto claim = box_.claim(c.peer, tag, /*singleSourceOnly=*/true);  // (as in startFrame)
    std::shared_ptr<std::byte> owned;
    std::span<std::byte> dst;
    if (claim.state && !claim.fits(c.peer, d.bytes)) {
      sendControlLocked(c, FrameKind::kPullDone, 0, d.ticket);
      return;
    }
    if (claim.state) {
      dst = claim.buffer.first(d.bytes);
    } else {
      try {
        owned = pool_->get(d.bytes);
      } catch (const std::bad_alloc&) {  // as in startFrame: the peer's traffic fails with the reason
        throw ProtocolError(c.peer, kFrameHeaderBytes,
                            "no memory for the " + std::to_string(d.bytes) + "-byte message it lends",
                            FrameFault::kOversized);
      }
      dst = std::span<std::byte>(owned.get(), d.bytes);
    }
    const int err = single_copy::pull(d, dst);
    // A sender that withdrew the message (cancelled the send, or closed)
    // shut this connection down before its buffer went back to its caller,
    // and on a Unix-domain socket that is seen at once, before what is
    // still queued here: the bytes read may be the caller's new ones, or
    // the read may have failed on memory the caller freed.
    if (pollfd p{c.fd, POLLRDHUP, 0};
        ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      auto error = std::make_exception_ptr(PeerFailure(
          c.peer, "it withdrew a message it lent (cancelled the send or closed) while it was read"));
      if (claim.state) claim.state->fail(error);
      return;  // the end of the stream that follows fails the connection
    }
    if (err != 0) {
      auto error = std::make_exception_ptr(
          ProtocolError(c.peer, kFrameHeaderBytes,
                        "cannot read the pulled message from process " + std::to_string(d.pid) +
                            " (process_vm_readv: " + errnoText(err) + "); set single-copy off for this job"));
      if (claim.state) claim.state->fail(error);
      std::rethrow_exception(error);
    }
    if (opt_.checksumPulls && crc32c(dst) != d.crc) {
      auto error = std::make_exception_ptr(ProtocolError(
          c.peer, kFrameHeaderBytes + 16, "pulled message fails its CRC-32C (sender changed it?)"));
      if (claim.state) claim.state->fail(error);
      std::rethrow_exception(error);
    }
    sendControlLocked(c, FrameKind::kPullDone, 0, d.ticket);
    life_.countReceived(d.bytes, /*pulled=*/true);
    if (sleepers_ > 0) wake();
    if (claim.state)
      claim.state->complete(c.peer, d.bytes);
    else
      box_.deliver(c.peer, tag, InboundPayload{owned, std::span<const std::byte>(dst.data(), dst.size())});
  }

  // Fails the pulls waiting on `peer` (-1: all).
  void failPulls(int peer, const std::exception_ptr& error) {
    if (peer < 0)
      pulls_.close(error);
    else
      pulls_.failOwedBy(peer, error);
  }

  // The connection ended (err 0: end of stream) or failed.
  void lost(Conn& c, int err) {
    if (c.gone) return;
    c.gone = true;
    ::shutdown(c.fd, SHUT_RDWR);
    const bool orderly = life_.leaving(c.peer) && !c.inPayload;  // everything before the bye was read
    std::exception_ptr error = orderly ? life_.failure(c.peer) : nullptr;  // its bye's, or its verdict
    if (!error) {
      std::string why = "connection lost without a goodbye (process died or network failed)";
      if (err != 0) why += ": " + errnoText(err);
      // A frame cut short: where (the peer's offset in it), and counted.
      const std::size_t staged = c.stageEnd - c.stageBegin;
      const std::size_t into =
          c.inPayload ? kFrameHeaderBytes + c.got + (c.got == c.frame.payloadBytes ? staged : 0) : staged;
      if (into > 0) {
        ++rejected_[static_cast<std::size_t>(FrameFault::kTruncated)];
        const std::size_t whole = kFrameHeaderBytes + c.frame.payloadBytes +
                                  (c.frame.kind == FrameKind::kDataTrailing ? kFrameTrailerBytes : 0);
        why += "; a frame was cut " + std::to_string(into) + " bytes in (of " +
               (c.inPayload ? std::to_string(whole) + ")"
                            : "its " + std::to_string(kFrameHeaderBytes) + "-byte header)");
      }
      error = std::make_exception_ptr(PeerFailure(c.peer, why));
    }
    c.failure = error;
    dropQueue(c, error);
    failPulls(c.peer, error);
    if (orderly) return;
    if (c.claimed) c.claimed->fail(error);
    c.claimed.reset();
    c.owned.reset();
    c.inPayload = false;
    life_.declareFailed(c.peer, error);
    failSiblingsLocked(c, error);
  }

  void failPeer(Conn& c, std::exception_ptr error) {
    // Shut down first: once failPulls tells a sender its lent message
    // failed, the caller may reuse the buffer, and the peer's check after
    // a pull must already see the hang-up (pullLocked).
    ::shutdown(c.fd, SHUT_RDWR);
    if (c.claimed) c.claimed->fail(error);
    c.claimed.reset();
    c.owned.reset();
    c.inPayload = false;
    c.gone = true;
    c.failure = error;
    dropQueue(c, error);
    failPulls(c.peer, error);
    life_.declareFailed(c.peer, error);
    failSiblingsLocked(c, error);
  }

  // A connection of c's peer failed: its other connection (the one from
  // set-up, or the second one of a process that started at the same time,
  // admitLocked) is shut down with the same error. Left open, the peer would
  // not learn that this rank counts it failed: its sends would still be
  // taken (and never delivered) and its receives from this rank would run to
  // their timeout instead of failing with PeerFailure at once.
  void failSiblingsLocked(const Conn& c, const std::exception_ptr& error) {
    for (Conn* other : allConnsLocked())
      if (other != &c && other->peer == c.peer && other->incarnation == c.incarnation && !other->gone)
        failPeer(*other, error);  // (c is gone already: no way back to it)
  }

  Options opt_;
  int capacity_;  // global ranks: worldSize plus the ranks that may join
  Mailbox box_;
  PeerLifecycle life_;               // peer table, goodbye, failure verdicts, statistics
  std::shared_ptr<HelloGate> gate_;  // the listener: restarted and joining ranks come in there
  std::vector<std::vector<std::uint64_t>> replaced_;  // by rank: incarnations a newer process replaced
  std::list<Conn> extras_;  // second connections of a peer's process (read; sends use conns_)
  struct Retired {
    int fd;
    Clock::time_point at;
  };
  std::vector<Retired> retired_;  // fds of replaced connections, closed a second later (retireLocked)
  std::atomic<bool> gateDue_{false};
  unsigned gatePasses_ = 0;
  std::vector<pollfd> gateScratch_;
  std::array<std::atomic<std::uint64_t>, kFrameFaultCount> rejected_{};  // TransportStats::rejectedFrames
  std::shared_ptr<PayloadPool> pool_ = std::make_shared<PayloadPool>();
  std::uint64_t backgroundErrors_ = 0;  // under exclusive: errors the background thread caught
  single_copy::Ledger pulls_;           // borrowed sends the peers still have to pull
  std::vector<Conn> conns_;             // by peer rank; conns_[rank] is unused (gone)
  // By peer rank: single copy towards it (ipc; it can read our memory). Read
  // without `exclusive` by isend; a restart turns it off.
  std::unique_ptr<std::atomic<bool>[]> pullTo_;
  int wakeFd_ = -1;
  Clock::duration spin_{};
  std::vector<pollfd> pollScratch_;
  std::vector<Conn*> pollConn_;
  bool stopped_ = false;  // under exclusive
  std::atomic<int> sleepers_{0};
  std::atomic<int> activeWaiters_{0};
  std::atomic<Clock::time_point> lastActivity_{};
  Clock::time_point lastProgress_{};  // end of the last progressLocked pass, under exclusive
  std::thread background_;
};

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(std::shared_ptr<Engine> engine) : e_(std::move(engine)) {}
  ~SocketTransport() override {
    try {
      e_->close(false);
    } catch (...) {
      // Destructors must not throw; close() failures were already reported.
    }
  }
  SocketTransport(const SocketTransport&) = delete;
  SocketTransport& operator=(const SocketTransport&) = delete;

  int rank() const override { return e_->options().rank; }
  int worldSize() const override { return e_->options().worldSize; }
  int capacity() const override { return e_->capacity(); }
  std::string name() const override { return "socket"; }
  double timeoutSeconds() const override { return e_->options().timeoutSeconds; }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return e_->isend(dst, tag, data, dtype);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    return e_->isend(dst, tag, data, dtype, true, checksum);
  }
  /// Borrowed sends (read in place by the waiting thread) and single copy
  /// over ipc; receives are read straight into posted buffers, so there is no
  /// hand-over to offer.
  TransportCapabilities capabilities() const noexcept override {
    TransportCapabilities c;
    c.borrowedSends = true;
    c.singleCopy = e_->pullsToAnyPeer();
    c.checksumReuseMinBytes = e_->checksumReuseMinBytes();
    return c;
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return e_->irecv(sources, tag, buffer);
  }
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return e_->discardArrived(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return e_->peerFailure(rank); }
  void close() override { e_->close(false); }
  void abort() override { e_->close(true); }
  TransportStats stats() const override { return e_->stats(); }

 private:
  std::shared_ptr<Engine> e_;
};

// --- connection set-up -----------------------------------------------------

std::string randomName(int rank) {
  std::random_device rd;
  std::ostringstream s;
  s << "gossamer-" << ::getpid() << '-' << rank << '-' << std::hex << rd() << rd();
  return s.str();
}

// This rank's listening socket (non-blocking) and its address: "tcp:HOST:PORT"
// or "ipc:NAME".
struct Listener {
  FdGuard fd;
  std::string address;
};

// Binds and listens: tcp on o.host at a port the kernel picks, ipc at a
// random abstract-namespace name.
Listener openListener(const Options& o) {
  const bool tcp = o.protocol == "tcp";
  FdGuard listener(::socket(tcp ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) throw Error("socket transport: socket(): " + errnoText(errno));
  std::string address;
  if (tcp) {
    const int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    SockAddr a = tcpAddress(o.host, 0);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0)
      throw Error("rank " + std::to_string(o.rank) + ": cannot bind tcp " + o.host + ": " + errnoText(errno));
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    address = "tcp:" + o.host + ":" + std::to_string(ntohs(bound.sin_port));
  } else {
    const std::string name = randomName(o.rank);
    SockAddr a = unixAddress(name);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0)
      throw Error("rank " + std::to_string(o.rank) + ": cannot bind ipc " + name + ": " + errnoText(errno));
    address = "ipc:" + name;
  }
  if (::listen(listener.get(), SOMAXCONN) != 0)
    throw Error("socket transport: listen(): " + errnoText(errno));
  setNonBlocking(listener.get());
  return Listener{std::move(listener), std::move(address)};
}

// What a rank publishes under "<prefix>/sock/<rank>": "ADDRESS INCARNATION"
// (the incarnation in hex), so that a peer that connects to it knows which
// process it reached.
struct Published {
  std::string address;
  std::uint64_t incarnation = 0;
};

std::string publishedForm(const std::string& address, std::uint64_t incarnation) {
  std::ostringstream s;
  s << address << ' ' << std::hex << incarnation;
  return s.str();
}

Published parsePublished(const std::string& s, int peer) {
  const auto space = s.rfind(' ');
  const std::string inc = space == std::string::npos ? "" : s.substr(space + 1);
  if (inc.empty() || inc.size() > 16 || inc.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw ProtocolError(peer, 0, "bad socket address in the store (no incarnation): '" + s + "'");
  return Published{s.substr(0, space), std::stoull(inc, nullptr, 16)};
}

// Connects to rank `p` at `address` and sends it `hello`; throws TimeoutError
// once `deadline` passes, PeerFailure if the peer refuses.
FdGuard connectTo(const std::string& address, int p, Clock::time_point deadline,
                  std::span<const std::byte> hello) {
  const SockAddr a = parseAddress(address, p);
  FdGuard fd(::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw Error("socket transport: socket(): " + errnoText(errno));
  tuneConnection(fd.get(), a.family);
  const auto connectOnce = [&] {
    return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.length);
  };
  int rc = connectOnce();
  // EAGAIN: nothing started (a Unix socket's listen backlog is full, or no
  // local TCP port is free): try again until the deadline.
  while (rc != 0 && errno == EAGAIN) {
    if (Clock::now() >= deadline)
      throw TimeoutError("socket transport: connecting to rank " + std::to_string(p) +
                         ": its listen backlog stayed full (or no local port was free)");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    rc = connectOnce();
  }
  if (rc != 0) {
    if (errno != EINPROGRESS) throw PeerFailure(p, "cannot connect: " + errnoText(errno));
    pollfd pfd{fd.get(), POLLOUT, 0};
    while (::poll(&pfd, 1, millisLeft(deadline, 1000)) == 0)
      if (Clock::now() >= deadline)
        throw TimeoutError("socket transport: connecting to rank " + std::to_string(p));
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw PeerFailure(p, "cannot connect: " + errnoText(err));
  }
  writeAll(fd.get(), hello.data(), hello.size(), deadline, p);
  return fd;
}

// Connects this rank to its peers within o.timeoutSeconds.
//
// Start of the job: publish the listener, connect to every lower rank, accept
// every higher one, then (ipc) probe which peers single copy reaches.
//
// A process that starts once the job runs (one restarted in place of a failed
// rank, or a rank >= worldSize that joins: joinsRunningJob, over
// "<prefix>/sock-started") connects to every rank published in the store instead; those take it in by
// its hello (Engine::admitLocked). A rank it cannot reach starts gone.
// Hellos of such processes that reach a rank still in its start are handed to
// the engine (Links::later).
Links connectAll(const Options& o, Store& store) {
  const int capacity = std::max(o.worldSize, o.maxWorldSize);
  const std::string prefix = o.storePrefix + "/sock/";
  const std::string startedKey = o.storePrefix + "/sock-started";
  const std::string who = "socket rank " + std::to_string(o.rank);
  const bool late = joinsRunningJob(store, startedKey, o.rank, o.worldSize);
  const auto deadline = deadlineAfter<Clock>(o.timeoutSeconds);

  Links links;
  links.incarnation = drawIncarnation();
  const JobKey key =
      JobKey::fromStore(store, o.storePrefix + "/sock-job-key", o.rank == 0, o.timeoutSeconds, who);
  const auto hello = encodeHello(o.rank, links.incarnation, key);
  Listener listener = openListener(o);
  store.set(prefix + std::to_string(o.rank), publishedForm(listener.address, links.incarnation));
  links.gate = std::make_shared<HelloGate>(o, capacity, std::move(listener.fd), key);
  links.fds.assign(static_cast<std::size_t>(capacity), -1);
  links.incarnations.assign(static_cast<std::size_t>(capacity), 0);
  links.why.assign(static_cast<std::size_t>(capacity), "");
  links.pids.assign(static_cast<std::size_t>(capacity), 0);
  links.pullTo.assign(static_cast<std::size_t>(capacity), false);
  std::vector<FdGuard> fds(static_cast<std::size_t>(capacity));
  const auto at = [](auto& v, int p) -> auto& { return v[static_cast<std::size_t>(p)]; };

  if (!late) {
    // Every lower rank listens already: it published after listen().
    for (int p = 0; p < o.rank; ++p) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      const Published peer = parsePublished(store.get(prefix + std::to_string(p), std::max(left, 0.0)), p);
      at(fds, p) = connectTo(peer.address, p, deadline, hello);
      at(links.incarnations, p) = peer.incarnation;
    }
    std::vector<pollfd> pfds;
    for (int pending = o.worldSize - 1 - o.rank; pending > 0;) {
      if (Clock::now() >= deadline)
        throw TimeoutError(who + " timed out after " + std::to_string(o.timeoutSeconds) + " s waiting for " +
                           std::to_string(pending) + " higher rank(s) to connect");
      pfds.clear();
      links.gate->pollSet(pfds);
      if (::poll(pfds.data(), pfds.size(), millisLeft(deadline, 100)) < 0 && errno != EINTR)
        throw Error("socket transport: poll(): " + errnoText(errno));
      for (auto& g : links.gate->service(pfds)) {
        if (g.rank > o.rank && g.rank < o.worldSize && at(fds, g.rank).get() < 0) {
          at(fds, g.rank) = std::move(g.fd);
          at(links.incarnations, g.rank) = g.incarnation;
          --pending;
        } else {
          links.later.push_back(std::move(g));  // a process started in place of one, or a joiner
        }
      }
    }
    links.gate->flushLog();
    if (o.protocol != "tcp" && o.singleCopy) {
      auto peers = single_copy::probe(o.rank, o.worldSize, store, o.storePrefix + "/sock/", o.timeoutSeconds);
      for (int p = 0; p < o.worldSize; ++p) {
        at(links.pids, p) = peers.pids[static_cast<std::size_t>(p)];
        links.pullTo[static_cast<std::size_t>(p)] = peers.pullTo[static_cast<std::size_t>(p)];
      }
    }
  } else {
    for (int p = 0; p < capacity; ++p) {
      if (p == o.rank) continue;
      const double left = std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
      // Ranks of the job have published (maybe a process that has died
      // since); a rank beyond it only if it joined.
      const auto value = p < o.worldSize ? std::optional(store.get(prefix + std::to_string(p), left))
                                         : store.tryGet(prefix + std::to_string(p));
      if (!value) {
        at(links.why, p) = "rank " + std::to_string(p) + " has not joined the job";
        continue;
      }
      const Published peer = parsePublished(*value, p);
      try {
        at(fds, p) =
            connectTo(peer.address, p, std::min(deadline, deadlineAfter<Clock>(kLateConnectSeconds)), hello);
        at(links.incarnations, p) = peer.incarnation;
      } catch (const Error& e) {
        at(links.why, p) = std::string("not reachable when this process started: ") + e.what();
      }
    }
  }
  markJobRunning(store, startedKey);
  for (auto& f : fds) links.fds[static_cast<std::size_t>(&f - fds.data())] = f.release();
  return links;
}

}  // namespace

std::unique_ptr<Transport> makeTransport(const Options& o, Store& store) {
  checkNetworkOptions(o);
  GOSSAMER_ENFORCE(o.spinSeconds >= 0 && o.spinSeconds <= 1, "spin " << o.spinSeconds << " s (0..1)");
  GOSSAMER_ENFORCE(o.maxWorldSize <= 1024, "socket: maxWorldSize " << o.maxWorldSize << " (at most 1024)");
  GOSSAMER_ENFORCE(o.sendQueueBytes > 0, "socket: sendQueueBytes must be positive");
  return std::make_unique<SocketTransport>(std::make_shared<Engine>(o, connectAll(o, store)));
}

void registerWith(Registry& registry) {
  registry.addTransport("socket", [](const TransportContext& ctx) {
    requireNoSecurity(ctx.config, "socket");
    auto o = networkOptionsFrom<Options>(ctx);
    o.maxWorldSize = ctx.maxWorldSize;
    return makeTransport(o, ctx.store);
  });
}

}  // namespace gossamer::sock
