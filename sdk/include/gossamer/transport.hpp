// The Transport interface: tagged, non-blocking byte messages between ranks.
//
// Threading: a Transport may be used from several threads at once (isend and
// irecv are thread-safe); each Request is used by one thread at a time.
// Ownership: isend copies or hands off the bytes before it returns, so the
// caller may reuse its buffer at once (the returned Request completes when the
// transport has taken the message). irecv writes into the caller's buffer,
// which must stay alive until the Request completes, fails or is cancelled;
// after cancel() returns the buffer is never touched again.
// Ordering: messages with the same (source, tag) are matched in send order.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"

namespace gossamer {

namespace detail {
struct RequestState;
}

/// Handle to one outstanding send or receive. Move-only. Destroying (or
/// assigning over) a pending request cancels it, so a receive can never write
/// into a buffer after its handle is gone — also when an exception unwinds.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::RequestState> state) : state_(std::move(state)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      cancel();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { cancel(); }

  /// Waits up to `timeoutSeconds` (>= 0). Returns true once the request has
  /// completed, false if the time ran out.
  /// @throws the request's failure (PeerFailure, ProtocolError, Cancelled).
  bool waitFor(double timeoutSeconds);
  /// Like waitFor but a timeout throws TimeoutError naming the peer(s) and tag.
  void wait(double timeoutSeconds);
  /// Like wait, but while the request stays pending it calls `check` after
  /// every `sliceSeconds` (> 0) of waiting; `check` ends the wait by
  /// throwing (the request is then still pending: destroying the handle, as
  /// the exception unwinds, cancels it). A request that completes within the
  /// first slice costs what wait costs: `check` is never called. The
  /// timeout is the same as wait's. A simulator's engine (whose time is its
  /// own) waits in one piece, without calling `check`. The collectives use
  /// it to notice that a rank they wait on is held up by a failed one.
  /// @throws like wait; whatever `check` throws; InvalidArgument for a
  ///         slice that is not positive.
  void wait(double timeoutSeconds, double sliceSeconds, const std::function<void()>& check);
  /// Non-blocking completion check. @throws the request's failure, like wait.
  bool test();
  /// Waits up to `timeoutSeconds` (>= 0, on the SDK's clock: a simulator's
  /// time in a simulation) until one of `requests` has settled: completed,
  /// failed or been cancelled. Returns the index of one that has (the lowest
  /// such index when several have), or -1 if the time ran out; throws
  /// nothing for a request's own failure (test() on it does). Empty handles
  /// are skipped. For a rank that waits for a message from whichever of its
  /// standing receives comes first (async push-sum gossip). A simulator's
  /// engine suspends the rank until a message arrives; other transports
  /// wait on a pending request's condition variable (or drive their engine)
  /// in slices of 200 microseconds, checking them all after each.
  /// @throws InvalidArgument for a negative timeout.
  static int waitAny(std::span<Request> requests, double timeoutSeconds);
  /// Cancels a pending request; a no-op once it completed (or on an empty
  /// handle). After it returns the receive buffer is not written any more.
  void cancel() noexcept;
  /// For transport wrappers (membership): fails a pending request with `error`
  /// as cancel() would cancel it (the buffer is not written any more after it
  /// returns); waiters then throw `error`. A no-op once the request settled.
  void fail(std::exception_ptr error) noexcept;
  /// A handle that observes this request without owning it (destroying it
  /// cancels nothing): for wrappers that may have to fail() it later.
  /// An empty handle's watcher is empty.
  std::weak_ptr<detail::RequestState> watch() const noexcept { return state_; }
  /// fail() on a request known only through watch(); a no-op if it is gone.
  static void fail(const std::weak_ptr<detail::RequestState>& watched, std::exception_ptr error) noexcept;
  /// Rank the matched message came from (receives); the destination (sends).
  int peer() const;
  /// Bytes received (receives) or sent (sends). Valid once completed.
  std::size_t bytes() const;
  /// For a completed receive: the CRC-32C (crc32c()) of the bytes received,
  /// when the transport verified the message against exactly that value (the
  /// socket transport's large frames); otherwise, and for sends, nullopt.
  /// Lets a collective forward a message without checksumming it again.
  std::optional<std::uint32_t> payloadChecksum() const;
  /// For a completed receive posted with Transport::irecvView into `buffer`:
  /// the payload, bytes() long. It is the transport's own memory when the
  /// transport handed that over (valid while this Request lives), else the
  /// start of `buffer`. Empty until the receive completed (also if it failed
  /// or was cancelled).
  /// @throws InvalidArgument on an empty handle, or if the payload is in
  ///         `buffer` and `buffer` is shorter than bytes().
  std::span<const std::byte> received(std::span<const std::byte> buffer) const;
  bool valid() const noexcept { return static_cast<bool>(state_); }

