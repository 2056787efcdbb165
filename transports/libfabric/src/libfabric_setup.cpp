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

namespace {
std::string toHex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xF]);
  }
  return out;
}

// The bytes of `hex` (even length, lowercase or uppercase digits); nullopt if it is not hex.
std::optional<std::string> fromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
    if (ec != std::errc() || end != hex.data() + 2 * i + 2) return std::nullopt;
    out[i] = static_cast<char>(v);
  }
  return out;
}

// Splits off the text up to the next newline of `rest` (advancing it);
// nullopt when there is none.
std::optional<std::string> nextLine(std::string_view& rest) {
  const auto nl = rest.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  std::string line(rest.substr(0, nl));
  rest.remove_prefix(nl + 1);
  return line;
}
}  // namespace

LibfabricTransport::PeerAddress LibfabricTransport::insertPeer(int p, const std::string& description,
                                                               const std::string& where) {
  const auto bad = [&](const std::string& what) {
    return Error("rank " + std::to_string(p) + " published " + what + " (" + where + ")");
  };
  std::string_view rest(description);
  const auto frameText = nextLine(rest);
  const auto pidText = nextLine(rest);
  if (!frameText || !pidText || rest.empty()) throw bad("a malformed libfabric address");
  std::size_t frameBytes = 0;
  const auto [end, ec] =
      std::from_chars(frameText->data(), frameText->data() + frameText->size(), frameBytes);
  if (ec != std::errc() || end != frameText->data() + frameText->size() || frameBytes < kAnnounceBytes ||
      frameBytes > maxMsgBytes_ - kEnvelopeBytes)
    throw bad("a frame buffer size of '" + *frameText + "' bytes; expected " +
              std::to_string(kAnnounceBytes) + " to " + std::to_string(maxMsgBytes_ - kEnvelopeBytes));
  long pid = 0;
  const auto [pidEnd, pidEc] = std::from_chars(pidText->data(), pidText->data() + pidText->size(), pid);
  if (pidEc != std::errc() || pidEnd != pidText->data() + pidText->size() || pid <= 0)
    throw bad("a process id of '" + *pidText + "'");
  const auto address = fromHex(std::string(rest));
  if (!address) throw bad("an address that is not hex");
  // fi_av_insert reads as many bytes as this provider's addresses have, or
  // (string addresses: shm) up to the terminating NUL.
  if (info_->addr_format == FI_ADDR_STR) {
    if (address->empty() || address->size() > FI_NAME_MAX || address->back() != '\0')
      throw bad("a string address of " + std::to_string(address->size()) +
                " bytes that is not NUL-terminated within " + std::to_string(FI_NAME_MAX));
  } else if (address->size() != addrLen_) {
    throw bad("an address of " + std::to_string(address->size()) + " bytes; this provider's have " +
              std::to_string(addrLen_));
  }
  if (neighbours_.entered() && ShmNeighbourhood::isClosed(*address))
    throw PeerFailure(p, "its shm endpoint, in this process, was closed (" + where + ")");
  PeerAddress out;
  out.inlineLimit = std::min(inlineBytes_, frameBytes - kFrameHeaderBytes);
  // Same host by construction for shm: watch the peer's process, so that
  // nothing is sent to it once it exited (see processExited).
  if (provider_.rfind("shm", 0) == 0) {
    out.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    out.pid =
        out.pidfd >= 0 ? pid : 0;  // (no pidfd: another pid namespace, say, where /proc/<pid> is not it)
  }
  const int n = fi_av_insert(av_.get(), address->data(), 1, &out.addr, 0, nullptr);
  if (n != 1) {
    if (out.pidfd >= 0) ::close(out.pidfd);
    throw Error("libfabric fi_av_insert: cannot use the address rank " + std::to_string(p) + " published (" +
                (n < 0 ? errorText(n) : std::to_string(n) + " inserted") + ")");
  }
  return out;
}

std::unique_ptr<SendOp> LibfabricTransport::makeHello(int p) {
  Hello hello{incarnation_, jobKey_.proof(incarnation_, opt_.rank, myEndpoint_), myEndpoint_};
  const auto payload = encodeHello(hello);
  const auto header =
      encodeFrameHeader(FrameKind::kHello, DType::kBytes, static_cast<std::uint32_t>(opt_.rank),
                        Tag{Op::kControl, 0, 0}, std::span<const std::byte>(payload));
  auto op = makeSendOp(p, header, payload);
  op->hello = true;
  return op;
}

