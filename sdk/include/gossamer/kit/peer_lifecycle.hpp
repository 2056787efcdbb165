// The part of a network transport that is the same whatever the wire: which
// peers are still there, the goodbye exchange on close, the verdict that a
// peer failed (its pending receives then fail with PeerFailure), the grace
// period after a connection drops without a goodbye, argument checks on sends
// and receives, and the statistics (TransportStats).
//
// A transport owns one PeerLifecycle next to its Mailbox and keeps only its
// wire mechanics: it sends the bye and bye-ack frames (FrameKind::kBye,
// kByeAck) and tells the lifecycle what arrived (onBye, onByeAck) or what it
// saw go wrong (declareFailed, noteLost); close() waits on waitSettled.
//
// Thread-safe: every member may be called from any thread. The lifecycle's
// state lock is a leaf, never held while the Mailbox is called; a second
// lock, held across a verdict or a revive and its Mailbox call (which never
// calls back), is taken after any lock of the transport. So a transport may
// call it while holding its own locks (the Mailbox's lock order, mailbox.hpp,
// applies to those calls as to any other).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {

/// Peer bookkeeping shared by the network transports (zmq, socket,
/// libfabric); see the file comment.
class PeerLifecycle {
 public:
  /// A bye frame's Tag::segment when its sender stopped because of an error
  /// of its own (Transport::abort), not a clean close: its peers report that.
  static constexpr std::uint32_t kByeAfterError = 1;

  /// Why a peer that said goodbye after an error of its own failed
  /// (PeerFailure's message): often a survivor of another rank's failure.
  static constexpr const char* kStoppedAfterError = "it stopped after an error of its own";

  /// Why a peer that left without a goodbye failed (PeerFailure's message).
  static constexpr const char* kLostWithoutBye =
      "connection lost without a goodbye (process died or network failed)";

  /// @param transport the transport's name, for messages ("zmq", "socket").
  /// @param box the transport's Mailbox; it must outlive this object.
  /// @throws InvalidArgument if `rank` is outside [0, worldSize).
  PeerLifecycle(std::string transport, int rank, int worldSize, Mailbox& box);
  PeerLifecycle(const PeerLifecycle&) = delete;
  PeerLifecycle& operator=(const PeerLifecycle&) = delete;

  int rank() const noexcept { return rank_; }
  int worldSize() const noexcept { return worldSize_; }

  // ---- argument checks ---------------------------------------------------------

  /// For isend: `dst` is a rank of the job and the transport is open.
  /// @throws InvalidArgument for a rank outside [0, worldSize); Cancelled
  ///         after beginClose().
  void checkSend(int dst) const;
  /// For irecv: the transport is open. (Mailbox::post checks the sources.)
  /// @throws Cancelled after beginClose().
  void checkOpen(const char* operation) const;

  // ---- closing -----------------------------------------------------------------

  /// Marks the transport closed; true only for the first call (close() is
  /// idempotent: later calls return at once).
  bool beginClose() noexcept { return !closed_.exchange(true); }
  bool closed() const noexcept { return closed_.load(); }

  /// The bye frame's Tag::segment for a close (`afterError` false) or an abort.
  static std::uint32_t byeSegment(bool afterError) noexcept { return afterError ? kByeAfterError : 0; }

  /// A bye from `peer` arrived after everything it sent (the transport
  /// delivered those first): receives waiting only on it fail with
  /// PeerFailure ("peer closed its transport", or "it stopped after an error
  /// of its own" when `segment` is kByeAfterError), later sends to it are
  /// refused, and close() no longer waits for it. The transport answers with
  /// a bye-ack unless the peer aborted.
  void onBye(int peer, std::uint32_t segment);
  /// `peer` acknowledged this rank's bye: close() no longer waits for it.
  void onByeAck(int peer);

  /// True once `peer` said bye, acknowledged ours, or was declared failed:
  /// close() need not wait for it. Always true for this rank.
  bool settled(int peer) const;
  /// True once `peer` said bye or was declared failed (this rank: false).
  bool leaving(int peer) const;
  /// True once `peer` acknowledged this rank's bye.
  bool acked(int peer) const;
  /// Waits up to `seconds` until every peer is settled or `alsoSettled(p)`
  /// (may be empty; called under the lifecycle's lock, so it must not call
  /// back into this object) says it need not be waited for. Woken by onBye,
  /// onByeAck, declareFailed and notify(). Returns true if all settled.
  bool waitSettled(double seconds, const std::function<bool(int)>& alsoSettled = {});
  /// Wakes waitSettled to re-evaluate `alsoSettled` (its state changed).
  void notify();

