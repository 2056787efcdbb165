// libfabric transport (design and numbers: docs/libfabric.md).
//
// One reliable-datagram endpoint (FI_EP_RDM) per rank, with one completion
// queue read by a progress thread. Matching is ours, not the provider's: an
// irecv takes a *set* of sources, which libfabric's tag and ignore mask cannot
// express, and the provider must never write into a caller's buffer after
// Request::cancel() returned. So a message lands in transport-owned memory
// first and the sdk Mailbox matches it with posted receives (one copy, as in
// the zmq transport), except a large payload whose receive is posted before
// its announcement: that one is received in place, and a cancel has the
// progress thread take it back first (CopyGuard, takeBack).
//
// Wire protocol. Every message is a tagged send. A 64-bit "envelope" names
//
//   bits 56..59 channel   bits 40..55 sender rank   bits 0..39 sequence number
//
// channel 1, frame:    [envelope][48-byte frame header (wire.hpp)][payload <= inlineBytes]
//                      (data frames with small payloads, bye, bye-ack)
// channel 5, announce: [envelope][48-byte frame header][u64 piece bytes][u64 first bulk seq]
//                      (a data frame whose payload follows on the bulk channel)
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
// shared memory, so nothing is sent to it once it exited. A thread that was
// already waiting on such a lock spins forever inside libfabric, so only the
// progress thread calls into libfabric: isend queues, irecv and wait use the
// Mailbox, and a stuck progress thread costs the application a PeerFailure
// (the checksum thread then watches the pidfds) or a TimeoutError, never a
// hang. close() sends a bye after the last data frame and
// waits (bounded by the linger period) for each peer's bye-ack, as the zmq transport does, so queued messages
// are delivered.
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
#include "gossamer/log.hpp"
#include "gossamer/mailbox.hpp"
#include "gossamer/peer_lifecycle.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::libfabric {

namespace {

using Clock = std::chrono::steady_clock;
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

/// Announcement (after the envelope): frame header, the piece size and the first bulk sequence
/// number (u64 LE each).
constexpr std::size_t kAnnounceBytes = kFrameHeaderBytes + 16;
constexpr std::size_t kPoolBuffers = 64;
/// Largest message sent with fi_tinject (no completion, no buffer kept), bytes.
constexpr std::size_t kInjectMax = 4096;
/// Frames that may arrive ahead of a missing one from one peer before it is a protocol error.
constexpr std::size_t kMaxEarlyFrames = 1 << 16;
constexpr const char* kProcessExited = "connection lost: its process exited";
/// Payloads from this size on have their CRC-32C checked on a second thread,
/// so that the progress thread moves the next payload meanwhile.
// Default piece size: a cancel of a receive filled in place waits for the
// piece the provider is receiving (tcp;ofi_rxm cannot cancel a matched one).
constexpr std::size_t kDefaultPieceBytes = std::size_t{8} << 20;
// Pieces of one payload posted at a time (postMore).
constexpr std::size_t kBulkWindow = 4;
constexpr std::size_t kVerifyOffloadBytes = std::size_t{256} << 10;

void putU64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t getU64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

/// ceil(n / d) for d > 0, without overflow.
constexpr std::uint64_t ceilDiv(std::uint64_t n, std::uint64_t d) { return n / d + (n % d != 0 ? 1 : 0); }

double secondsSince(Clock::time_point t, Clock::time_point now) {
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
  bool live = false;  ///< counted in liveSends_ (posted to a peer not known to be gone)
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
  std::mutex mu;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  std::uint64_t frameSeq = 0, bulkSeq = 0;
  std::deque<std::unique_ptr<SendOp>> pending;  ///< not posted yet, in order (under mu)
  bool shut = false;                            ///< the endpoint is being closed: post nothing
  std::size_t inlineLimit = 0;  ///< largest payload sent inside a frame: what the peer's buffers take
  std::exception_ptr why;       ///< why it is gone (set before `gone`)
  std::atomic<bool> gone{false};
  /// shm: a pidfd of the peer's process (-1 when unused); readable once it exited.
  int pidfd = -1;
  std::atomic<bool> exited{false};
};

/// Receiving side of one peer (progress thread only).
struct PeerRx {
  std::uint64_t nextSeq = 0, nextBulkSeq = 0;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<std::byte>>>
      early;  ///< seq -> (channel, bytes)
  std::deque<std::unique_ptr<InboundMsg>> queue;
  Clock::time_point lastHeard;
  Clock::time_point gapSince;  ///< when `early` last became non-empty
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
bool isPendingRequest(gossamer::detail::RequestState& s) {
  std::lock_guard<std::mutex> lk(s.mu);
  return s.status == gossamer::detail::RequestState::Status::kPending;
}

void markCancelled(gossamer::detail::RequestState& s) {
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.status == gossamer::detail::RequestState::Status::kPending)
      s.status = gossamer::detail::RequestState::Status::kCancelled;
  }
  s.cv.notify_all();
}

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
      markCancelled(state);
      return;
    }
    cancels.push_back(&state);
    cancelsPending = true;
    if (wake) wake();
    if (!cv.wait_for(lk, std::chrono::duration<double>(bound_),
                     [&] { return closed || !direct.contains(&state); }))
      GOSSAMER_LOG(kError, "libfabric: a cancelled receive's payload was not taken back within "
                               << bound_ << " s (the progress thread is stuck inside libfabric?)");
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
  std::deque<const gossamer::detail::RequestState*> cancels;  ///< for the progress thread (under mu)
  std::atomic<bool> cancelsPending{false};
  std::function<void()> wake;  ///< wakes the progress thread (under mu; empty once closed)
  bool closed = false;         ///< under mu: the endpoint is closed, nothing writes any more

 private:
  double bound_;
};

