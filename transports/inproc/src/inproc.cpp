// In-process transport: isend copies the bytes into the destination rank's
// Mailbox and completes at once; close() marks the rank gone so peers waiting
// on it fail with PeerFailure instead of timing out.
//
// Statistics: a message counts as received (TransportStats::bytesReceived,
// messagesReceived) when it is handed to its receiver's Mailbox, whether a
// receive takes it or not (the receiver may close first, or drop it with
// discardArrived). That is where socket, zmq and libfabric count too: when
// their reader hands an arrived frame to the Mailbox or to the posted receive
// it claimed, not when the application takes it. A message for a rank that
// has closed is neither delivered nor counted: its send fails (PeerFailure),
// as a send to a peer whose goodbye was read does over the wire.
#include <atomic>
#include <exception>
#include <mutex>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/transports/inproc.hpp"

namespace gossamer::inproc {

class Fabric {
 public:
  explicit Fabric(int worldSize)
      : attached_(static_cast<std::size_t>(worldSize), false),
        received_(static_cast<std::size_t>(worldSize)),
        failed_(static_cast<std::size_t>(worldSize)) {
    for (int i = 0; i < worldSize; ++i) boxes_.push_back(std::make_unique<Mailbox>(worldSize));
  }
  int worldSize() const { return static_cast<int>(boxes_.size()); }
  Mailbox& box(int rank) { return *boxes_[static_cast<std::size_t>(rank)]; }
  /// Per destination rank: payload bytes and messages handed to its Mailbox
  /// (deliver), taken by a receive or not: what it received (see the top).
  struct Counters {
    std::atomic<std::uint64_t> bytes{0}, messages{0};
  };
  Counters& received(int rank) { return received_[static_cast<std::size_t>(rank)]; }
  /// Hands `payload` from `source` to `dst`'s Mailbox and counts it received
  /// there; false, with nothing delivered or counted, once `dst` closed its
  /// Mailbox (Mailbox::deliver says so under its own lock, so a message
  /// racing with the close is never counted as received).
  bool deliver(int source, int dst, const Tag& tag, InboundPayload payload) {
    const std::size_t bytes = payload.bytes.size();
    if (!box(dst).deliver(source, tag, std::move(payload))) return false;
    received_[static_cast<std::size_t>(dst)].bytes += bytes;
    ++received_[static_cast<std::size_t>(dst)].messages;
    return true;
  }
  void attach(int rank) {
    std::lock_guard<std::mutex> lk(mu_);
    GOSSAMER_ENFORCE(!attached_[static_cast<std::size_t>(rank)],
                     "rank " << rank << " is already attached to this fabric");
    attached_[static_cast<std::size_t>(rank)] = true;
  }
  void leave(int rank, bool afterError) {
    const auto why = detail::closedPeerFailure(rank, afterError);
    if (afterError) {
      std::lock_guard<std::mutex> lk(mu_);
      failed_[static_cast<std::size_t>(rank)] = why;
    }
    for (int i = 0; i < worldSize(); ++i)
      if (i != rank) box(i).peerGone(rank, why);
  }

  /// Why `rank` failed (it aborted: Transport::peerFailure); null while it
  /// is attached or after a clean close.
  std::exception_ptr failure(int rank) {
    if (rank < 0 || rank >= worldSize()) return nullptr;
    std::lock_guard<std::mutex> lk(mu_);
    return failed_[static_cast<std::size_t>(rank)];
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::vector<bool> attached_;
  std::vector<Counters> received_;
  std::vector<std::exception_ptr> failed_;  ///< per rank, under mu_: set by an abort
};

namespace {

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<Fabric> fabric, int rank, double timeout)
      : fabric_(std::move(fabric)), rank_(rank), timeout_(timeout) {
    fabric_->attach(rank);
  }
  ~InprocTransport() override { close(); }

  int rank() const override { return rank_; }
  int worldSize() const override { return fabric_->worldSize(); }
  std::string name() const override { return "inproc"; }
  double timeoutSeconds() const override { return timeout_; }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    detail::checkSendArguments(dst, worldSize(), data.size(), dtype);
    if (closed_) throw Cancelled("isend on a closed transport (rank " + std::to_string(rank_) + ")");
    if (dst != rank_ && fabric_->box(rank_).isGone(dst))
      throw PeerFailure(dst, "cannot send: peer closed its transport");
    auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    InboundPayload p{owned, std::span<const std::byte>(owned->data(), owned->size())};
    if (!fabric_->deliver(rank_, dst, tag, std::move(p))) {
      if (dst == rank_) throw Cancelled("isend on a closed transport (rank " + std::to_string(rank_) + ")");
      throw PeerFailure(dst, "cannot send: peer closed its transport");
    }
    bytesSent_ += data.size();
    ++messagesSent_;
    return Request(detail::completedRequest(dst, data.size()));
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    if (closed_) throw Cancelled("irecv on a closed transport (rank " + std::to_string(rank_) + ")");
    return fabric_->box(rank_).post(sources, tag, buffer);
  }

