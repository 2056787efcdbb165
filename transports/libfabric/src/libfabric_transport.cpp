// libfabric transport: the Transport API (isend, irecv, close, stats), the
// handle makeTransport returns, and registration. Design and wire protocol:
// libfabric_impl.hpp and docs/libfabric.md.
#include "gossamer/transports/libfabric.hpp"

#include "gossamer/kit/background.hpp"
#include "gossamer/kit/security.hpp"
#include "libfabric_impl.hpp"

namespace gossamer::libfabric {

namespace impl {

LibfabricTransport::LibfabricTransport(const Options& o, Store& store)
    : opt_(o),
      capacity_(std::max(o.worldSize, o.maxWorldSize)),
      guard_(std::make_shared<CopyGuard>(o.timeoutSeconds)),
      box_(capacity_),
      life_("libfabric", o.rank, capacity_, box_) {
  peerTimeout_ = o.peerTimeoutSeconds > 0 ? o.peerTimeoutSeconds : std::min(o.timeoutSeconds / 2, 5.0);
  GOSSAMER_ENFORCE(peerTimeout_ > o.heartbeatSeconds,
                   "peer timeout " << peerTimeout_ << " s must exceed the heartbeat interval "
                                   << o.heartbeatSeconds << " s");
  info_ = detail::selectProvider(o);
  const fi_info* fi = info_.get();
  provider_ = fi->fabric_attr->prov_name;
  mrLocal_ = (fi->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  namesSenders_ = (fi->caps & FI_SOURCE) != 0 && (fi->caps & FI_DIRECTED_RECV) != 0;
  // shm peers are on this host: their process exit is watched directly
  // (pidfd), which is faster than heartbeats and never touches a dead
  // peer's shared memory, where a heartbeat could wedge this rank.
  heartbeats_ = provider_.rfind("shm", 0) != 0;
  // Large payloads are received straight into a posted receive's buffer only
  // with shm, whose receiver moves every byte itself inside its own progress
  // calls (a piece is either copied during fi_cq_read or cancelled).
  // tcp;ofi_rxm cannot cancel a piece whose transfer began, and a stopped
  // sender that resumes later would have it write into the caller's buffer
  // after cancel() returned or the receive failed; so there (and with any
  // other provider) payloads land in this transport's memory and the
  // checksum thread copies them into the receive (docs/libfabric.md).
  inPlace_ = !heartbeats_;
  maxMsgBytes_ = fi->ep_attr->max_msg_size;
  if (maxMsgBytes_ < kEnvelopeBytes + kAnnounceBytes)
    throw Error("libfabric provider " + provider_ + ": max_msg_size " + std::to_string(maxMsgBytes_) +
                " bytes is below the " + std::to_string(kEnvelopeBytes + kAnnounceBytes) +
                " bytes this transport needs");
  injectBytes_ = std::min(fi->tx_attr->inject_size, kInjectMax);
  inlineBytes_ = std::min(o.inlineBytes, maxMsgBytes_ - kEnvelopeBytes - kFrameHeaderBytes);
  // Frame buffers take the largest of: a frame with an inline payload, an
  // announcement, and a hello (a restarted or joining process's first word,
  // which must not be truncated whatever inlineBytes is).
  poolBytes_ = kEnvelopeBytes +
               std::max({kFrameHeaderBytes + inlineBytes_, kAnnounceBytes,
                         std::min(kFrameHeaderBytes + kMaxHelloPayload, maxMsgBytes_ - kEnvelopeBytes)});
  // (No frame payload exceeds kMaxPayloadBytes, so neither does a piece.)
  GOSSAMER_ENFORCE(o.maxPieceBytes == 0 || o.maxPieceBytes >= kMinPieceBytes,
                   "maxPieceBytes " << o.maxPieceBytes << " below " << kMinPieceBytes
                                    << " (a receiver refuses smaller pieces)");
  pieceBytes_ = std::min<std::size_t>(
      std::min(o.maxPieceBytes > 0 ? o.maxPieceBytes : kDefaultPieceBytes, maxMsgBytes_), kMaxPayloadBytes);

  openEndpoint();
  try {
    setUp(store);
  } catch (...) {
    // Its address may be in a shm neighbour's address vector already: park
    // the endpoint rather than close it under that neighbour.
    if (neighbours_.entered()) neighbours_.leave(keepEndpoint());
    throw;
  }
}

void LibfabricTransport::setUp(Store& store) {
  exchangeAddresses(store);

  rx_ = std::vector<PeerRx>(static_cast<std::size_t>(capacity_));
  const auto now = Clock::now();
  for (auto& r : rx_) r.lastHeard = now;
  for (auto& peer : tx_) peer->moved = now;
  for (int p = 0; p < capacity_; ++p) {  // ranks that have not joined
    auto& peer = *tx_[static_cast<std::size_t>(p)];
    if (p == opt_.rank || !peer.gone) continue;
    rx_[static_cast<std::size_t>(p)].gone = true;
    (void)life_.declareFailed(p, peer.why);
  }
  beatHeader_ = encodeFrameHeader(FrameKind::kData, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                  Tag{Op::kControl, 0, 0}, {});
  postPool();
}

void LibfabricTransport::start() {
  {
    std::lock_guard<std::mutex> lk(guard_->mu);
    guard_->wake = [this] { wake(); };  // cleared by teardown(), while this object lives
  }
  // (survivePass: what escapes a loop ends its thread, logged, never the
  // process; the peers are then failed, so that no wait runs to its timeout.)
  verifier_ = std::thread([self = shared_from_this()] {
    if (!survivePass("libfabric checksum thread", [&] { self->verifyLoop(); }))
      survivePass("libfabric checksum thread", [&] { self->failEveryPeerFrom("checksum thread"); });
  });
  progress_ = std::thread([self = shared_from_this()] {
    if (!survivePass("libfabric progress thread", [&] { self->progressLoop(); }))
      survivePass("libfabric progress thread", [&] { self->failEveryPeerFrom("progress thread"); });
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

LibfabricTransport::~LibfabricTransport() {
  try {
    close();
  } catch (...) {
    // Destructors must not throw; close() failures were already reported.
  }
}

Request LibfabricTransport::isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) {
  life_.checkSend(dst);
  // (encodeFrameHeader validates the size and dtype: InvalidArgument before anything is queued.)
  const bool large = dst != opt_.rank && data.size() > tx_[static_cast<std::size_t>(dst)]->inlineLimit.load(
                                                           std::memory_order_relaxed);
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
    if (large) std::this_thread::yield();
  }
  life_.countSent(data.size());
  return Request(gossamer::detail::completedRequest(dst, data.size()));
}

Request LibfabricTransport::irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) {
  life_.checkOpen("irecv");
  auto r = box_.post(sources, tag, buffer, guard_);
  kick();  // a message is expected: keep the progress thread polling
  return r;
}

void LibfabricTransport::abort() {
  opt_.lingerSeconds = 0;
  aborting_ = true;
  close();
}

void LibfabricTransport::close() {
  if (!life_.beginClose()) return;
  // Goodbye handshake (as in the zmq transport): the bye follows everything
  // this rank sent to the peer (same sequence); the peer acknowledges it once
  // it has received all of that. Wait, bounded by the linger period, until
  // every peer acknowledged, is closing itself, or is gone.
  for (int p = 0; p < capacity_; ++p) {
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
  int capacity() const override { return impl_->capacity(); }
  std::string name() const override { return impl_->name(); }
  double timeoutSeconds() const override { return impl_->timeoutSeconds(); }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return impl_->isend(dst, tag, data, dtype);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return impl_->irecv(sources, tag, buffer);
  }
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return impl_->discardArrived(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return impl_->peerFailure(rank); }
  void close() override { impl_->close(); }
  void abort() override { impl_->abort(); }
  TransportStats stats() const override { return impl_->stats(); }

 private:
  std::shared_ptr<LibfabricTransport> impl_;
};

}  // namespace impl

using impl::kSourceMask;
using impl::LibfabricTransport;
using impl::TransportHandle;

std::unique_ptr<Transport> makeTransport(const Options& o, Store& store) {
  GOSSAMER_ENFORCE(o.worldSize >= 1 && o.worldSize <= static_cast<int>(kSourceMask) + 1,
                   "world size " << o.worldSize);
  const int most = std::max(o.worldSize, o.maxWorldSize);
  GOSSAMER_ENFORCE(most <= static_cast<int>(kSourceMask) + 1 && o.maxWorldSize <= 1024,
                   "maxWorldSize " << o.maxWorldSize << " (at most 1024)");
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < most, "rank " << o.rank << " outside world size " << most);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds);
  GOSSAMER_ENFORCE(o.lingerSeconds >= 0, "linger " << o.lingerSeconds);
  GOSSAMER_ENFORCE(o.heartbeatSeconds > 0, "heartbeat interval " << o.heartbeatSeconds);
  GOSSAMER_ENFORCE(o.peerTimeoutSeconds >= 0, "peer timeout " << o.peerTimeoutSeconds);
  GOSSAMER_ENFORCE(o.spinSeconds >= 0, "spin time " << o.spinSeconds);
  GOSSAMER_ENFORCE(o.inlineBytes <= kMaxPayloadBytes, "inline bytes " << o.inlineBytes);
  GOSSAMER_ENFORCE(!o.provider.empty(), "libfabric provider name is empty");
  auto impl = std::make_shared<LibfabricTransport>(o, store);
  try {
    impl->start();
  } catch (...) {
    // A thread that could not start (the system's thread limit): the one
    // that did holds the transport alive until close() stops it (an abort:
    // no byes wait for acknowledgements no progress thread would take).
    try {
      impl->abort();
    } catch (...) {
      // The start's failure is the one to report.
    }
    throw;
  }
  return std::make_unique<TransportHandle>(std::move(impl));
}

