// Internals of the libfabric transport, shared by its source files (not
// installed): the wire constants, the operations handed to libfabric, and the
// LibfabricTransport class, whose members are defined by concern in
// libfabric_transport.cpp (the Transport API, close), libfabric_setup.cpp
// (endpoint, address vector, posted buffers), libfabric_send.cpp (queueing
// and posting sends), libfabric_progress.cpp (the progress thread:
// completions, frames, payload pieces, matching) and libfabric_checks.cpp
// (the checksum thread, peer failure, teardown).
//
// libfabric transport (design and numbers: docs/libfabric.md).
//
// One reliable-datagram endpoint (FI_EP_RDM) per rank, with one completion
// queue read by a progress thread. Matching is ours, not the provider's: an
// irecv takes a *set* of sources, which libfabric's tag and ignore mask cannot
// express, and the provider must never write into a caller's buffer after
// Request::cancel() returned. So a message lands in transport-owned memory
// first and the sdk Mailbox matches it with posted receives (one copy, as in
// the zmq transport), except a large payload whose receive is posted before
// its announcement, with shm: that one is received in place (not over
// tcp;ofi_rxm, which cannot take back a piece under way), and a cancel has the
// progress thread take it back first (CopyGuard, takeBack).
//
// Wire protocol. Every message is a tagged send. A 64-bit "envelope" names
//
//   bits 56..59 channel   bits 40..55 sender rank   bits 0..39 sequence number
//
// channel 1, frame:    [envelope][48-byte frame header (wire.hpp)][payload <= inlineBytes]
//                      (data frames with small payloads, bye, bye-ack)
// channel 5, announce: [envelope][48-byte frame header][u64 piece bytes][u64 first bulk seq]
//                      [u64 crc32c of the 64 bytes before it] (a data frame whose
//                      payload follows on the bulk channel)
// channel 3, beat:     [envelope][48-byte frame header] heartbeat, no payload
// channel 8, bulk:     one piece of an announced payload, with the envelope as
//                      its libfabric tag (ceil(n / piece) pieces, consecutive
//                      bulk sequence numbers; split so that no message exceeds
//                      the provider's max_msg_size)
//
// Channels 1, 3 and 5 share one libfabric tag and carry the envelope as their
// first 8 bytes (u64 LE) instead: a pool of receive buffers is kept posted for
// that tag. (Matching distinct tags under an ignore mask would need no
// envelope, but the shm provider of libfabric 1.17 stops matching unexpected
// messages to such receives after a while; see docs/libfabric.md.) Frame and
// announce messages carry a per-(sender, receiver) sequence number: the
// receiver processes them strictly in that order (completion order is not
// guaranteed by every provider), so messages with the same source and tag are
// matched in send order. For an announcement the progress thread claims the
// posted receive or allocates the payload's buffer, and posts receives for
// its pieces (a few at a time: postMore) without waiting for the
// application's irecv, so a large send costs no extra round trip and no one
// can deadlock on it. Frames from
// one sender are delivered to the Mailbox in order: a small frame that
// arrives while an earlier large payload from the same sender is still in
// flight waits for it.
//
// Every frame is validated (wire.hpp: magic, version, kind, lengths, CRC-32C)
// before it is delivered; a bad one fails its sender with the ProtocolError.
// Senders are checked too, where the provider names them (FI_SOURCE; tcp and
// shm do): a message whose envelope names a rank but which came from another
// endpoint, or from one outside the job, is counted by what is wrong with it
// (TransportStats::rejectedFrames; a well-formed one is a "stranger"), logged
// at a bounded rate and dropped, and fails no one. So is a frame-channel
// message too large for the frame buffers (its sender cannot be known, and
// no rank sends one). Payload pieces are received from their announcing peer
// only (FI_DIRECTED_RECV).
//
// Failure. Completion-queue error entries become PeerFailure (failed sends,
// receives) or ProtocolError (truncated messages), with fi_cq_strerror's
// text. A peer that dies while a payload from it is under way shows up so
// (tcp;ofi_rxm: the receive is cancelled, "Transport endpoint is not
// connected"; shm: "Input/output error"), but at any other moment the
// providers of libfabric 1.17 report nothing (sends to it stay -FI_EAGAIN or
// pending, see docs/libfabric.md), so every rank also sends each peer a heartbeat every
// heartbeatSeconds and declares a peer failed when nothing arrived from it for
// peerTimeoutSeconds. With shm (one host) a pidfd on each peer's process
// replaces the heartbeats: a killed shm peer may leave a spin lock held in
// shared memory, so nothing is sent to it once it exited; one whose process
// is stopped (/proc/<pid>/stat) is failed once it took nothing sent to it
// (sends refused or never completed) for timeoutSeconds (a hung one that
// runs is not detected). A thread that was
// already waiting on such a lock spins forever inside libfabric, so only the
// progress thread calls into libfabric: isend queues, irecv and wait use the
// Mailbox, and a stuck progress thread costs the application a PeerFailure
// (the checksum thread then watches the pidfds) or a TimeoutError, never a
// hang. close() sends a bye after the last data frame and
// waits (bounded by the linger period) for each peer's bye-ack, as the zmq transport does, so queued messages
// are delivered.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fabric.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/job_key.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/peer_lifecycle.hpp"
#include "gossamer/log.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/transports/libfabric.hpp"

