// Message matching for transport implementers: posted receives against
// arrived ("unexpected") messages, per tag, FIFO per (source, tag).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gossamer/transport.hpp"

namespace gossamer {

class LinkMeter;

namespace detail {

struct RequestState;

/// Hook for transports whose progress is made by the threads that wait (no
/// background thread moves their messages): Request::waitFor and test() call
/// it instead of sleeping on the request's condition variable, and cancel()
/// takes `exclusive` first, so that a receive the engine is filling in place
/// (see Mailbox::claim) is never written after cancel() returns.
/// Lock order: exclusive, then Mailbox::mu_, then RequestState::mu.
class ProgressEngine {
 public:
  virtual ~ProgressEngine() = default;
  /// Drives communication until `state` is no longer pending or `deadline`
  /// passes, whichever comes first. Must not throw for a request's own failure
  /// (that is recorded in `state`).
  virtual void waitUntil(RequestState& state, std::chrono::steady_clock::time_point deadline) = 0;
  /// One non-blocking pass over the connections.
  virtual void poke() = 0;
  /// Called by Request::cancel with `exclusive` held, before the request is
  /// marked cancelled: the engine drops any reference to the request's buffer.
  virtual void cancelLocked(RequestState& state) { (void)state; }
  /// True for an engine with a clock of its own (a simulator's): Request::
  /// waitFor then calls waitFor below and measures its timeout on that clock,
  /// never sleeping on the request's condition variable in real time.
  virtual bool keepsTime() const noexcept { return false; }
  /// For an engine that keepsTime: waits up to `timeoutSeconds` of its own
  /// time for `state` to settle; returns whether it did.
  virtual bool waitFor(RequestState& state, double timeoutSeconds) {
    (void)state;
    (void)timeoutSeconds;
    return false;
  }
  /// For an engine that keepsTime: waits up to `timeoutSeconds` of its own
  /// time until one of `states` (all of this engine's) settles; returns
  /// whether one did (Request::waitAny).
  virtual bool waitForAny(std::span<RequestState* const> states, double timeoutSeconds) {
    (void)states;
    (void)timeoutSeconds;
    return false;
  }
  std::mutex exclusive;
};

/// The engine for transports whose own background thread moves messages and
/// fills claimed receives (Mailbox::claim): waiting threads have nothing to
/// drive, and the filling thread holds `exclusive` while it writes into a
/// claimed receive's buffer (after checking that the request is still
/// pending), so that Request::cancel() never returns while it does.
class BackgroundEngine : public ProgressEngine {
 public:
  void waitUntil(RequestState& /*state*/, std::chrono::steady_clock::time_point /*deadline*/) override {}
  void poke() override {}
};

/// Shared state behind a Request. Lock order: Mailbox::mu_ before mu.
struct RequestState {
  enum class Status { kPending, kDone, kFailed, kCancelled };
  std::mutex mu;
  std::condition_variable cv;
  Status status = Status::kPending;
  std::exception_ptr error;
  int peer = -1;
  std::size_t bytes = 0;
  std::optional<std::uint32_t> checksum;  ///< Request::payloadChecksum
  /// A receive completed with the transport's own memory (Request::received).
  std::shared_ptr<const void> viewOwner;
  std::span<const std::byte> view;
  std::string what;  ///< For timeout messages: "recv from {1,2} tag(...)".
  /// Set by transports that progress in the waiting thread (else null).
  std::shared_ptr<ProgressEngine> engine;
  /// For a transport that runs another one over a subset of its ranks (the
  /// composite transport): `peer` and the rank in a PeerFailure or
  /// ProtocolError are the inner transport's ranks, and Request::peer() and
  /// the errors waiters see are renamed through this table (inner rank ->
  /// outer rank). Null: no renaming.
  std::shared_ptr<const std::vector<int>> peerNames;
  /// When a thread first waited on this request (Request::waitFor, wait):
  /// steady_clock nanoseconds since its epoch, 0 before. For the stall report.
  std::atomic<std::int64_t> firstWaitNanos{0};
  /// Counts this receive's bytes by source when it completes (the run
  /// service's link meter); null: not counted. Set with attachMeter.
  std::shared_ptr<LinkMeter> meter;
  std::uint64_t meterTag = 0;  ///< Tag::packed() of the receive, for LinkMeter::received.
  /// Request::fail's error while the engine's cancelLocked runs (under mu):
  /// an engine that settles the request itself (cancelIfPending) fails it
  /// with this error rather than cancelling it.
  std::exception_ptr settleError;

  // The transport's side of a request: these five are all a transport needs
  // (besides Mailbox::claim for filling a receive in place). Each takes `mu`
  // itself, so the caller must not hold it; each is a no-op once the request
  // is no longer pending (a cancel that won the race is kept).

