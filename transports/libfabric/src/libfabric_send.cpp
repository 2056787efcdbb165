// libfabric transport: queueing frames and large payloads for a peer, and
// posting them (from the progress thread) in order, with heartbeats.
#include "libfabric_impl.hpp"
#include "test_seam.hpp"

namespace gossamer::libfabric::impl {

std::atomic<int> corruptNextLargeChecksumOf{-1};

bool LibfabricTransport::processExited(PeerTx& peer) {
  if (peer.exited) return true;
  const int pidfd = peer.pidfd;  // (read once: the fd checked is the fd polled)
  if (pidfd < 0) return false;
  pollfd pfd{pidfd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0) peer.exited = true;
  return peer.exited;
}

void LibfabricTransport::throwGone(int dst) {
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

std::unique_ptr<SendOp> LibfabricTransport::makeSendOp(int dst, std::span<const std::byte> a,
                                                       std::span<const std::byte> b) {
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

ssize_t LibfabricTransport::post(std::unique_ptr<SendOp>& op, fi_addr_t addr) {
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
  auto& peer = *tx_[static_cast<std::size_t>(op->dst)];
  {
    std::lock_guard<std::mutex> lk(opsMu_);
    inflight_.insert(raw);
    op->live = !peer.gone;
    if (op->live) {
      ++liveSends_;
      ++peer.liveSends;
    }
  }
  const ssize_t rc = fi_tsend(ep_.get(), op->data, op->len, op->desc, addr, op->tag, raw);
  if (rc == 0) {
    (void)op.release();
  } else {
    std::lock_guard<std::mutex> lk(opsMu_);
    inflight_.erase(raw);
    if (op->live) {
      --liveSends_;
      --peer.liveSends;
    }
  }
  return rc;
}

void LibfabricTransport::queueLocked(PeerTx& peer, std::unique_ptr<SendOp> op) {
  peer.pending.push_back(std::move(op));
  ++queued_;
}

void LibfabricTransport::sendFrame(int dst, std::uint64_t channel, std::span<const std::byte> a,
                                   std::span<const std::byte> b) {
  auto op = makeSendOp(dst, a, b);  // copy outside the lock
  auto& peer = *tx_[static_cast<std::size_t>(dst)];
  std::lock_guard<std::mutex> lk(peer.mu);
  if (peer.shut) throw Cancelled("send on a closed transport (rank " + std::to_string(opt_.rank) + ")");
  if (processExited(peer)) throw PeerFailure(dst, kProcessExited);
  putU64(op->own.data(), fabricTag(channel, opt_.rank, peer.frameSeq++));
  op->generation = peer.generation;
  queueLocked(peer, std::move(op));
}

void LibfabricTransport::sendLarge(int dst, const Tag& tag, DType dtype, std::span<const std::byte> data) {
  // The header's checksum comes out of the copy: one pass over the
  // caller's bytes instead of two.
  // Size and dtype checked (InvalidArgument) before anything is allocated.
  (void)encodeFrameHeader(FrameKind::kData, dtype, static_cast<std::uint32_t>(opt_.rank), tag, data.size(),
                          0u);
  auto payload = std::make_shared<Payload>();
  payload->bytes = cache_->get(data.size());
  payload->size = data.size();
  std::uint32_t sum = copyAndCrc32c(payload->bytes.get(), data.data(), data.size());
  if (int me = opt_.rank; corruptNextLargeChecksumOf.load(std::memory_order_relaxed) == me &&
                          corruptNextLargeChecksumOf.compare_exchange_strong(me, -1))
    sum ^= 1u;  // (tests only: test_seam.hpp)
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
  putU64(announce.data() + kAnnouncePiece, pieceBytes_);
  auto annOp = makeSendOp(dst, announce, {});

  auto& peer = *tx_[static_cast<std::size_t>(dst)];
  std::lock_guard<std::mutex> lk(peer.mu);
  if (peer.shut) throw Cancelled("send on a closed transport (rank " + std::to_string(opt_.rank) + ")");
  if (processExited(peer)) throw PeerFailure(dst, kProcessExited);
  const std::uint64_t first = peer.bulkSeq;
  peer.bulkSeq += pieces;
  std::byte* const ann = annOp->own.data() + kEnvelopeBytes;
  putU64(ann + kAnnounceFirst, first & kSeqMask);
  putU64(ann + kAnnounceCheck, crc32c({ann, kAnnounceCheck}));
  putU64(annOp->own.data(), fabricTag(kChanAnnounce, opt_.rank, peer.frameSeq++));
  annOp->generation = peer.generation;
  queueLocked(peer, std::move(annOp));
  for (std::size_t i = 0; i < pieces; ++i) {
    ops[i]->tag = fabricTag(kChanBulk, opt_.rank, first + i);
    ops[i]->generation = peer.generation;
    queueLocked(peer, std::move(ops[i]));
  }
}

void LibfabricTransport::sendControl(int p, FrameKind kind, std::uint32_t detail) {
  const auto h = encodeFrameHeader(kind, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                                   Tag{Op::kControl, detail, 0}, {});
  try {
    sendFrame(p, kChanFrame, h, {});
  } catch (const Error&) {
    // see above
  }
}

void LibfabricTransport::flushPending() {
  std::size_t held = 0;
  for (int p = 0; p < capacity_ && queued_ > 0; ++p) {
    auto& peer = *tx_[static_cast<std::size_t>(p)];
    std::deque<std::unique_ptr<SendOp>> batch;
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.shut) continue;
      if (peer.awaitingHello) {  // only the hello goes out until the peer answers it
        while (!peer.pending.empty() && peer.pending.front()->hello) {
          batch.push_back(std::move(peer.pending.front()));
          peer.pending.pop_front();
        }
        held += peer.pending.size();
      } else {
        batch.swap(peer.pending);
      }
    }
    if (batch.empty()) continue;
    std::exception_ptr failure;
    if (processExited(peer)) {  // never touch a dead shm peer's memory
      queued_ -= batch.size();
      batch.clear();
      failure = std::make_exception_ptr(PeerFailure(p, kProcessExited));
    }
    bool posted = false;
    while (!batch.empty()) {
      const ssize_t rc = post(batch.front(), peer.addr);
      if (rc == -FI_EAGAIN) break;
      posted = true;
      batch.pop_front();
      --queued_;
      if (rc != 0) {
        failure = std::make_exception_ptr(PeerFailure(p, "libfabric fi_tsend: " + errorText(rc)));
        break;
      }
    }
    // (A send taken after a refusal is the peer making room: progress. One
    // taken otherwise says nothing: the provider queues for a stopped peer
    // too, until its queue is full.)
    if (posted && peer.refused) ++peer.progress;
    peer.refused = !batch.empty() && !failure;
    if (!batch.empty()) {  // refused for now: back in front of what was queued meanwhile
      std::lock_guard<std::mutex> lk(peer.mu);
      peer.pending.insert(peer.pending.begin(), std::make_move_iterator(batch.begin()),
                          std::make_move_iterator(batch.end()));
    }
    if (failure) failPeer(p, failure);
  }
  held_ = held;
}

void LibfabricTransport::sendBeats() {
  if (!heartbeats_) return;
  for (int p = 0; p < capacity_; ++p) {
    if (p == opt_.rank || rx_[static_cast<std::size_t>(p)].gone) continue;
    // Unordered and dropped when the provider is busy: the next one will do. A
    // provider that knows the peer is gone says so here (sockets: -FI_ENOENT).
    auto& peer = *tx_[static_cast<std::size_t>(p)];
    if (peer.gone || processExited(peer)) continue;  // checkSilence reports an exited one
    {
      std::lock_guard<std::mutex> lk(peer.mu);
      if (peer.awaitingHello) continue;  // it does not know this process yet
    }
    auto op = makeSendOp(p, beatHeader_, {});
    putU64(op->own.data(), fabricTag(kChanBeat, opt_.rank, 0));  // unordered: sequence number 0
    const ssize_t rc = post(op, peer.addr);
    if (rc < 0 && rc != -FI_EAGAIN)
      failPeer(p, std::make_exception_ptr(PeerFailure(p, "connection lost: libfabric (" + provider_ +
                                                             ") refuses to send to it: " + errorText(rc))));
  }
}

}  // namespace gossamer::libfabric::impl
