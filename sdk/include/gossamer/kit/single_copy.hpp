// Single copy between processes on one host (Linux cross-memory attach): the
// sender names its buffer in a pull frame (wire.hpp, PullDescriptor) and the
// receiver copies the bytes straight out of the sender's memory with
// process_vm_readv, one copy where a socket makes two, as Open MPI's `vader`
// BTL does with CMA. Shared by the ipc modes of the socket and zmq transports
// (docs/transports.md, "Single copy on one host").
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/store.hpp"

namespace gossamer::single_copy {

/// A PullDescriptor as a pull frame's payload (kPullDescriptorBytes,
/// little-endian fields: address, bytes, crc, pid, ticket).
std::array<std::byte, kPullDescriptorBytes> encode(const PullDescriptor& d) noexcept;

/// The PullDescriptor in a pull frame's payload.
/// @throws ProtocolError(peer, kFrameHeaderBytes) if `payload` is not
///         kPullDescriptorBytes long, or (at the byte offset of the field)
///         if it announces more than kMaxPayloadBytes or a ticket above Tag::kMaxStep.
PullDescriptor decode(std::span<const std::byte> payload, int peer);

/// Copies `d.bytes` bytes from process `d.pid` at `d.address` into
/// `dst` (which must hold at least d.bytes), in as many process_vm_readv
/// calls as it takes. Returns 0, EINVAL if `dst` is shorter than d.bytes,
/// or the errno of the call that failed (EFAULT for a read of 0 bytes: the
/// sender's range is not mapped; ESRCH: the process is gone; EPERM: the
/// kernel's ptrace rules forbid it).
int pull(const PullDescriptor& d, std::span<std::byte> dst) noexcept;

/// Who may pull from whom, agreed at set-up.
struct Peers {
  std::vector<std::uint32_t> pids;  ///< Per rank, its process id (this rank's own too).
  /// Per rank: it can read this process's memory, so messages to it may go
  /// as pull frames. False for this rank.
  std::vector<bool> pullTo;
};

/// Set-up, collective over all `worldSize` ranks: each publishes its pid and
/// the address of a known 8-byte value under "<keyPrefix><rank>/probe",
/// reads every peer's value with process_vm_readv (which the kernel allows
/// only where ptrace would be: same user, and Yama's ptrace_scope 0, or 1
/// for a child), publishes which peers it could read under
/// "<keyPrefix><rank>/pull", and learns from the peers' lists which of them
/// can read it.
/// @throws TimeoutError if a peer does not publish within `timeoutSeconds`;
///         ProtocolError(peer, 0) for a malformed probe entry.
Peers probe(int rank, int worldSize, Store& store, const std::string& keyPrefix, double timeoutSeconds);

/// The sender's record of borrowed sends that went as pull frames: each gets
/// a ticket (the pull frame's PullDescriptor::ticket), completes when the
/// peer's pull-done for it arrives, and fails when that peer is declared gone
/// or the transport closes. Shared by the socket and zmq transports.
/// Thread-safe; its lock is a leaf (it completes and fails requests after
/// releasing it).
class Ledger {
 public:
  /// Records a send of `bytes` bytes to rank `dst`, completed by `state`.
  /// Returns its ticket (at most Tag::kMaxStep).
  /// @throws Cancelled after close().
  std::uint64_t add(int dst, std::shared_ptr<detail::RequestState> state, std::size_t bytes);
  /// Drops the record of `ticket` without completing it (its frame could not
  /// be sent, or a cancelled send stops waiting).
  void forget(std::uint64_t ticket);
  /// The pull-done for `ticket` arrived from `peer`: completes the send, or
  /// fails it with PeerFailure when `failed` (the peer could not read it).
  /// False, doing nothing, when no such send to `peer` is recorded (it failed
  /// or was cancelled already).
  bool done(int peer, std::uint64_t ticket, bool failed);
  /// Fails, with `error`, every send that `peer` still has to pull.
  void failOwedBy(int peer, const std::exception_ptr& error);
  /// Fails every recorded send with `error` and refuses later add() calls.
  void close(const std::exception_ptr& error);
  /// The ticket of the recorded send completed by `state`, if any.
  std::optional<std::uint64_t> ticketOf(const detail::RequestState& state) const;
  /// The destination rank of ticket's send; -1 when it is not recorded.
  int destinationOf(std::uint64_t ticket) const;
  /// Waits up to `seconds` until ticket's send is no longer recorded
  /// (pulled, failed or forgotten). Returns true if it is not.
  bool waitSettled(std::uint64_t ticket, double seconds);

 private:
  struct Entry {
    int dst;
    std::shared_ptr<detail::RequestState> state;
    std::size_t bytes;
  };
  /// Removes the entries `pick` selects (under mu_) and fails them with `error`.
  template <typename Pick>
  void failWhere(Pick pick, const std::exception_ptr& error, bool closing);

  mutable std::mutex mu_;  // a leaf lock
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::uint64_t next_ = 1;
  bool closed_ = false;
};

}  // namespace gossamer::single_copy
