// ZeroMQ transport.
//
// Sockets: each rank binds one ROUTER (receives from everyone) and connects
// one DEALER per peer (routing id "RANK.INCARNATION", the incarnation drawn at
// random when the transport starts); the first frame on every DEALER is a
// hello (wire.hpp: the incarnation and the ROUTER's address). A message is a
// two-part zmq message [48-byte frame header][payload]; the ROUTER adds the
// routing id in front. A DEALER is used by the sending threads under its own mutex; the
// DEALERs' monitor sockets belong to the progress thread. The ROUTER is read
// under rxMu_ by one thread at a time: a thread waiting on a receive under
// 1 MiB, when no other thread is (ReceiveEngine, drive), else the progress
// thread (which alone reads for receives of 1 MiB or more). That
// reader validates every frame (wire.hpp) and hands the payload, without
// copying it again, to the Mailbox that matches it with posted receives; a
// payload of 64 KiB or more whose receive (from that rank alone) is already
// posted is checked and copied into it in one pass instead (Mailbox::claim,
// deliverLarge). So a waiting thread is woken by libzmq's I/O thread itself
// (the ROUTER's ZMQ_FD), not by the progress thread after that woke: one
// thread hand-off fewer per message. A hello (which may replace a peer's
// sockets) is always handled by the progress thread: a waiter that reads one
// hands it over and stops reading.
//
// Sends: isend copies the payload into a ZeroMQ message. isendBorrowed of 64
// KiB or more lends the caller's buffer instead (zmq_msg_init_data): its
// Request completes when ZeroMQ releases the buffer (written to the kernel, or
// dropped), and cancel() waits for that release; a peer that does not take its
// data within the timeout has its connection torn down, which releases it.
// Over ipc, to a peer that can read this process's memory (probed at set-up),
// such a send goes as a pull frame instead (single_copy.hpp): the peer's
// progress thread copies the bytes out of the caller's buffer and answers
// pull-done, which completes the Request.
//
// Failure: a peer that closes sends a bye frame after its last message (same
// connection, so in order): receives waiting only on it fail with PeerFailure
// at once. A peer whose connection drops without a bye (killed, crashed) is
// declared failed after a short grace period. A malformed frame fails that
// peer with the ProtocolError. Every wait is also bounded by its timeout.
//
// Restart: a hello of a new incarnation (a process started in place of a
// failed rank) makes its peers drop the old connection and what was queued on
// it, connect to the new process's address and take the rank back
// (PeerLifecycle::revive); frames of the old incarnation still queued are
// dropped unread. Only a process that read the job's rendezvous can do so:
// rank 0 puts a random 32-byte job key there when the job starts, and every
// hello carries HMAC-SHA-512-256(job key, incarnation || rank) (libsodium's
// crypto_auth, kit/job_key.hpp); a hello whose MAC does not verify is counted, logged and
// ignored, so a process that only reached a port cannot evict a live peer.
//
// Join: with Options::maxWorldSize above worldSize, ranks worldSize ..
// maxWorldSize-1 have a Peer from the start but no connection, and are gone
// (PeerLifecycle) until a hello for one arrives with a valid proof: it is
// then taken in as a restarted rank is (connect to the hello's address,
// revive). Every rank connects to ranks 0..worldSize-1 and to the joined
// ranks whose addresses are in the store when it starts (a rank that joins,
// or one restarted in place of a failed one, finds them there); ranks that
// join later reach it by their hello.
#include <zmq.hpp>

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/job_key.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/peer_lifecycle.hpp"
#include "gossamer/kit/single_copy.hpp"
#include "gossamer/log.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/transports/zmq.hpp"
#include "zmq_security.hpp"

namespace gossamer::zmq {

namespace {

using Clock = std::chrono::steady_clock;

int toMillis(double seconds) { return static_cast<int>(std::min(seconds * 1000.0, 2.0e9)); }

/// Descriptors this process has open now.
std::size_t openDescriptors() {
  std::error_code ec;
  std::size_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

/// Makes sure the process may open `more` descriptors besides those it has
/// (for `what`): libzmq aborts the process when it runs out, so the soft
/// limit (RLIMIT_NOFILE) is raised towards the hard one when it is short.
/// @throws Error naming the descriptors needed and the limits, when even
///         the hard limit is too low.
void ensureDescriptors(int rank, std::size_t more, const std::string& what) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  const std::size_t openNow = openDescriptors();
  const auto want = static_cast<rlim_t>(openNow + more);
  if (want <= lim.rlim_cur) return;
  const rlim_t raised = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
  const rlimit next{raised, lim.rlim_max};
  if (raised > lim.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &next) == 0) {
    GOSSAMER_LOG(kInfo, "zmq rank " << rank << ": raised the open-file limit from " << lim.rlim_cur << " to "
                                    << raised << " for " << what);
    lim.rlim_cur = raised;
  }
  if (want > lim.rlim_cur)
    throw Error("zmq rank " + std::to_string(rank) + ": " + what + " need about " + std::to_string(more) +
                " more file descriptors (" + std::to_string(openNow) + " open), above the limit of " +
                std::to_string(lim.rlim_cur) + " (hard limit " +
                (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
                "): raise it (ulimit -n) or use fewer ranks per process");
}

/// Descriptors a peer's connection takes: the DEALER's connection and
/// mailbox, the two monitor mailboxes, the peer's connection to the ROUTER.
constexpr std::size_t kDescriptorsPerPeer = 5;

/// The context of a transport of `worldSize` ranks at the start and room
/// for `capacity` (max_world_size), with room for the sockets of all of
/// them: per peer a DEALER, its monitor's PAIR and libzmq's end of that,
/// plus the ROUTER, CURVE's handler and a margin (libzmq's default, 1023,
/// stops at about 340 ranks). The descriptors of the ranks at the start
/// are made sure of here (ensureDescriptors), those of a rank that joins
/// when it does.
/// @throws Error from ensureDescriptors, or when libzmq cannot hold that
///         many sockets.
::zmq::context_t contextFor(int rank, int worldSize, int capacity) {
  ensureDescriptors(rank, kDescriptorsPerPeer * static_cast<std::size_t>(worldSize) + 64,
                    std::to_string(worldSize) + " ranks");
  ::zmq::context_t ctx(1);
  const int sockets = std::max(3 * capacity + 64, ZMQ_MAX_SOCKETS_DFLT);
  const int most = zmq_ctx_get(ctx.handle(), ZMQ_SOCKET_LIMIT);
  if (most > 0 && sockets > most)
    throw Error("zmq rank " + std::to_string(rank) + ": " + std::to_string(capacity) + " ranks need " +
                std::to_string(sockets) + " ZeroMQ sockets, above libzmq's limit of " + std::to_string(most));
  if (zmq_ctx_set(ctx.handle(), ZMQ_MAX_SOCKETS, sockets) != 0)
    throw Error("zmq rank " + std::to_string(rank) + ": cannot allow " + std::to_string(sockets) +
                " ZeroMQ sockets: " + zmq_strerror(zmq_errno()));
  return ctx;
}

/// See Options::recycleReceiveBuffers. Once per process.
void recycleFreedBuffers() {
#ifdef __GLIBC__
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)done;
#endif
}

/// The engine of borrowed sends (its own `exclusive`, apart from the receive
/// engine's): Request::cancel() calls back into the transport, which waits
/// until ZeroMQ has released the buffer.
class LoanGuard final : public detail::BackgroundEngine {
 public:
  explicit LoanGuard(std::function<void(detail::RequestState&)> onCancel) : onCancel_(std::move(onCancel)) {}
  void cancelLocked(detail::RequestState& state) override {
    try {
      onCancel_(state);
    } catch (const std::exception& e) {  // Request::cancel is noexcept
      GOSSAMER_LOG(kError, "zmq: cancelling a borrowed send failed: " << e.what());
    }
  }

 private:
  std::function<void(detail::RequestState&)> onCancel_;
};

class ZmqTransport;

/// The receive engine: as BackgroundEngine, the thread that fills a claimed
/// receive holds `exclusive` while it writes; in addition a thread that waits
/// on a receive (Request::waitFor) reads the ROUTER itself while no other
/// waiter does (ZmqTransport::drive), and otherwise falls back to sleeping on
/// the request until the reader (another waiter or the progress thread)
/// completes it.
class ReceiveEngine final : public detail::BackgroundEngine {
 public:
  void waitUntil(detail::RequestState& state, Clock::time_point deadline) override;
  /// From now on waiters may read `owner`'s ROUTER.
  void attach(ZmqTransport* owner) {
    std::lock_guard<std::mutex> lk(driverMu_);
    owner_ = owner;
  }
  /// No waiter reads the ROUTER after this returns (it waits for the one that does).
  void detach() {
    std::lock_guard<std::mutex> lk(driverMu_);
    owner_ = nullptr;
  }