namespace gossamer::libfabric::impl {

using Clock = std::chrono::steady_clock;
using detail::api;
using detail::check;
using detail::errorText;
using detail::FidPtr;

// ---- tags ----------------------------------------------------------------------

constexpr int kChannelShift = 56;
constexpr int kSourceShift = 40;
constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << 40) - 1;
constexpr std::uint64_t kSourceMask = 0xFFFF;
constexpr std::uint64_t kChanFrame = 0x1, kChanBeat = 0x3, kChanAnnounce = 0x5, kChanBulk = 0x8;
/// The libfabric tag of every channel 1, 3 and 5 message (their envelope is in the message).
constexpr std::uint64_t kPoolTag = kChanFrame << kChannelShift;
constexpr std::size_t kEnvelopeBytes = 8;

constexpr std::uint64_t fabricTag(std::uint64_t channel, int source, std::uint64_t seq) {
  return (channel << kChannelShift) | (static_cast<std::uint64_t>(source) << kSourceShift) | (seq & kSeqMask);
}
constexpr std::uint64_t channelOf(std::uint64_t tag) { return (tag >> kChannelShift) & 0xF; }
constexpr int sourceOf(std::uint64_t tag) { return static_cast<int>((tag >> kSourceShift) & kSourceMask); }

/// Announcement (after the envelope): frame header, the piece size, the first bulk sequence
/// number and the announcement's own check, crc32c of the 64 bytes before it (u64 LE each). The
/// header's checksum covers the payload too, so without the check nothing in an announcement
/// could be trusted before the payload it asks memory for had arrived.
constexpr std::size_t kAnnouncePiece = kFrameHeaderBytes, kAnnounceFirst = kFrameHeaderBytes + 8,
                      kAnnounceCheck = kFrameHeaderBytes + 16, kAnnounceBytes = kFrameHeaderBytes + 24;
constexpr std::size_t kPoolBuffers = 64;
/// Largest hello payload (wire.hpp): incarnation, proof, endpoint.
constexpr std::size_t kMaxHelloPayload = 8 + kHelloProofBytes + kMaxHelloEndpoint;
/// Largest message sent with fi_tinject (no completion, no buffer kept), bytes.
constexpr std::size_t kInjectMax = 4096;
/// Frames that may arrive ahead of a missing one from one peer before it is a protocol error.
constexpr std::size_t kMaxEarlyFrames = 1 << 16;
constexpr const char* kProcessExited = "connection lost: its process exited";
/// Payloads from this size on have their CRC-32C checked on a second thread,
/// so that the progress thread moves the next payload meanwhile.
// Default piece size: a cancel of a receive filled in place (shm) waits for
// the pieces the provider is receiving.
constexpr std::size_t kDefaultPieceBytes = std::size_t{8} << 20;
// Smallest piece a sender may use and a receiver takes (but a whole payload
// smaller than it): the receiver keeps one operation per piece.
constexpr std::size_t kMinPieceBytes = 4096;
// Pieces of one payload posted at a time (postMore).
constexpr std::size_t kBulkWindow = 4;
constexpr std::size_t kVerifyOffloadBytes = std::size_t{256} << 10;

inline void putU64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint64_t getU64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

/// ceil(n / d) for d > 0, without overflow.
constexpr std::uint64_t ceilDiv(std::uint64_t n, std::uint64_t d) { return n / d + (n % d != 0 ? 1 : 0); }

inline double secondsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

// ---- operations handed to libfabric ----------------------------------------------

enum class OpKind : std::uint8_t { kSend, kPoolRecv, kBulkRecv };

/// Every posted operation's context. libfabric may use the fi_context2 (the
/// FI_CONTEXT modes), so it comes first and lives until the completion.
struct FabricOp {
  fi_context2 fi{};
  OpKind kind;
  explicit FabricOp(OpKind k) : kind(k) {}
};

/// Large buffers kept for reuse: a fresh 64 MiB allocation is mapped and
/// zeroed page by page by the kernel, which costs more than moving the bytes.
/// Buffers come back through the deleter of the shared_ptr get() returns,
/// whatever thread drops the last reference (the cache outlives them).
class BufferCache : public std::enable_shared_from_this<BufferCache> {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{64} << 10;         ///< smaller ones are not kept
  static constexpr std::size_t kMaxCachedBytes = std::size_t{256} << 20;  ///< kept at most, in all

