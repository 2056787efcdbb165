// Native socket transport: Gossamer's own wire protocol over one stream
// socket per pair of ranks (TCP, or Unix-domain sockets on one host), with no
// broker or I/O thread in between.
//
// Why it exists next to ZeroMQ: a ZeroMQ message crosses two I/O threads (the
// sender's and the receiver's) before the application sees it, and every
// crossing is a thread wake-up; on small or virtualised machines a wake-up
// costs 15-25 µs, so a 4 KiB allreduce spends most of its time waiting for
// the scheduler. Here the thread that sends writes the socket itself, and the
// thread that waits reads it, busy-polling for a short window before it
// sleeps in poll(2) (the way MPI libraries progress). Large payloads are read
// straight from the socket into the posted receive buffer and written
// straight from the caller's buffer into the socket: no intermediate copy.
//
// Progress: messages move while some thread is inside the transport (isend,
// irecv, Request::wait/waitFor/test, close); a background thread takes over
// only after the application has made no call for 1 ms, so a rank that is
// computing still drains its sockets.
//
// Checksums: data frames of 64 KiB and more carry the payload's CRC-32C in a
// trailer (FrameKind::kDataTrailing), so each end checksums 256 KiB at a time
// next to the kernel's copy; a CRC the caller passes to isendBorrowed (the
// ring forwards the one Request::payloadChecksum reports) is used as is.
// checksumReuseMinBytes() is 64 KiB. See docs/transports.md.
//
// Only this factory header is public.
#pragma once

#include <memory>
#include <string>

#include "gossamer/defaults.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer {
class Registry;
}

namespace gossamer::sock {

/// Options of one rank's socket transport.
struct Options {
  int rank = 0;
  int worldSize = 1;
  /// Room for ranks that join the running job (membership.max_world_size,
  /// at most 1024): ranks worldSize..maxWorldSize-1 are gone until their
  /// process connects and says hello (with the job key's proof: a process
  /// that read the rendezvous). A rank that joins has rank >= worldSize
  /// itself. 0 or at most worldSize: no joins.
  int maxWorldSize = 0;
  /// "tcp" (IPv4; `host` is the address to listen on and publish) or "ipc"
  /// (Unix-domain stream sockets in the abstract namespace: one host only).
  std::string protocol = defaults::kProtocol;
  std::string host = defaults::kHost;  ///< tcp: interface to listen on (the port is picked by the OS).
  /// Bound on rendezvous and default for waits, seconds.
  double timeoutSeconds = defaults::kTimeoutSeconds;
  /// close(): how long queued messages may still be delivered, seconds.
  double lingerSeconds = defaults::kLingerSeconds;
  /// How long a waiting thread busy-polls its sockets (yielding the core
  /// between polls) before it sleeps in poll(2), seconds. 0 disables spinning
  /// (lowest CPU use, highest latency). With 200 µs a rank that idles
  /// through another group's phase (hierarchical allreduce) rarely sleeps,
  /// so times do not depend on which algorithm ran before, which keeps
  /// `auto`'s calibrated choices steady (docs/collectives.md).
  double spinSeconds = 200e-6;
  /// ipc only: a message of at least singleCopyMinBytes sent with
  /// isendBorrowed (the collectives' pieces) is not written to the socket; the
  /// receiver reads it straight from the sender's memory with
  /// process_vm_readv(2) (Linux cross-memory attach) after a 32-byte pull
  /// frame, and acknowledges it: one copy instead of two. Used only towards
  /// peers that proved at set-up that they can read this process's memory;
  /// otherwise (or with false) messages travel through the socket.
  bool singleCopy = true;
  std::size_t singleCopyMinBytes = std::size_t{64} << 10;
  /// Single copy: also checksum the pulled bytes (CRC-32C on both sides). Off
  /// by default: a pulled message never crosses a wire (the kernel copies it
  /// between two address spaces of one host) and the pull frame that names it
  /// is checksummed like every frame; the CRC would cost as much as the copy.
  bool checksumPulls = false;
  /// Bytes a peer's send queue may hold of copies not yet written (the rest
  /// of each isend that the kernel's socket buffers did not take) before a
  /// send of 64 KiB or more waits: it first moves messages until the queue
  /// holds less. Smaller sends (heartbeats, control messages) and
  /// isendBorrowed (the caller's memory is queued, not copied) never wait. A
  /// peer that takes nothing for timeoutSeconds is failed (PeerFailure), as
  /// is one so slow that a send finds no room within 10 x timeoutSeconds.
  /// Bounds the memory a slow peer (one that reads, but slower than it is
  /// sent to) costs; one message larger than this is queued whole.
  std::size_t sendQueueBytes = std::size_t{256} << 20;
  std::string storePrefix = "gossamer";  ///< Namespace of this job's keys in the store.
};

/// Creates the transport: listens, publishes "<prefix>/sock/<rank>" (address
/// and incarnation) in `store`, connects to every lower rank and accepts
/// every higher one. Each connection starts with a 48-byte hello: the
/// connecting rank, its process's incarnation (drawn at random) and the proof
/// that it read the rendezvous (kit/job_key.hpp). A process started once the
/// job runs (in place of a failed rank, or a rank >= worldSize that joins)
/// connects to every published rank instead; the listener stays open, and
/// each peer takes it in by its hello (a rank restarted: the old connection
/// fails with PeerFailure and the rank is back, PeerLifecycle::revive).
/// @throws InvalidArgument for bad options; TimeoutError if peers do not show
///         up within timeoutSeconds; Error if a socket cannot be created,
///         bound or connected; ProtocolError for a bad hello.
std::unique_ptr<Transport> makeTransport(const Options& options, Store& store);

/// Registers transport kind "socket", configured from the `transport:`
/// section (protocol tcp|ipc, host, timeout_seconds, linger_seconds).
void registerWith(Registry& registry);

}  // namespace gossamer::sock