 private:
  std::mutex driverMu_;  // held by the one waiter reading the ROUTER
  ZmqTransport* owner_ = nullptr;
};

class ZmqTransport final : public Transport {
 public:
  ZmqTransport(const Options& o, Store& store)
      : opt_(o),
        capacity_(std::max(o.worldSize, o.maxWorldSize)),
        box_(capacity_),
        life_("zmq", o.rank, capacity_, box_),
        ctx_(contextFor(o.rank, o.worldSize, capacity_)),
        rx_(ctx_, ::zmq::socket_type::router) {
    if (o.recycleReceiveBuffers) recycleFreedBuffers();
    byeLinger_ = std::min(o.lingerSeconds, 0.05);
    // At most 1,000 messages wait per connection: past that libzmq stops
    // reading it (the sender waits; nothing is dropped), so a client that
    // floods this rank holds a bounded amount of its memory.
    rx_.set(::zmq::sockopt::rcvhwm, kReceiveQueueMessages);
    rx_.set(::zmq::sockopt::linger, 0);
    // No message above the largest frame is read into memory: libzmq drops
    // the connection when a message announces more.
    rx_.set(::zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kMaxPayloadBytes));
    if (o.curve) curve::CurveAdmission::makeServer(rx_, *opt_.curve);
    admission_ = std::make_unique<curve::CurveAdmission>(ctx_, rx_, o.curve ? &*opt_.curve : nullptr, o.rank);
    const std::string bindAt = o.protocol == "tcp" ? "tcp://" + o.host + ":*" : "ipc://*";
    try {
      rx_.bind(bindAt);
    } catch (const ::zmq::error_t& e) {
      throw Error("rank " + std::to_string(o.rank) + ": cannot bind " + bindAt + ": " + e.what());
    }
    me_ = rx_.get(::zmq::sockopt::last_endpoint);
    rxFd_ = rx_.get(::zmq::sockopt::fd);
    wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakeFd_ < 0) throw std::system_error(errno, std::generic_category(), "zmq: eventfd");
    incarnation_ = drawIncarnation();
    // The progress thread reads the ROUTER from now on, while this rank
    // waits for its peers: what a stray client sends meanwhile is checked
    // and dropped at once instead of piling up in memory (see stashEarly).
    try {
      progress_ = std::thread([this] {
        // (The loop goes on after an error; this is for what escapes its
        // set-up part: logged, and every peer failed, so that no wait runs to
        // its timeout on a transport that no longer progresses.)
        if (survivePass("zmq progress thread", [this] { progressLoop(); })) return;
        survivePass("zmq progress thread", [this] {
          const std::string why = "this rank's zmq progress thread ended on an error (see the log)";
          for (int p = 0; p < capacity_; ++p)
            if (p != opt_.rank) {
              (void)life_.declareFailed(p, why);
              failPullsTo(p, why);  // (single-copy sends waiting for their pull-done)
            }
        });
      });
    } catch (const std::system_error& e) {
      // The system's thread limit. The destructor does not run for a
      // constructor that throws: the eventfd is closed here.
      ::close(wakeFd_);
      throw Error("zmq rank " + std::to_string(o.rank) + ": cannot start the progress thread: " + e.what());
    }
    try {
      connectPeers(store, me_);
    } catch (...) {
      stop_ = true;
      progress_.join();
      ::close(wakeFd_);
      // The connections made so far hold their hellos: closed with libzmq's
      // default linger, the context's end would wait for peers that may
      // never answer (a dead one, a refused key), and this constructor
      // would never throw.
      for (auto& peer : peers_)
        if (peer) {
          if (peer->tx.handle() != nullptr) peer->tx.set(::zmq::sockopt::linger, 0);
          if (peer->monitor.handle() != nullptr) peer->monitor.set(::zmq::sockopt::linger, 0);
        }
      try {
        throw;
      } catch (const ::zmq::error_t& e) {
        throw Error("zmq rank " + std::to_string(o.rank) + ": setting up the connections: " + e.what());
      }
    }
    engine_->attach(this);
  }

  // The rest of set-up: publish `me` (rx_'s address), wait for every
  // peer's address, connect. rx_ belongs to the progress thread by now.
  void connectPeers(Store& store, const std::string& me) {
    const Options& o = opt_;
    const std::string prefix = o.storePrefix + "/zmq/";
    // Under CURVE each rank also publishes its public key; a client connects
    // only to a server whose published key is admitted.
    const std::string keyPrefix = o.storePrefix + "/zmq-key/";
    // Looked at before this rank publishes (joinsRunningJob): a process
    // started in place of a failed rank, or a joiner, once the job runs.
    const std::string startedKey = o.storePrefix + "/zmq-started";
    const bool late = joinsRunningJob(store, startedKey, o.rank, o.worldSize);
    // The address first: a rank publishes it whether or not rank 0 (which
    // draws the job's key) has started.
    if (o.curve) store.set(keyPrefix + std::to_string(o.rank), o.curve->publicKey);
    store.set(prefix + std::to_string(o.rank), me);
    jobKey_ = JobKey::fromStore(store, o.storePrefix + "/zmq-job-key", o.rank == 0, o.timeoutSeconds,
                                "zmq rank " + std::to_string(o.rank));
    keyReady_.store(true, std::memory_order_release);  // stashEarly checks hellos from now on
    Hello hello{incarnation_, {}, me};
    hello.proof = jobKey_.proof(incarnation_, o.rank, me);
    hello_ = encodeHello(hello);
    std::vector<std::string> keys;
    for (int p = 0; p < o.worldSize; ++p) keys.push_back(prefix + std::to_string(p));
    store.wait(keys, o.timeoutSeconds);
    if (o.curve) {
      serverKeys_.resize(static_cast<std::size_t>(o.worldSize));
      for (int p = 0; p < o.worldSize; ++p)
        if (p != o.rank)
          serverKeys_[static_cast<std::size_t>(p)] =
              store.get(keyPrefix + std::to_string(p), o.timeoutSeconds);
    }
    // Single copy reads the peer's memory directly, outside CURVE: not under security.
    // Only the job's start-up runs the probe, all ranks below worldSize
    // together. A later process (a joiner, or one restarted in place of a
    // failed rank) does not: the others keep the process ids they probed,
    // and would refuse its pull frames as another process's; it sends
    // copies, and they stop pulling from it (onHello).
    if (o.protocol == "ipc" && o.singleCopy && !o.curve && !late) {
      auto probed =
          single_copy::probe(o.rank, o.worldSize, store, o.storePrefix + "/zmq-pull/", o.timeoutSeconds);
      pids_ = std::move(probed.pids);
      pullTo_ = std::move(probed.pullTo);
    }

    // Every rank this transport may ever address has its Peer from the
    // start (sending threads read peers_ without a lock); a rank that has
    // not joined has no connection and is gone until its hello comes.
    peers_.resize(static_cast<std::size_t>(capacity_));
    pullTo_.resize(pullTo_.empty() ? 0 : static_cast<std::size_t>(capacity_), false);
    for (int p = 0; p < capacity_; ++p) {
      if (p == o.rank) continue;
      peers_[static_cast<std::size_t>(p)] = std::make_unique<Peer>();
      std::optional<std::string> at;
      // Ranks that joined before this process started are in the store too
      // (this rank joins, or restarts a rank that failed): it connects to
      // them as well, or they would never hear from it.
      if (p < o.worldSize)
        at = store.get(prefix + std::to_string(p), o.timeoutSeconds);
      else
        at = store.tryGet(prefix + std::to_string(p));
      if (at) {
        connectLocked(p, *at);
      } else {
        peers_[static_cast<std::size_t>(p)]->tornDown = true;
        (void)life_.declareFailed(p, "rank " + std::to_string(p) + " has not joined the job");
      }
    }
    if (!late) markJobRunning(store, startedKey);
    ready_.store(true, std::memory_order_release);
  }

  ~ZmqTransport() override {
    try {
      close();
    } catch (...) {
      // Destructors must not throw; close() failures were already reported.
    }
    engine_->detach();
    ::close(wakeFd_);
  }

  /// ReceiveEngine::waitUntil, in the one waiting thread that reads the
  /// ROUTER: reads and handles every frame queued there, sleeps on the
  /// ROUTER's ZMQ_FD (at most 2 ms at a time, to see a receive that another
  /// thread settled), and again, until `state` is settled or `deadline`
  /// passes; returns at once before set-up is over, while a hello waits for
  /// the progress thread, and once the transport is closing.
  void drive(detail::RequestState& state, Clock::time_point deadline) {
    if (!started_.load(std::memory_order_acquire)) return;
    driving_.store(true, std::memory_order_release);
    // The progress thread reads the ROUTER again within a millisecond (it
    // polls that often while a waiter reads it): no wake-up per wait.
    struct Leave {
      ZmqTransport& t;
      ~Leave() { t.driving_.store(false, std::memory_order_release); }
    } leave{*this};
    bool more = false;  // the last drain stopped with frames still queued
    while (!stop_) {
      {
        std::lock_guard<std::mutex> lk(rxMu_);
        if (handingOff_) return;
        try {
          more = drainRouter(true);
        } catch (const ::zmq::error_t& e) {
          if (e.num() == ETERM) return;
          GOSSAMER_LOG(kError, "zmq rank " << opt_.rank << ": receive error: " << e.what());
          return;
        }
      }
      if (!state.pending()) return;
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) return;
      if (more) continue;  // frames are still queued: ZMQ_FD would not signal them
      pollfd fd{rxFd_, POLLIN, 0};
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      (void)::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(ms, 2)));
    }
  }

  int rank() const override { return opt_.rank; }
  int worldSize() const override { return opt_.worldSize; }
  int capacity() const override { return capacity_; }
  std::string name() const override { return "zmq"; }
  double timeoutSeconds() const override { return opt_.timeoutSeconds; }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    life_.checkSend(dst);
    if (dst != opt_.rank) return sendToPeer(dst, tag, data, dtype);
    // Loop back without a socket; the header is only encoded to validate the size.
    (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data.size(),
                            0u);
    auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    box_.deliver(dst, tag, InboundPayload{owned, std::span<const std::byte>(owned->data(), owned->size())});
    life_.countSent(data.size());
    return Request(detail::completedRequest(dst, data.size()));
  }

  /// A payload of kClaimMinBytes or more goes without a copy: ZeroMQ reads
  /// the caller's buffer until it releases it, which completes the Request
  /// (fails it with PeerFailure if the peer's connection was torn down first).
  /// cancel() waits for the release (see cancelLoan). With the caller's
  /// checksum nothing else reads the buffer. Over ipc, of singleCopyMinBytes
  /// or more, to a peer that can read this process's memory: a pull frame
  /// (sendPull), completed by the peer's pull-done.
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    if (dst == opt_.rank || data.size() < kClaimMinBytes) return isend(dst, tag, data, dtype);
    life_.checkSend(dst);
    if (pullsTo(dst) && data.size() >= opt_.singleCopyMinBytes) return sendPull(dst, tag, data, dtype);
    return lend(dst, tag, data, dtype, checksum);
  }

  /// Borrowed sends, handed-over receives, and single copy towards the
  /// peers that passed the probe. Pulled messages come without a checksum to
  /// forward: with single copy towards any peer, no size is promised.
  TransportCapabilities capabilities() const noexcept override {
    const bool pulls = std::find(pullTo_.begin(), pullTo_.end(), true) != pullTo_.end();
    TransportCapabilities c;
    c.borrowedSends = true;
    c.receiveViews = true;
    c.singleCopy = pulls;
    c.checksumReuseMinBytes = pulls ? std::numeric_limits<std::size_t>::max() : kClaimMinBytes;
    return c;
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    life_.checkOpen("irecv");
    return box_.post(sources, tag, buffer, engineFor(buffer));
  }

  /// A payload received before or after the post is handed over, not copied.
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    life_.checkOpen("irecv");
    return box_.post(std::span<const int>(&source, 1), tag, buffer, engineFor(buffer), true);
  }

  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return box_.discard(stale);
  }

  std::exception_ptr peerFailure(int rank) const override { return life_.failedVerdict(rank); }

 private:
  // The payload is copied into a ZeroMQ message anyway: the checksum comes
  // out of that copy (copyAndCrc32c), one pass over the caller's bytes,
  // unless the caller knows it (`known`).
  Request sendToPeer(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                     std::optional<std::uint32_t> known = {}) {
    if (life_.gone(dst)) throw PeerFailure(dst, "cannot send: peer is gone");
    // Size and dtype checked (InvalidArgument) before anything is allocated.
    (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data.size(),
                            0u);
    ::zmq::message_t body(data.size());
    std::uint32_t sum = 0;
    if (known) {
      if (!data.empty()) std::memcpy(body.data(), data.data(), data.size());
      sum = *known;
    } else {
      sum = copyAndCrc32c(static_cast<std::byte*>(body.data()), data.data(), data.size());
    }
    const auto header = encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag,
                                          data.size(), sum);  // throws InvalidArgument for a bad size
    {
      auto& peer = *peers_[static_cast<std::size_t>(dst)];
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.tornDown) {
        life_.checkOpen("isend");  // this rank closed: Cancelled, not its peer's failure
        throw PeerFailure(dst, "cannot send: " + closedWhy(dst));
      }
      peer.tx.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      peer.tx.send(body, ::zmq::send_flags::none);
    }
    life_.countSent(data.size());
    return Request(detail::completedRequest(dst, data.size()));
  }

  // ---- borrowed sends ----------------------------------------------------------

  /// A buffer lent to ZeroMQ; the zmq_msg free function's hint.
  struct Loan {
    ZmqTransport* owner;
    std::shared_ptr<detail::RequestState> state;
    int dst;
    std::size_t bytes;
  };

  Request lend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
               std::optional<std::uint32_t> known) {
    if (life_.gone(dst)) throw PeerFailure(dst, "cannot send: peer is gone");
    const std::uint32_t sum = known ? *known : crc32c(data);
    const auto header = encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag,
                                          data.size(), sum);  // throws InvalidArgument for a bad size
    auto state = std::make_shared<detail::RequestState>();
    // An engine per loan: cancel() holds its `exclusive` while it waits, and
    // must not make cancels of other sends wait too.
    state->engine = std::make_shared<LoanGuard>([this](detail::RequestState& s) { cancelLoan(s); });
    state->what = "send to rank " + std::to_string(dst) + " " + toString(tag);
    auto loan = std::make_unique<Loan>(Loan{this, state, dst, data.size()});
    auto& peer = *peers_[static_cast<std::size_t>(dst)];
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.tornDown) {
        life_.checkOpen("isend");  // this rank closed: Cancelled, not its peer's failure
        throw PeerFailure(dst, "cannot send: " + closedWhy(dst));
      }
      {
        std::lock_guard<std::mutex> ll(loansMu_);
        loans_.emplace(state.get(), loan.get());
      }
      // Checked again now that the loan is registered: the progress thread
      // marks a peer gone before it looks for loans to it (releaseLoansTo),
      // so either it finds this one or this sees the peer gone.
      if (life_.gone(dst)) {
        forget(*state);
        throw PeerFailure(dst, "cannot send: peer is gone");
      }
      ::zmq::message_t body;
      try {
        body = ::zmq::message_t(const_cast<std::byte*>(data.data()), data.size(), &ZmqTransport::released,
                                loan.get());
      } catch (...) {
        forget(*state);
        throw;
      }
      // From here ZeroMQ owns the loan: it calls released() exactly once, also
      // when a send below throws (the message is closed then).
      (void)loan.release();
      peer.tx.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
      peer.tx.send(body, ::zmq::send_flags::none);
    }
    life_.countSent(data.size());
    return Request(std::move(state));
  }

  // ZeroMQ is done with a lent buffer (any thread: its I/O thread, or the
  // one closing a socket).
  static void released(void* /*data*/, void* hint) noexcept {
    std::unique_ptr<Loan> loan(static_cast<Loan*>(hint));
    ZmqTransport& t = *loan->owner;
    std::string torn;
    {
      auto& peer = *t.peers_[static_cast<std::size_t>(loan->dst)];
      std::lock_guard<std::mutex> ll(t.loansMu_);
      torn = peer.droppedWhy;
      t.loans_.erase(loan->state.get());
    }
    try {
      if (!torn.empty())
        loan->state->fail(std::make_exception_ptr(PeerFailure(loan->dst, "send dropped: " + torn)));
      else if (t.aborting_)
        loan->state->fail(std::make_exception_ptr(Cancelled("send dropped: transport aborted")));
      else
        loan->state->complete(loan->dst, loan->bytes);
    } catch (...) {
      loan->state->complete(loan->dst, loan->bytes);  // out of memory for the error: still released
    }
    t.loansCv_.notify_all();
  }

  // Why peer p's socket is closed (the caller holds its mu, and it is).
  std::string closedWhy(int p) {
    std::lock_guard<std::mutex> ll(loansMu_);
    const auto& why = peers_[static_cast<std::size_t>(p)]->droppedWhy;
    return why.empty() ? "the transport is closed" : why;
  }

  void forget(detail::RequestState& s) {
    std::lock_guard<std::mutex> ll(loansMu_);
    loans_.erase(&s);
  }

  // Request::cancel() of a borrowed send: returns once ZeroMQ released the
  // buffer. A peer that has not taken it within the timeout has its
  // connection torn down (PeerFailure from then on), which releases it.
  void cancelLoan(detail::RequestState& s) {
    int dst = -1;
    {
      std::unique_lock<std::mutex> ll(loansMu_);
      const auto it = loans_.find(&s);
      if (it == loans_.end()) return;
      dst = it->second->dst;
      if (loansCv_.wait_until(ll, deadlineAfter<std::chrono::steady_clock>(opt_.timeoutSeconds),
                              [&] { return loans_.count(&s) == 0; }))
        return;
    }
    tearDown(dst, 0.0,
             "a cancelled send to it was still unsent after " + std::to_string(opt_.timeoutSeconds) +
                 " s (the peer is not reading)");
    std::unique_lock<std::mutex> ll(loansMu_);
    if (!loansCv_.wait_for(ll, std::chrono::seconds(10), [&] { return loans_.count(&s) == 0; }))
      GOSSAMER_LOG(
          kError,
          "zmq rank "
              << opt_.rank
              << ": ZeroMQ still holds a cancelled send's buffer 10 s after its connection was closed");
  }

  // Closes the connection to peer p (its queued messages get `linger`
  // seconds, then are dropped, which releases lent buffers with PeerFailure)
  // and declares p gone. Any thread; idempotent.
  void tearDown(int p, double linger, const std::string& why) {
    auto& peer = *peers_[static_cast<std::size_t>(p)];
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.tornDown) return;
      peer.tornDown = true;
      {
        std::lock_guard<std::mutex> ll(loansMu_);
        peer.droppedWhy = why;
      }
      try {
        peer.tx.set(::zmq::sockopt::linger, toMillis(linger));
      } catch (const ::zmq::error_t&) {
        // Closed with the default linger then; it still releases what it holds.
      }
      zmq_socket_monitor(peer.tx.handle(), nullptr, 0);
      peer.tx.close();
    }
    life_.declareFailed(p, why);
    failPullsTo(p, why);
  }

  // Tears down p's connection if buffers lent to it are still out: after p
  // is gone they would otherwise stay with ZeroMQ until close().
  void releaseLoansTo(int p, double linger, const std::string& why) {
    bool any = false;
    {
      std::lock_guard<std::mutex> ll(loansMu_);
      for (const auto& [state, loan] : loans_) any = any || loan->dst == p;
    }
    if (any) tearDown(p, linger, why);
  }

 public:
  void abort() override {
    opt_.lingerSeconds = 0;
    aborting_ = true;
    close();
  }

  void close() override {
    if (!life_.beginClose()) return;
    // Goodbye handshake: a bye goes after everything this rank sent, on the
    // same connections; a peer acknowledges it once it has read all of that.
    // Wait (bounded by the linger period) until every peer acknowledged, is
    // closing itself, or is gone; then nothing queued can still matter.
    for (int p = 0; p < capacity_; ++p)
      if (peers_[static_cast<std::size_t>(p)] && !life_.leaving(p))
        sendControl(p, FrameKind::kBye, PeerLifecycle::byeSegment(aborting_));
    (void)life_.waitSettled(opt_.lingerSeconds);
    stop_ = true;
    if (progress_.joinable()) progress_.join();
    engine_->detach();
    box_.close();
    failPullsTo(-1, "the transport is closed");
    for (int p = 0; p < capacity_; ++p) {
      auto& peer = peers_[static_cast<std::size_t>(p)];
      if (!peer) continue;
      // What may still be queued: acks to peers that are closing (short grace)
      // or data for a peer that never answered (bounded by the linger period).
      const double linger = life_.leaving(p) ? std::min(opt_.lingerSeconds, 0.05)
                            : life_.acked(p) ? 0.0
                                             : opt_.lingerSeconds;
      std::lock_guard<std::mutex> lk(peer->mu);
      if (peer->tornDown) {  // tearDown closed it already
        peer->monitor.close();
        continue;
      }
      peer->tx.set(::zmq::sockopt::linger, toMillis(linger));
      zmq_socket_monitor(peer->tx.handle(), nullptr, 0);
      peer->monitor.close();
      peer->tx.close();
      peer->tornDown = true;  // a cancelLoan timing out now must not touch the closed socket
    }
    if (admission_) {
      zmq_socket_monitor(rx_.handle(), nullptr, 0);
      refusedAtClose_ = admission_->refusedKeys() + admission_->failedHandshakes();
      std::lock_guard<std::mutex> lk(admissionMu_);
      admission_.reset();
    }
    rejectLog_.flush();
    rx_.close();
    ctx_.close();
  }

  TransportStats stats() const override {
    TransportStats s = life_.stats();
    {
      std::lock_guard<std::mutex> lk(admissionMu_);
      s.refusedConnections =
          admission_ ? admission_->refusedKeys() + admission_->failedHandshakes() : refusedAtClose_.load();
    }
    for (std::size_t i = 0; i < kFrameFaultCount; ++i) s.rejectedFrames[i] = rejected_[i].load();
    return s;
  }

 private:
  // Sends a header-only control frame (bye, bye-ack) to peer p; best effort.

  void sendControl(int p, FrameKind kind, std::uint32_t detail = 0, std::uint64_t step = 0) {
    const auto h = encodeFrameHeader(kind, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                     Tag{Op::kControl, detail, step}, {});
    auto& peer = *peers_[static_cast<std::size_t>(p)];
    std::lock_guard<std::mutex> lk(peer.mu);
    if (peer.tornDown) return;
    try {
      peer.tx.send(::zmq::buffer(h.data(), h.size()), ::zmq::send_flags::sndmore);
      peer.tx.send(::zmq::const_buffer{}, ::zmq::send_flags::none);
    } catch (const ::zmq::error_t&) {
      // Control frames are a courtesy: peers still see the disconnect or time out.
    }
  }

  struct Peer {
    std::mutex mu;
    ::zmq::socket_t tx;
    bool tornDown = false;   // under mu: tx is closed (tearDown or close())
    std::string droppedWhy;  // under loansMu_: why tearDown closed tx; lent buffers it drops fail with it
    ::zmq::socket_t monitor;
    int connections = 0;                  // tx sockets made so far (names the monitor)
    std::uint64_t incarnation = 0;        // progress thread: the peer's, from its hello (0: none yet)
    std::vector<std::uint64_t> replaced;  // progress thread: its earlier incarnations
    std::string endpoint;                 // under mu: the address tx is connected to
  };

  // Opens the connection to peer p at `endpoint` (a DEALER with this rank's
  // routing id, watched for disconnects) and sends this rank's hello first
  // on it. At construction, or under p's mu on the progress thread.
  void connectLocked(int p, const std::string& endpoint) {
    auto& peer = *peers_[static_cast<std::size_t>(p)];
    peer.tx = ::zmq::socket_t(ctx_, ::zmq::socket_type::dealer);
    peer.tx.set(::zmq::sockopt::routing_id, std::to_string(opt_.rank) + "." + std::to_string(incarnation_));
    peer.tx.set(::zmq::sockopt::sndhwm, 0);
    peer.tx.set(::zmq::sockopt::immediate, false);
    if (opt_.curve)
      curve::CurveAdmission::makeClient(peer.tx, *opt_.curve, serverKeys_[static_cast<std::size_t>(p)], p);
    const std::string monitorAt =
        "inproc://monitor-" + std::to_string(p) + "-" + std::to_string(peer.connections++);
    if (zmq_socket_monitor(peer.tx.handle(), monitorAt.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
      throw Error("cannot monitor the socket to peer " + std::to_string(p));
    peer.monitor = ::zmq::socket_t(ctx_, ::zmq::socket_type::pair);
    peer.monitor.connect(monitorAt);
    peer.tx.connect(endpoint);
    peer.endpoint = endpoint;
    const auto h = encodeFrameHeader(FrameKind::kHello, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                     Tag{Op::kControl, 0, 0}, hello_);
    peer.tx.send(::zmq::buffer(h.data(), h.size()), ::zmq::send_flags::sndmore);
    peer.tx.send(::zmq::buffer(hello_.data(), hello_.size()), ::zmq::send_flags::none);
    peer.tornDown = false;
  }

  // A hello from p (progress thread). The first one names p's process; one
  // with another incarnation, or any once p is gone, comes from a process
  // started in its place (the old one failed: gossamer-train --rejoin), or
  // from a rank joining the job (no connection to it yet: --join). The old one is declared failed
  // if it was not yet, what was lent to it comes back, and the connection is
  // made anew to the new process's address; p is then there again
  // (PeerLifecycle::revive), for the membership service to take it back.
  void onHello(int p, const Hello& hello) {
    auto& peer = *peers_[static_cast<std::size_t>(p)];
    if (std::find(peer.replaced.begin(), peer.replaced.end(), hello.incarnation) != peer.replaced.end())
      return;
    if (!jobKey_.verify(hello.incarnation, p, hello.proof, hello.endpoint)) {
      // Not from a process of this job (it did not read the rendezvous):
      // the rank's connection stays as it is.
      const auto n = forgedHellos_.fetch_add(1, std::memory_order_relaxed) + 1;
      if (n <= 3 || (n & (n - 1)) == 0)
        GOSSAMER_LOG(kWarning, "zmq rank " << opt_.rank << ": ignored a hello claiming rank " << p
                                           << " (incarnation " << hello.incarnation << ", " << hello.endpoint
                                           << ") whose proof does not verify under the job's key (" << n
                                           << " so far)");
      return;
    }
    // The first hello of a peer that is there, from the address this rank
    // connected to; the old process may also have gone, or been replaced,
    // before its own hello was read.
    bool first = false;
    if (peer.incarnation == 0 && !life_.gone(p)) {
      std::lock_guard<std::mutex> lk(peer.mu);
      first = hello.endpoint == peer.endpoint;
    }
    if (peer.incarnation == hello.incarnation || first) {
      peer.incarnation = hello.incarnation;
      return;
    }
    if (peer.incarnation != 0) peer.replaced.push_back(peer.incarnation);
    peer.incarnation = hello.incarnation;
    const std::string why = "a new process took its place";
    int connections;
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      connections = peer.connections;
    }
    GOSSAMER_LOG(kInfo, "zmq rank " << opt_.rank << ": rank " << p
                                    << (connections == 0 ? " joined (" : " restarted (") << hello.endpoint
                                    << ")");
    tearDown(p, 0.0, why);
    (void)life_.declareFailed(p, why);
    failPullsTo(p, why);
    {
      // ZeroMQ gives back what was lent to the old connection as it drops it.
      std::unique_lock<std::mutex> ll(loansMu_);
      loansCv_.wait_for(ll, std::chrono::seconds(2), [&] {
        return std::none_of(loans_.begin(), loans_.end(), [&](const auto& l) { return l.second->dst == p; });
      });
    }
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      // The poll set is rebuilt without the closed monitor even if the new
      // connection fails (the peer then stays failed).
      rebuildPoll_ = true;
      peer.monitor.close();
      if (connections == 0)
        ensureDescriptors(opt_.rank, kDescriptorsPerPeer, "rank " + std::to_string(p) + " joining");
      connectLocked(p, hello.endpoint);
      std::lock_guard<std::mutex> ll(loansMu_);
      peer.droppedWhy.clear();
    }
    if (!pullTo_.empty()) pullTo_[static_cast<std::size_t>(p)] = false;
    life_.revive(p);
    rebuildPoll_ = true;
  }

  // The engine of a receive into `buffer`: the one whose waiter reads the
  // ROUTER for small ones (engine_), the progress thread's for large ones.
  std::shared_ptr<detail::ProgressEngine> engineFor(std::span<std::byte> buffer) const {
    if (buffer.size() < kBulkReceiveMinBytes) return engine_;
    return bulkEngine_;
  }

  // Wakes the progress thread from its poll (wakeFd_).
  void wakeProgress() {
    const std::uint64_t one = 1;
    (void)!::write(wakeFd_, &one, sizeof one);
  }

  void progressLoop() {
    // [wakeFd_, the ROUTER's ZMQ_FD (polled only while no waiter reads the
    // ROUTER), each peer's monitor socket]
    std::vector<::zmq::pollitem_t> items;
    std::vector<int> itemPeer;
    bool more = false;  // the last drain stopped with frames still queued: no sleep
    while (!stop_) {
      if (!started_.load(std::memory_order_relaxed)) {  // set-up: this thread alone reads the ROUTER
        if (ready_.load(std::memory_order_acquire)) {
          std::lock_guard<std::mutex> lk(rxMu_);
          for (auto& e : early_) handleFrame(e.id, e.parts, e.checked);
          early_.clear();
          early_.shrink_to_fit();
          rebuildPoll_ = true;
          started_.store(true, std::memory_order_release);
          continue;
        }
        if (keyReady_.load(std::memory_order_acquire)) verifyHeldHellos();
        if (readsPaused()) {  // until connectPeers reads the key (or gives up at its timeout)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        ::zmq::pollitem_t item{rx_.handle(), 0, ZMQ_POLLIN, 0};
        try {
          ::zmq::poll(&item, 1, std::chrono::milliseconds(10));
          if (item.revents & ZMQ_POLLIN) drainRouter(false);
        } catch (const ::zmq::error_t& e) {
          if (e.num() == ETERM) return;
          GOSSAMER_LOG(kError, "zmq rank " << opt_.rank << ": progress error: " << e.what());
        } catch (const std::exception& e) {  // (as below)
          GOSSAMER_LOG(kError, "zmq rank " << opt_.rank << ": progress error: " << e.what());
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      try {
        {
          std::lock_guard<std::mutex> lk(rxMu_);
          if (handingOff_) {  // a waiter read a hello: handle it, then what followed it
            HandedOff h = std::move(handoff_);
            handoff_ = {};
            handingOff_ = false;
            handleFrame(h.id, h.parts);
            more = drainRouter(false);
          } else if (!driving_.load(std::memory_order_acquire)) {
            more = drainRouter(false);
          }
          for (std::size_t i = 2; i < items.size(); ++i)
            if (items[i].revents & ZMQ_POLLIN) readMonitor(itemPeer[i]);
          checkLostPeers();
          if (items.empty() || rebuildPoll_) {  // a peer's monitor socket was replaced (onHello)
            rebuildPoll_ = false;
            items.assign({{nullptr, wakeFd_, ZMQ_POLLIN, 0}, {nullptr, rxFd_, ZMQ_POLLIN, 0}});
            itemPeer.assign(2, -1);
            for (int p = 0; p < capacity_; ++p) {
              // (A rank that has not joined has no monitor yet.)
              if (!peers_[static_cast<std::size_t>(p)] || !peers_[static_cast<std::size_t>(p)]->monitor)
                continue;
              items.push_back({peers_[static_cast<std::size_t>(p)]->monitor.handle(), 0, ZMQ_POLLIN, 0});
              itemPeer.push_back(p);
            }
          }
        }
        // While a waiter reads the ROUTER, this thread looks again every
        // millisecond whether it still does (it might have stopped).
        const bool waiterReads = driving_.load(std::memory_order_acquire);
        items[1].events = waiterReads ? 0 : ZMQ_POLLIN;
        for (auto& item : items) item.revents = 0;
        ::zmq::poll(items.data(), items.size(), std::chrono::milliseconds(more ? 0 : waiterReads ? 1 : 10));
        more = false;
        if (items[0].revents & ZMQ_POLLIN) {
          std::uint64_t n = 0;
          (void)!::read(wakeFd_, &n, sizeof n);
        }
      } catch (const ::zmq::error_t& e) {
        if (e.num() == ETERM) return;
        GOSSAMER_LOG(kError, "zmq rank " << opt_.rank << ": progress error: " << e.what());
      } catch (const std::exception& e) {
        // (Out of memory for a frame, say: nothing may leave this thread,
        // where it would terminate the process. The frame is lost; a wait
        // for it ends at its timeout.)
        GOSSAMER_LOG(kError, "zmq rank " << opt_.rank << ": progress error: " << e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  // True for a [header][payload] message whose header's kind byte says hello.
  static bool isHello(const std::vector<::zmq::message_t>& parts) {
    return parts.size() == 2 && parts[0].size() > frame_offset::kKind &&
           static_cast<const std::uint8_t*>(parts[0].data())[frame_offset::kKind] ==
               std::uint8_t(FrameKind::kHello);
  }

  // Reads and handles the messages queued on the ROUTER (caller holds
  // rxMu_), up to kDrainBatch: true if it stopped there with more queued
  // (ZMQ_FD will not signal them: the caller drains again before it sleeps
  // on that descriptor). `waiter`: called by a waiting thread (drive), which
  // hands a hello to the progress thread (handoff_) and stops there.
  bool drainRouter(bool waiter) {
    // At most kDrainBatch frames a call, so that a waiter looks at its own
    // request and deadline, and the progress thread at stop_, however fast
    // frames keep coming.
    constexpr int kDrainBatch = 256;
    bool rechecked = false;
    for (int taken = 0;; ++taken) {
      if (taken == kDrainBatch) return true;
      ::zmq::message_t id;
      if (!rx_.recv(id, ::zmq::recv_flags::dontwait)) {
        // ZMQ_FD signals again only once ZMQ_EVENTS shows no input left.
        if (rechecked || !(rx_.get(::zmq::sockopt::events) & ZMQ_POLLIN)) return false;
        rechecked = true;
        continue;
      }
      rechecked = false;
      std::vector<::zmq::message_t> parts;
      while (rx_.get(::zmq::sockopt::rcvmore)) {
        parts.emplace_back();
        (void)rx_.recv(parts.back(), ::zmq::recv_flags::none);
        if (parts.size() > 2) {  // swallow the rest of an oversized multipart
          ::zmq::message_t sink;
          while (rx_.get(::zmq::sockopt::rcvmore)) (void)rx_.recv(sink, ::zmq::recv_flags::none);
          break;
        }
      }
      if (!started_.load(std::memory_order_relaxed)) {
        stashEarly(std::move(id), parts);
        if (readsPaused()) return false;  // (its poll is on the socket, which sees what is queued)
      } else if (waiter && isHello(parts)) {
        handoff_ = {std::move(id), std::move(parts)};
        handingOff_ = true;
        wakeProgress();
        return false;
      } else {
        handleFrame(id, parts);
      }
    }
  }

  // A frame's header, decoded, and whether its payload's length and checksum
  // were verified with it (checkFrame).
  struct CheckedFrame {
    FrameHeader header;
    bool payloadVerified = false;
  };

  // The checks of a frame that need nothing but its bytes and the rank its
  // routing id names (`peer`, -1: none), shared by stashEarly and
  // handleFrame: two parts (header, payload), a header that decodes, and the
  // payload's length and checksum, except for a data frame of
  // kClaimMinBytes or more, which handleFrame verifies as it copies it
  // (deliverLarge) or else whole.
  // @throws ProtocolError, with its FrameFault, for the first check that fails.
  CheckedFrame checkFrame(const std::vector<::zmq::message_t>& parts, int peer) const {
    if (parts.size() != 2)
      throw ProtocolError(
          peer, 0,
          "expected a 2-part message (header, payload), got " + std::to_string(parts.size()) + " parts");
    std::span<const std::byte> header(static_cast<const std::byte*>(parts[0].data()), parts[0].size());
    CheckedFrame c{decodeFrameHeader(header, peer, capacity_)};
    std::span<const std::byte> payload(static_cast<const std::byte*>(parts[1].data()), parts[1].size());
    if (c.header.kind != FrameKind::kData || payload.size() < kClaimMinBytes) {
      verifyFramePayload(header, c.header, payload, peer);
      c.payloadVerified = true;
    }
    return c;
  }

  // The error for a hello on connection `id` whose proof does not verify.
  ProtocolError forgedHello(int rank, const ::zmq::message_t& id) const {
    return ProtocolError(rank, kFrameHeaderBytes,
                         "a hello whose proof does not verify under the job's key on " + describe(id),
                         FrameFault::kStranger);
  }

  // Set-up, once the job's key is read: checks the hellos kept unchecked
  // before (stashEarly) and drops the connections, and what was kept from
  // them, whose hello does not verify.
  void verifyHeldHellos() {
    if (unverified_.empty()) return;
    for (const auto& entry : unverified_) {
      const std::string& idText =
          entry.first;  // (a structured binding cannot be captured before C++20's P1091)
      const Hello& hello = entry.second;
      const int rank = senderOf(::zmq::message_t(idText.data(), idText.size())).rank;
      if (jobKey_.verify(hello.incarnation, rank, hello.proof, hello.endpoint)) continue;
      greeted_.erase(idText);
      const auto kept = std::erase_if(early_, [&](const EarlyFrame& e) {
        return e.id.size() == idText.size() && std::memcmp(e.id.data(), idText.data(), idText.size()) == 0;
      });
      rejected_[static_cast<std::size_t>(FrameFault::kStranger)] += kept + 1;
      rejectLog_([&] {
        return "zmq rank " + std::to_string(opt_.rank) + ": dropped a hello and " + std::to_string(kept) +
               " frames kept after it from connection " + idText +
               ": its proof does not verify under the job's key";
      });
    }
    unverified_.clear();
    unverifiedBytes_ = 0;
  }

  // Set-up, before the job's key is read: the ROUTER is not read while
  // kMaxUnverifiedBytes are kept from connections whose hellos are not
  // checked yet, so that their senders wait (ZeroMQ's high-water marks)
  // instead of filling this rank's memory.
  bool readsPaused() const {
    return unverifiedBytes_ >= kMaxUnverifiedBytes && !keyReady_.load(std::memory_order_acquire);
  }

  // Set-up is not over (peers_ is being filled): a frame that fails any
  // check, or whose routing id names no rank, is counted and dropped now; a
  // well-formed one from a rank's connection is kept for handleFrame, in
  // order, with what checkFrame found. Only the progress thread touches early_.
  void stashEarly(::zmq::message_t id, std::vector<::zmq::message_t>& parts) {
    const Sender sender = senderOf(id);
    CheckedFrame checked;
    try {
      checked = checkFrame(parts, sender.rank);
      const FrameHeader& h = checked.header;
      if (sender.rank < 0)
        throw ProtocolError(-1, frame_offset::kSource,
                            "a frame from " + describe(id) + ", which names no rank of the job",
                            FrameFault::kStranger);
      // A peer's connection begins with its hello (connectLocked), whose
      // proof shows it read the job's rendezvous. Once this rank holds the
      // job's key, a hello is checked as it arrives, and nothing is kept
      // from a connection whose hello does not verify (a process that only
      // reached the port cannot fill this rank's memory until set-up ends).
      // Before (a rank other than 0 waits for rank 0's key after it
      // published its address), a hello is kept unchecked, with at most
      // kMaxUnverifiedBytes of what follows it on its connection
      // (readsPaused), and all are checked as soon as the key is read
      // (verifyHeldHellos): what a forger sent is then dropped.
      const std::string idText(static_cast<const char*>(id.data()), id.size());
      const bool keyReady = keyReady_.load(std::memory_order_acquire);
      if (keyReady) verifyHeldHellos();
      if (h.kind == FrameKind::kHello) {
        // (No cap on their number: a genuine hello dropped here would never
        // come again, and its peer's frames would all be dropped. What is
        // kept is bounded by readsPaused, each hello counted with what it
        // costs in greeted_ and unverified_ besides its bytes.)
        if (!keyReady) unverifiedBytes_ += kUnverifiedHelloOverheadBytes;
        const Hello hello = decodeHello(
            std::span<const std::byte>(static_cast<const std::byte*>(parts[1].data()), parts[1].size()),
            sender.rank);
        if (keyReady) {
          if (!jobKey_.verify(hello.incarnation, sender.rank, hello.proof, hello.endpoint))
            throw forgedHello(sender.rank, id);
        } else {
          unverified_[idText] = hello;
        }
        greeted_.insert(idText);
      } else if (!greeted_.count(idText)) {
        throw ProtocolError(sender.rank, frame_offset::kKind, "a frame before any hello on " + describe(id),
                            FrameFault::kStranger);
      }
      if (!keyReady)
        for (const auto& part : parts) unverifiedBytes_ += part.size();
    } catch (const ProtocolError& e) {
      ++rejected_[static_cast<std::size_t>(e.fault())];
      rejectLog_([&] {
        return "zmq rank " + std::to_string(opt_.rank) + ": dropped " + toString(e.fault()) + " bytes from " +
               describe(id) + ": " + e.what();
      });
      return;
    }
    // Copied: a received message may share libzmq's whole 8 KiB read
    // buffer, which it would keep alive while it waits here.
    std::vector<::zmq::message_t> copies;
    for (const auto& part : parts) copies.emplace_back(part.data(), part.size());
    early_.push_back({::zmq::message_t(id.data(), id.size()), std::move(copies), checked});
  }

  // A connection's routing id is "RANK.INCARNATION" (decimal): the sender's
  // rank, and the incarnation of its process (its hello's); "RANK" alone is
  // incarnation 0 (unknown).
  struct Sender {
    int rank = -1;
    std::uint64_t incarnation = 0;
  };
  Sender senderOf(const ::zmq::message_t& id) const {
    const std::string s(static_cast<const char*>(id.data()), id.size());
    const auto dot = s.find('.');
    const std::string rank = s.substr(0, dot),
                      incarnation = dot == std::string::npos ? "0" : s.substr(dot + 1);
    auto digits = [](const std::string& t, std::size_t most) {
      return !t.empty() && t.size() <= most && t.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(rank, 6) || !digits(incarnation, 20)) return {};
    const int r = std::stoi(rank);
    if (r >= capacity_ || r == opt_.rank) return {};
    std::uint64_t inc = 0;
    try {
      inc = std::stoull(incarnation);
    } catch (const std::out_of_range&) {  // 20 digits above 2^64
      return {};
    }
    // Only the form connectLocked writes: "01.5" or "1.05" would be another
    // routing id (which libzmq does not keep apart from "1.5") speaking for
    // the same process.
    if (std::to_string(r) != rank || (dot != std::string::npos && std::to_string(inc) != incarnation))
      return {};
    return {r, inc};
  }

  // Only the connection a peer said hello on (routing id "RANK.INCARNATION"
  // of its current incarnation) speaks for it: a bad frame there fails the
  // peer. Anything else that reaches the ROUTER (a stray or hostile client,
  // bytes libzmq took for ZMTP 1.0 messages, a forged hello) is counted by
  // kind, logged at most 10 lines a second, and dropped: it fails no one.
  // `checked`: what checkFrame found when the frame was stashed (stashEarly),
  // not looked for again.
  void handleFrame(const ::zmq::message_t& id, std::vector<::zmq::message_t>& parts,
                   const std::optional<CheckedFrame>& checked = std::nullopt) {
    const Sender sender = senderOf(id);
    const int peer = sender.rank;
    const Peer* known = peer >= 0 ? peers_[static_cast<std::size_t>(peer)].get() : nullptr;
    const bool own = known != nullptr && known->incarnation != 0 && sender.incarnation == known->incarnation;
    const bool helloKind = isHello(parts);
    // Frames still queued from a process that another took the place of
    // (whose hello came first) are dropped unread.
    if (known != nullptr && !own && !helloKind &&
        std::find(known->replaced.begin(), known->replaced.end(), sender.incarnation) !=
            known->replaced.end())
      return;
    try {
      const CheckedFrame c = checked ? *checked : checkFrame(parts, peer);
      const FrameHeader& h = c.header;
      std::span<const std::byte> header(static_cast<const std::byte*>(parts[0].data()), parts[0].size());
      auto msg = std::make_shared<::zmq::message_t>(std::move(parts[1]));
      std::span<const std::byte> payload(static_cast<const std::byte*>(msg->data()), msg->size());
      if (own && h.kind == FrameKind::kData && payload.size() >= kClaimMinBytes &&
          payload.size() == h.payloadBytes && static_cast<int>(h.source) == peer) {
        deliverLarge(peer, header, h, std::move(msg), payload);
        return;
      }
      if (!c.payloadVerified) verifyFramePayload(header, h, payload, peer);
      if (!own && h.kind != FrameKind::kHello)
        throw ProtocolError(peer, frame_offset::kKind,
                            "a frame of kind " + std::to_string(int(h.kind)) + " from " + describe(id) +
                                ", which is not a peer's connection",
                            FrameFault::kStranger);
      if (peer < 0 || static_cast<int>(h.source) != peer)
        throw ProtocolError(
            peer, frame_offset::kSource,
            "frame claims source rank " + std::to_string(h.source) + " but arrived from " + describe(id),
            peer < 0 ? FrameFault::kStranger : FrameFault::kMalformed);
      if (h.kind == FrameKind::kBye) {
        life_.onBye(peer, h.tag.segment);
        sendControl(peer, FrameKind::kByeAck);
        // The ack goes first; what this rank still sends it is not read.
        releaseLoansTo(peer, byeLinger_, "peer closed its transport");
        return;
      }
      if (h.kind == FrameKind::kByeAck) {
        life_.onByeAck(peer);
        return;
      }
      if (h.kind == FrameKind::kPull) {
        pullFrom(peer, h, payload);
        return;
      }
      if (h.kind == FrameKind::kHello) {
        const Hello hello = decodeHello(payload, peer);
        if (hello.incarnation != sender.incarnation)
          throw ProtocolError(peer, kFrameHeaderBytes,
                              "hello of incarnation " + std::to_string(hello.incarnation) +
                                  " on the connection of incarnation " + std::to_string(sender.incarnation));
        onHello(peer, hello);
        return;
      }
      if (h.kind == FrameKind::kPullDone) {
        (void)pulls_.done(peer, h.tag.step, h.tag.segment == kPullFailed);
        return;
      }
      if (h.kind != FrameKind::kData)
        throw ProtocolError(peer, frame_offset::kKind,
                            "frame kind " + std::to_string(int(h.kind)) + " is not used over zmq");
      life_.countReceived(payload.size());
      box_.deliver(peer, h.tag, InboundPayload{msg, payload});
    } catch (const PeerFailure& e) {  // a pull from a process that is gone
      if (peer >= 0) declareFailed(peer, std::current_exception(), e.what());
    } catch (const ProtocolError& e) {
      ++rejected_[static_cast<std::size_t>(e.fault())];
      if (!own) {
        rejectLog_([&] {
          return "zmq rank " + std::to_string(opt_.rank) + ": dropped " + toString(e.fault()) +
                 " bytes from " + describe(id) + ": " + e.what();
        });
        return;
      }
      GOSSAMER_LOG(kWarning, "zmq rank " << opt_.rank << ": " << e.what());
      // It may still read pull frames queued before; it misbehaves, so this
      // rank stops waiting for it (see Transport::isendBorrowed on cancel).
      declareFailed(peer, std::current_exception(), std::string("it sent a malformed frame: ") + e.what());
    }
  }

  // A connection's routing id for a log line: printable, at most 40 characters.
  static std::string describe(const ::zmq::message_t& id) {
    std::string out = "the connection with routing id '";
    const auto* b = static_cast<const unsigned char*>(id.data());
    for (std::size_t i = 0; i < id.size() && i < 40; ++i) {
      if (b[i] >= 0x20 && b[i] < 0x7f) {
        out += static_cast<char>(b[i]);
      } else {
        static const char* hex = "0123456789abcdef";
        out += "\\x";
        out += hex[b[i] >> 4];
        out += hex[b[i] & 15];
      }
    }
    return out + (id.size() > 40 ? "...'" : "'");
  }

  // Peer p failed with `error` (progress thread): receives waiting only on it
  // fail with it, buffers lent to it come back, and the sends it owes pulls
  // for fail with PeerFailure(`why`).
  void declareFailed(int p, std::exception_ptr error, const std::string& why) {
    life_.declareFailed(p, std::move(error));
    releaseLoansTo(p, 0.0, why);
    failPullsTo(p, why);
  }

  static constexpr int kReceiveQueueMessages = 100;

  // Payloads from this size on are checked in one pass that also copies them
  // into their receive, when one from their sender alone is posted
  // (Mailbox::claim), and report their checksum (Request::payloadChecksum)
  // for the collectives to forward.
  static constexpr std::size_t kClaimMinBytes = std::size_t{64} << 10;
  // Receives from this size on wait while the progress thread reads the
  // ROUTER (bulkEngine_); smaller ones have their waiter read it (drive).
  static constexpr std::size_t kBulkReceiveMinBytes = std::size_t{1} << 20;

  // A data frame of kClaimMinBytes or more whose length matches its header.
  // Frames from one peer arrive in order, so claiming here keeps matching
  // order. A receive cancelled before the copy (cancel() waits for
  // `exclusive`) leaves the message to the Mailbox: nothing is lost. A
  // receive posted with irecvView gets the message itself, not a copy.
  // A receive from several ranks is not claimed (as the socket transport):
  // a checksum mismatch fails only its sender, and that receive stays posted
  // for the others, its buffer untouched; it gets the payload once verified.
  // @throws ProtocolError for a checksum mismatch (the claimed receive fails with it too).
  void deliverLarge(int peer, std::span<const std::byte> header, const FrameHeader& h,
                    std::shared_ptr<::zmq::message_t> msg, std::span<const std::byte> payload) {
    StreamFrameVerifier v;
    v.begin(header, h, peer);
    auto claim = box_.claim(peer, h.tag, /*singleSourceOnly=*/true);
    bool consumed = false;
    std::uint32_t sum = 0;
    if (claim.state) {
      std::lock_guard<std::mutex> lk(claim.state->engine->exclusive);
      if (!claim.fits(peer, payload.size())) {  // the receive fails, the message is used up
        consumed = true;
      } else if (claim.state->pending()) {
        // Checked and copied in one pass, or (irecvView) checked and handed over.
        sum = claim.handOver ? crc32c(payload)
                             : copyAndCrc32c(claim.buffer.data(), payload.data(), payload.size());
        v.updateSummed(sum, payload.size());
        try {
          v.finish();
        } catch (const ProtocolError&) {
          claim.state->fail(std::current_exception());
          throw;
        }
        life_.countReceived(payload.size());
        if (claim.handOver)
          claim.state->handOver(peer, std::move(msg), payload, sum);
        else
          claim.state->complete(peer, payload.size(), sum);
        return;
      }
    }
    sum = crc32c(payload);
    v.updateSummed(sum, payload.size());
    v.finish();
    life_.countReceived(payload.size());
    if (!consumed) box_.deliver(peer, h.tag, InboundPayload{std::move(msg), payload, sum});
  }

  // ---- single copy (ipc) ------------------------------------------------------

  // A pull-done frame's Tag::segment when the receiver could not read the message.
  static constexpr std::uint32_t kPullFailed = 1;

  bool pullsTo(int dst) const { return !pullTo_.empty() && pullTo_[static_cast<std::size_t>(dst)]; }

  // Sends a pull frame naming `data`; the request completes when the peer's
  // pull-done for its ticket arrives (fails if the peer could not read it,
  // or is gone first). cancel() waits for the pull-done (see cancelPull).
  Request sendPull(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) {
    if (life_.gone(dst)) throw PeerFailure(dst, "cannot send: peer is gone");
    // Size and dtype checked (InvalidArgument) as for any data frame.
    (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data.size(),
                            0u);
    PullDescriptor d;
    d.address = reinterpret_cast<std::uintptr_t>(data.data());
    d.bytes = data.size();
    d.crc = opt_.checksumPulls ? crc32c(data) : 0;
    d.pid = pids_[static_cast<std::size_t>(opt_.rank)];
    auto state = std::make_shared<detail::RequestState>();
    state->engine = std::make_shared<LoanGuard>([this](detail::RequestState& s) { cancelPull(s); });
    state->what = "send to rank " + std::to_string(dst) + " " + toString(tag) + " (waiting for its pull)";
    auto& peer = *peers_[static_cast<std::size_t>(dst)];
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.tornDown) {
        life_.checkOpen("isend");  // this rank closed: Cancelled, not its peer's failure
        throw PeerFailure(dst, "cannot send: " + closedWhy(dst));
      }
      d.ticket = pulls_.add(dst, state, data.size());  // Cancelled once close() failed them all
      // As in lend(): registered first, so a peer found gone from now on fails it.
      if (life_.gone(dst)) {
        pulls_.forget(d.ticket);
        throw PeerFailure(dst, "cannot send: peer is gone");
      }
      const auto wire = single_copy::encode(d);
      const auto header =
          encodeFrameHeader(FrameKind::kPull, DType::kBytes, static_cast<std::uint32_t>(opt_.rank), tag,
                            std::span<const std::byte>(wire));
      try {
        peer.tx.send(::zmq::buffer(header.data(), header.size()), ::zmq::send_flags::sndmore);
        peer.tx.send(::zmq::buffer(wire.data(), wire.size()), ::zmq::send_flags::none);
      } catch (...) {
        pulls_.forget(d.ticket);
        throw;
      }
    }
    life_.countSent(data.size());
    return Request(std::move(state));
  }

  // Request::cancel() of a pulled send: returns once the peer has read the
  // buffer (its pull-done) or is gone. A peer that has not read it within the
  // timeout has its connection torn down, which fails the send.
  void cancelPull(detail::RequestState& s) {
    const auto ticket = pulls_.ticketOf(s);
    if (!ticket) return;
    const int dst = pulls_.destinationOf(*ticket);
    if (dst < 0 || pulls_.waitSettled(*ticket, opt_.timeoutSeconds)) return;
    tearDown(dst, 0.0,
             "a cancelled send to it was still not read after " + std::to_string(opt_.timeoutSeconds) +
                 " s (the peer is not reading)");
  }

  // Fails the pulls peer p still owes (-1: every peer's).
  void failPullsTo(int p, const std::string& why) {
    if (p < 0)
      pulls_.close(std::make_exception_ptr(Cancelled("send dropped: " + why)));
    else
      pulls_.failOwedBy(p, std::make_exception_ptr(PeerFailure(p, "send dropped: " + why)));
  }

  // Receiver side of a pull frame (progress thread): copies the message out of
  // the sender's memory into the posted receive (or a buffer of its own for
  // the Mailbox), then acknowledges with pull-done, also when it failed.
  // Frames from one peer arrive in order, so claiming here keeps matching order.
  // @throws ProtocolError for a bad descriptor, an unreadable sender or a CRC mismatch.
  void pullFrom(int peer, const FrameHeader& h, std::span<const std::byte> payload) {
    const auto d = single_copy::decode(payload, peer);
    // From here every outcome answers the sender: pull-done, or pull-done
    // with kPullFailed before the error (so its send fails at once rather
    // than at its timeout).
    auto refuse = [&](std::exception_ptr error, detail::RequestState* claimed) {
      if (claimed) claimed->fail(error);
      sendControl(peer, FrameKind::kPullDone, kPullFailed, d.ticket);
      std::rethrow_exception(error);
    };
    const bool probed = static_cast<std::size_t>(peer) < pids_.size();  // (a rank that joined was not)
    if (!probed || d.pid != pids_[static_cast<std::size_t>(peer)])
      refuse(std::make_exception_ptr(ProtocolError(
                 peer, kFrameHeaderBytes + 20,
                 "pull frame names process " + std::to_string(d.pid) + ", but rank " + std::to_string(peer) +
                     (!probed ? std::string(" was not probed (single copy is off on this rank, or it joined)")
                              : " is process " + std::to_string(pids_[static_cast<std::size_t>(peer)])))),
             nullptr);
    auto copy = [&](std::span<std::byte> dst, detail::RequestState* claimed) {
      if (const int err = single_copy::pull(d, dst); err != 0)
        refuse(err == ESRCH ? std::make_exception_ptr(PeerFailure(peer, "its process is gone (pull: ESRCH)"))
                            : std::make_exception_ptr(ProtocolError(
                                  peer, kFrameHeaderBytes,
                                  "cannot read the pulled message from process " + std::to_string(d.pid) +
                                      " (process_vm_readv: " + std::system_category().message(err) +
                                      "); turn single copy off (zmq::Options::singleCopy)")),
               claimed);
      if (opt_.checksumPulls && crc32c(dst) != d.crc)
        refuse(std::make_exception_ptr(ProtocolError(
                   peer, kFrameHeaderBytes + 16, "pulled message fails its CRC-32C (sender changed it?)")),
               claimed);
    };
    // A receive that names only this peer (as the socket transport): one that
    // also waits on others must not fail because this one's read did.
    auto claim = box_.claim(peer, h.tag, /*singleSourceOnly=*/true);
    if (claim.state) {
      std::lock_guard<std::mutex> lk(claim.state->engine->exclusive);
      if (claim.state->pending()) {        // (cancelled meanwhile: the Mailbox gets it below)
        if (!claim.fits(peer, d.bytes)) {  // the receive fails, the message is used up
          sendControl(peer, FrameKind::kPullDone, 0, d.ticket);
          return;
        }
        copy(claim.buffer.first(d.bytes), claim.state.get());
        sendControl(peer, FrameKind::kPullDone, 0, d.ticket);
        life_.countReceived(d.bytes, /*pulled=*/true);
        claim.state->complete(peer, d.bytes);
        return;
      }
    }
    // No receive posted (or it was cancelled before the copy): a buffer of its own.
    std::shared_ptr<std::byte> owned;
    try {
      owned = std::shared_ptr<std::byte>(new std::byte[std::max<std::size_t>(d.bytes, 1)],
                                         std::default_delete<std::byte[]>());
    } catch (const std::bad_alloc&) {
      refuse(std::make_exception_ptr(
                 ProtocolError(peer, kFrameHeaderBytes + 8,
                               "no memory for a pulled message of " + std::to_string(d.bytes) + " bytes")),
             nullptr);
    }
    std::span<std::byte> dst(owned.get(), d.bytes);
    copy(dst, nullptr);
    sendControl(peer, FrameKind::kPullDone, 0, d.ticket);
    life_.countReceived(d.bytes, /*pulled=*/true);
    box_.deliver(peer, h.tag, InboundPayload{std::move(owned), dst});
  }

  void readMonitor(int p) {
    auto& peer = *peers_[static_cast<std::size_t>(p)];
    if (peer.monitor.handle() == nullptr) return;  // closed by a reconnect that failed (onHello)
    ::zmq::message_t ev, addr;
    while (peer.monitor.recv(ev, ::zmq::recv_flags::dontwait)) {
      if (peer.monitor.get(::zmq::sockopt::rcvmore)) (void)peer.monitor.recv(addr, ::zmq::recv_flags::none);
      std::uint16_t event = 0;
      if (ev.size() >= 2) std::memcpy(&event, ev.data(), 2);
      if (event != ZMQ_EVENT_DISCONNECTED) continue;
      if (life_.leaving(p))  // it closed its ROUTER after its last read: what it did not pull, it never will
        failPullsTo(p, "peer closed its transport");
      else
        life_.noteLost(p);  // its in-flight messages get failureGraceSeconds (checkLostPeers)
    }
  }

  // Peers lost for longer than the grace period are declared failed: buffers
  // lent to them come back, the sends they owe pulls for fail.
  void checkLostPeers() {
    for (int p : life_.expireLost(opt_.failureGraceSeconds)) {
      releaseLoansTo(p, 0.0, PeerLifecycle::kLostWithoutBye);
      failPullsTo(p, PeerLifecycle::kLostWithoutBye);
    }
  }

  Options opt_;
  const int capacity_;  // global ranks this transport can address: worldSize plus the ranks that may join
  std::shared_ptr<ReceiveEngine> engine_ = std::make_shared<ReceiveEngine>();
  // The engine of receives of kBulkReceiveMinBytes or more: their waiters
  // sleep while the progress thread reads, checks and copies, so a ring's
  // next 1 MiB piece lands while its caller reduces the last one. Below
  // that a waiter that reads the ROUTER itself saves a thread hand-off per
  // message (measured at 4 processes: 64 KiB allreduces 1.17 ms -> 0.31 ms,
  // 256 KiB 1.62 -> 0.69 ms, from 1 MiB on alike within the noise).
  std::shared_ptr<detail::BackgroundEngine> bulkEngine_ = std::make_shared<detail::BackgroundEngine>();
  std::mutex loansMu_;  // after Peer::mu
  std::condition_variable loansCv_;
  std::unordered_map<detail::RequestState*, Loan*> loans_;  // lent buffers ZeroMQ still holds
  double byeLinger_ = 0;  // how long sends to a peer that said bye may still go (abort() changes opt_)
  Mailbox box_;
  PeerLifecycle life_;  // peer table, goodbye, failure verdicts, statistics
  ::zmq::context_t ctx_;
  ::zmq::socket_t rx_;
  std::unique_ptr<curve::CurveAdmission> admission_;  // counts failed handshakes; under CURVE, admits by key
  mutable std::mutex admissionMu_;                    // admission_ as stats() reads it while close() ends it
  std::atomic<std::uint64_t> refusedAtClose_{0};
  std::array<std::atomic<std::uint64_t>, kFrameFaultCount> rejected_{};  // TransportStats::rejectedFrames
  LogLimiter rejectLog_{LogLevel::kWarning, 10, "rejected frames"};
  std::vector<std::string> serverKeys_;  // under CURVE: each rank's public key
  std::vector<std::unique_ptr<Peer>> peers_;
  std::thread progress_;
  std::atomic<bool> stop_{false}, aborting_{false};
  std::uint64_t incarnation_ = 0;               // this process's, drawn at random (odd: never 0)
  std::string me_;                              // rx_'s address
  JobKey jobKey_;                               // from the rendezvous (kit/job_key.hpp)
  std::atomic<std::uint64_t> forgedHellos_{0};  // hellos whose proof did not verify
  std::vector<std::byte> hello_;                // its hello (encodeHello): incarnation_ and rx_'s address
  bool rebuildPoll_ = false;                    // under rxMu_: a monitor socket changed
  // The ROUTER, and all that handling its frames touches (below, peers_'s
  // incarnations, early_), are used under rxMu_, by one thread at a time: a
  // waiter that reads it (drive) or the progress thread.
  std::mutex rxMu_;
  int rxFd_ = -1;                     // the ROUTER's ZMQ_FD: readable when its input may have changed
  int wakeFd_ = -1;                   // eventfd: wakes the progress thread's poll (wakeProgress)
  std::atomic<bool> driving_{false};  // a waiter reads the ROUTER (drive): the progress thread does not
  struct HandedOff {
    ::zmq::message_t id;
    std::vector<::zmq::message_t> parts;
  };
  bool handingOff_ = false;  // under rxMu_: a waiter read a hello, for the progress thread (handoff_)
  HandedOff handoff_;
  // Set-up is over (peers_ complete); until then the progress thread keeps
  // well-formed frames from ranks' connections in early_ (stashEarly).
  std::atomic<bool> ready_{false};
  std::atomic<bool> started_{false};  // the progress thread has seen ready_ and handled early_
  std::set<std::string> greeted_;     // progress thread, during set-up: routing ids that sent a hello
  // Set-up, before jobKey_ is read: the hellos kept unchecked, by routing id.
  std::map<std::string, Hello> unverified_;  // hellos read before the job's key, by connection
  std::size_t unverifiedBytes_ = 0;          // kept from their connections since (stashEarly)
  static constexpr std::size_t kMaxUnverifiedBytes = std::size_t{64} << 20;
  static constexpr std::size_t kUnverifiedHelloOverheadBytes =
      512;                             // its entries in greeted_ and unverified_
  std::atomic<bool> keyReady_{false};  // jobKey_ is read (connectPeers); stashEarly verifies hellos
  struct EarlyFrame {
    ::zmq::message_t id;
    std::vector<::zmq::message_t> parts;
    CheckedFrame checked;
  };
  std::vector<EarlyFrame> early_;
  // Single copy (ipc): per rank, its pid and whether it can read our memory
  // (empty without single copy); the pulls this rank's peers still owe it.
  std::vector<std::uint32_t> pids_;
  std::vector<bool> pullTo_;
  single_copy::Ledger pulls_;  // the pulls this rank's peers still owe it
};

void ReceiveEngine::waitUntil(detail::RequestState& state, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(driverMu_, std::try_to_lock);
  if (lk.owns_lock() && owner_ != nullptr) owner_->drive(state, deadline);
}

}  // namespace

std::unique_ptr<Transport> makeTransport(const Options& o, Store& store) {
  checkNetworkOptions(o);
  GOSSAMER_ENFORCE(o.maxWorldSize <= o.worldSize || !o.curve,
                   "zmq: ranks cannot join a running job under CURVE (maxWorldSize "
                       << o.maxWorldSize << " > worldSize " << o.worldSize << ")");
  return std::make_unique<ZmqTransport>(o, store);
}

}  // namespace gossamer::zmq

namespace gossamer::zmq {
void registerWith(Registry& registry) {
  registry.addTransport(
      "zmq",
      [](const TransportContext& ctx) {
        auto o = networkOptionsFrom<Options>(ctx);
        o.recycleReceiveBuffers = ctx.config.get<bool>("transport.recycle_receive_buffers");
        o.curve = curveKeysFrom(ctx.config, ctx.rank);
        o.maxWorldSize = ctx.maxWorldSize;
        return makeTransport(o, ctx.store);
      },
      KeySet().boolean(
          "recycle_receive_buffers", Options{}.recycleReceiveBuffers,
          "raise glibc's mmap and trim thresholds (mallopt: process-wide, for good) so large receive "
          "buffers are reused; about 2x faster 64 MiB allreduces over zmq"),
      TransportTraits{
          .spansProcesses = true, .secures = true, .innerKeys = {}});  // CURVE on every link (curveKeysFrom)
  registry.setDefault("transport", "zmq");
}
}  // namespace gossamer::zmq