  /// A buffer of at least `n` bytes (contents undefined).
  std::shared_ptr<std::byte[]> get(std::size_t n) {
    if (n < kMinBytes) return std::shared_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(n, 1)]);
    std::unique_ptr<std::byte[]> buf;
    std::size_t capacity = n;
    {
      std::lock_guard<std::mutex> lk(mu_);
      const auto it = free_.lower_bound(n);
      if (it != free_.end() && it->first <= 2 * n) {  // do not spend a huge buffer on a small message
        capacity = it->first;
        buf = std::move(it->second);
        cached_ -= capacity;
        free_.erase(it);
      }
    }
    if (!buf) buf.reset(new std::byte[n]);
    return std::shared_ptr<std::byte[]>(buf.release(), [self = shared_from_this(), capacity](std::byte* p) {
      self->put(std::unique_ptr<std::byte[]>(p), capacity);
    });
  }

 private:
  void put(std::unique_ptr<std::byte[]> buf, std::size_t capacity) {
    std::lock_guard<std::mutex> lk(mu_);
    while (!free_.empty() && cached_ + capacity > kMaxCachedBytes) {  // drop the smallest first
      cached_ -= free_.begin()->first;
      free_.erase(free_.begin());
    }
    if (capacity > kMaxCachedBytes) return;
    cached_ += capacity;
    free_.emplace(capacity, std::move(buf));
  }

  std::mutex mu_;
  std::multimap<std::size_t, std::unique_ptr<std::byte[]>> free_;  ///< capacity -> buffer
  std::size_t cached_ = 0;
};

/// A large payload staged for sending, shared by its pieces.
struct Payload {
  std::shared_ptr<std::byte[]> bytes;
  std::size_t size = 0;
  FidPtr<fid_mr> mr;  ///< registered by the progress thread (FI_MR_LOCAL providers only)
  void* desc = nullptr;
};

struct SendOp : FabricOp {
  SendOp() : FabricOp(OpKind::kSend) {}
  int dst = -1;
  std::uint64_t tag = 0;
  std::vector<std::byte> own;        ///< frame or announcement bytes
  std::shared_ptr<Payload> payload;  ///< bulk piece: the payload it points into
  const std::byte* data = nullptr;
  std::size_t len = 0;
  FidPtr<fid_mr> mr;  ///< registration of `own` (FI_MR_LOCAL providers only)
  void* desc = nullptr;
  bool live = false;             ///< counted in liveSends_ (posted to a peer not known to be gone)
  bool hello = false;            ///< this rank's hello: posted while the peer has not answered it yet
  std::uint64_t generation = 0;  ///< PeerTx::generation when queued: an error on it is the old process's
};

struct PoolOp : FabricOp {
  PoolOp() : FabricOp(OpKind::kPoolRecv) {}
  std::byte* buf = nullptr;
};

struct InboundMsg;
struct BulkRecvOp : FabricOp {
  BulkRecvOp() : FabricOp(OpKind::kBulkRecv) {}
  InboundMsg* msg = nullptr;
  std::size_t offset = 0, len = 0;
  std::uint64_t tag = 0;
  bool posted = false, done = false;
};

/// A frame from one peer, in its order, until it is delivered.
struct InboundMsg {
  int source = -1;
  FrameHeader header;
  HeaderBytes headerBytes{};
  std::shared_ptr<std::byte[]> data;  ///< the payload (null for control frames and empty payloads)
  std::size_t size = 0;
  bool ready = false;     ///< every byte has arrived and was verified
  bool arrived = false;   ///< every payload piece has arrived (checksum not yet checked)
  bool consumed = false;  ///< went to its claimed receive (or failed it): not for the Mailbox
  bool counted = false;   ///< in the received-bytes statistics already
  /// The posted receive this payload goes to (Mailbox::claim), and the part
  /// of its buffer it fills: either received there in place (`direct`, claimed
  /// at the announcement) or copied there by the checksum thread (claimed once
  /// the payload is first in line).
  std::shared_ptr<gossamer::detail::RequestState> claimed;
  std::span<std::byte> dst;
  bool direct = false;           ///< the pieces are posted into `dst`, not into `data`
  bool cancelling = false;       ///< the receive was cancelled: taking the payload back into `data`
  std::exception_ptr failure;    ///< why its peer failed (zombies), for the claimed receive
  std::uint32_t payloadCrc = 0;  ///< crc32c of the payload, once verified

  std::byte* base() const { return direct ? dst.data() : data.get(); }
  bool zombie = false;             ///< its peer failed: only waiting for cancelled receives to come back
  bool verifying = false;          ///< with the checksum thread (which reads it): keep it alive
  std::exception_ptr verifyError;  ///< what the checksum thread found (under verifyMu_)
  std::size_t piecesLeft = 0, outstanding = 0;
  std::vector<BulkRecvOp> ops;  ///< never resized once posted (libfabric holds pointers)
  FidPtr<fid_mr> mr;
  void* desc = nullptr;
};