void LibfabricTransport::exchangeAddresses(Store& store) {
  std::size_t len = 0;
  const int rc = fi_getname(&ep_->fid, nullptr, &len);
  if (rc != -FI_ETOOSMALL) check(rc, "fi_getname");
  std::string address(len, '\0');
  check(fi_getname(&ep_->fid, address.data(), &len), "fi_getname");
  address.resize(len);
  addrLen_ = len;
  if (provider_.rfind("shm", 0) == 0) neighbours_.enter(address);  // before any fi_av_insert
  const std::string who = "libfabric rank " + std::to_string(opt_.rank);
  const std::string prefix = opt_.storePrefix + "/libfabric/";
  const std::string startedKey = opt_.storePrefix + "/libfabric-started";
  const bool late = joinsRunningJob(store, startedKey, opt_.rank, opt_.worldSize);
  incarnation_ = drawIncarnation();
  jobKey_ = JobKey::fromStore(store, opt_.storePrefix + "/libfabric-job-key", opt_.rank == 0,
                              opt_.timeoutSeconds, who);
  myEndpoint_ =
      std::to_string(poolBytes_ - kEnvelopeBytes) + '\n' + std::to_string(::getpid()) + '\n' + toHex(address);
  std::ostringstream inc;
  inc << std::hex << incarnation_;
  store.set(prefix + std::to_string(opt_.rank), provider_ + '\n' + inc.str() + '\n' + myEndpoint_);
  if (!late) {
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(opt_.worldSize));
    for (int p = 0; p < opt_.worldSize; ++p) keys.push_back(prefix + std::to_string(p));
    store.wait(keys, opt_.timeoutSeconds);
  }

  incarnations_.assign(static_cast<std::size_t>(capacity_), 0);
  replaced_.assign(static_cast<std::size_t>(capacity_), {});
  for (int p = 0; p < capacity_; ++p) {
    tx_.push_back(std::make_unique<PeerTx>());
    if (p == opt_.rank) continue;
    auto& peer = *tx_.back();
    const std::string key = prefix + std::to_string(p);
    // Ranks of the job have published; one beyond it only if it joined.
    const auto value =
        p < opt_.worldSize ? std::optional(store.get(key, opt_.timeoutSeconds)) : store.tryGet(key);
    if (!value) {
      peer.why =
          std::make_exception_ptr(PeerFailure(p, "rank " + std::to_string(p) + " has not joined the job"));
      peer.gone = true;
      continue;
    }
    std::string_view rest(*value);
    const auto theirs = nextLine(rest);
    const auto incText = nextLine(rest);
    std::uint64_t incarnation = 0;
    if (!theirs || !incText ||
        std::from_chars(incText->data(), incText->data() + incText->size(), incarnation, 16).ec !=
            std::errc())
      throw Error("rank " + std::to_string(p) + " published a malformed libfabric address (store key " + key +
                  ")");
    if (*theirs != provider_)
      throw Error("rank " + std::to_string(p) + " uses libfabric provider '" + *theirs + "' but rank " +
                  std::to_string(opt_.rank) + " uses '" + provider_ +
                  "': every rank must configure the same transport.provider");
    PeerAddress a;
    try {
      a = insertPeer(p, std::string(rest), "store key " + key);
    } catch (const PeerFailure&) {  // (shm: its endpoint in this process closed)
      peer.why = std::current_exception();
      peer.gone = true;
      continue;
    }
    peer.addr = a.addr;
    peer.inlineLimit = a.inlineLimit;
    peer.pidfd = a.pidfd;
    peer.pid = a.pid;
    watchesPids_ = watchesPids_ || a.pidfd >= 0;
    incarnations_[static_cast<std::size_t>(p)] = incarnation;
    if (late) {
      // Its first frame; the rest waits for the answer (flushPending).
      auto hello = makeHello(p);
      putU64(hello->own.data(), fabricTag(kChanFrame, opt_.rank, peer.frameSeq++));
      peer.awaitingHello = true;
      peer.saidHello = true;
      queueLocked(peer, std::move(hello));
    }
  }
  markJobRunning(store, startedKey);
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
