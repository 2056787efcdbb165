// libfabric transport: reliable-datagram endpoints (FI_EP_RDM) with tagged
// messages, so the same job runs on HPC fabrics (verbs for InfiniBand and
// RoCE, opx/psm2 for Omni-Path, cxi for Slingshot) and, on any Linux machine,
// over tcp or shared memory. Only this factory header is public: nothing
// outside transports/libfabric includes <rdma/fabric.h>. Design, wire
// protocol and measured numbers: docs/libfabric.md.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/defaults.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::libfabric {

/// Options of one rank's libfabric transport. Every rank of a job must use the
/// same provider.
struct Options {
  int rank = 0;
  int worldSize = 1;
  /// Room for ranks that join the running job (membership.max_world_size,
  /// at most 1024): ranks worldSize..maxWorldSize-1 are gone until their
  /// process says hello with the job key's proof (a process that read the
  /// rendezvous). A process started once the job runs (a joiner, rank >=
  /// worldSize, or one restarted in place of a failed rank) says hello to
  /// every published rank; each takes it in (its old process's traffic fails
  /// with PeerFailure) and answers, and only then does the rest of what it
  /// sends go out. 0 or at most worldSize: no joins.
  int maxWorldSize = 0;
  /// libfabric provider: "tcp" (= "tcp;ofi_rxm"), "verbs" (= "verbs;ofi_rxm"),
  /// "shm" (shared memory, one host), "sockets", or any name `fi_info -l`
  /// lists, e.g. "net" or "udp;ofi_rxd". Never chosen implicitly: "sockets"
  /// (deprecated; it spins 10 ms per progress call). An shm endpoint's file
  /// in /dev/shm is named `gossamer-<pid>-<64 random bits>`; making one also
  /// removes such files whose process has died (a killed process leaves its
  /// 16 MiB file behind).
  std::string provider = "tcp";
  /// IP-based providers (tcp, verbs, net, sockets, udp): the local address
  /// every endpoint binds to, passed to fi_getinfo as the source address. All
  /// ranks of a job on one host should give the same address: RDM endpoints
  /// that bind different interfaces cannot reach each other. The default keeps
  /// a job on loopback. "" lets the provider pick an interface. Ignored by shm.
  std::string host = defaults::kHost;
  /// Bound on rendezvous and default for waits, seconds (> 0). With shm also
  /// how long a peer whose process is stopped may take nothing sent to it
  /// before it is declared failed (PeerFailure).
  double timeoutSeconds = defaults::kTimeoutSeconds;
  /// close(): how long queued messages may still be delivered, seconds.
  double lingerSeconds = defaults::kLingerSeconds;
  /// Every rank sends each peer a heartbeat this often, seconds (> 0). Not
  /// with shm, where each peer's process exit is watched directly.
  double heartbeatSeconds = 0.1;
  /// A peer from which nothing (no message, no heartbeat) arrived for this
  /// long is declared failed (PeerFailure), seconds. 0 = min(timeoutSeconds /
  /// 2, 5). Must exceed heartbeatSeconds. Also bounds how long a frame may stay
  /// missing while later ones from the same peer arrive.
  double peerTimeoutSeconds = 0.0;
  /// Payloads up to this many bytes travel inside the frame message; larger
  /// ones follow it as a separate transfer (>= 0). Also sizes this rank's
  /// posted frame buffers; ranks may differ, a sender never exceeds what the
  /// receiver published.
  std::size_t inlineBytes = 8192;
  /// Large payloads are sent in pieces of at most this many bytes (at least
  /// 4096; 0 = 8 MiB). Pieces never exceed the provider's max_msg_size. A piece the
  /// provider has begun to receive cannot be cancelled: cancelling a receive
  /// that a payload is filling in place waits for at most one piece.
  std::size_t maxPieceBytes = 0;
  /// After any activity the progress thread busy-polls the completion queue
  /// this long before it sleeps, seconds (>= 0). Lower latency for more CPU.
  double spinSeconds = 200e-6;
  std::string storePrefix = "gossamer";  ///< Namespace of this job's keys in the store.
};

/// The requested provider is not available here (or offers no reliable-datagram
/// tagged endpoint on the requested address). The message lists the providers
/// that do.
class ProviderNotFound : public InvalidArgument {
 public:
  explicit ProviderNotFound(const std::string& what) : InvalidArgument(what) {}
};

/// The fi_getinfo provider name for a configured one: "tcp" -> "tcp;ofi_rxm",
/// "verbs" -> "verbs;ofi_rxm"; anything else unchanged.
std::string providerName(const std::string& provider);

/// Providers (fi_getinfo names, e.g. "tcp;ofi_rxm", "shm") that offer the
/// reliable-datagram tagged endpoints this transport needs, in libfabric's
/// order of preference, without duplicates. Empty when libfabric finds none.
std::vector<std::string> availableProviders();

/// Creates the transport: opens an endpoint of the provider, publishes
/// "<provider>\n<largest frame its buffers take, bytes>\n<pid>\n<endpoint address>"
/// as "<prefix>/libfabric/<rank>" in `store`, waits for every peer's entry and
/// inserts their addresses into the address vector. The store is used only here.
/// Threading: isend, irecv and waits may come from any thread and make no
/// libfabric call that can wait on a peer (only fi_cq_signal, over providers
/// with a wait object, to wake the progress thread): isend copies and queues,
/// and a progress thread owned by the transport posts, receives and reads the
/// completion queue. So a wait ends within its
/// timeout (PeerFailure or TimeoutError) even if the provider wedges that
/// thread (shm: a SIGKILLed peer that held a lock in shared memory), and
/// close() returns within lingerSeconds + 2 s even then, leaving the stuck thread and
/// the endpoint behind (docs/libfabric.md).
/// @throws InvalidArgument for bad options; ProviderNotFound when the provider
///         is missing; TimeoutError if peers do not show up within
///         timeoutSeconds; Error if a peer uses another provider or a libfabric
///         call fails (with libfabric's message).
std::unique_ptr<Transport> makeTransport(const Options& options, Store& store);

}  // namespace gossamer::libfabric

namespace gossamer {
class Registry;
}
namespace gossamer::libfabric {
/// Registers transport kind "libfabric", configured from the `transport:`
/// section (provider, host, timeout_seconds, linger_seconds). A missing
/// provider is reported as a ConfigError on key transport.provider.
void registerWith(Registry& registry);
}  // namespace gossamer::libfabric