/// Sending side of one peer. Application threads queue messages under `mu`;
/// only the progress thread posts them, and never while holding `mu`, so an
/// application thread never waits on a thread that is inside libfabric.
struct PeerTx {
  PeerTx() = default;
  PeerTx(const PeerTx&) = delete;
  PeerTx& operator=(const PeerTx&) = delete;
  /// (teardown() closes the pidfd; this covers a constructor that threw midway.)
  ~PeerTx() {
    if (pidfd >= 0) ::close(pidfd);
  }
  std::mutex mu;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  std::uint64_t frameSeq = 0, bulkSeq = 0;
  std::deque<std::unique_ptr<SendOp>> pending;  ///< not posted yet, in order (under mu)
  bool shut = false;                            ///< the endpoint is being closed: post nothing
  /// Largest payload sent inside a frame: what the peer's buffers take. Set
  /// under mu (at set-up, and by the progress thread when a restarted peer's
  /// hello arrives); read without it by isend, hence atomic.
  std::atomic<std::size_t> inlineLimit{0};
  std::exception_ptr why;  ///< why it is gone (set before `gone`)
  std::atomic<bool> gone{false};
  /// shm: a pidfd of the peer's process (-1 when unused); readable once it exited.
  /// Replaced (restart) and closed (teardown) under mu; read by the progress
  /// thread, or under mu.
  std::atomic<int> pidfd{-1};
  /// shm: the peer's process id, for its state (progress thread only; 0 when unused).
  long pid = 0;
  std::atomic<bool> exited{false};
  /// This process started once the job ran and said hello to the peer: what
  /// else is queued for it waits until the peer's hello answers (under mu).
  bool awaitingHello = false;
  /// This rank's hello to the peer's current process is queued (under mu).
  bool saidHello = false;
  /// Bumped when a new process takes the peer's place (under mu).
  std::uint64_t generation = 0;
  // What a stopped peer is known by where no heartbeats run (shm): sends to
  // it that it takes nothing of, and its process's state (progress thread
  // only; liveSends also under opsMu_, as liveSends_ is).
  int liveSends = 0;     ///< posted to it, not completed, counted in liveSends_
  bool refused = false;  ///< the provider refused the next queued send (-FI_EAGAIN) at the last flush
  /// Sends to it completed, or taken after a refusal: counted where they
  /// happen (no clock read there); checkStalled turns a change into `moved`.
  std::uint64_t progress = 0, progressSeen = 0;
  Clock::time_point moved;           ///< when checkStalled last saw progress, or none waited
  Clock::time_point stoppedSince{};  ///< since when its process is seen stopped (epoch: not seen so)
};

/// Receiving side of one peer (progress thread only).
struct PeerRx {
  std::uint64_t nextSeq = 0, nextBulkSeq = 0;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<std::byte>>>
      early;  ///< seq -> (channel, bytes)
  std::deque<std::unique_ptr<InboundMsg>> queue;
  Clock::time_point lastHeard;
  Clock::time_point gapSince;  ///< when `early` last became non-empty
  /// A frame-channel message too large for the frame buffers named this peer
  /// as its sender (which cannot be checked): if a frame from it then stays
  /// missing, the error says so.
  std::string oversized;
  bool gone = false;
};

/// Attached to every posted receive, so that no byte lands in a receive's
/// buffer after Request::cancel() returned. cancel() takes `exclusive`, which
/// the checksum thread holds while it reads or fills a claimed receive's
/// buffer; and for a payload the provider is receiving in place, cancelLocked
/// has the progress thread take it back (fi_cancel, then copy what already
/// arrived into the transport's own memory) before it returns, so the message
/// is delivered to a later receive instead. Progress itself is the progress
/// thread's: a waiting thread has nothing to drive.
class CopyGuard final : public gossamer::detail::BackgroundEngine {
 public:
  explicit CopyGuard(double boundSeconds) : bound_(boundSeconds) {}

  /// Request::cancel(), `exclusive` held: waits (at most the transport's
  /// timeout) until the progress thread took the payload back, if one is being
  /// received into the request's buffer.
  void cancelLocked(gossamer::detail::RequestState& state) override {
    std::unique_lock<std::mutex> lk(mu);
    if (closed || !direct.contains(&state)) {
      // Cancelled here, under `mu`: the progress thread, which may have
      // claimed the receive a moment ago, checks under `mu` that it is still
      // pending before it posts anything into its buffer (claimInPlace).
      state.cancelIfPending();
      return;
    }
    // (cancel() is noexcept: `cancels` has room for every receive in
    // `direct`, reserved as each enters it. Should it not, out of memory,
    // the payload is not taken back but left to land in the buffer, and
    // this waits for that within the same bound; past it, as for a
    // take-back, it logs and returns, and the provider may still write.)
    try {
      cancels.push_back(&state);
      cancelsPending = true;
    } catch (const std::exception&) {
    }
    if (wake) wake();
    if (!cv.wait_for(lk, std::chrono::duration<double>(bound_),
                     [&] { return closed || !direct.contains(&state); })) {
      try {
        GOSSAMER_LOG(kError, "libfabric: a cancelled receive's payload was not taken back within "
                                 << bound_ << " s (the progress thread is stuck inside libfabric?)");
      } catch (const std::exception&) {
      }
    }
    // Not left behind for the progress thread (the request may be freed once this returns).
    std::erase(cancels, &state);
  }

