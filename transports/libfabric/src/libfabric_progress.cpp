// libfabric transport: the progress thread. Reads the completion queue,
// validates frames, receives payload pieces (in place into a claimed receive
// when one is posted) and hands complete messages to the Mailbox in order.
#include "libfabric_impl.hpp"

namespace gossamer::libfabric::impl {

void LibfabricTransport::kick() {
  lastKick_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  if (sleeping_.load()) wake();
}

void LibfabricTransport::wake() {
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

void LibfabricTransport::progressLoop() {
  std::array<fi_cq_tagged_entry, 32> entries{};
  std::array<fi_addr_t, 32> from{};  // each completion's source endpoint (receives, FI_SOURCE)
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
      if (secondsSince(lastLoop, now) > peerTimeout_ / 4) {
        for (auto& r : rx_) r.lastHeard = now;
        for (auto& peer : tx_) peer->moved = now;
      }
      lastLoop = now;
      ssize_t n = fi_cq_readfrom(cq_.get(), entries.data(), entries.size(), from.data());
      const bool active = handleCq(n, entries.data(), from.data());
      if (queued_ > held_) flushPending();
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
        if (!retired_.empty()) retireOld(now);
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
      if (Clock::now() - std::max(lastActivity, kicked) < spin || queued_ > held_ || liveSends_ > 0 ||
          bulkPosted_ > 0) {
        std::this_thread::yield();
        continue;
      }
      // Idle: sleep until something arrives (wait object), a kick, or the next heartbeat.
      // (sleeping_ is set before queued_ is read again, and isend queues before it
      // reads sleeping_: a send queued meanwhile is seen here or wakes this thread.)
      sleeping_ = true;
      if (queued_ > held_) {
        sleeping_ = false;
        continue;
      }
      if (cqWaits_) {
        n = fi_cq_sreadfrom(cq_.get(), entries.data(), entries.size(), from.data(), nullptr, 2);
        sleeping_ = false;
        if (handleCq(n, entries.data(), from.data())) lastActivity = Clock::now();
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
      for (int p = 0; p < capacity_; ++p)
        if (p != opt_.rank)
          failPeer(
              p, std::make_exception_ptr(PeerFailure(p, std::string("local libfabric error: ") + e.what())));
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

bool LibfabricTransport::handleCq(ssize_t n, fi_cq_tagged_entry* entries, const fi_addr_t* from) {
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) handleCompletion(entries[i], namesSenders_ ? from[i] : FI_ADDR_UNSPEC);
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

void LibfabricTransport::handleCompletion(const fi_cq_tagged_entry& e, fi_addr_t from) {
  auto* op = static_cast<FabricOp*>(e.op_context);
  switch (op->kind) {
    case OpKind::kSend:
      finishSend(static_cast<SendOp*>(op));
      break;
    case OpKind::kPoolRecv: {
      auto* p = static_cast<PoolOp*>(op);
      onPoolMessage(std::span<const std::byte>(p->buf, e.len), from);
      repost(*p);
      break;
    }
    case OpKind::kBulkRecv:
      onBulkPiece(*static_cast<BulkRecvOp*>(op), e.len);
      break;
  }
}

void LibfabricTransport::finishSend(SendOp* op) {
  {
    std::lock_guard<std::mutex> lk(opsMu_);
    inflight_.erase(op);
    if (op->live) {
      --liveSends_;
      auto& peer = *tx_[static_cast<std::size_t>(op->dst)];
      --peer.liveSends;
      ++peer.progress;
    }
  }
  delete op;  // NOLINT(cppcoreguidelines-owning-memory): owned by libfabric since post()
}

void LibfabricTransport::handleError() {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(cq_.get(), &err, 0) < 0) return;
  auto* op = static_cast<FabricOp*>(err.op_context);
  if (!op) return;
  std::array<char, 256> buf{};
  const char* prov = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf.data(), buf.size());
  const std::string why = std::string(api().strerror(err.err)) + " (provider " + provider_ + ": " +
                          (prov ? prov : "no detail") + ")";
  // (Providers differ in the sign of err: shm reports -FI_ETRUNC.)
  const bool cancelled = std::abs(err.err) == FI_ECANCELED;
  switch (op->kind) {
    case OpKind::kSend: {
      auto* s = static_cast<SendOp*>(op);
      const int dst = s->dst;
      // (A send to a process that another has replaced since says nothing of the new one.)
      bool current = false;
      {
        auto& peer = *tx_[static_cast<std::size_t>(dst)];
        std::lock_guard<std::mutex> lk(peer.mu);
        current = s->generation == peer.generation;
      }
      finishSend(s);
      if (!cancelled && current)
        failPeer(dst, std::make_exception_ptr(
                          PeerFailure(dst, "connection lost: libfabric failed a send to it: " + why)));
      break;
    }
    case OpKind::kPoolRecv: {
      auto* p = static_cast<PoolOp*>(op);
      if (cancelled) break;  // closing
      if (std::abs(err.err) == FI_ETRUNC) {
        // No rank sends a frame-channel message larger than the buffers it
        // was told of, and an error entry does not say who sent this one
        // (whatever its envelope claims): counted and dropped.
        countFault(FrameFault::kOversized);
        const std::uint64_t envelope = getU64(p->buf);
        const int named = sourceOf(envelope);
        if (named < capacity_ && named != opt_.rank && channelOf(envelope) != kChanBeat)
          rx_[static_cast<std::size_t>(named)].oversized =
              "a frame-channel message that named it as sender was dropped: it exceeded the largest frame "
              "this rank takes (" +
              std::to_string(poolBytes_ - kEnvelopeBytes) + " bytes) by " + std::to_string(err.olen) +
              " bytes";
        rejectLog_([&] {
          return "libfabric rank " + std::to_string(opt_.rank) +
                 ": dropped a frame-channel message larger than the largest frame this rank takes (" +
                 std::to_string(poolBytes_ - kEnvelopeBytes) + " bytes) by " + std::to_string(err.olen) +
                 " bytes";
        });
      } else {
        GOSSAMER_LOG(kWarning,
                     "libfabric rank " << opt_.rank << ": a frame buffer's receive failed: " << why);
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
      if (std::abs(err.err) == FI_ETRUNC) {
        countFault(FrameFault::kOversized);
        failPeer(src, std::make_exception_ptr(ProtocolError(src, kFrameHeaderBytes + b.offset + b.len,
                                                            "a payload piece exceeds its announced " +
                                                                std::to_string(b.len) + " bytes by " +
                                                                std::to_string(err.olen) + " bytes: " + why,
                                                            FrameFault::kOversized)));
      } else {
        failPeer(src, std::make_exception_ptr(
                          PeerFailure(src, "connection lost: libfabric failed a receive from it: " + why)));
      }
      break;
    }
  }
}

void LibfabricTransport::onPoolMessage(std::span<const std::byte> message, fi_addr_t from) {
  if (message.size() < kEnvelopeBytes) {
    rejectStranger(message, "shorter than its envelope");
    return;
  }
  const std::uint64_t envelope = getU64(message.data());
  const auto bytes = message.subspan(kEnvelopeBytes);
  const std::uint64_t channel = channelOf(envelope);
  const int src = sourceOf(envelope);
  if (src >= capacity_ || src == opt_.rank) {
    rejectStranger(message, "its envelope names rank " + std::to_string(src));
    return;
  }
  if (channel == kChanFrame && onHello(src, envelope, message, from)) return;
  if (namesSenders_ && from != tx_[static_cast<std::size_t>(src)]->addr) {
    rejectStranger(message, "its envelope names rank " + std::to_string(src) + ", which did not send it");
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
    countFault(e.fault());
    failPeer(src, std::current_exception());
  } catch (const std::exception& e) {  // e.g. out of memory for an announced payload
    failPeer(src, std::make_exception_ptr(PeerFailure(src, std::string("cannot receive: ") + e.what())));
  }
}

void LibfabricTransport::rejectStranger(std::span<const std::byte> message, const std::string& why) {
  // What is wrong with it, checked as a frame from its rank would be, but
  // without touching that rank's stream.
  FrameFault fault = FrameFault::kStranger;
  try {
    if (message.size() < kEnvelopeBytes)
      throw ProtocolError(-1, message.size(), "shorter than an envelope", FrameFault::kTruncated);
    const std::uint64_t channel = channelOf(getU64(message.data()));
    const auto bytes = message.subspan(kEnvelopeBytes);
    if (channel != kChanFrame && channel != kChanBeat && channel != kChanAnnounce)
      throw ProtocolError(-1, 0, "unknown channel", FrameFault::kMalformed);
    const auto header = bytes.first(std::min(bytes.size(), kFrameHeaderBytes));
    const FrameHeader h = decodeFrameHeader(header, -1, capacity_);
    if (channel == kChanFrame)
      verifyFramePayload(header, h, bytes.subspan(header.size()), -1);
    else if (bytes.size() != (channel == kChanBeat ? kFrameHeaderBytes : kAnnounceBytes))
      throw ProtocolError(-1, bytes.size(), "wrong length", FrameFault::kMalformed);
    else if (channel == kChanAnnounce &&
             getU64(bytes.data() + kAnnounceCheck) != crc32c(bytes.first(kAnnounceCheck)))
      throw ProtocolError(-1, kAnnounceCheck, "announcement checksum mismatch", FrameFault::kChecksum);
  } catch (const ProtocolError& e) {
    fault = e.fault();
  }
  countFault(fault);
  rejectLog_([&] {
    return "libfabric rank " + std::to_string(opt_.rank) + ": dropped a " + toString(fault) + " message of " +
           std::to_string(message.size()) + " bytes: " + why;
  });
}

void LibfabricTransport::checkBeat(int src, std::span<const std::byte> bytes) {
  if (bytes.size() != kFrameHeaderBytes)
    throw ProtocolError(src, std::min(bytes.size(), kFrameHeaderBytes),
                        "heartbeat of " + std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(kFrameHeaderBytes));
  const FrameHeader h = decodeFrameHeader(bytes, src, capacity_);
  if (h.kind != FrameKind::kData || h.tag.op != Op::kControl || h.payloadBytes != 0 ||
      static_cast<int>(h.source) != src)
    throw ProtocolError(src, frame_offset::kKind, "malformed heartbeat frame");
  verifyFramePayload(bytes, h, {}, src);
}

void LibfabricTransport::processFrame(int src, std::uint64_t channel, std::span<const std::byte> bytes) {
  if (bytes.size() < kFrameHeaderBytes)
    throw ProtocolError(
        src, bytes.size(),
        "message of " + std::to_string(bytes.size()) + " bytes is shorter than a frame header");
  const auto headerSpan = bytes.first(kFrameHeaderBytes);
  const FrameHeader h = decodeFrameHeader(headerSpan, src, capacity_);
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
    if (h.kind == FrameKind::kHello) {
      // The process this rank knows said hello (onHello took the others):
      // the answer to this rank's hello, or the first word of a process that
      // started beside this one. What waited for it goes out now.
      if (decodeHello(payload, src).incarnation != incarnations_[static_cast<std::size_t>(src)])
        throw ProtocolError(src, kFrameHeaderBytes,
                            "a hello of another incarnation in the stream of this one");
      auto& peer = *tx_[static_cast<std::size_t>(src)];
      std::lock_guard<std::mutex> lk(peer.mu);
      peer.awaitingHello = false;
      held_ = 0;
      if (!peer.saidHello) {
        auto answer = makeHello(src);
        putU64(answer->own.data(), fabricTag(kChanFrame, opt_.rank, peer.frameSeq++));
        answer->generation = peer.generation;
        peer.saidHello = true;
        queueLocked(peer, std::move(answer));
      }
      return;
    }
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
  if (getU64(bytes.data() + kAnnounceCheck) != crc32c(bytes.first(kAnnounceCheck)))
    throw ProtocolError(src, kAnnounceCheck, "announcement checksum mismatch (corrupted)",
                        FrameFault::kChecksum);
  const std::uint64_t n = h.payloadBytes;
  const std::uint64_t piece = getU64(bytes.data() + kAnnouncePiece);
  const std::uint64_t first = getU64(bytes.data() + kAnnounceFirst);
  if (n == 0) throw ProtocolError(src, frame_offset::kPayloadBytes, "announced an empty payload");
  // At least kMinPieceBytes (or the whole payload): the receiver keeps one
  // operation per piece, so a 1-byte piece of 1 GiB would ask for 2^30.
  const std::uint64_t smallest = std::min<std::uint64_t>({n, kMinPieceBytes, maxMsgBytes_});
  if (piece < smallest || piece > maxMsgBytes_)
    throw ProtocolError(src, kAnnouncePiece,
                        "piece size " + std::to_string(piece) + " outside [" + std::to_string(smallest) +
                            ", max_msg_size " + std::to_string(maxMsgBytes_) + "]");
  if (first != rx.nextBulkSeq)
    throw ProtocolError(src, kAnnounceFirst,
                        "first bulk sequence number " + std::to_string(first) + ", expected " +
                            std::to_string(rx.nextBulkSeq));
  const std::uint64_t pieces = ceilDiv(n, piece);
  rx.nextBulkSeq = (rx.nextBulkSeq + pieces) & kSeqMask;
  msg->size = n;
  msg->ops = std::vector<BulkRecvOp>(pieces);
  msg->piecesLeft = pieces;
  InboundMsg* m = msg.get();
  rx.queue.push_back(std::move(msg));  // from here on, failPeer releases what it claims
  if (inPlace_ && n >= kVerifyOffloadBytes) claimInPlace(*m, rx);
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

bool LibfabricTransport::onHello(int src, std::uint64_t envelope, std::span<const std::byte> message,
                                 fi_addr_t from) {
  (void)from;  // (a new process's endpoint is not in the address vector yet: the proof stands for it)
  const auto bytes = message.subspan(kEnvelopeBytes);
  if (bytes.size() < kFrameHeaderBytes || std::to_integer<std::uint8_t>(bytes[frame_offset::kKind]) !=
                                              static_cast<std::uint8_t>(FrameKind::kHello))
    return false;
  Hello hello;
  try {  // checked as any frame first: magic, version, lengths, checksum
    const auto header = bytes.first(kFrameHeaderBytes);
    const FrameHeader h = decodeFrameHeader(header, src, capacity_);
    const auto payload = bytes.subspan(kFrameHeaderBytes);
    verifyFramePayload(header, h, payload, src);
    if (static_cast<int>(h.source) != src)
      throw ProtocolError(src, frame_offset::kSource, "a hello whose header names another rank");
    hello = decodeHello(payload, src);
  } catch (const ProtocolError& e) {
    rejectStranger(message, std::string("a hello that does not parse: ") + e.what());
    return true;
  }
  auto& known = incarnations_[static_cast<std::size_t>(src)];
  if (hello.incarnation == known) return false;  // in its stream, checked as any frame (processFrame)
  const std::string claim = "a hello claiming rank " + std::to_string(src);
  if (!jobKey_.verify(hello.incarnation, src, hello.proof, hello.endpoint)) {
    rejectStranger(message, claim +
                                " whose proof does not verify under the job's key: the process did not read "
                                "this job's rendezvous");
    return true;
  }
  auto& old = replaced_[static_cast<std::size_t>(src)];
  if (std::find(old.begin(), old.end(), hello.incarnation) != old.end()) {
    rejectStranger(message, claim + " from a process that another one replaced since");
    return true;
  }
  PeerAddress a;
  try {
    a = insertPeer(src, hello.endpoint, "in its hello");
  } catch (const PeerFailure&) {  // (shm: from an endpoint of this process that closed since)
    failPeer(src, std::current_exception());
    return true;
  } catch (const Error& e) {
    rejectStranger(message, claim + ": " + e.what());
    return true;
  }
  // A new process in place of src, or src joins: the old one's traffic fails.
  const bool joined = known == 0 && src >= opt_.worldSize;
  const auto why = std::make_exception_ptr(PeerFailure(src, "a new process took its place"));
  failPeer(src, why);  // (nothing if it was gone already)
  if (known != 0) old.push_back(known);
  known = hello.incarnation;
  auto& rx = rx_[static_cast<std::size_t>(src)];
  rx = PeerRx{};
  rx.lastHeard = Clock::now();
  rx.nextSeq = ((envelope & kSeqMask) + 1) & kSeqMask;  // its hello opens its stream
  auto& peer = *tx_[static_cast<std::size_t>(src)];
  {
    std::lock_guard<std::mutex> lk(peer.mu);
    // The old process's pidfd is closed after a grace period (retireOld).
    if (peer.pidfd >= 0) retired_.push_back(Retired{src, peer.pidfd.load(), Clock::now()});
    ++peer.generation;
    peer.addr = a.addr;
    peer.inlineLimit = a.inlineLimit;
    // Always the new process's pidfd, -1 when pidfd_open failed: the old
    // one is readable once the old process exited.
    peer.pidfd = a.pidfd;
    peer.pid = a.pid;  // (0 without a pidfd: its state is not read)
    peer.stoppedSince = {};
    peer.exited = false;
    peer.why = nullptr;
    peer.frameSeq = 0;
    peer.bulkSeq = 0;
    queued_ -= peer.pending.size();
    peer.pending.clear();
    peer.awaitingHello = false;
    peer.refused = false;
    peer.moved = Clock::now();
    auto answer = makeHello(src);
    putU64(answer->own.data(), fabricTag(kChanFrame, opt_.rank, peer.frameSeq++));
    answer->generation = peer.generation;
    peer.saidHello = true;
    queueLocked(peer, std::move(answer));
  }
  peer.gone = false;
  life_.revive(src);
  GOSSAMER_LOG(kInfo, "libfabric rank " << opt_.rank << ": rank " << src
                                        << (joined ? " joined" : " restarted") << " (incarnation " << std::hex
                                        << hello.incarnation << std::dec << ")");
  return true;
}

bool LibfabricTransport::postMore(InboundMsg& msg) {
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

void LibfabricTransport::pumpBulk() {
  bulkPump_ = false;
  for (auto& rx : rx_)
    for (auto& msg : rx.queue)
      if (!postMore(*msg)) return;
}

void LibfabricTransport::onBulkPiece(BulkRecvOp& op, std::size_t len) {
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
    countFault(e.fault());
    failPeer(src, std::current_exception());
  }
}

void LibfabricTransport::flushInbound(int src) {
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
      case FrameKind::kHello:         // (processFrame takes it)
        failPeer(src,
                 std::make_exception_ptr(ProtocolError(
                     src, frame_offset::kKind,
                     "frame kind " + std::to_string(int(msg->header.kind)) + " is not used over libfabric")));
        return;
    }
  }
}

void LibfabricTransport::countReceived(InboundMsg& msg) {
  life_.countReceived(msg.size);
  msg.counted = true;
}

bool LibfabricTransport::fits(InboundMsg& msg, const Mailbox::Claimed& claim) {
  if (claim.fits(msg.source, msg.size)) return true;
  msg.consumed = true;
  return false;
}

void LibfabricTransport::claimInPlace(InboundMsg& msg, const PeerRx& rx) {
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
  if (guard_->closed || !claim.state->pending()) return;
  msg.claimed = std::move(claim.state);
  msg.dst = claim.buffer.first(msg.size);
  msg.direct = true;
  guard_->direct.emplace(msg.claimed.get(), &msg);
  try {
    guard_->cancels.reserve(guard_->direct.size());  // CopyGuard::cancelLocked adds to it without allocating
  } catch (const std::exception&) {                  // (and without it, waits for the payload to land)
  }
}

void LibfabricTransport::takeBackCancelled() {
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

void LibfabricTransport::takeBack(InboundMsg& msg) {
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

void LibfabricTransport::retireOld(Clock::time_point now) {
  // A grace period (the checksum thread reads a pidfd only under the peer's
  // lock, watchWhileStuck, so it never polls one closed here). Only the
  // pidfd goes: the old address stays in the address vector, since a freed
  // slot would be handed to the next insert (this peer's next process),
  // whose pieces carry the tags the old process's late pieces still do.
  constexpr double kGraceSeconds = 1.0;
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (secondsSince(it->since, now) < kGraceSeconds) {
      ++it;
      continue;
    }
    if (it->pidfd >= 0) ::close(it->pidfd);
    it = retired_.erase(it);
  }
}

void LibfabricTransport::releaseClaim(InboundMsg& msg) {
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

}  // namespace gossamer::libfabric::impl