  /// Completes the request: `n` bytes from (receives) or to (sends) `peerRank`.
  void complete(int peerRank, std::size_t n, std::optional<std::uint32_t> payloadChecksum = {});
  /// Completes a receive with `bytes`, which `owner` keeps alive, handed over
  /// instead of copied (Transport::irecvView).
  void handOver(int peerRank, std::shared_ptr<const void> owner, std::span<const std::byte> bytes,
                std::optional<std::uint32_t> payloadChecksum);
  /// Fails the request with `e` (PeerFailure, ProtocolError, Cancelled, ...).
  void fail(std::exception_ptr e);
  /// True while the request has neither completed, failed nor been cancelled.
  /// A transport filling a claimed receive checks it under the engine's
  /// `exclusive` lock before it writes into the buffer.
  bool pending();
  /// Settles a pending request as its Request::cancel or Request::fail asked
  /// (failed with the error that fail() was given, else cancelled), without
  /// the engine's cancelLocked: what an engine's cancelLocked calls to settle
  /// the request itself, and what a transport that is shutting down calls
  /// (cancelled). Wakes its waiters.
  void cancelIfPending();
  /// Counts this receive in `m` (under the job's ranks: peerNames applies)
  /// when it completes, or at once if it completed already.
  void attachMeter(std::shared_ptr<LinkMeter> m, const Tag& tag);
};

std::shared_ptr<RequestState> completedRequest(int peer, std::size_t bytes);

/// The checks of a send's arguments that a transport makes before anything
/// else: `dst` in [0, worldSize), and `bytes` a whole number of `dtype`
/// elements. @throws InvalidArgument naming the rank or the dtype.
void checkSendArguments(int dst, int worldSize, std::size_t bytes, DType dtype);

/// The PeerFailure that a transport's peers see once `rank` closed its
/// transport: after an error of its own (abort) or a plain close.
std::exception_ptr closedPeerFailure(int rank, bool afterError);

}  // namespace detail

/// An arrived message's bytes and whatever owns them (a vector, a zmq message).
struct InboundPayload {
  std::shared_ptr<const void> owner;
  std::span<const std::byte> bytes;
  std::optional<std::uint32_t> checksum = {};  ///< crc32c(bytes), if the transport verified exactly that
};

/// Matches arriving messages with posted receives. Thread-safe.
class Mailbox {
 public:
  explicit Mailbox(int worldSize);

  /// A message arrived from `source`. Completes the oldest matching posted
  /// receive, or queues the message. Returns false, with the message
  /// dropped, once close() ran (nothing can take it any more).
  bool deliver(int source, const Tag& tag, InboundPayload payload);

  /// Posts a receive into `buffer` from any rank in `sources` under `tag`.
  /// `engine` (may be null) is attached to the request (see ProgressEngine).
  /// @param handOver the payload's owner may be handed over instead of the
  ///        bytes copied (Transport::irecvView; RequestState::handOver).
  Request post(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer,
               std::shared_ptr<detail::ProgressEngine> engine = nullptr, bool handOver = false);

  /// A posted receive taken over by the transport, which then writes the
  /// payload straight into `buffer` and completes or fails `state` itself.
  struct Claimed {
    std::shared_ptr<detail::RequestState> state;  ///< null: nothing matched
    std::span<std::byte> buffer;
    bool handOver = false;  ///< posted with handOver: the payload may be handed over instead
    /// False, after failing the receive with the ProtocolError a delivery
    /// would raise (at offset kFrameHeaderBytes + buffer size), when a
    /// message of `bytes` bytes from `source` does not fit `buffer`: as with
    /// deliver(), the message is then used up. `state` must be non-null.
    bool fits(int source, std::size_t bytes) const;
  };
  /// For transports that read a payload directly into the receiver's memory:
  /// when the header of a frame from `source` under `tag` arrives, removes and
  /// returns the oldest pending posted receive that matches, if any. Per
  /// (source, tag) order is kept: a match exists only if no earlier message of
  /// that pair is queued. The caller must hold the request's engine
  /// `exclusive` lock while it writes into the buffer.
  /// @param singleSourceOnly claim nothing when the oldest matching receive
  ///        takes more than one source: for a transport that would fail the
  ///        claimed receive if `source` failed while filling it (a receive
  ///        from several ranks must stay pending while any of them lives).
  Claimed claim(int source, const Tag& tag, bool singleSourceOnly = false);

  /// Marks `rank` as gone: pending receives whose every source is gone fail
  /// with `why`; later posts that cannot be matched fail at once.
  void peerGone(int rank, std::exception_ptr why);
  bool isGone(int rank) const;
  /// `rank` is back (a process started in its place): later posts from it
  /// wait for its messages again, and what its predecessor sent that was
  /// never received is dropped.
  void revive(int rank);

  /// Drops the queued messages whose tag `stale` accepts; returns how many
  /// (Transport::discardArrived). `stale` runs under the Mailbox's lock: it
  /// must not call into the Mailbox.
  std::size_t discard(const std::function<bool(const Tag&)>& stale);

  /// Cancels every pending receive and rejects later posts.
  void close();

  /// Number of queued, unmatched messages (for tests and diagnostics).
  std::size_t unexpectedCount() const;

 private:
  struct Posted {
    std::vector<int> sources;
    std::span<std::byte> buffer;
    std::shared_ptr<detail::RequestState> state;
    bool handOver = false;
  };
  struct Arrived {
    int source;
    InboundPayload payload;
  };
  bool allGoneLocked(const std::vector<int>& sources) const;
  std::exception_ptr goneErrorLocked(const std::vector<int>& sources) const;
  /// False (nothing done) if the receive is no longer pending.
  static bool fill(const Posted& p, int source, const InboundPayload& payload);

  mutable std::mutex mu_;
  int worldSize_;
  bool closed_ = false;
  std::unordered_map<std::uint64_t, std::list<Posted>> posted_;
  std::unordered_map<std::uint64_t, std::deque<Arrived>> arrived_;
  std::vector<std::exception_ptr> gone_;  ///< per rank: null while alive
  std::size_t arrivedCount_ = 0;
};

}  // namespace gossamer