  /// Wakes every canceller and lets later cancels return at once: nothing
  /// writes into a receive's buffer any more (the progress thread has
  /// stopped, or the endpoint is closed).
  void close() {
    {
      std::lock_guard<std::mutex> lk(mu);
      closed = true;
      wake = nullptr;
    }
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  /// Receives whose buffers the provider may write into, and their payloads (under mu).
  std::unordered_map<const gossamer::detail::RequestState*, InboundMsg*> direct;
  /// For the progress thread (under mu); its capacity covers `direct`.
  std::vector<const gossamer::detail::RequestState*> cancels;
  std::atomic<bool> cancelsPending{false};
  std::function<void()> wake;  ///< wakes the progress thread (under mu; empty once closed)
  bool closed = false;         ///< under mu: the endpoint is closed, nothing writes any more

 private:
  double bound_;
};

/// An endpoint left open after its transport closed, with everything the
/// provider may still read or write or hand back: the fabric objects, the
/// frame pool, the receive states and inbound messages, and the posted sends.
/// Destroying it closes the endpoint first and frees the memory last (members
/// go in reverse order of declaration).
struct KeptEndpoint {
  std::vector<std::byte> poolMem;
  std::vector<PoolOp> pool;
  FidPtr<fid_fabric> fabric;
  FidPtr<fid_domain> domain;
  FidPtr<fid_cq> cq;
  FidPtr<fid_av> av;
  FidPtr<fid_mr> poolMr;
  std::vector<PeerRx> rx;
  std::vector<std::unique_ptr<InboundMsg>> zombies;
  std::vector<std::unique_ptr<SendOp>> sends;
  FidPtr<fid_ep> ep;
};

/// A shm transport's place among the shm transports of its process.
///
/// libfabric 1.17's shm provider reaches an endpoint of the same process
/// through that endpoint's own mapping of its shared-memory region (found by
/// name in a process-wide list), and unmaps the region when the endpoint
/// closes. A transport still sending to a closed endpoint of its own process,
/// or taking in a message it sent, then touches unmapped memory and the
/// process crashes: a rank restarted inside the process that hosts its peers
/// (tests, ranks as threads). So while another shm transport of the process
/// is open, a closing one parks its endpoint, open and never progressed, like
/// a stopped process's: sends to it fill its queue and are then refused, as
/// for a stopped peer. The last shm transport of the process to close closes
/// every parked endpoint. A parked endpoint holds its region (16 MiB in
/// /dev/shm, of which the pages touched use memory) and its buffers.
/// libfabric 1.17 also keeps a closed endpoint's name, and its unmapped
/// region, in its list: a transport that inserted the address of an endpoint
/// of this process that was closed would be handed that region. So the
/// names of the transports that left are kept (isClosed), and insertPeer
/// refuses them.
class ShmNeighbourhood {
 public:
  ShmNeighbourhood() = default;
  ShmNeighbourhood(const ShmNeighbourhood&) = delete;
  ShmNeighbourhood& operator=(const ShmNeighbourhood&) = delete;
  /// Leaves if still in (a constructor that threw after enter()).
  ~ShmNeighbourhood();
  /// Counts this transport's endpoint, of shm address `name`, among the
  /// process's open ones. Once; before the transport inserts any address.
  void enter(std::string name);
  [[nodiscard]] bool entered() const { return in_; }
  /// Stops counting it. `kept` (null: nothing to close, or kept for good
  /// elsewhere) is parked while another shm transport of the process is open;
  /// otherwise it and every parked endpoint are closed. Not entered (not shm):
  /// `kept` is closed. Never throws.
  void leave(std::unique_ptr<KeptEndpoint> kept) noexcept;
  /// Whether `name` is the shm address of an endpoint of this process whose
  /// transport closed (or failed to open after entering).
  static bool isClosed(const std::string& name);

 private:
  bool in_ = false;
  std::string name_;
};

class LibfabricTransport final : public Transport, public std::enable_shared_from_this<LibfabricTransport> {
 public:
  LibfabricTransport(const Options& o, Store& store);

  /// Starts the progress thread, which keeps the transport alive while it runs
  /// (see close()). Call once, right after construction.
  void start();
  ~LibfabricTransport() override;
  int rank() const override { return opt_.rank; }
  int worldSize() const override { return opt_.worldSize; }
  int capacity() const override { return capacity_; }
  std::string name() const override { return "libfabric"; }
  double timeoutSeconds() const override { return opt_.timeoutSeconds; }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override;
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override;
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return box_.discard(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return life_.failedVerdict(rank); }
  void abort() override;
  void close() override;
  TransportStats stats() const override {
    TransportStats s = life_.stats();
    for (std::size_t i = 0; i < kFrameFaultCount; ++i) s.rejectedFrames[i] = rejected_[i].load();
    return s;
  }

 private:
  // ---- setup ---------------------------------------------------------------------

  void openEndpoint();

  // Publishes "<provider>\n<frame bytes>\n<pid>\n<incarnation, hex>\n<address>"
  // (frame bytes: the largest frame, header included, this rank's buffers
  // take) and inserts every peer's address. A rank sends a peer payloads
  // inside frames only up to what that peer's buffers take, so ranks may
  // differ in inlineBytes. A process that starts once the job runs (restarted
  // or joining) reads the addresses that are there and says hello to each.
  void exchangeAddresses(Store& store);
  // The peer described by "<frame bytes>\n<pid>\n<address>" (a store entry's
  // tail, or a hello's endpoint): its address inserted into the address
  // vector, its inline limit, and (shm) a pidfd of its process.
  struct PeerAddress {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    std::size_t inlineLimit = 0;
    int pidfd = -1;
    long pid = 0;  ///< shm: the peer's process id (0 when unused)
  };
  PeerAddress insertPeer(int p, const std::string& description, const std::string& where);
  // This rank's hello to `p` (payload: wire.hpp's Hello, whose endpoint is
  // "<frame bytes>\n<pid>\n<address>" with the address in hex).
  std::unique_ptr<SendOp> makeHello(int p);
  FidPtr<fid_mr> registerLocal(const void* buf, std::size_t len, std::uint64_t access, void** desc);
  void postPool();
  void repost(PoolOp& op);
  bool postBulk(BulkRecvOp& op);
  void retryUnposted();