  /// Every message is a vector of its own: a view receive gets it, not a copy.
  /// Payloads are handed over (the sender's copy), not copied again.
  TransportCapabilities capabilities() const noexcept override {
    TransportCapabilities c;
    c.receiveViews = true;
    return c;
  }

  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    if (closed_) throw Cancelled("irecv on a closed transport (rank " + std::to_string(rank_) + ")");
    return fabric_->box(rank_).post(std::span<const int>(&source, 1), tag, buffer, nullptr, true);
  }

  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return fabric_->box(rank_).discard(stale);
  }

  /// A rank that aborted (not one that closed).
  std::exception_ptr peerFailure(int rank) const override { return fabric_->failure(rank); }

  void close() override { shut(false); }
  void abort() override { shut(true); }

  void shut(bool afterError) {
    if (closed_.exchange(true)) return;
    fabric_->leave(rank_, afterError);
    fabric_->box(rank_).close();
  }

  TransportStats stats() const override {
    TransportStats s;
    s.bytesSent = bytesSent_;
    s.messagesSent = messagesSent_;
    s.bytesReceived = fabric_->received(rank_).bytes;
    s.messagesReceived = fabric_->received(rank_).messages;
    return s;
  }

 private:
  std::shared_ptr<Fabric> fabric_;
  int rank_;
  double timeout_;
  std::atomic<bool> closed_{false};
  std::atomic<std::uint64_t> bytesSent_{0}, messagesSent_{0};
};

}  // namespace

std::shared_ptr<Fabric> makeFabric(int worldSize) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  return std::make_shared<Fabric>(worldSize);
}

std::unique_ptr<Transport> makeTransport(std::shared_ptr<Fabric> fabric, int rank, double timeoutSeconds) {
  GOSSAMER_ENFORCE(fabric, "null fabric");
  GOSSAMER_ENFORCE(rank >= 0 && rank < fabric->worldSize(),
                   "rank " << rank << " outside world size " << fabric->worldSize());
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "timeout " << timeoutSeconds);
  return std::make_unique<InprocTransport>(std::move(fabric), rank, timeoutSeconds);
}

}  // namespace gossamer::inproc

#include "gossamer/registry.hpp"

namespace gossamer::inproc {
namespace {
// The ranks are threads of one process: nothing crosses a process, so
// nothing needs securing either.
const TransportTraits kTraits{.spansProcesses = false, .secures = false, .innerKeys = {}};
}  // namespace

void registerWith(Registry& registry) {
  // The fabric is made by the first transport the registry creates, for that
  // config's world size, and shared by the ranks that follow while any of
  // them lives: once every transport on it is gone, the next job (of any
  // world size) gets a fabric of its own.
  struct Lazy {
    std::mutex mu;
    std::weak_ptr<Fabric> fabric;
  };
  auto lazy = std::make_shared<Lazy>();
  registry.addTransport(
      "inproc",
      [lazy](const TransportContext& ctx) {
        std::shared_ptr<Fabric> fabric;
        {
          std::lock_guard<std::mutex> lock(lazy->mu);
          fabric = lazy->fabric.lock();
          if (!fabric) {
            fabric = makeFabric(ctx.config.worldSize());
            lazy->fabric = fabric;
          }
        }
        GOSSAMER_ENFORCE(ctx.config.worldSize() == fabric->worldSize(),
                         "config world size " << ctx.config.worldSize() << " != fabric world size "
                                              << fabric->worldSize());
        return makeTransport(fabric, ctx.rank, ctx.config.get<double>("transport.timeout_seconds"));
      },
      KeySet{}, kTraits);
}

void registerWith(Registry& registry, std::shared_ptr<Fabric> fabric) {
  GOSSAMER_ENFORCE(fabric, "null fabric");
  registry.addTransport(
      "inproc",
      [fabric](const TransportContext& ctx) {
        GOSSAMER_ENFORCE(ctx.config.worldSize() == fabric->worldSize(),
                         "config world size " << ctx.config.worldSize() << " != fabric world size "
                                              << fabric->worldSize());
        return makeTransport(fabric, ctx.rank, ctx.config.get<double>("transport.timeout_seconds"));
      },
      KeySet{}, kTraits);
}
}  // namespace gossamer::inproc