class LibfabricTransport final : public Transport, public std::enable_shared_from_this<LibfabricTransport> {
 public:
  LibfabricTransport(const Options& o, Store& store)
      : opt_(o),
        guard_(std::make_shared<CopyGuard>(o.timeoutSeconds)),
        box_(o.worldSize),
        life_("libfabric", o.rank, o.worldSize, box_) {
    peerTimeout_ = o.peerTimeoutSeconds > 0 ? o.peerTimeoutSeconds : std::min(o.timeoutSeconds / 2, 5.0);
    GOSSAMER_ENFORCE(peerTimeout_ > o.heartbeatSeconds,
                     "peer timeout " << peerTimeout_ << " s must exceed the heartbeat interval "
                                     << o.heartbeatSeconds << " s");
    info_ = detail::selectProvider(o);
    const fi_info* fi = info_.get();
    provider_ = fi->fabric_attr->prov_name;
    mrLocal_ = (fi->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
    // shm peers are on this host: their process exit is watched directly
    // (pidfd), which is faster than heartbeats and never touches a dead
    // peer's shared memory, where a heartbeat could wedge this rank.
    heartbeats_ = provider_.rfind("shm", 0) != 0;
    maxMsgBytes_ = fi->ep_attr->max_msg_size;
    if (maxMsgBytes_ < kEnvelopeBytes + kAnnounceBytes)
      throw Error("libfabric provider " + provider_ + ": max_msg_size " + std::to_string(maxMsgBytes_) +
                  " bytes is below the " + std::to_string(kEnvelopeBytes + kAnnounceBytes) +
                  " bytes this transport needs");
    injectBytes_ = std::min(fi->tx_attr->inject_size, kInjectMax);
    inlineBytes_ = std::min(o.inlineBytes, maxMsgBytes_ - kEnvelopeBytes - kFrameHeaderBytes);
    poolBytes_ = kEnvelopeBytes + std::max(kFrameHeaderBytes + inlineBytes_, kAnnounceBytes);
    // (No frame payload exceeds kMaxPayloadBytes, so neither does a piece.)
    pieceBytes_ = std::min<std::size_t>(
        std::min(o.maxPieceBytes > 0 ? o.maxPieceBytes : kDefaultPieceBytes, maxMsgBytes_), kMaxPayloadBytes);

    openEndpoint();
    exchangeAddresses(store);

    rx_ = std::vector<PeerRx>(static_cast<std::size_t>(o.worldSize));
    const auto now = Clock::now();
    for (auto& r : rx_) r.lastHeard = now;
    beatHeader_ = encodeFrameHeader(FrameKind::kData, DType::kBytes, static_cast<std::uint32_t>(o.rank),
                                    Tag{Op::kControl, 0, 0}, {});
    postPool();
  }

  /// Starts the progress thread, which keeps the transport alive while it runs
  /// (see close()). Call once, right after construction.
  void start() {
    {
      std::lock_guard<std::mutex> lk(guard_->mu);
      guard_->wake = [this] { wake(); };  // cleared by teardown(), while this object lives
    }
    verifier_ = std::thread([self = shared_from_this()] { self->verifyLoop(); });
    progress_ = std::thread([self = shared_from_this()] {
      self->progressLoop();
      bool abandoned = false;
      {
        std::lock_guard<std::mutex> lk(self->exitMu_);
        self->progressExited_ = true;
        abandoned = self->abandoned_;
      }
      self->exitCv_.notify_all();
      // close() gave up on this thread (it seemed stuck), yet it came back:
      // it closes the endpoint itself, so that nothing is left behind.
      if (abandoned) self->teardown();
    });
  }

  ~LibfabricTransport() override {
    try {
      close();
    } catch (...) {
      // Destructors must not throw; close() failures were already reported.
    }
  }

  int rank() const override { return opt_.rank; }
  int worldSize() const override { return opt_.worldSize; }
  std::string name() const override { return "libfabric"; }
  double timeoutSeconds() const override { return opt_.timeoutSeconds; }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    life_.checkSend(dst);
    // (encodeFrameHeader validates the size and dtype: InvalidArgument before anything is queued.)
    const bool large = dst != opt_.rank && data.size() > tx_[static_cast<std::size_t>(dst)]->inlineLimit;
    const auto header =
        large ? HeaderBytes{}
              : encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data);
    if (dst == opt_.rank) {  // loop back without the fabric
      std::shared_ptr<std::byte[]> owned(new std::byte[std::max<std::size_t>(data.size(), 1)]);
      if (!data.empty()) std::memcpy(owned.get(), data.data(), data.size());
      box_.deliver(dst, tag, InboundPayload{owned, std::span<const std::byte>(owned.get(), data.size())});
    } else {
      if (tx_[static_cast<std::size_t>(dst)]->gone) throwGone(dst);
      // The bytes are copied and queued; the progress thread posts them. This
      // thread makes no libfabric call that could wait on a peer (kick() may
      // fi_cq_signal, nothing else), so a dead shm peer's lock cannot hold it
      // (docs/libfabric.md).
      if (!large)
        sendFrame(dst, kChanFrame, header, data);
      else
        sendLarge(dst, tag, dtype, data);
      kick();
      // A large message waits for the progress thread to post it: give it
      // the core now (a no-op with cores to spare). On 2 cores shared by a
      // sender's and a receiver's threads, shm streaming at 4 MiB went from
      // 0.85x to 0.96x of zmq ipc (docs/libfabric.md).
      if (data.size() > tx_[static_cast<std::size_t>(dst)]->inlineLimit) std::this_thread::yield();
    }
    life_.countSent(data.size());
    return Request(gossamer::detail::completedRequest(dst, data.size()));
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    life_.checkOpen("irecv");
    auto r = box_.post(sources, tag, buffer, guard_);
    kick();  // a message is expected: keep the progress thread polling
    return r;
  }

  void abort() override {
    opt_.lingerSeconds = 0;
    aborting_ = true;
    close();
  }

  void close() override {
    if (!life_.beginClose()) return;
    // Goodbye handshake (as in the zmq transport): the bye follows everything
    // this rank sent to the peer (same sequence); the peer acknowledges it once
    // it has received all of that. Wait, bounded by the linger period, until
    // every peer acknowledged, is closing itself, or is gone.
    for (int p = 0; p < opt_.worldSize; ++p) {
      if (p == opt_.rank || tx_[static_cast<std::size_t>(p)]->gone || life_.leaving(p)) continue;
      sendControl(p, FrameKind::kBye, PeerLifecycle::byeSegment(aborting_));
    }
    kick();
    (void)life_.waitSettled(opt_.lingerSeconds,
                            [&](int p) { return tx_[static_cast<std::size_t>(p)]->gone.load(); });
    stop_ = true;
    wake();
    // The progress thread posts what is still queued (the byes), then stops
    // within a loop turn (it never sleeps more than 2 ms), unless it is stuck
    // inside libfabric: shm spins forever on a lock that a killed peer held.
    // It counts as stuck once it burnt 200 ms of CPU time without beginning
    // a loop turn (a thread that is merely not scheduled, on a loaded
    // machine, burns none), or after 2 s in all; then it is left behind with
    // the endpoint (it holds the transport alive) rather than this call
    // hanging too.
    bool exited = true;
    if (progress_.joinable()) {
      clockid_t cpuClock{};
      const bool haveCpuClock = pthread_getcpuclockid(progress_.native_handle(), &cpuClock) == 0;
      const auto cpuSeconds = [&] {
        timespec ts{};
        clock_gettime(cpuClock, &ts);
        return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
      };
      const double cpu0 = haveCpuClock ? cpuSeconds() : 0;
      const auto turn0 = loopStamp_.load();
      std::unique_lock<std::mutex> lk(exitMu_);
      const auto deadline = Clock::now() + std::chrono::seconds(2);
      while (!progressExited_ && Clock::now() < deadline &&
             !(haveCpuClock && loopStamp_.load() == turn0 && cpuSeconds() - cpu0 > 0.2))
        exitCv_.wait_for(lk, std::chrono::milliseconds(10));
      exited = progressExited_;
    }
    // No progress thread moves data any more (or it is stuck inside
    // libfabric, spinning on a lock): cancellers waiting for a take-back it
    // will not do may go. (They hold `exclusive`, which the checksum thread
    // may be waiting for.)
    guard_->close();
    // The checksum thread never waits inside libfabric: stop it either way,
    // before the progress thread may tear down what it reads.
    stopVerifier();
    if (!exited) {
      std::lock_guard<std::mutex> lk(exitMu_);
      exited = progressExited_;
      abandoned_ = !exited;  // should it come back after all, it tears down itself
    }
    if (exited) {
      if (progress_.joinable()) progress_.join();
    } else if (progress_.joinable()) {
      GOSSAMER_LOG(
          kError,
          "libfabric rank "
              << opt_.rank
              << ": the progress thread is stuck inside libfabric (a peer died holding a shared lock?); "
                 "leaving it and the endpoint behind");
      progress_.detach();
    }
    box_.close();
    if (exited) teardown();
  }

  TransportStats stats() const override { return life_.stats(); }

 private:
  // ---- setup ---------------------------------------------------------------------

  void openEndpoint() {
    fi_info* fi = info_.get();
    fid_fabric* fabric = nullptr;
    check(fi_fabric(fi->fabric_attr, &fabric, nullptr), "fi_fabric");
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    check(fi_domain(fabric_.get(), fi, &domain, nullptr), "fi_domain");
    domain_.reset(domain);

    // A completion queue with a file-descriptor wait object lets the progress
    // thread sleep until something arrives (tcp); shm has none, so there the
    // thread polls with a short back-off.
    fi_cq_attr cqAttr{};
    cqAttr.format = FI_CQ_FORMAT_TAGGED;
    cqAttr.size = fi->tx_attr->size + fi->rx_attr->size;
    cqAttr.wait_obj = FI_WAIT_FD;
    fid_cq* cq = nullptr;
    if (fi_cq_open(domain_.get(), &cqAttr, &cq, nullptr) == 0) {
      cqWaits_ = true;
    } else {
      cqAttr.wait_obj = FI_WAIT_NONE;
      check(fi_cq_open(domain_.get(), &cqAttr, &cq, nullptr), "fi_cq_open");
    }
    cq_.reset(cq);

    fi_av_attr avAttr{};
    avAttr.type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type : FI_AV_TABLE;
    avAttr.count = static_cast<std::size_t>(opt_.worldSize);
    fid_av* av = nullptr;
    check(fi_av_open(domain_.get(), &avAttr, &av, nullptr), "fi_av_open");
    av_.reset(av);

    fid_ep* ep = nullptr;
    check(fi_endpoint(domain_.get(), fi, &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    check(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind (address vector)");
    check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (completion queue)");
    check(fi_enable(ep_.get()), "fi_enable");
  }

  // Publishes "<provider>\n<frame bytes>\n<address>" (frame bytes: the largest
  // frame, header included, this rank's buffers take) and inserts every peer's
  // address. A rank sends a peer payloads inside frames only up to what that
  // peer's buffers take, so ranks may differ in inlineBytes.
  void exchangeAddresses(Store& store) {
    std::size_t len = 0;
    const int rc = fi_getname(&ep_->fid, nullptr, &len);
    if (rc != -FI_ETOOSMALL) check(rc, "fi_getname");
    std::string address(len, '\0');
    check(fi_getname(&ep_->fid, address.data(), &len), "fi_getname");
    address.resize(len);
    const std::string prefix = opt_.storePrefix + "/libfabric/";
    store.set(prefix + std::to_string(opt_.rank), provider_ + '\n' +
                                                      std::to_string(poolBytes_ - kEnvelopeBytes) + '\n' +
                                                      std::to_string(::getpid()) + '\n' + address);
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(opt_.worldSize));
    for (int p = 0; p < opt_.worldSize; ++p) keys.push_back(prefix + std::to_string(p));
    store.wait(keys, opt_.timeoutSeconds);

    for (int p = 0; p < opt_.worldSize; ++p) {
      tx_.push_back(std::make_unique<PeerTx>());
      if (p == opt_.rank) continue;
      const std::string key = prefix + std::to_string(p);
      const std::string value = store.get(key, opt_.timeoutSeconds);
      const auto nl1 = value.find('\n');
      const auto nl2 = nl1 == std::string::npos ? nl1 : value.find('\n', nl1 + 1);
      const auto nl3 = nl2 == std::string::npos ? nl2 : value.find('\n', nl2 + 1);
      if (nl3 == std::string::npos || nl3 + 1 >= value.size())
        throw Error("rank " + std::to_string(p) + " published a malformed libfabric address (store key " +
                    key + ")");
      const std::string theirs = value.substr(0, nl1);
      if (theirs != provider_)
        throw Error("rank " + std::to_string(p) + " uses libfabric provider '" + theirs + "' but rank " +
                    std::to_string(opt_.rank) + " uses '" + provider_ +
                    "': every rank must configure the same transport.provider");
      const std::string frameText = value.substr(nl1 + 1, nl2 - nl1 - 1);
      std::size_t frameBytes = 0;
      const auto [end, ec] =
          std::from_chars(frameText.data(), frameText.data() + frameText.size(), frameBytes);
      if (ec != std::errc() || end != frameText.data() + frameText.size() || frameBytes < kAnnounceBytes ||
          frameBytes > maxMsgBytes_ - kEnvelopeBytes)
        throw Error("rank " + std::to_string(p) + " published a frame buffer size of '" + frameText +
                    "' bytes (store key " + key + "); expected " + std::to_string(kAnnounceBytes) + " to " +
                    std::to_string(maxMsgBytes_ - kEnvelopeBytes));
      tx_.back()->inlineLimit = std::min(inlineBytes_, frameBytes - kFrameHeaderBytes);
      const std::string pidText = value.substr(nl2 + 1, nl3 - nl2 - 1);
      long pid = 0;
      const auto [pidEnd, pidEc] = std::from_chars(pidText.data(), pidText.data() + pidText.size(), pid);
      if (pidEc != std::errc() || pidEnd != pidText.data() + pidText.size() || pid <= 0)
        throw Error("rank " + std::to_string(p) + " published a process id of '" + pidText + "' (store key " +
                    key + ")");
      // Same host by construction for shm: watch the peer's process, so that
      // nothing is sent to it once it exited (see processExited).
      if (provider_.rfind("shm", 0) == 0) {
        tx_.back()->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
        watchesPids_ = watchesPids_ || tx_.back()->pidfd >= 0;
      }
      const std::string peerAddress = value.substr(nl3 + 1);
      fi_addr_t addr = FI_ADDR_UNSPEC;
      const int n = fi_av_insert(av_.get(), peerAddress.data(), 1, &addr, 0, nullptr);
      if (n != 1)
        throw Error("libfabric fi_av_insert: cannot use the address rank " + std::to_string(p) +
                    " published (" + (n < 0 ? errorText(n) : std::to_string(n) + " inserted") + ")");
      tx_.back()->addr = addr;
    }
  }

  FidPtr<fid_mr> registerLocal(const void* buf, std::size_t len, std::uint64_t access, void** desc) {
    *desc = nullptr;
    if (!mrLocal_ || len == 0) return {};
    fid_mr* mr = nullptr;
    check(fi_mr_reg(domain_.get(), buf, len, access, 0, nextKey_++, 0, &mr, nullptr), "fi_mr_reg");
    *desc = fi_mr_desc(mr);
    return FidPtr<fid_mr>(mr);
  }

  void postPool() {
    poolMem_.resize(kPoolBuffers * poolBytes_);
    poolMr_ = registerLocal(poolMem_.data(), poolMem_.size(), FI_RECV, &poolDesc_);
    pool_ = std::vector<PoolOp>(kPoolBuffers);
    for (std::size_t i = 0; i < kPoolBuffers; ++i) {
      pool_[i].buf = poolMem_.data() + i * poolBytes_;
      repost(pool_[i]);
    }
  }

  void repost(PoolOp& op) {
    const ssize_t rc = fi_trecv(ep_.get(), op.buf, poolBytes_, poolDesc_, FI_ADDR_UNSPEC, kPoolTag, 0,
                                static_cast<FabricOp*>(&op));
    if (rc == -FI_EAGAIN) {
      unposted_.push_back(&op);
      return;
    }
    check(rc, "fi_trecv (frame buffer)");
  }

  bool postBulk(BulkRecvOp& op) {
    const ssize_t rc = fi_trecv(ep_.get(), op.msg->base() + op.offset, op.len, op.msg->desc, FI_ADDR_UNSPEC,
                                op.tag, 0, static_cast<FabricOp*>(&op));
    if (rc == -FI_EAGAIN) return false;
    check(rc, "fi_trecv (payload)");
    op.posted = true;
    ++op.msg->outstanding;
    ++bulkPosted_;
    return true;
  }

  void retryUnposted() {
    while (!unposted_.empty()) {
      FabricOp* op = unposted_.front();
      if (op->kind == OpKind::kPoolRecv) {
        auto* p = static_cast<PoolOp*>(op);
        const ssize_t rc =
            fi_trecv(ep_.get(), p->buf, poolBytes_, poolDesc_, FI_ADDR_UNSPEC, kPoolTag, 0, op);
        if (rc == -FI_EAGAIN) return;
        check(rc, "fi_trecv (frame buffer)");
      }
      unposted_.pop_front();
    }
  }

  // ---- sending -------------------------------------------------------------------

  // shm: true once the peer's process exited. A killed shm peer may have died
  // holding the lock of its own region, and sending to it would then spin
  // forever inside libfabric; so every send to it checks first.
  static bool processExited(PeerTx& peer) {
    if (peer.exited) return true;
    if (peer.pidfd < 0) return false;
    pollfd pfd{peer.pidfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) peer.exited = true;
    return peer.exited;
  }

  // isend to a peer known to be gone: the reason it is gone.
  [[noreturn]] void throwGone(int dst) {
    std::exception_ptr why;
    {
      auto& peer = *tx_[static_cast<std::size_t>(dst)];
      std::lock_guard<std::mutex> lk(peer.mu);
      why = peer.why;
    }
    try {
      if (why) std::rethrow_exception(why);
    } catch (const PeerFailure&) {
      throw;
    } catch (const std::exception& e) {
      throw PeerFailure(dst, std::string("cannot send: ") + e.what());
    }
    throw PeerFailure(dst, "cannot send: peer is gone");
  }

  // A pool-tag message [envelope (filled in by the caller)][a][b].
  std::unique_ptr<SendOp> makeSendOp(int dst, std::span<const std::byte> a, std::span<const std::byte> b) {
    auto op = std::make_unique<SendOp>();
    op->dst = dst;
    op->tag = kPoolTag;
    op->own.resize(kEnvelopeBytes + a.size() + b.size());
    if (!a.empty()) std::memcpy(op->own.data() + kEnvelopeBytes, a.data(), a.size());
    if (!b.empty()) std::memcpy(op->own.data() + kEnvelopeBytes + a.size(), b.data(), b.size());
    op->data = op->own.data();
    op->len = op->own.size();
    return op;
  }

  // Progress thread: posts `op` (ownership passes to libfabric until its
  // completion; an injected one is done at once). Returns 0, -FI_EAGAIN (op
  // untouched) or another libfabric error. Registers the buffer first when
  // the provider wants local registration (on this thread too: application
  // threads make no libfabric call at all).
  ssize_t post(std::unique_ptr<SendOp>& op, fi_addr_t addr) {
    if (!op->payload && op->len <= injectBytes_) {
      const ssize_t rc = fi_tinject(ep_.get(), op->data, op->len, addr, op->tag);
      if (rc == 0) op.reset();
      return rc;
    }
    if (mrLocal_) {
      if (op->payload) {
        if (!op->payload->mr)
          op->payload->mr =
              registerLocal(op->payload->bytes.get(), op->payload->size, FI_SEND, &op->payload->desc);
        op->desc = op->payload->desc;
      } else if (!op->mr) {
        op->mr = registerLocal(op->data, op->len, FI_SEND, &op->desc);
      }
    }
    FabricOp* raw = op.get();
    {
      std::lock_guard<std::mutex> lk(opsMu_);
      inflight_.insert(raw);
      op->live = !tx_[static_cast<std::size_t>(op->dst)]->gone;
      if (op->live) ++liveSends_;
    }
    const ssize_t rc = fi_tsend(ep_.get(), op->data, op->len, op->desc, addr, op->tag, raw);
    if (rc == 0) {
      (void)op.release();
    } else {
      std::lock_guard<std::mutex> lk(opsMu_);
      inflight_.erase(raw);
      if (op->live) --liveSends_;
    }
    return rc;
  }

  // Caller holds peer.mu. Queues `op` for the progress thread, behind earlier sends.
  void queueLocked(PeerTx& peer, std::unique_ptr<SendOp> op) {
    peer.pending.push_back(std::move(op));
    ++queued_;
  }

  // One message on the pool's tag to `dst`: the envelope (channel, this rank,
  // the next frame sequence number), then a ++ b; queued for the progress thread.
  void sendFrame(int dst, std::uint64_t channel, std::span<const std::byte> a, std::span<const std::byte> b) {
    auto op = makeSendOp(dst, a, b);  // copy outside the lock
    auto& peer = *tx_[static_cast<std::size_t>(dst)];
    std::lock_guard<std::mutex> lk(peer.mu);
    if (peer.shut) throw Cancelled("send on a closed transport (rank " + std::to_string(opt_.rank) + ")");
    if (processExited(peer)) throw PeerFailure(dst, kProcessExited);
    putU64(op->own.data(), fabricTag(channel, opt_.rank, peer.frameSeq++));
    queueLocked(peer, std::move(op));
  }

  // A payload above inlineBytes: an announcement on the frame sequence, then
  // the payload in pieces on the bulk channel.
  void sendLarge(int dst, const Tag& tag, DType dtype, std::span<const std::byte> data) {
    // The header's checksum comes out of the copy: one pass over the
    // caller's bytes instead of two.
    // Size and dtype checked (InvalidArgument) before anything is allocated.
    (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data.size(),
                            0u);
    auto payload = std::make_shared<Payload>();
    payload->bytes = cache_->get(data.size());
    payload->size = data.size();
    const std::uint32_t sum = copyAndCrc32c(payload->bytes.get(), data.data(), data.size());
    const auto header = encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag,
                                          data.size(), sum);
    const std::size_t pieces = ceilDiv(data.size(), pieceBytes_);
    std::vector<std::unique_ptr<SendOp>> ops;
    ops.reserve(pieces);
    for (std::size_t i = 0; i < pieces; ++i) {
      auto op = std::make_unique<SendOp>();
      op->dst = dst;
      op->payload = payload;
      op->data = payload->bytes.get() + i * pieceBytes_;
      op->len = std::min(pieceBytes_, data.size() - i * pieceBytes_);
      ops.push_back(std::move(op));
    }
    std::array<std::byte, kAnnounceBytes> announce{};
    std::memcpy(announce.data(), header.data(), header.size());
    putU64(announce.data() + kFrameHeaderBytes, pieceBytes_);
    auto annOp = makeSendOp(dst, announce, {});

    auto& peer = *tx_[static_cast<std::size_t>(dst)];
    std::lock_guard<std::mutex> lk(peer.mu);
    if (peer.shut) throw Cancelled("send on a closed transport (rank " + std::to_string(opt_.rank) + ")");
    if (processExited(peer)) throw PeerFailure(dst, kProcessExited);
    const std::uint64_t first = peer.bulkSeq;
    peer.bulkSeq += pieces;
    putU64(annOp->own.data() + kEnvelopeBytes + kFrameHeaderBytes + 8, first & kSeqMask);
    putU64(annOp->own.data(), fabricTag(kChanAnnounce, opt_.rank, peer.frameSeq++));
    queueLocked(peer, std::move(annOp));
    for (std::size_t i = 0; i < pieces; ++i) {
      ops[i]->tag = fabricTag(kChanBulk, opt_.rank, first + i);
      queueLocked(peer, std::move(ops[i]));
    }
  }

  // Best effort: a control frame (bye, bye-ack) that cannot be sent only
  // means the peer finds out by its heartbeat timeout or pidfd.
  void sendControl(int p, FrameKind kind, std::uint32_t detail = 0) {
    const auto h = encodeFrameHeader(kind, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                     Tag{Op::kControl, detail, 0}, {});
    try {
      sendFrame(p, kChanFrame, h, {});
    } catch (const Error&) {
      // see above
    }
  }

  // Progress thread: posts the queued sends, in order per peer, until the
  // provider refuses one (-FI_EAGAIN: retried on the next turn). Holds no
  // lock inside libfabric: application threads keep queueing meanwhile.
  void flushPending() {
    for (int p = 0; p < opt_.worldSize && queued_ > 0; ++p) {
      auto& peer = *tx_[static_cast<std::size_t>(p)];
      std::deque<std::unique_ptr<SendOp>> batch;
      {
        std::lock_guard<std::mutex> lk(peer.mu);
        if (peer.shut) continue;
        batch.swap(peer.pending);
      }
      if (batch.empty()) continue;
      std::exception_ptr failure;
      if (processExited(peer)) {  // never touch a dead shm peer's memory
        queued_ -= batch.size();
        batch.clear();
        failure = std::make_exception_ptr(PeerFailure(p, kProcessExited));
      }
      while (!batch.empty()) {
        const ssize_t rc = post(batch.front(), peer.addr);
        if (rc == -FI_EAGAIN) break;
        batch.pop_front();
        --queued_;
        if (rc != 0) {
          failure = std::make_exception_ptr(PeerFailure(p, "libfabric fi_tsend: " + errorText(rc)));
          break;
        }
      }
      if (!batch.empty()) {  // refused for now: back in front of what was queued meanwhile
        std::lock_guard<std::mutex> lk(peer.mu);
        peer.pending.insert(peer.pending.begin(), std::make_move_iterator(batch.begin()),
                            std::make_move_iterator(batch.end()));
      }
      if (failure) failPeer(p, failure);
    }
  }

  void sendBeats() {
    if (!heartbeats_) return;
    for (int p = 0; p < opt_.worldSize; ++p) {
      if (p == opt_.rank || rx_[static_cast<std::size_t>(p)].gone) continue;
      // Unordered and dropped when the provider is busy: the next one will do. A
      // provider that knows the peer is gone says so here (sockets: -FI_ENOENT).
      auto& peer = *tx_[static_cast<std::size_t>(p)];
      if (peer.gone || processExited(peer)) continue;  // checkSilence reports an exited one
      auto op = makeSendOp(p, beatHeader_, {});
      putU64(op->own.data(), fabricTag(kChanBeat, opt_.rank, 0));  // unordered: sequence number 0
      const ssize_t rc = post(op, peer.addr);
      if (rc < 0 && rc != -FI_EAGAIN)
        failPeer(p, std::make_exception_ptr(PeerFailure(p, "connection lost: libfabric (" + provider_ +
                                                               ") refuses to send to it: " + errorText(rc))));
    }
  }

  // ---- progress thread --------------------------------------------------------------

  // Wakes the progress thread if it sleeps, and keeps it polling for a while.
  void kick() {
    lastKick_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    if (sleeping_.load()) wake();
  }

  void wake() {
    if (cqWaits_) {
      fi_cq_signal(cq_.get());
    } else {
      {
        std::lock_guard<std::mutex> lk(kickMu_);
        kicked_ = true;
      }
      kickCv_.notify_one();
    }
  }

  void progressLoop() {
    std::array<fi_cq_tagged_entry, 32> entries{};
    const auto beatEvery = std::chrono::duration<double>(opt_.heartbeatSeconds);
    const auto spin = std::chrono::duration<double>(opt_.spinSeconds);
    auto lastBeat = Clock::now() - std::chrono::hours(1);
    auto lastCheck = Clock::now();
    auto lastLoop = Clock::now();
    auto lastActivity = Clock::now();
    auto backoff = std::chrono::microseconds(20);
    while (!stop_) {
      try {
        auto now = Clock::now();
        loopStamp_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
        // If this thread itself did not run for a while (machine overloaded),
        // silence from the peers proves nothing: restart their clocks.
        if (secondsSince(lastLoop, now) > peerTimeout_ / 4)
          for (auto& r : rx_) r.lastHeard = now;
        lastLoop = now;
        ssize_t n = fi_cq_read(cq_.get(), entries.data(), entries.size());
        const bool active = handleCq(n, entries.data());
        if (queued_ > 0) flushPending();
        if (!unposted_.empty()) retryUnposted();
        if (bulkPump_) pumpBulk();
        if (verifying_ > 0) drainVerified();
        if (guard_->cancelsPending) takeBackCancelled();
        if (now - lastBeat >= beatEvery) {
          sendBeats();
          lastBeat = now;
        }
        if (secondsSince(lastCheck, now) >= 0.01) {
          checkSilence(now);
          lastCheck = now;
        }
        if (active) {
          lastActivity = Clock::now();
          backoff = std::chrono::microseconds(20);
          continue;
        }
        const Clock::time_point kicked{Clock::duration(lastKick_.load(std::memory_order_relaxed))};
        // Keep polling while sends wait or are under way, or payload pieces are due.
        // (Not for payloads with the checksum thread: it wakes this one when done.)
        if (Clock::now() - std::max(lastActivity, kicked) < spin || queued_ > 0 || liveSends_ > 0 ||
            bulkPosted_ > 0) {
          std::this_thread::yield();
          continue;
        }
        // Idle: sleep until something arrives (wait object), a kick, or the next heartbeat.
        // (sleeping_ is set before queued_ is read again, and isend queues before it
        // reads sleeping_: a send queued meanwhile is seen here or wakes this thread.)
        sleeping_ = true;
        if (queued_ > 0) {
          sleeping_ = false;
          continue;
        }
        if (cqWaits_) {
          n = fi_cq_sread(cq_.get(), entries.data(), entries.size(), nullptr, 2);
          sleeping_ = false;
          if (handleCq(n, entries.data())) lastActivity = Clock::now();
        } else {
          std::unique_lock<std::mutex> lk(kickMu_);
          kickCv_.wait_for(lk, backoff, [&] { return kicked_ || stop_.load(); });
          kicked_ = false;
          sleeping_ = false;
          backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
        }
      } catch (const std::exception& e) {
        // A libfabric call failed outside any one peer's traffic: the endpoint is unusable.
        GOSSAMER_LOG(kError, "libfabric rank " << opt_.rank << ": progress error: " << e.what());
        for (int p = 0; p < opt_.worldSize; ++p)
          if (p != opt_.rank)
            failPeer(p, std::make_exception_ptr(
                            PeerFailure(p, std::string("local libfabric error: ") + e.what())));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    // Closing: post what is still queued (the byes of close() and abort()).
    try {
      if (queued_ > 0) flushPending();
    } catch (const std::exception& e) {
      GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": progress error at close: " << e.what());
    }
  }

  // Handles what fi_cq_read / fi_cq_sread returned. True if anything completed.
  bool handleCq(ssize_t n, fi_cq_tagged_entry* entries) {
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) handleCompletion(entries[i]);
      return true;
    }
    if (n == -FI_EAVAIL) {
      handleError();
      return true;
    }
    // (-FI_EINTR: a signal interrupted a system call inside the provider, a
    // debugger attaching for one; nothing is lost, the next read goes on.)
    if (n != -FI_EAGAIN && n != -FI_ECANCELED && n != -FI_ETIMEDOUT && n != -FI_EINTR) check(n, "fi_cq_read");
    return false;
  }

  void handleCompletion(const fi_cq_tagged_entry& e) {
    auto* op = static_cast<FabricOp*>(e.op_context);
    switch (op->kind) {
      case OpKind::kSend:
        finishSend(static_cast<SendOp*>(op));
        break;
      case OpKind::kPoolRecv: {
        auto* p = static_cast<PoolOp*>(op);
        onPoolMessage(std::span<const std::byte>(p->buf, e.len));
        repost(*p);
        break;
      }
      case OpKind::kBulkRecv:
        onBulkPiece(*static_cast<BulkRecvOp*>(op), e.len);
        break;
    }
  }

  void finishSend(SendOp* op) {
    {
      std::lock_guard<std::mutex> lk(opsMu_);
      inflight_.erase(op);
      if (op->live) --liveSends_;
    }
    delete op;  // NOLINT(cppcoreguidelines-owning-memory): owned by libfabric since post()
  }

  // A completion-queue error entry: the provider's account of a failed operation.
  void handleError() {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq_.get(), &err, 0) < 0) return;
    auto* op = static_cast<FabricOp*>(err.op_context);
    if (!op) return;
    std::array<char, 256> buf{};
    const char* prov = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf.data(), buf.size());
    const std::string why = std::string(fi_strerror(err.err)) + " (provider " + provider_ + ": " +
                            (prov ? prov : "no detail") + ")";
    const bool cancelled = err.err == FI_ECANCELED;
    switch (op->kind) {
      case OpKind::kSend: {
        auto* s = static_cast<SendOp*>(op);
        const int dst = s->dst;
        finishSend(s);
        if (!cancelled)
          failPeer(dst, std::make_exception_ptr(
                            PeerFailure(dst, "connection lost: libfabric failed a send to it: " + why)));
        break;
      }
      case OpKind::kPoolRecv: {
        auto* p = static_cast<PoolOp*>(op);
        if (cancelled) break;  // closing
        // A truncated message still left its first bytes, the envelope, in the buffer.
        int src = -1;
        if (err.err == FI_ETRUNC) {
          const std::uint64_t envelope = getU64(p->buf);
          const std::uint64_t ch = channelOf(envelope);
          if (ch == kChanFrame || ch == kChanBeat || ch == kChanAnnounce) src = sourceOf(envelope);
        }
        std::exception_ptr e;
        if (err.err == FI_ETRUNC)
          e = std::make_exception_ptr(ProtocolError(src, poolBytes_ - kEnvelopeBytes,
                                                    "the frame exceeds the largest frame this rank takes (" +
                                                        std::to_string(poolBytes_ - kEnvelopeBytes) +
                                                        " bytes) by " + std::to_string(err.olen) +
                                                        " bytes: " + why));
        else
          e = std::make_exception_ptr(
              PeerFailure(src, "connection lost: libfabric failed a receive from it: " + why));
        if (src >= 0 && src < opt_.worldSize && src != opt_.rank) {
          failPeer(src, e);
        } else {
          try {
            std::rethrow_exception(e);
          } catch (const Error& x) {
            GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": " << x.what());
          }
        }
        repost(*p);
        break;
      }
      case OpKind::kBulkRecv: {
        auto& b = *static_cast<BulkRecvOp*>(op);
        InboundMsg* msg = b.msg;
        --msg->outstanding;
        --bulkPosted_;
        if (cancelled && msg->cancelling && !msg->zombie) {  // taken back from a cancelled receive
          b.posted = false;  // posted again into this transport's buffer (takeBack)
          takeBack(*msg);
          break;
        }
        b.done = true;
        if (msg->zombie) {
          buryIfDone(msg);
          break;
        }
        const int src = msg->source;
        if (err.err == FI_ETRUNC)
          failPeer(src, std::make_exception_ptr(
                            ProtocolError(src, kFrameHeaderBytes + b.offset + b.len,
                                          "a payload piece exceeds its announced " + std::to_string(b.len) +
                                              " bytes by " + std::to_string(err.olen) + " bytes: " + why)));
        else
          failPeer(src, std::make_exception_ptr(
                            PeerFailure(src, "connection lost: libfabric failed a receive from it: " + why)));
        break;
      }
    }
  }

  void onPoolMessage(std::span<const std::byte> message) {
    if (message.size() < kEnvelopeBytes) {
      GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": dropped a message of " << message.size()
                                               << " bytes, shorter than its envelope");
      return;
    }
    const std::uint64_t envelope = getU64(message.data());
    const auto bytes = message.subspan(kEnvelopeBytes);
    const std::uint64_t channel = channelOf(envelope);
    const int src = sourceOf(envelope);
    if (src >= opt_.worldSize || src == opt_.rank) {
      GOSSAMER_LOG(kWarning,
                   "libfabric rank " << opt_.rank << ": dropped a message whose envelope names rank " << src);
      return;
    }
    auto& rx = rx_[static_cast<std::size_t>(src)];
    rx.lastHeard = Clock::now();
    if (rx.gone) return;
    try {
      if (channel == kChanBeat) {
        checkBeat(src, bytes);
        return;
      }
      if (channel != kChanFrame && channel != kChanAnnounce)
        throw ProtocolError(src, 0, "message on unknown channel " + std::to_string(channel));
      const std::uint64_t seq = envelope & kSeqMask;
      if (seq != rx.nextSeq) {
        if (((rx.nextSeq - seq) & kSeqMask) < (kSeqMask >> 1))
          throw ProtocolError(src, 0,
                              "frame sequence number " + std::to_string(seq) + " repeats (expected " +
                                  std::to_string(rx.nextSeq) + ")");
        if (rx.early.size() >= kMaxEarlyFrames)
          throw ProtocolError(src, 0,
                              "frame " + std::to_string(rx.nextSeq) + " missing while " +
                                  std::to_string(rx.early.size()) + " later ones arrived");
        if (rx.early.empty()) rx.gapSince = Clock::now();
        rx.early.emplace(seq, std::make_pair(channel, std::vector<std::byte>(bytes.begin(), bytes.end())));
        return;
      }
      processFrame(src, channel, bytes);
      rx.nextSeq = (rx.nextSeq + 1) & kSeqMask;
      for (auto it = rx.early.find(rx.nextSeq); it != rx.early.end() && !rx.gone;
           it = rx.early.find(rx.nextSeq)) {
        const auto [ch, held] = std::move(it->second);
        rx.early.erase(it);
        processFrame(src, ch, held);
        rx.nextSeq = (rx.nextSeq + 1) & kSeqMask;
      }
      flushInbound(src);
    } catch (const ProtocolError& e) {
      GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": " << e.what());
      failPeer(src, std::current_exception());
    } catch (const std::exception& e) {  // e.g. out of memory for an announced payload
      failPeer(src, std::make_exception_ptr(PeerFailure(src, std::string("cannot receive: ") + e.what())));
    }
  }

  void checkBeat(int src, std::span<const std::byte> bytes) {
    if (bytes.size() != kFrameHeaderBytes)
      throw ProtocolError(src, std::min(bytes.size(), kFrameHeaderBytes),
                          "heartbeat of " + std::to_string(bytes.size()) + " bytes, expected " +
                              std::to_string(kFrameHeaderBytes));
    const FrameHeader h = decodeFrameHeader(bytes, src, opt_.worldSize);
    if (h.kind != FrameKind::kData || h.tag.op != Op::kControl || h.payloadBytes != 0 ||
        static_cast<int>(h.source) != src)
      throw ProtocolError(src, frame_offset::kKind, "malformed heartbeat frame");
    verifyFramePayload(bytes, h, {}, src);
  }

  // One frame or announcement from `src`, in sequence order.
  void processFrame(int src, std::uint64_t channel, std::span<const std::byte> bytes) {
    if (bytes.size() < kFrameHeaderBytes)
      throw ProtocolError(
          src, bytes.size(),
          "message of " + std::to_string(bytes.size()) + " bytes is shorter than a frame header");
    const auto headerSpan = bytes.first(kFrameHeaderBytes);
    const FrameHeader h = decodeFrameHeader(headerSpan, src, opt_.worldSize);
    if (static_cast<int>(h.source) != src)
      throw ProtocolError(src, frame_offset::kSource,
                          "frame claims source rank " + std::to_string(h.source) +
                              " but its envelope says rank " + std::to_string(src));
    auto msg = std::make_unique<InboundMsg>();
    msg->source = src;
    msg->header = h;
    std::memcpy(msg->headerBytes.data(), headerSpan.data(), kFrameHeaderBytes);
    auto& rx = rx_[static_cast<std::size_t>(src)];
    if (channel == kChanFrame) {
      const auto payload = bytes.subspan(kFrameHeaderBytes);
      verifyFramePayload(headerSpan, h, payload, src);
      if (h.kind == FrameKind::kBye && h.tag.segment == PeerLifecycle::kByeAfterError) {
        // The peer aborted: it dropped what it had queued and closes its
        // endpoint without waiting, so payloads still under way from it will
        // fail. Report why now rather than the lost connection, and send no
        // ack (nobody waits for it).
        life_.onBye(src, h.tag.segment);
        failPeer(src, life_.failure(src));
        return;
      }
      if (!payload.empty()) {
        msg->data.reset(new std::byte[payload.size()]);
        std::memcpy(msg->data.get(), payload.data(), payload.size());
      }
      msg->size = payload.size();
      msg->ready = true;
      rx.queue.push_back(std::move(msg));
      return;
    }
    // An announcement: the payload follows in pieces on the bulk channel.
    if (h.kind != FrameKind::kData)
      throw ProtocolError(src, frame_offset::kKind, "a control frame cannot announce a payload");
    if (bytes.size() != kAnnounceBytes)
      throw ProtocolError(src, std::min(bytes.size(), kAnnounceBytes),
                          "announcement of " + std::to_string(bytes.size()) + " bytes, expected " +
                              std::to_string(kAnnounceBytes));
    const std::uint64_t n = h.payloadBytes;
    const std::uint64_t piece = getU64(bytes.data() + kFrameHeaderBytes);
    const std::uint64_t first = getU64(bytes.data() + kFrameHeaderBytes + 8);
    if (n == 0) throw ProtocolError(src, frame_offset::kPayloadBytes, "announced an empty payload");
    if (piece == 0 || piece > maxMsgBytes_)
      throw ProtocolError(src, kFrameHeaderBytes,
                          "piece size " + std::to_string(piece) + " outside [1, max_msg_size " +
                              std::to_string(maxMsgBytes_) + "]");
    if (first != rx.nextBulkSeq)
      throw ProtocolError(src, kFrameHeaderBytes + 8,
                          "first bulk sequence number " + std::to_string(first) + ", expected " +
                              std::to_string(rx.nextBulkSeq));
    const std::uint64_t pieces = ceilDiv(n, piece);
    rx.nextBulkSeq = (rx.nextBulkSeq + pieces) & kSeqMask;
    msg->size = n;
    msg->ops = std::vector<BulkRecvOp>(pieces);
    msg->piecesLeft = pieces;
    InboundMsg* m = msg.get();
    rx.queue.push_back(std::move(msg));  // from here on, failPeer releases what it claims
    if (n >= kVerifyOffloadBytes) claimInPlace(*m, rx);
    if (!m->direct) m->data = cache_->get(n);
    m->mr = registerLocal(m->base(), n, FI_RECV, &m->desc);
    for (std::uint64_t i = 0; i < pieces; ++i) {
      auto& op = m->ops[i];
      op.msg = m;
      op.offset = i * piece;
      op.len = std::min<std::uint64_t>(piece, n - i * piece);
      op.tag = fabricTag(kChanBulk, src, first + i);
    }
    postMore(*m);
  }

  // Posts the next pieces of `msg`, in order, while fewer than kBulkWindow of
  // its pieces are with the provider. A provider matches an announced piece
  // as soon as it is posted (ofi_rxm's rendezvous then reads it whatever
  // happens), and a matched piece cannot be cancelled: the window bounds what
  // a cancel of an in-place receive waits for. Returns false when the
  // provider refused one (-FI_EAGAIN): pumpBulk() retries.
  bool postMore(InboundMsg& msg) {
    if (msg.zombie || msg.cancelling) return true;
    for (auto& op : msg.ops) {
      if (msg.outstanding >= kBulkWindow) return true;
      if (op.posted || op.done) continue;
      if (!postBulk(op)) {
        bulkPump_ = true;
        return false;
      }
    }
    return true;
  }

  // Progress thread: pieces a provider refused earlier, and the next ones.
  void pumpBulk() {
    bulkPump_ = false;
    for (auto& rx : rx_)
      for (auto& msg : rx.queue)
        if (!postMore(*msg)) return;
  }

  void onBulkPiece(BulkRecvOp& op, std::size_t len) {
    InboundMsg* msg = op.msg;
    op.done = true;
    --msg->outstanding;
    --bulkPosted_;
    if (msg->zombie) {
      buryIfDone(msg);
      return;
    }
    const int src = msg->source;
    rx_[static_cast<std::size_t>(src)].lastHeard = Clock::now();
    try {
      if (len != op.len)
        throw ProtocolError(
            src, kFrameHeaderBytes + op.offset + std::min(len, op.len),
            "payload piece of " + std::to_string(len) + " bytes, expected " + std::to_string(op.len));
      --msg->piecesLeft;
      if (msg->cancelling) {
        takeBack(*msg);
        if (msg->cancelling) return;
      }
      if (msg->piecesLeft > 0) {
        postMore(*msg);
        return;
      }
      msg->mr.reset();
      if (msg->size < kVerifyOffloadBytes) {
        verifyFramePayload(msg->headerBytes, msg->header,
                           std::span<const std::byte>(msg->data.get(), msg->size), src);
        msg->ready = true;
      } else {
        msg->arrived = true;  // to the checksum thread once it is first in line (flushInbound)
      }
      flushInbound(src);
    } catch (const ProtocolError& e) {
      GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": " << e.what());
      failPeer(src, std::current_exception());
    }
  }

  // Delivers the frames from `src` that are complete, in order.
  void flushInbound(int src) {
    auto& rx = rx_[static_cast<std::size_t>(src)];
    while (!rx.gone && !rx.queue.empty()) {
      if (!rx.queue.front()->ready) {
        if (rx.queue.front()->arrived && !rx.queue.front()->verifying) toChecksumThread(*rx.queue.front());
        return;
      }
      std::unique_ptr<InboundMsg> msg = std::move(rx.queue.front());
      rx.queue.pop_front();
      switch (msg->header.kind) {
        case FrameKind::kData:
          if (!msg->counted) countReceived(*msg);
          if (!msg->consumed)
            box_.deliver(
                src, msg->header.tag,
                InboundPayload{msg->data, std::span<const std::byte>(msg->data.get(), msg->size),
                               msg->arrived ? std::optional<std::uint32_t>(msg->payloadCrc) : std::nullopt});
          break;
        case FrameKind::kBye:
          // Everything the peer sent before its bye has been delivered. (A bye
          // after an error does not wait in this queue: processFrame.)
          life_.onBye(src, msg->header.tag.segment);
          failPeer(src, life_.failure(src));
          sendControl(src, FrameKind::kByeAck);
          break;
        case FrameKind::kByeAck:
          life_.onByeAck(src);
          break;
        case FrameKind::kPull:
        case FrameKind::kPullDone:      // the socket transport's single-copy frames
        case FrameKind::kDataTrailing:  // and its stream-only data frames
          failPeer(src, std::make_exception_ptr(ProtocolError(src, frame_offset::kKind,
                                                              "frame kind " +
                                                                  std::to_string(int(msg->header.kind)) +
                                                                  " is not used over libfabric")));
          return;
      }
    }
  }

  void countReceived(InboundMsg& msg) {
    life_.countReceived(msg.size);
    msg.counted = true;
  }

  // A claimed receive too small for `msg` fails, and the message is used up
  // (as Mailbox::deliver does). True if it fits.
  static bool fits(InboundMsg& msg, const Mailbox::Claimed& claim) {
    if (claim.fits(msg.source, msg.size)) return true;
    msg.consumed = true;
    return false;
  }

  // At a large payload's announcement (`msg`, last in its peer's line): if a
  // receive for it is posted already, and no earlier message from the peer
  // under the same tag is still on its way (matching order), the pieces are
  // received straight into that receive's buffer.
  void claimInPlace(InboundMsg& msg, const PeerRx& rx) {
    for (const auto& q : rx.queue)
      if (q.get() != &msg && q->header.kind == FrameKind::kData &&
          q->header.tag.packed() == msg.header.tag.packed())
        return;
    // (A receive from several ranks is not taken here: if this one failed
    // mid-payload, the receive would fail with it while the others live.)
    auto claim = box_.claim(msg.source, msg.header.tag, /*singleSourceOnly=*/true);
    if (!claim.state || !fits(msg, claim)) return;
    std::lock_guard<std::mutex> lk(guard_->mu);
    // A cancel that ran since the claim found nothing to take back and
    // cancelled the request under guard_->mu: then the payload goes to this
    // transport's memory, and on to the next receive.
    if (guard_->closed || !isPendingRequest(*claim.state)) return;
    msg.claimed = std::move(claim.state);
    msg.dst = claim.buffer.first(msg.size);
    msg.direct = true;
    guard_->direct.emplace(msg.claimed.get(), &msg);
  }

  // Progress thread: receives cancelled while their payload was being received
  // in place (CopyGuard::cancelLocked, whose caller waits).
  void takeBackCancelled() {
    std::vector<InboundMsg*> msgs;
    {
      // Resolved under the lock: a request whose canceller has returned may
      // be freed, and its address reused (cancelLocked removes its entry).
      std::lock_guard<std::mutex> lk(guard_->mu);
      for (const auto* state : guard_->cancels) {
        const auto it = guard_->direct.find(state);
        if (it != guard_->direct.end()) msgs.push_back(it->second);  // else finished meanwhile
      }
      guard_->cancels.clear();
      guard_->cancelsPending = false;
    }
    for (InboundMsg* msg : msgs) {
      // A zombie's receive is failed once its pieces came back (buryIfDone);
      // one whose pieces are all back may wait for the checksum thread, which
      // waits for the canceller: take it back now.
      if (msg->cancelling || (msg->zombie && msg->outstanding > 0)) continue;
      msg->cancelling = true;
      for (auto& op : msg->ops)
        if (op.posted && !op.done) fi_cancel(&ep_->fid, static_cast<FabricOp*>(&op));
      takeBack(*msg);
    }
  }

  // Once no piece of a cancelling in-place payload is with the provider any
  // more: copies the pieces that arrived into the transport's own buffer,
  // posts the cancelled ones again into it, and lets the canceller go on. The
  // message then goes on as one that found no receive.
  void takeBack(InboundMsg& msg) {
    if (!msg.cancelling || msg.outstanding > 0) return;
    auto owned = cache_->get(msg.size);
    for (const auto& op : msg.ops)
      if (op.done) std::memcpy(owned.get() + op.offset, msg.dst.data() + op.offset, op.len);
    const auto* key = msg.claimed.get();
    msg.mr.reset();
    msg.data = std::move(owned);
    msg.mr = registerLocal(msg.data.get(), msg.size, FI_RECV, &msg.desc);
    msg.direct = false;
    msg.cancelling = false;
    msg.claimed.reset();
    msg.dst = {};
    {
      std::lock_guard<std::mutex> lk(guard_->mu);
      guard_->direct.erase(key);
    }
    guard_->cv.notify_all();
    postMore(msg);  // the cancelled pieces again, and the rest, into this transport's buffer
  }

  // An in-place payload whose peer failed, once the provider gave all its
  // pieces back: its receive fails with the peer's error.
  void releaseClaim(InboundMsg& msg) {
    if (!msg.direct || !msg.claimed) return;
    msg.claimed->fail(msg.failure ? msg.failure
                                  : std::make_exception_ptr(PeerFailure(msg.source, "peer failed")));
    {
      std::lock_guard<std::mutex> lk(guard_->mu);
      guard_->direct.erase(msg.claimed.get());
    }
    guard_->cv.notify_all();
    msg.claimed.reset();
  }

  // A large payload that fully arrived and is first in its peer's line: the
  // checksum thread checks it and, when a receive for it is posted, copies it
  // into that receive's buffer in the same pass (claimed here, in order, so
  // per (source, tag) matching order holds). Later frames from the peer wait.
  void toChecksumThread(InboundMsg& msg) {
    if (!msg.direct && !msg.consumed) {
      auto claim = box_.claim(msg.source, msg.header.tag);
      if (claim.state && fits(msg, claim)) {
        msg.claimed = std::move(claim.state);
        msg.dst = claim.buffer.first(msg.size);
      }
    }
    msg.verifying = true;
    ++verifying_;
    {
      std::lock_guard<std::mutex> lk(verifyMu_);
      toVerify_.push_back(&msg);
    }
    verifyCv_.notify_one();
  }

  // Checksum thread: verifies `msg` (one pass over its payload). If it was
  // received in place, completes (or fails) its receive. If it was claimed by
  // a receive that is still pending, copies it into that receive in the same
  // pass and completes it; a receive cancelled meanwhile (cancel() waits for
  // guard_->exclusive) leaves the message to the Mailbox.
  void checkPayload(InboundMsg& msg) {
    // First, and before reading `msg`: a cancel (which holds it) may have had
    // the progress thread take an in-place payload back (takeBack).
    std::unique_lock<std::mutex> g(guard_->exclusive);
    StreamFrameVerifier v;
    v.begin(msg.headerBytes, msg.header, msg.source);
    if (msg.direct) {
      {  // the provider is done with the buffer: a cancel has nothing to take back
        std::lock_guard<std::mutex> lk(guard_->mu);
        guard_->direct.erase(msg.claimed.get());
      }
      msg.consumed = true;
      msg.payloadCrc = crc32c(msg.dst.first(msg.size));
      v.updateSummed(msg.payloadCrc, msg.size);
      try {
        v.finish();
      } catch (const ProtocolError&) {
        msg.claimed->fail(std::current_exception());
        throw;
      }
      countReceived(msg);  // before the receiver can look
      msg.claimed->complete(msg.source, msg.size, msg.payloadCrc);
      return;
    }
    if (!msg.claimed) g.unlock();
    const std::span<const std::byte> payload(msg.data.get(), msg.size);
    if (msg.claimed) {
      if (isPendingRequest(*msg.claimed)) {
        msg.payloadCrc = copyAndCrc32c(msg.dst.data(), payload.data(), payload.size());
        v.updateSummed(msg.payloadCrc, payload.size());
        try {
          v.finish();
        } catch (const ProtocolError&) {
          msg.claimed->fail(std::current_exception());
          msg.consumed = true;
          throw;
        }
        countReceived(msg);
        msg.claimed->complete(msg.source, msg.size, msg.payloadCrc);
        msg.consumed = true;
        return;
      }
      msg.claimed.reset();
    }
    msg.payloadCrc = crc32c(payload);
    v.updateSummed(msg.payloadCrc, payload.size());
    v.finish();
  }

  // The checksum thread: verifies large payloads handed over by toChecksumThread.
  // With shm it also watches the peers' processes every 10 ms while the
  // progress thread is stuck (watchWhileStuck).
  void verifyLoop() {
    std::unique_lock<std::mutex> lk(verifyMu_);
    for (;;) {
      const auto due = [&] { return verifyStop_ || !toVerify_.empty(); };
      if (watchesPids_)
        verifyCv_.wait_for(lk, std::chrono::milliseconds(10), due);
      else
        verifyCv_.wait(lk, due);
      if (toVerify_.empty()) {
        if (verifyStop_) return;  // stopping, nothing left
        lk.unlock();
        watchWhileStuck();
        lk.lock();
        continue;
      }
      InboundMsg* msg = toVerify_.front();
      toVerify_.pop_front();
      lk.unlock();
      std::exception_ptr error;
      try {
        checkPayload(*msg);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      msg->verifyError = error;
      verified_.push_back(msg);
      lk.unlock();
      wake();  // the progress thread delivers it
      lk.lock();
    }
  }

  // True when the progress thread has not begun a loop turn for `d`.
  bool progressStuckFor(Clock::duration d) const {
    const Clock::time_point turn{Clock::duration(loopStamp_.load(std::memory_order_relaxed))};
    return Clock::now() - turn > d;
  }

  // Checksum thread, shm only: when the progress thread has not finished a
  // loop turn for 100 ms it is stuck inside libfabric (it never sleeps longer
  // than 2 ms), most likely spinning on a shm lock that a killed peer held.
  // Then it cannot see that peer's exit, so this thread reports it to the
  // Mailbox itself: receives waiting on the dead peer fail now with
  // PeerFailure rather than at their timeout. (Not while the progress thread
  // runs: it delivers what fully arrived from the peer first, then fails it.)
  void watchWhileStuck() {
    if (!progressStuckFor(std::chrono::milliseconds(100)) || stop_) return;
    for (int p = 0; p < opt_.worldSize; ++p) {
      auto& peer = *tx_[static_cast<std::size_t>(p)];
      if (p == opt_.rank || peer.gone || !processExited(peer)) continue;
      auto why = std::make_exception_ptr(PeerFailure(p, kProcessExited));
      {
        std::lock_guard<std::mutex> lk(peer.mu);
        peer.why = why;
      }
      peer.gone = true;
      life_.declareFailed(p, std::move(why));
      GOSSAMER_LOG(kError,
                   "libfabric rank "
                       << opt_.rank << ": peer " << p
                       << " exited while the progress thread is stuck inside libfabric (on a lock it held?)");
    }
  }

  // Progress thread: payloads the checksum thread is done with.
  void drainVerified() {
    std::deque<InboundMsg*> done;
    {
      std::lock_guard<std::mutex> lk(verifyMu_);
      done.swap(verified_);
    }
    for (InboundMsg* msg : done) {
      --verifying_;
      msg->verifying = false;
      if (msg->zombie) {
        buryIfDone(msg);
        continue;
      }
      if (msg->verifyError) {
        try {
          std::rethrow_exception(msg->verifyError);
        } catch (const std::exception& e) {
          GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": " << e.what());
        }
        failPeer(msg->source, msg->verifyError);
        continue;
      }
      msg->ready = true;
      flushInbound(msg->source);
    }
  }

  void checkSilence(Clock::time_point now) {
    for (int p = 0; p < opt_.worldSize; ++p) {
      auto& rx = rx_[static_cast<std::size_t>(p)];
      if (p == opt_.rank || rx.gone) continue;
      if (processExited(*tx_[static_cast<std::size_t>(p)])) {
        failPeer(p, std::make_exception_ptr(PeerFailure(p, kProcessExited)));
        continue;
      }
      // A frame that stays missing while later ones arrive was lost on the way:
      // fail the peer instead of waiting for it forever.
      if (!rx.early.empty() && secondsSince(rx.gapSince, now) > peerTimeout_) {
        failPeer(p, std::make_exception_ptr(ProtocolError(
                        p, 0,
                        "frame " + std::to_string(rx.nextSeq) + " never arrived, while " +
                            std::to_string(rx.early.size()) + " later ones did (lost by the provider)")));
        continue;
      }
      if (!heartbeats_) continue;
      const double silent = secondsSince(rx.lastHeard, now);
      if (silent > peerTimeout_)
        failPeer(p, std::make_exception_ptr(PeerFailure(
                        p, "connection lost: nothing (no message, no heartbeat) arrived from it for " +
                               std::to_string(silent).substr(0, 4) +
                               " s (the process died or hung, or the network failed)")));
    }
  }

  // Progress thread: `p` is gone (failed, or closed: then `why` says so).
  // Fails receives waiting only on it, drops what was queued for it and
  // cancels the payload receives still posted for it.
  void failPeer(int p, std::exception_ptr why) {
    auto& rx = rx_[static_cast<std::size_t>(p)];
    if (rx.gone) return;
    rx.gone = true;
    auto& peer = *tx_[static_cast<std::size_t>(p)];
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      peer.why = why;
    }
    peer.gone = true;
    life_.declareFailed(p, std::move(why));
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      queued_ -= peer.pending.size();
      peer.pending.clear();
    }
    {
      // Its posted sends may never complete (a dead peer): stop waiting for them.
      std::lock_guard<std::mutex> lk(opsMu_);
      for (FabricOp* op : inflight_) {
        auto* s = static_cast<SendOp*>(op);
        if (s->dst == p && s->live) {
          s->live = false;
          --liveSends_;
        }
      }
    }
    std::exception_ptr failure;
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      failure = peer.why;
    }
    for (auto& msg : rx.queue) {
      msg->failure = failure;
      if (msg->outstanding == 0 && !msg->verifying) {
        releaseClaim(*msg);
        continue;
      }
      msg->zombie = true;
      for (auto& op : msg->ops)
        if (op.posted && !op.done) fi_cancel(&ep_->fid, static_cast<FabricOp*>(&op));
      zombies_.push_back(std::move(msg));
    }
    rx.queue.clear();
    rx.early.clear();
  }

  void buryIfDone(InboundMsg* msg) {
    if (msg->outstanding > 0 || msg->verifying) return;
    releaseClaim(*msg);
    const auto it =
        std::find_if(zombies_.begin(), zombies_.end(), [&](const auto& z) { return z.get() == msg; });
    if (it != zombies_.end()) zombies_.erase(it);
  }

  // Stops the checksum thread. It waits on nothing but its queue and
  // `exclusive`, which only a canceller holds, and close() releases those
  // first (guard_->close()).
  void stopVerifier() {
    {
      std::lock_guard<std::mutex> lk(verifyMu_);
      verifyStop_ = true;
    }
    verifyCv_.notify_all();
    if (verifier_.joinable()) verifier_.join();
  }

  // Before the endpoint closes: cancels the payload pieces still posted and
  // reads the completion queue until they came back (cancelled or complete),
  // for at most 200 ms. tcp;ofi_rxm of libfabric 1.17 crashed inside
  // fi_close(ep) when the endpoint closed while a piece was arriving.
  void drainBulk() {
    if (!ep_ || !cq_ || bulkPosted_ == 0) return;
    const auto cancelAll = [&](InboundMsg& msg) {
      for (auto& op : msg.ops)
        if (op.posted && !op.done) fi_cancel(&ep_->fid, static_cast<FabricOp*>(&op));
    };
    for (auto& rx : rx_)
      for (auto& msg : rx.queue) cancelAll(*msg);
    for (auto& msg : zombies_) cancelAll(*msg);
    const auto settle = [&](void* context) {
      auto* op = static_cast<FabricOp*>(context);
      if (!op) return;
      if (op->kind == OpKind::kBulkRecv) {
        auto& b = *static_cast<BulkRecvOp*>(op);
        b.done = true;
        --b.msg->outstanding;
        --bulkPosted_;
      } else if (op->kind == OpKind::kSend) {
        finishSend(static_cast<SendOp*>(op));
      }
    };
    std::array<fi_cq_tagged_entry, 32> entries{};
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (bulkPosted_ > 0 && Clock::now() < until) {
      const ssize_t n = fi_cq_read(cq_.get(), entries.data(), entries.size());
      if (n > 0) {
        for (ssize_t i = 0; i < n; ++i) settle(entries[static_cast<std::size_t>(i)].op_context);
      } else if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq_.get(), &err, 0) > 0) settle(err.op_context);
      } else if (n != -FI_EAGAIN) {
        break;
      }
    }
  }

  // After the progress thread stopped: closes the endpoint (libfabric drops
  // what is still posted), then frees the operations and the fabric.
  void teardown() {
    for (auto& peer : tx_) {
      std::lock_guard<std::mutex> lk(peer->mu);
      peer->shut = true;
      peer->pending.clear();
      if (peer->pidfd >= 0) ::close(peer->pidfd);
      peer->pidfd = -1;
    }
    drainBulk();
    ep_.reset();
    {
      // The endpoint is closed: nothing writes into a receive's buffer any
      // more. Receives that were being filled in place fail.
      std::lock_guard<std::mutex> lk(guard_->mu);
      for (const auto& [state, msg] : guard_->direct)
        if (msg->claimed)
          msg->claimed->fail(std::make_exception_ptr(Cancelled("transport closed while receiving")));
      guard_->direct.clear();
    }
    guard_->close();
    {
      std::lock_guard<std::mutex> lk(opsMu_);
      for (FabricOp* op : inflight_)
        delete static_cast<SendOp*>(op);  // NOLINT(cppcoreguidelines-owning-memory)
      inflight_.clear();
    }
    zombies_.clear();
    rx_.clear();
    unposted_.clear();
    poolMr_.reset();
    av_.reset();
    cq_.reset();
    domain_.reset();
    fabric_.reset();
  }

  Options opt_;
  std::shared_ptr<BufferCache> cache_ = std::make_shared<BufferCache>();  // before box_: its messages use it
  std::shared_ptr<CopyGuard> guard_;  ///< attached to posted receives (set in the constructor)
  Mailbox box_;
  PeerLifecycle life_;  // peer table, goodbye, failure verdicts, statistics
  double peerTimeout_ = 0;
  detail::InfoPtr info_;
  std::string provider_;
  bool mrLocal_ = false, cqWaits_ = false, heartbeats_ = true;
  std::size_t maxMsgBytes_ = 0, injectBytes_ = 0, inlineBytes_ = 0, poolBytes_ = 0, pieceBytes_ = 0;
  std::uint64_t nextKey_ = 1;
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
  std::atomic<std::size_t> queued_{0};  ///< sends waiting in PeerTx::pending, all peers
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
  bool kicked_ = false;  // under kickMu_
};