namespace {
/// transport.provider must name one when libfabric is the transport.
// Wherever the config runs libfabric: as transport.kind, or inside another
// transport (a composite's local or remote one).
std::optional<ConfigIssue> checkProvider(const TransportCatalog& catalog, const Config& c) {
  if (!c.get<std::string>("transport.provider").empty()) return std::nullopt;
  for (const auto& [key, name] : catalog.inUse(c))
    if (name == "libfabric")
      return ConfigIssue{"transport.provider",
                         "the libfabric transport (" + key +
                             ") needs a provider (e.g. tcp, shm, verbs, or a name fi_info "
                             "lists)"};
  return std::nullopt;
}
}  // namespace

void registerWith(Registry& registry) {
  const Options defaults;
  const std::shared_ptr<const TransportCatalog> catalog = registry.transportCatalog();
  registry.addTransport(
      "libfabric",
      [](const TransportContext& ctx) {
        requireNoSecurity(ctx.config, "libfabric");
        Options o;
        o.rank = ctx.rank;
        o.worldSize = ctx.config.worldSize();
        o.provider = ctx.config.get<std::string>("transport.provider");
        o.host = transportHost(ctx);
        o.timeoutSeconds = ctx.config.get<double>("transport.timeout_seconds");
        o.lingerSeconds = ctx.config.get<double>("transport.linger_seconds");
        o.maxWorldSize = ctx.maxWorldSize;
        try {
          return makeTransport(o, ctx.store);
        } catch (const ProviderNotFound& e) {
          throw ConfigError(ctx.config.sourceFile, 0, "transport.provider", e.what());
        }
      },
      KeySet()
          .text("provider", defaults.provider, {},
                "libfabric provider: tcp (tcp;ofi_rxm), shm, verbs (verbs;ofi_rxm), sockets or any name "
                "fi_info "
                "lists; checked when the transport starts")
          .rule([catalog](const Config& c) { return checkProvider(*catalog, c); }));
}

}  // namespace gossamer::libfabric