  // ---- sending -------------------------------------------------------------------

  // shm: true once the peer's process exited. A killed shm peer may have died
  // holding the lock of its own region, and sending to it would then spin
  // forever inside libfabric; so every send to it checks first. Called by
  // the progress thread (the one that replaces a restarted peer's pidfd) or
  // with peer.mu held (application threads, the checksum thread).
  static bool processExited(PeerTx& peer);

  // isend to a peer known to be gone: the reason it is gone.
  [[noreturn]] void throwGone(int dst);

  // A pool-tag message [envelope (filled in by the caller)][a][b].
  std::unique_ptr<SendOp> makeSendOp(int dst, std::span<const std::byte> a, std::span<const std::byte> b);

  // Progress thread: posts `op` (ownership passes to libfabric until its
  // completion; an injected one is done at once). Returns 0, -FI_EAGAIN (op
  // untouched) or another libfabric error. Registers the buffer first when
  // the provider wants local registration (on this thread too: application
  // threads make no libfabric call at all).
  ssize_t post(std::unique_ptr<SendOp>& op, fi_addr_t addr);

  // Caller holds peer.mu. Queues `op` for the progress thread, behind earlier sends.
  void queueLocked(PeerTx& peer, std::unique_ptr<SendOp> op);

  // One message on the pool's tag to `dst`: the envelope (channel, this rank,
  // the next frame sequence number), then a ++ b; queued for the progress thread.
  void sendFrame(int dst, std::uint64_t channel, std::span<const std::byte> a, std::span<const std::byte> b);

  // A payload above inlineBytes: an announcement on the frame sequence, then
  // the payload in pieces on the bulk channel.
  void sendLarge(int dst, const Tag& tag, DType dtype, std::span<const std::byte> data);

  // Best effort: a control frame (bye, bye-ack) that cannot be sent only
  // means the peer finds out by its heartbeat timeout or pidfd.
  void sendControl(int p, FrameKind kind, std::uint32_t detail = 0);

  // Progress thread: posts the queued sends, in order per peer, until the
  // provider refuses one (-FI_EAGAIN: retried on the next turn). Holds no
  // lock inside libfabric: application threads keep queueing meanwhile.
  void flushPending();
  void sendBeats();

  // ---- progress thread --------------------------------------------------------------

  // Wakes the progress thread if it sleeps, and keeps it polling for a while.
  void kick();
  void wake();
  void progressLoop();

  // Handles what fi_cq_read / fi_cq_sread returned. True if anything completed.
  bool handleCq(ssize_t n, fi_cq_tagged_entry* entries, const fi_addr_t* from);
  void handleCompletion(const fi_cq_tagged_entry& e, fi_addr_t from);
  void finishSend(SendOp* op);

  // A completion-queue error entry: the provider's account of a failed operation.
  void handleError();
  // A frame-channel message from the endpoint `from` (FI_ADDR_UNSPEC when the
  // provider does not name senders).
  void onPoolMessage(std::span<const std::byte> message, fi_addr_t from);

  // Counts a message that no rank's stream takes (the rank it names did not
  // send it, or it names none) by what is wrong with it, and logs it at a
  // bounded rate.
  void rejectStranger(std::span<const std::byte> message, const std::string& why);

  // Counts a bad message from a rank (which then fails) by its fault.
  void countFault(FrameFault fault) { ++rejected_[static_cast<std::size_t>(fault)]; }
  void checkBeat(int src, std::span<const std::byte> bytes);

  // One frame or announcement from `src`, in sequence order.
  void processFrame(int src, std::uint64_t channel, std::span<const std::byte> bytes);

  // A hello frame naming `src` (before any sequence or sender check): from a
  // process this rank does not know yet (restarted in place of `src`, or a
  // rank that joins), whose proof verifies under the job's key, the peer is
  // taken in: its old process's traffic fails with PeerFailure, the new
  // address replaces the old, both sequences start over, this rank answers
  // with its own hello, and `src` is back (PeerLifecycle::revive). From the
  // process it knows: the answer to this rank's hello, after which what was
  // queued for it goes out. Returns false if the message is no hello.
  bool onHello(int src, std::uint64_t envelope, std::span<const std::byte> message, fi_addr_t from);

  // Posts the next pieces of `msg`, in order, while fewer than kBulkWindow of
  // its pieces are with the provider. A provider matches an announced piece
  // as soon as it is posted (ofi_rxm's rendezvous then reads it whatever
  // happens), and a matched piece cannot be cancelled: the window bounds what
  // a cancel of an in-place receive waits for. Returns false when the
  // provider refused one (-FI_EAGAIN): pumpBulk() retries.
  bool postMore(InboundMsg& msg);

