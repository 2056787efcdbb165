// libfabric transport: the checksum thread (CRC-32C of large payloads off the
// progress thread), detection of silent or exited peers and their failure
// verdicts, and teardown of the endpoint.
#include "libfabric_impl.hpp"

#include <cstdio>
#include <optional>
#include <string>

#include "gossamer/kit/proc_stat.hpp"

namespace gossamer::libfabric::impl {

void LibfabricTransport::toChecksumThread(InboundMsg& msg) {
  if (!msg.direct && !msg.consumed) {
    // Only a receive from this rank alone: checkPayload fails what it
    // claimed when the checksum fails, and a receive from several ranks
    // must stay posted for the others (as over socket and zmq). That one
    // gets the payload from the Mailbox once checked (one copy more).
    auto claim = box_.claim(msg.source, msg.header.tag, /*singleSourceOnly=*/true);
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

void LibfabricTransport::checkPayload(InboundMsg& msg) {
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
    if (msg.claimed->pending()) {
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

void LibfabricTransport::verifyLoop() {
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

bool LibfabricTransport::progressStuckFor(Clock::duration d) const {
  const Clock::time_point turn{Clock::duration(loopStamp_.load(std::memory_order_relaxed))};
  return Clock::now() - turn > d;
}

void LibfabricTransport::watchWhileStuck() {
  if (!progressStuckFor(std::chrono::milliseconds(100)) || stop_) return;
  for (int p = 0; p < capacity_; ++p) {
    auto& peer = *tx_[static_cast<std::size_t>(p)];
    if (p == opt_.rank || peer.gone) continue;
    {
      // Under the peer's lock, as a restart replaces its pidfd (onHello) and
      // teardown() closes it: otherwise this thread could poll a pidfd closed
      // meanwhile (its number maybe reused), or find the old process exited
      // and mark the new one so (PeerTx::exited) after onHello cleared it.
      // The progress thread never holds it inside libfabric, so this cannot
      // wait on the stuck thread.
      std::lock_guard<std::mutex> lk(peer.mu);
      if (!processExited(peer)) continue;
    }
    declareGone(p, std::make_exception_ptr(PeerFailure(p, kProcessExited)));
    GOSSAMER_LOG(kError,
                 "libfabric rank "
                     << opt_.rank << ": peer " << p
                     << " exited while the progress thread is stuck inside libfabric (on a lock it held?)");
  }
}

void LibfabricTransport::drainVerified() {
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

void LibfabricTransport::checkSilence(Clock::time_point now) {
  for (int p = 0; p < capacity_; ++p) {
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
                          std::to_string(rx.early.size()) + " later ones did (" +
                          (rx.oversized.empty() ? "lost by the provider" : rx.oversized) + ")")));
      continue;
    }
    if (!heartbeats_) {
      checkStalled(p, now);
      continue;
    }
    const double silent = secondsSince(rx.lastHeard, now);
    if (silent > peerTimeout_)
      failPeer(p, std::make_exception_ptr(PeerFailure(
                      p, "connection lost: nothing (no message, no heartbeat) arrived from it for " +
                             std::to_string(silent).substr(0, 4) +
                             " s (the process died or hung, or the network failed)")));
  }
}

void LibfabricTransport::checkStalled(int p, Clock::time_point now) {
  // Without heartbeats (shm), a peer whose process was stopped (SIGSTOP, a
  // debugger) sends nothing and takes nothing: the provider refuses further
  // sends once its queue in the peer's memory is full, and posted ones never
  // complete, so what is sent to it would queue here without bound. Sends
  // that make no progress are not enough to blame it: shm completes an
  // endpoint's large sends in order, so one stopped peer holds back the
  // completions of sends to every other peer too. The process's own state
  // decides (a peer hung while running is not known so).
  auto& peer = *tx_[static_cast<std::size_t>(p)];
  if ((!peer.refused && peer.liveSends == 0) || peer.progress != peer.progressSeen) {
    peer.progressSeen = peer.progress;
    peer.moved = now;
    peer.stoppedSince = {};
    return;
  }
  // Its state is read once its sends have waited half the timeout; it must
  // stay stopped for the other half (a debugger's look at a running peer
  // is not enough), and the pidfd must still see the same process.
  const double still = secondsSince(peer.moved, now);
  if (still <= opt_.timeoutSeconds / 2) return;
  const auto stat =
      peer.pid > 0 ? ::gossamer::detail::readProcessStat(static_cast<pid_t>(peer.pid)) : std::nullopt;
  if (!stat || !stat->stopped || processExited(peer)) {
    peer.stoppedSince = {};
    return;
  }
  if (peer.stoppedSince == Clock::time_point{}) peer.stoppedSince = now;
  if (still <= opt_.timeoutSeconds || secondsSince(peer.stoppedSince, now) < opt_.timeoutSeconds / 2) return;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", still);
  failPeer(
      p,
      std::make_exception_ptr(PeerFailure(
          p, std::string("connection lost: its process is stopped, and took nothing of what was sent to it "
                         "for ") +
                 seconds + " s (" + std::to_string(peer.liveSends) + " sends under way" +
                 (peer.refused ? ", more refused by libfabric" : "") + ")")));
}

void LibfabricTransport::declareGone(int p, std::exception_ptr why) {
  auto& peer = *tx_[static_cast<std::size_t>(p)];
  {
    std::lock_guard<std::mutex> lk(peer.mu);
    peer.why = why;
  }
  peer.gone = true;
  life_.declareFailed(p, std::move(why));
}

void LibfabricTransport::failEveryPeerFrom(const char* thread) {
  for (int p = 0; p < capacity_; ++p)
    if (p != opt_.rank && !tx_[static_cast<std::size_t>(p)]->gone)
      declareGone(p, std::make_exception_ptr(PeerFailure(p, std::string("this rank's libfabric ") + thread +
                                                                " ended on an error (see the log)")));
}

void LibfabricTransport::failPeer(int p, std::exception_ptr why) {
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
    peer.awaitingHello = false;
  }
  held_ = 0;  // counted again by the next flushPending
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
    peer.liveSends = 0;
    peer.refused = false;
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

void LibfabricTransport::buryIfDone(InboundMsg* msg) {
  if (msg->outstanding > 0 || msg->verifying) return;
  releaseClaim(*msg);
  const auto it =
      std::find_if(zombies_.begin(), zombies_.end(), [&](const auto& z) { return z.get() == msg; });
  if (it != zombies_.end()) zombies_.erase(it);
}

void LibfabricTransport::stopVerifier() {
  {
    std::lock_guard<std::mutex> lk(verifyMu_);
    verifyStop_ = true;
  }
  verifyCv_.notify_all();
  if (verifier_.joinable()) verifier_.join();
}

void LibfabricTransport::drainBulk() {
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

std::unique_ptr<KeptEndpoint> LibfabricTransport::keepEndpoint() {
  auto k = std::make_unique<KeptEndpoint>();
  k->poolMem = std::move(poolMem_);
  k->pool = std::move(pool_);
  k->fabric = std::move(fabric_);
  k->domain = std::move(domain_);
  k->cq = std::move(cq_);
  k->av = std::move(av_);
  k->poolMr = std::move(poolMr_);
  k->rx = std::move(rx_);
  k->zombies = std::move(zombies_);
  {
    std::lock_guard<std::mutex> lk(opsMu_);
    for (FabricOp* op : inflight_) k->sends.emplace_back(static_cast<SendOp*>(op));
    inflight_.clear();
  }
  k->ep = std::move(ep_);
  return k;
}

// tcp;ofi_rxm (libfabric 1.17) cannot take back a payload receive whose
// transfer is under way, and closing the endpoint with one outstanding
// crashes inside the provider. So when drainBulk() could not get every piece
// back, the endpoint is not closed: it and all keepEndpoint() takes stay as
// they are, unreachable, until the process exits. That costs the memory of
// one transport (its sockets stay open, and nothing progresses them) and
// happens only when a peer is still streaming into a closing transport.
void LibfabricTransport::abandonEndpoint(std::unique_ptr<KeptEndpoint> kept) {
  static std::mutex keptMu;
  static auto* forGood =
      new std::vector<std::unique_ptr<KeptEndpoint>>();  // never freed: the provider may use it
  GOSSAMER_LOG(kWarning, "libfabric rank " << opt_.rank << ": " << bulkPosted_
                                           << " payload receives still under way at close; the endpoint "
                                              "is left open until the process exits");
  bulkPosted_ = 0;
  std::lock_guard<std::mutex> lk(keptMu);
  forGood->push_back(std::move(kept));
}

namespace {
struct Neighbours {
  std::mutex mu;
  int open = 0;  ///< shm transports of this process that entered and have not left
  std::vector<std::unique_ptr<KeptEndpoint>> parked;
  std::unordered_set<std::string> closed;  ///< names of those that left (tens of bytes each)
};
Neighbours& neighbours() {
  static auto* n = new Neighbours();  // never destroyed: transports may close during exit
  return *n;
}
}  // namespace

void ShmNeighbourhood::enter(std::string name) {
  if (in_) return;
  auto& n = neighbours();
  std::lock_guard<std::mutex> lk(n.mu);
  ++n.open;
  in_ = true;
  name_ = std::move(name);
}

bool ShmNeighbourhood::isClosed(const std::string& name) {
  auto& n = neighbours();
  std::lock_guard<std::mutex> lk(n.mu);
  return n.closed.count(name) > 0;
}

void ShmNeighbourhood::leave(std::unique_ptr<KeptEndpoint> kept) noexcept {
  if (!in_) return;  // (kept is then closed here, as it would have been)
  in_ = false;
  auto& n = neighbours();
  std::lock_guard<std::mutex> lk(n.mu);  // held while closing: no transport enters meanwhile
  const bool last = --n.open == 0;
  try {
    n.closed.insert(name_);
    if (!last) {
      if (kept) n.parked.push_back(std::move(kept));
      return;
    }
  } catch (...) {  // out of memory: leave it open for good rather than close it under a peer
    (void)kept.release();
    return;
  }
  kept.reset();
  n.parked.clear();
}

ShmNeighbourhood::~ShmNeighbourhood() { leave(nullptr); }

void LibfabricTransport::teardown() {
  for (auto& peer : tx_) {
    std::lock_guard<std::mutex> lk(peer->mu);
    peer->shut = true;
    peer->pending.clear();
    if (peer->pidfd >= 0) ::close(peer->pidfd);
    peer->pidfd = -1;
  }
  for (const auto& r : retired_)  // (their addresses go with the address vector)
    if (r.pidfd >= 0) ::close(r.pidfd);
  retired_.clear();
  drainBulk();
  // Everything the provider may use, closed in KeptEndpoint's order (the
  // endpoint first: libfabric drops what is still posted), unless it is kept
  // open: abandoned, or parked among shm neighbours (ShmNeighbourhood).
  auto kept = keepEndpoint();
  const bool abandon = bulkPosted_ > 0;
  if (!abandon && !neighbours_.entered()) kept->ep.reset();
  rejectLog_.flush();
  {
    // The endpoint is closed or never progressed again: nothing writes into
    // a receive's buffer any more. Receives that were being filled in place fail.
    std::lock_guard<std::mutex> lk(guard_->mu);
    for (const auto& [state, msg] : guard_->direct)
      if (msg->claimed)
        msg->claimed->fail(std::make_exception_ptr(Cancelled("transport closed while receiving")));
    guard_->direct.clear();
  }
  guard_->close();
  unposted_.clear();
  if (abandon) {
    abandonEndpoint(std::move(kept));
    neighbours_.leave(nullptr);
  } else {
    neighbours_.leave(std::move(kept));  // parks it, or closes it (and the parked ones, if last)
  }
}

}  // namespace gossamer::libfabric::impl