 private:
  /// Throws the TimeoutError of a wait of `timeoutSeconds` that ran out.
  [[noreturn]] void throwTimedOut(double timeoutSeconds) const;
  /// cancel() (null `error`) or fail(error): ends a pending request once the
  /// engine no longer writes into its buffer.
  void settle(std::exception_ptr error) noexcept;
  std::shared_ptr<detail::RequestState> state_;
};

/// Waits for every request, up to `timeoutSeconds` in all.
/// @throws TimeoutError or the first request's failure.
void waitAll(std::span<Request> requests, double timeoutSeconds);

/// Counters kept by every transport (payload bytes, frame headers excluded).
struct TransportStats {
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  std::uint64_t messagesSent = 0;
  std::uint64_t messagesReceived = 0;
  /// Of messagesReceived, those copied straight out of the sender's memory
  /// (single copy over ipc: single_copy.hpp), not read from a socket.
  std::uint64_t messagesPulled = 0;
  /// Connections refused before anything they sent was delivered: zmq, a
  /// failed ZMTP or CURVE handshake or a public key not admitted; socket, a
  /// connection at start-up without the Gossamer hello (a port scanner, a
  /// health check, random bytes) or naming an unexpected rank.
  std::uint64_t refusedConnections = 0;
  /// Frames (and stray connections' first bytes) dropped unread, by
  /// FrameFault: index with std::size_t(FrameFault::kChecksum), etc. Bad
  /// bytes from a connection that is not a current peer's are only counted
  /// (and logged at most 10 lines a second); a bad frame on a peer's own
  /// connection is counted and fails that peer (ProtocolError).
  std::array<std::uint64_t, kFrameFaultCount> rejectedFrames{};
  /// Sum of rejectedFrames.
  std::uint64_t rejectedFrameTotal() const noexcept {
    std::uint64_t n = 0;
    for (auto v : rejectedFrames) n += v;
    return n;
  }
};

/// The performance features of a transport, in one place: what the
/// collectives may rely on beyond plain isend/irecv. Each field says what
/// the transport does; the default (all off, SIZE_MAX) is a transport that
/// copies every message.
struct TransportCapabilities {
  /// isendBorrowed reads the caller's buffer in place until the send
  /// completes instead of copying it at the call (zmq, socket).
  bool borrowedSends = false;
  /// irecvView hands over payloads the transport holds in memory of its own
  /// instead of copying them into the caller's buffer (zmq, inproc).
  bool receiveViews = false;
  /// Large borrowed sends over ipc cross as one copy, read by the receiver
  /// straight out of the sender's memory (process_vm_readv) towards at least
  /// one peer (zmq and socket over ipc, where the kernel allows it).
  bool singleCopy = false;
  /// Smallest message (bytes) for which isendBorrowed uses a checksum the
  /// caller passes; SIZE_MAX means never (callers then need not compute
  /// one). The socket transport and zmq: 64 KiB; SIZE_MAX with single-copy
  /// pulls (which carry no payload checksum).
  std::size_t checksumReuseMinBytes = std::numeric_limits<std::size_t>::max();
};

