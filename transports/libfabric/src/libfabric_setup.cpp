// libfabric transport: opening the endpoint, exchanging addresses through the
// rendezvous store, and posting the frame and payload-piece receive buffers.
#include "libfabric_impl.hpp"

namespace gossamer::libfabric::impl {

void LibfabricTransport::openEndpoint() {
  fi_info* fi = info_.get();
  fid_fabric* fabric = nullptr;
  check(api().fabric(fi->fabric_attr, &fabric, nullptr), "fi_fabric");
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

void LibfabricTransport::exchangeAddresses(Store& store) {
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
      throw Error("rank " + std::to_string(p) + " published a malformed libfabric address (store key " + key +
                  ")");
    const std::string theirs = value.substr(0, nl1);
    if (theirs != provider_)
      throw Error("rank " + std::to_string(p) + " uses libfabric provider '" + theirs + "' but rank " +
                  std::to_string(opt_.rank) + " uses '" + provider_ +
                  "': every rank must configure the same transport.provider");
    const std::string frameText = value.substr(nl1 + 1, nl2 - nl1 - 1);
    std::size_t frameBytes = 0;
    const auto [end, ec] = std::from_chars(frameText.data(), frameText.data() + frameText.size(), frameBytes);
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

FidPtr<fid_mr> LibfabricTransport::registerLocal(const void* buf, std::size_t len, std::uint64_t access,
                                                 void** desc) {
  *desc = nullptr;
  if (!mrLocal_ || len == 0) return {};
  fid_mr* mr = nullptr;
  check(fi_mr_reg(domain_.get(), buf, len, access, 0, nextKey_++, 0, &mr, nullptr), "fi_mr_reg");
  *desc = fi_mr_desc(mr);
  return FidPtr<fid_mr>(mr);
}

void LibfabricTransport::postPool() {
  poolMem_.resize(kPoolBuffers * poolBytes_);
  poolMr_ = registerLocal(poolMem_.data(), poolMem_.size(), FI_RECV, &poolDesc_);
  pool_ = std::vector<PoolOp>(kPoolBuffers);
  for (std::size_t i = 0; i < kPoolBuffers; ++i) {
    pool_[i].buf = poolMem_.data() + i * poolBytes_;
    repost(pool_[i]);
  }
}

void LibfabricTransport::repost(PoolOp& op) {
  const ssize_t rc = fi_trecv(ep_.get(), op.buf, poolBytes_, poolDesc_, FI_ADDR_UNSPEC, kPoolTag, 0,
                              static_cast<FabricOp*>(&op));
  if (rc == -FI_EAGAIN) {
    unposted_.push_back(&op);
    return;
  }
  check(rc, "fi_trecv (frame buffer)");
}

bool LibfabricTransport::postBulk(BulkRecvOp& op) {
  // From the announcing peer only, where the provider can match on senders.
  const fi_addr_t from = namesSenders_ ? tx_[static_cast<std::size_t>(op.msg->source)]->addr : FI_ADDR_UNSPEC;
  const ssize_t rc = fi_trecv(ep_.get(), op.msg->base() + op.offset, op.len, op.msg->desc, from, op.tag, 0,
                              static_cast<FabricOp*>(&op));
  if (rc == -FI_EAGAIN) return false;
  check(rc, "fi_trecv (payload)");
  op.posted = true;
  ++op.msg->outstanding;
  ++bulkPosted_;
  return true;
}

void LibfabricTransport::retryUnposted() {
  while (!unposted_.empty()) {
    FabricOp* op = unposted_.front();
    if (op->kind == OpKind::kPoolRecv) {
      auto* p = static_cast<PoolOp*>(op);
      const ssize_t rc = fi_trecv(ep_.get(), p->buf, poolBytes_, poolDesc_, FI_ADDR_UNSPEC, kPoolTag, 0, op);
      if (rc == -FI_EAGAIN) return;
      check(rc, "fi_trecv (frame buffer)");
    }
    unposted_.pop_front();
  }
}

}  // namespace gossamer::libfabric::impl