  // Progress thread: pieces a provider refused earlier, and the next ones.
  void pumpBulk();
  void onBulkPiece(BulkRecvOp& op, std::size_t len);

  // Delivers the frames from `src` that are complete, in order.
  void flushInbound(int src);
  void countReceived(InboundMsg& msg);

  // A claimed receive too small for `msg` fails, and the message is used up
  // (as Mailbox::deliver does). True if it fits.
  static bool fits(InboundMsg& msg, const Mailbox::Claimed& claim);

  // At a large payload's announcement (`msg`, last in its peer's line): if a
  // receive for it is posted already, and no earlier message from the peer
  // under the same tag is still on its way (matching order), the pieces are
  // received straight into that receive's buffer.
  void claimInPlace(InboundMsg& msg, const PeerRx& rx);

  // Progress thread: receives cancelled while their payload was being received
  // in place (CopyGuard::cancelLocked, whose caller waits).
  void takeBackCancelled();

  // Once no piece of a cancelling in-place payload is with the provider any
  // more: copies the pieces that arrived into the transport's own buffer,
  // posts the cancelled ones again into it, and lets the canceller go on. The
  // message then goes on as one that found no receive.
  void takeBack(InboundMsg& msg);

  // Progress thread: releases the address-vector entries and pidfds of
  // replaced processes once no send to them nor payload piece from them is
  // posted any more (and a grace period passed).
  void retireOld(Clock::time_point now);

  // An in-place payload whose peer failed, once the provider gave all its
  // pieces back: its receive fails with the peer's error.
  void releaseClaim(InboundMsg& msg);

  // A large payload that fully arrived and is first in its peer's line: the
  // checksum thread checks it and, when a receive from its sender alone is
  // posted for it, copies it into that receive's buffer in the same pass
  // (claimed here, in order, so per (source, tag) matching order holds). A
  // receive from several ranks is not claimed: a bad checksum would fail it
  // while the others live; the Mailbox gives it the payload once checked.
  // Later frames from the peer wait.
  void toChecksumThread(InboundMsg& msg);

  // Checksum thread: verifies `msg` (one pass over its payload). If it was
  // received in place, completes (or fails) its receive. If it was claimed by
  // a receive that is still pending, copies it into that receive in the same
  // pass and completes it; a receive cancelled meanwhile (cancel() waits for
  // guard_->exclusive) leaves the message to the Mailbox.
  void checkPayload(InboundMsg& msg);

  // The checksum thread: verifies large payloads handed over by toChecksumThread.
  // With shm it also watches the peers' processes every 10 ms while the
  // progress thread is stuck (watchWhileStuck).
  void verifyLoop();

  // True when the progress thread has not begun a loop turn for `d`.
  bool progressStuckFor(Clock::duration d) const;

  // Checksum thread, shm only: when the progress thread has not finished a
  // loop turn for 100 ms it is stuck inside libfabric (it never sleeps longer
  // than 2 ms), most likely spinning on a shm lock that a killed peer held.
  // Then it cannot see that peer's exit, so this thread reports it to the
  // Mailbox itself: receives waiting on the dead peer fail now with
  // PeerFailure rather than at their timeout. (Not while the progress thread
  // runs: it delivers what fully arrived from the peer first, then fails it.)
  void watchWhileStuck();

  // Progress thread: payloads the checksum thread is done with.
  void drainVerified();
  void checkSilence(Clock::time_point now);
  /// Without heartbeats: fails peer `p` once sends to it made no progress
  /// (refused, or posted and not completed) for the transport's timeout and
  /// its process was seen stopped (/proc/<pid>/stat) for half of it.
  void checkStalled(int p, Clock::time_point now);
  /// From a thread of this transport (`thread` names it) that ended on an
  /// exception: every peer is declared failed, so that waits end with PeerFailure
  /// instead of their timeouts.
  void failEveryPeerFrom(const char* thread);
  /// Declares peer `p` failed with `why` from off the progress thread (its
  /// `why` and `gone`, and the lifecycle): what failPeer's caller-facing
  /// part does, without touching the progress thread's state.
  void declareGone(int p, std::exception_ptr why);

  // Progress thread: `p` is gone (failed, or closed: then `why` says so).
  // Fails receives waiting only on it, drops what was queued for it and
  // cancels the payload receives still posted for it.
  void failPeer(int p, std::exception_ptr why);
  void buryIfDone(InboundMsg* msg);

  // Stops the checksum thread. It waits on nothing but its queue and
  // `exclusive`, which only a canceller holds, and close() releases those
  // first (guard_->close()).
  void stopVerifier();

  // Before the endpoint closes: cancels the payload pieces still posted and
  // reads the completion queue until they came back (cancelled or complete),
  // for at most 200 ms: tcp;ofi_rxm of libfabric 1.17 crashes inside
  // fi_close(ep) if a piece is still arriving (see abandonEndpoint()).
  void drainBulk();