/// Tagged non-blocking point-to-point messaging between the ranks of one job.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// How many global ranks this transport can ever address: worldSize()
  /// plus the ranks that may join the running job later (a transport built
  /// with room for them: membership.max_world_size). A rank in
  /// [worldSize(), capacity()) is gone (sends and receives fail with
  /// PeerFailure) until its process says hello. A rank that joined may
  /// itself be at or above worldSize(). Default: worldSize() (no joins).
  virtual int capacity() const { return worldSize(); }
  /// Short name: "inproc", "zmq", ...
  virtual std::string name() const = 0;
  /// Default bound for waits on this transport's requests, seconds.
  virtual double timeoutSeconds() const = 0;

  /// Sends `data` (a whole number of `dtype` elements) to rank `dst` (which
  /// may be this rank) under `tag`.
  /// @throws InvalidArgument for a bad rank or size; PeerFailure if `dst` is
  ///         known to be gone; Cancelled after close().
  virtual Request isend(int dst, const Tag& tag, std::span<const std::byte> data,
                        DType dtype = DType::kBytes) = 0;

  /// Like isend, but without the copy: the transport may read `data` until
  /// the returned Request completes, so the caller keeps it alive and
  /// unchanged until then (wait on the request). Destroying or cancelling the
  /// request before it completes makes the transport copy what it still needs
  /// (or drop the message if none of it left yet), so the buffer is never read
  /// after cancel() returns. One exception: a single-copy pull (socket and zmq
  /// transports over ipc, single_copy.hpp) is read by the peer's process, and
  /// cancel() waits for the peer's pull-done only up to the timeout; a peer
  /// that is stopped or hung past it, then resumes, may still read the buffer
  /// (its connection is torn down, so it cannot deliver what it read as a
  /// completed send). Transports that copy anyway (the default) return a
  /// completed request. The collectives use this for their pipelined pieces.
  /// @param checksum if given, crc32c(data), which the caller already knows
  ///        (it forwards a received message, see Request::payloadChecksum, or
  ///        checksummed the bytes while they were in cache): a transport that
  ///        puts the payload's CRC-32C on the wire then skips its own pass over
  ///        `data`. A wrong value is never delivered as good data: the receiver
  ///        fails the message with ProtocolError and, on a stream transport,
  ///        drops the connection, so the sender's other traffic with it fails
  ///        too (PeerFailure). Transports may ignore it (see
  ///        checksumReuseMinBytes).
  /// @throws like isend.
  virtual Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data,
                                DType dtype = DType::kBytes, std::optional<std::uint32_t> checksum = {}) {
    (void)checksum;
    return isend(dst, tag, data, dtype);
  }

  /// What this transport does faster than the plain isend/irecv path (see
  /// TransportCapabilities). The default: nothing.
  virtual TransportCapabilities capabilities() const noexcept { return {}; }

  /// Smallest message (bytes) for which isendBorrowed uses a checksum the
  /// caller passes: capabilities().checksumReuseMinBytes.
  std::size_t checksumReuseMinBytes() const noexcept { return capabilities().checksumReuseMinBytes; }

  /// Receives the next message under `tag` from any rank in `sources` into
  /// `buffer`. Request::peer() tells which rank it came from and bytes() its
  /// length. A message longer than the buffer fails the request with
  /// ProtocolError. If every source has left or failed, the request fails
  /// with PeerFailure.
  /// @throws InvalidArgument for an empty or bad source list.
  virtual Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) = 0;

  /// Receive from one rank.
  Request irecv(int source, const Tag& tag, std::span<std::byte> buffer) {
    return irecv(std::span<const int>(&source, 1), tag, buffer);
  }

  /// Like irecv from `source`, for a consumer that reads the payload once and
  /// in place (the ring's reduce-scatter adds it into its vector): a
  /// transport that holds the arrived payload in memory of its own (zmq,
  /// inproc) may hand that over instead of copying it into `buffer`. Read the
  /// payload with Request::received(buffer), while the Request lives.
  /// The default is irecv. @throws like irecv.
  virtual Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) {
    return irecv(source, tag, buffer);
  }

  /// Drops the messages that arrived before any receive matched them and
  /// whose tag `stale` accepts, so that no later receive gets them (the
  /// membership service drops those of views it has left). Returns how many.
  /// The default, for a transport that queues nothing of its own: 0.
  virtual std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) {
    (void)stale;
    return 0;
  }

  /// Why `rank` (a rank of this transport, in [0, capacity())) is known to
  /// have failed: the PeerFailure (or ProtocolError) that its receives fail
  /// with, once this transport has declared it failed (its connection was
  /// lost without a goodbye, it sent bad frames, its process exited, or it
  /// stopped after an error of its own: Transport::abort). Null while it is
  /// not known to have failed, for this rank, for a rank that closed cleanly
  /// (it finished what it was doing, its messages were delivered first), and
  /// for a rank that came back (a restarted process). The collectives poll it
  /// while a wait takes long, so that a rank held up by a dead one's other
  /// peers fails at once instead of at the timeout. Thread-safe; cheap (a
  /// lock and a lookup; no message). Wrappers forward it, mapping ranks.
  /// The default, for a transport that cannot tell: null.
  /// @throws nothing for a rank outside [0, capacity()) (null).
  virtual std::exception_ptr peerFailure(int rank) const {
    (void)rank;
    return nullptr;
  }

  /// Typed helpers over contiguous elements.
  template <typename T>
  Request isendOf(int dst, const Tag& tag, std::span<const T> data) {
    return isend(dst, tag, std::as_bytes(data), DTypeOf<std::remove_const_t<T>>::value);
  }
  template <typename T>
  Request isendBorrowedOf(int dst, const Tag& tag, std::span<const T> data,
                          std::optional<std::uint32_t> checksum = {}) {
    return isendBorrowed(dst, tag, std::as_bytes(data), DTypeOf<std::remove_const_t<T>>::value, checksum);
  }
  template <typename T>
  Request irecvOf(int source, const Tag& tag, std::span<T> data) {
    return irecv(source, tag, std::as_writable_bytes(data));
  }

  /// Delivers what is queued (bounded by the transport's linger period), tells
  /// the peers this rank is leaving, and cancels pending receives. Idempotent.
  virtual void close() = 0;

  /// Like close() but drops what is still queued instead of delivering it:
  /// for error paths, where waiting for the linger period only delays the
  /// report. Idempotent. The default calls close().
  virtual void abort() { close(); }

  virtual TransportStats stats() const = 0;
};

}  // namespace gossamer