  // ---- failure verdicts --------------------------------------------------------

  /// `peer` is gone with `error` (usually PeerFailure or ProtocolError):
  /// receives waiting only on it fail with it (Mailbox::peerGone), and
  /// close() stops waiting for it. The first verdict stands: returns false
  /// (and does nothing) if `peer` had said bye or was declared failed already.
  bool declareFailed(int peer, std::exception_ptr error);
  /// A process started in place of `peer` (gone or not) reached this rank:
  /// it is there again, with no verdict, no goodbye and an empty mailbox
  /// (Mailbox::revive). The transport has reconnected to it first.
  void revive(int peer);
  /// Shorthand: declareFailed(peer, PeerFailure(peer, why)).
  bool declareFailed(int peer, const std::string& why);
  /// The verdict on `peer`: its error, or its bye's PeerFailure; null while
  /// it is there.
  std::exception_ptr failure(int peer) const;
  /// True once `peer` said bye or failed (= failure(peer) != null).
  bool gone(int peer) const { return static_cast<bool>(failure(peer)); }
  /// The verdict on `peer` if it failed (declared failed, or a bye after an
  /// error of its own, kByeAfterError); null while it is there, after a
  /// clean bye, and for a rank outside [0, worldSize) (Transport::peerFailure).
  std::exception_ptr failedVerdict(int peer) const;
  /// Throws failure(peer), or PeerFailure(peer, `fallback`) if there is none.
  [[noreturn]] void throwGone(int peer, const std::string& fallback) const;

  // ---- grace after a lost connection ------------------------------------------

  /// `peer`'s connection dropped without a bye: it gets a grace period to
  /// deliver what is still in flight (the first call starts it; later calls
  /// and calls for peers already gone do nothing).
  void noteLost(int peer);
  /// Declares failed (kLostWithoutBye) every peer noted lost more than
  /// `graceSeconds` ago that has not said bye meanwhile. Returns those peers.
  std::vector<int> expireLost(double graceSeconds);

  // ---- statistics --------------------------------------------------------------

  /// A message of `bytes` payload bytes was sent (or handed to the wire).
  void countSent(std::size_t bytes) noexcept {
    bytesSent_.fetch_add(bytes, std::memory_order_relaxed);
    messagesSent_.fetch_add(1, std::memory_order_relaxed);
  }
  /// A message of `bytes` payload bytes arrived; `pulled`: by single copy
  /// (TransportStats::messagesPulled).
  void countReceived(std::size_t bytes, bool pulled = false) noexcept {
    bytesReceived_.fetch_add(bytes, std::memory_order_relaxed);
    messagesReceived_.fetch_add(1, std::memory_order_relaxed);
    if (pulled) messagesPulled_.fetch_add(1, std::memory_order_relaxed);
  }
  /// The counters so far.
  TransportStats stats() const noexcept;

 private:
  enum class State : std::uint8_t { kHere, kLeft, kFailed };
  struct Peer {
    State state = State::kHere;
    bool acked = false;
    std::exception_ptr why;
    std::optional<Clock::time_point> lostAt;
  };
  /// Sets the verdict under mu_; true if it is the first.
  bool setGoneLocked(int peer, State state, std::exception_ptr why);
  /// declareFailed with verdictMu_ held.
  bool declareFailedVerdictLocked(int peer, std::exception_ptr error);
  void checkRank(int peer) const;

  std::string transport_;
  int rank_;
  int worldSize_;
  Mailbox& box_;
  std::atomic<bool> closed_{false};
  // Held across a verdict and its Mailbox call (declareFailed, onBye,
  // revive, expireLost), so that the two never disagree after a failure
  // and a revive race; taken before mu_ and the Mailbox's own lock.
  std::mutex verdictMu_;
  mutable std::mutex mu_;  // a leaf lock
  std::condition_variable cv_;
  std::vector<Peer> peers_;
  std::atomic<std::uint64_t> bytesSent_{0}, messagesSent_{0}, bytesReceived_{0}, messagesReceived_{0},
      messagesPulled_{0};
};

}  // namespace gossamer