  // After the progress thread stopped: closes the endpoint (libfabric drops
  // what is still posted), then frees the operations and the fabric; or
  // keeps the endpoint open (abandoned, or parked: ShmNeighbourhood).
  void teardown();
  /// Moves the endpoint and everything the provider may still use out of this
  /// transport (teardown(): to close it in order, abandon it, or park it).
  std::unique_ptr<KeptEndpoint> keepEndpoint();
  /// The constructor's part after openEndpoint(): addresses, receive state, the frame pool.
  void setUp(Store& store);
  /// Leaves `kept` open for the rest of the process (see teardown()).
  void abandonEndpoint(std::unique_ptr<KeptEndpoint> kept);
  Options opt_;
  int capacity_ = 0;  ///< global ranks: worldSize and the ranks that may join
  std::shared_ptr<BufferCache> cache_ = std::make_shared<BufferCache>();  // before box_: its messages use it
  std::shared_ptr<CopyGuard> guard_;  ///< attached to posted receives (set in the constructor)
  Mailbox box_;
  PeerLifecycle life_;  // peer table, goodbye, failure verdicts, statistics
  double peerTimeout_ = 0;
  detail::InfoPtr info_;
  std::string provider_;
  bool mrLocal_ = false, cqWaits_ = false, heartbeats_ = true;
  bool inPlace_ = false;       ///< large payloads may be received into a posted receive's buffer (shm)
  bool namesSenders_ = false;  ///< the provider reports each message's source endpoint (FI_SOURCE)
  std::size_t addrLen_ = 0;    ///< bytes of this provider's endpoint addresses (fi_getname)
  std::size_t maxMsgBytes_ = 0, injectBytes_ = 0, inlineBytes_ = 0, poolBytes_ = 0, pieceBytes_ = 0;
  std::uint64_t nextKey_ = 1;
  ShmNeighbourhood neighbours_;  ///< shm only (before the fabric objects: it outlives them)
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  FidPtr<fid_ep> ep_;
  std::vector<std::byte> poolMem_;
  FidPtr<fid_mr> poolMr_;
  void* poolDesc_ = nullptr;
  std::vector<PoolOp> pool_;
  HeaderBytes beatHeader_{};
  std::vector<std::unique_ptr<PeerTx>> tx_;
  JobKey jobKey_;                            ///< the job's key: proves hellos (kit/job_key.hpp)
  std::uint64_t incarnation_ = 0;            ///< this process's
  std::string myEndpoint_;                   ///< "<frame bytes>\n<pid>\n<address in hex>", for hellos
  std::vector<std::uint64_t> incarnations_;  ///< progress thread: of each peer's process (0: unknown)
  std::vector<std::vector<std::uint64_t>> replaced_;  ///< progress thread: incarnations a newer one replaced
  std::atomic<std::size_t> queued_{0};                ///< sends waiting in PeerTx::pending, all peers
  /// Of those, the ones held back until a peer answers this rank's hello
  /// (progress thread: flushPending, onHello).
  std::size_t held_ = 0;
  std::mutex opsMu_;
  std::unordered_set<FabricOp*> inflight_;
  /// Posted sends to peers not known to be gone (written under opsMu_): while
  /// there are any, the progress thread keeps polling, since some providers
  /// move a large message along only when their completion queue is read.
  std::atomic<std::size_t> liveSends_{0};  ///< posted sends, owned here until their completion

  // Progress thread only.
  std::vector<PeerRx> rx_;
  std::deque<FabricOp*> unposted_;  ///< frame-buffer receives the provider refused (-FI_EAGAIN)
  bool bulkPump_ = false;           ///< payload pieces wait to be posted (pumpBulk)
  std::size_t bulkPosted_ = 0;      ///< payload-piece receives posted and not completed
  std::size_t verifying_ = 0;       ///< payloads with the checksum thread
  std::vector<std::unique_ptr<InboundMsg>> zombies_;
  /// A peer's replaced process: its pidfd, closed after a grace period
  /// (retireOld). Its address stays in the address vector.
  struct Retired {
    int peer = -1;
    int pidfd = -1;
    Clock::time_point since;
  };
  std::vector<Retired> retired_;
  std::thread progress_;
  std::thread verifier_;  ///< the checksum thread
  std::mutex verifyMu_;
  std::condition_variable verifyCv_;
  std::deque<InboundMsg*> toVerify_, verified_;  // under verifyMu_
  bool verifyStop_ = false;                      // under verifyMu_
  std::mutex exitMu_;
  std::condition_variable exitCv_;
  bool progressExited_ = false;  // under exitMu_
  bool abandoned_ = false;       // under exitMu_: close() left the progress thread behind
  std::atomic<bool> stop_{false}, aborting_{false}, sleeping_{false};
  std::atomic<Clock::rep> lastKick_{0};
  /// When the progress thread last began a loop turn (watchWhileStuck).
  std::atomic<Clock::rep> loopStamp_{Clock::now().time_since_epoch().count()};
  bool watchesPids_ = false;  ///< shm: the checksum thread also watches peer processes
  std::mutex kickMu_;
  std::condition_variable kickCv_;
  bool kicked_ = false;                                                  // under kickMu_
  std::array<std::atomic<std::uint64_t>, kFrameFaultCount> rejected_{};  ///< TransportStats::rejectedFrames
  LogLimiter rejectLog_{LogLevel::kWarning, 10, "rejected frames"};
};

}  // namespace gossamer::libfabric::impl