/// What makeTransport returns: the transport is shared with its progress
/// thread, which may outlive a close() that had to give up on it.
class TransportHandle final : public Transport {
 public:
  explicit TransportHandle(std::shared_ptr<LibfabricTransport> impl) : impl_(std::move(impl)) {}
  ~TransportHandle() override {
    try {
      impl_->close();
    } catch (...) {
      // Destructors must not throw; close() failures were already reported.
    }
  }
  int rank() const override { return impl_->rank(); }
  int worldSize() const override { return impl_->worldSize(); }
  std::string name() const override { return impl_->name(); }
  double timeoutSeconds() const override { return impl_->timeoutSeconds(); }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return impl_->isend(dst, tag, data, dtype);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return impl_->irecv(sources, tag, buffer);
  }
  void close() override { impl_->close(); }
  void abort() override { impl_->abort(); }
  TransportStats stats() const override { return impl_->stats(); }

 private:
  std::shared_ptr<LibfabricTransport> impl_;
};

}  // namespace

std::unique_ptr<Transport> makeTransport(const Options& o, Store& store) {
  GOSSAMER_ENFORCE(o.worldSize >= 1 && o.worldSize <= static_cast<int>(kSourceMask) + 1,
                   "world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < o.worldSize,
                   "rank " << o.rank << " outside world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.lingerSeconds >= 0, "linger " << o.lingerSeconds);
  GOSSAMER_ENFORCE(o.heartbeatSeconds > 0, "heartbeat interval " << o.heartbeatSeconds);
  GOSSAMER_ENFORCE(o.peerTimeoutSeconds >= 0, "peer timeout " << o.peerTimeoutSeconds);
  GOSSAMER_ENFORCE(o.spinSeconds >= 0, "spin time " << o.spinSeconds);
  GOSSAMER_ENFORCE(o.inlineBytes <= kMaxPayloadBytes, "inline bytes " << o.inlineBytes);
  GOSSAMER_ENFORCE(!o.provider.empty(), "libfabric provider name is empty");
  auto impl = std::make_shared<LibfabricTransport>(o, store);
  impl->start();
  return std::make_unique<TransportHandle>(std::move(impl));
}

void registerWith(Registry& registry) {
  registry.addTransport("libfabric", [](const TransportContext& ctx) {
    Options o;
    o.rank = ctx.rank;
    o.worldSize = ctx.config.worldSize;
    o.provider = ctx.config.transport.provider;
    o.host = ctx.config.transport.host;
    o.timeoutSeconds = ctx.config.transport.timeoutSeconds;
    o.lingerSeconds = ctx.config.transport.lingerSeconds;
    try {
      return makeTransport(o, ctx.store);
    } catch (const ProviderNotFound& e) {
      throw ConfigError(ctx.config.sourceFile, 0, "transport.provider", e.what());
    }
  });
}

}  // namespace gossamer::libfabric
