// ZeroMQ transport (cppzmq): one ROUTER socket per rank receives, one DEALER
// per peer sends. Endpoints are bound on ephemeral ports (tcp) or unique
// socket files (ipc) and exchanged through the rendezvous Store, so runs never
// collide on fixed ports. Only this factory header is public: nothing outside
// transports/zmq includes zmq.hpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "gossamer/defaults.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::zmq {

/// Options of one rank's ZeroMQ transport.
struct Options {
  int rank = 0;
  int worldSize = 1;
  /// Room for ranks that join the running job (membership.max_world_size):
  /// ranks worldSize..maxWorldSize-1 are gone until their process says
  /// hello (one that read the rendezvous: its hello carries the job key's
  /// proof); this rank then connects to the address in that hello. A rank
  /// that joins has rank >= worldSize itself. Every rank connects to ranks
  /// 0..worldSize-1 and to the joined ranks it finds in the store. 0 or at
  /// most worldSize: no joins. Not under CURVE (a joiner's key is not in
  /// the admitted set).
  int maxWorldSize = 0;
  std::string protocol = defaults::kProtocol;  ///< "tcp" or "ipc".
  std::string host = defaults::kHost;          ///< tcp: interface to bind (its port is picked by the OS).
  /// Bound on rendezvous and default for waits, seconds.
  double timeoutSeconds = defaults::kTimeoutSeconds;
  /// close(): how long queued messages may still be delivered.
  double lingerSeconds = defaults::kLingerSeconds;
  /// After a peer's connection drops without a goodbye frame, how long to keep
  /// reading its in-flight messages before declaring it failed, seconds.
  double failureGraceSeconds = 0.25;
  /// Off by default: it changes a process-wide setting. glibc only. What it
  /// changes: the first transport made with it true calls mallopt to set
  /// M_MMAP_THRESHOLD to 32 MiB and M_TRIM_THRESHOLD to 256 MiB, for the whole
  /// process and for good (later transports, and false, do not undo it). Why
  /// one would want it: ZeroMQ allocates a fresh buffer for every message of
  /// more than 8 KiB it receives, and with glibc's adaptive defaults freed
  /// large buffers are often returned to the kernel and the next one is
  /// page-faulted in again; with the thresholds raised they are reused, which
  /// speeds up large receives (see docs/transports.md for measurements).
  /// Leave it false when the application tunes malloc itself or uses another
  /// allocator.
  bool recycleReceiveBuffers = false;
  std::string storePrefix = "gossamer";  ///< Namespace of this job's keys in the store.
  /// ipc only: a message of at least singleCopyMinBytes (and at least 64 KiB)
  /// sent with isendBorrowed (the collectives' pieces) goes as a pull frame
  /// naming the sender's memory: the receiver copies it straight out with
  /// process_vm_readv (single_copy.hpp), one copy where ZeroMQ makes two
  /// plus the kernel's, and the send completes when the receiver's pull-done
  /// frame comes back. Set-up probes which peers can read each other's memory
  /// (the kernel's ptrace rules); the others get ordinary messages. Such
  /// messages carry no payload checksum (the bytes never cross a socket)
  /// unless checksumPulls. All three must be the same on every rank: the
  /// probe is collective (a rank without it waits timeoutSeconds, then throws
  /// TimeoutError), and a receiver with checksumPulls fails the pulls of a
  /// sender without it. See Transport::isendBorrowed for what cancel()
  /// promises then.
  bool singleCopy = true;
  std::size_t singleCopyMinBytes = std::size_t{64} << 10;  ///< Smallest pulled message, bytes.
  bool checksumPulls = false;  ///< Also CRC-32C each pulled message (sender and receiver).
  /// When set (`security.enabled`), every link runs CURVE (CurveZMQ: a
  /// Curve25519 key exchange, then each frame encrypted and authenticated):
  /// this rank accepts a connection only from an admitted public key (others
  /// are refused and logged with their address and key), publishes its own
  /// key in the store beside its endpoint, and connects only to a peer whose
  /// published key is admitted. Single copy is off under it.
  std::optional<CurveKeys> curve;
};

/// Creates the transport: binds, publishes "<prefix>/zmq/<rank>" in `store`,
/// waits for the endpoint of every rank below worldSize (and reads those of
/// ranks that joined, when this rank joins) and connects; over ipc with singleCopy,
/// also probes single copy under "<prefix>/zmq-pull/". The store is used only here.
/// @throws InvalidArgument for bad options, TimeoutError if peers do not show
///         up within timeoutSeconds (the single-copy probe may wait that long
///         again), ProtocolError for a malformed probe entry in the store,
///         Error if binding fails.
std::unique_ptr<Transport> makeTransport(const Options& options, Store& store);

/// A new CURVE key pair {public, secret}, Z85 text of 40 characters each,
/// from libzmq (zmq_curve_keypair: libsodium's Curve25519 and its random
/// source). @throws Error if libzmq was built without CURVE.
std::pair<std::string, std::string> newCurveKeyPair();

}  // namespace gossamer::zmq

namespace gossamer {
class Registry;
}
namespace gossamer::zmq {
/// Registers transport kind "zmq", configured from the `transport:` section
/// (protocol, host, timeout_seconds, linger_seconds).
void registerWith(Registry& registry);
}  // namespace gossamer::zmq

namespace gossamer::zmq {

/// Serves a rendezvous Store over ZeroMQ (for multi-host jobs: normally rank 0
/// runs it and every rank, rank 0 included, talks to it through RemoteStore).
/// A background thread answers requests until the server is destroyed.
/// Requests are validated (frame count, operation, key syntax, value size at
/// most 1 MiB); a bad request gets an error reply and is otherwise ignored.
class StoreServer {
 public:
  /// Binds `endpoint` (e.g. "tcp://0.0.0.0:29500" or "tcp://127.0.0.1:*").
  /// @throws Error if the address cannot be bound.
  explicit StoreServer(const std::string& endpoint);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  /// The bound endpoint, with the actual port when "*" was asked for.
  std::string endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Client of a StoreServer. Thread-safe (requests are serialised).
class RemoteStore final : public Store {
 public:
  /// @param requestTimeoutSeconds bound on each request's round trip (> 0).
  RemoteStore(const std::string& endpoint, double requestTimeoutSeconds = 10.0);
  ~RemoteStore() override;
  /// @throws TimeoutError if the server does not answer in time; Error if it
  ///         rejects the request; InvalidArgument for a bad key.
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> tryGet(const std::string& key) override;
  /// The server keeps the first value it is sent for `key` (op "claim").
  bool claim(const std::string& key, const std::string& value) override;
  /// This host's address facing the server's host (routeAddressTo).
  /// @throws Error if that host cannot be resolved or routed to.
  std::optional<std::string> localAddress() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A client of the rendezvous named by `address`: a RemoteStore for
/// "tcp://HOST:PORT", a FileStore on the directory otherwise (created if
/// missing). It serves nothing and takes no generation (see Rendezvous):
/// for a look at a running job's keys, such as claiming a rank to join it.
/// @throws InvalidArgument for an empty address, a scheme other than tcp://,
///         or a tcp:// address without HOST:PORT with PORT in 1..65535;
///         Error if the directory cannot be created.
std::unique_ptr<Store> openStore(const std::string& address, double requestTimeoutSeconds);

/// One rank's side of a rendezvous named by an address: "tcp://HOST:PORT"
/// (rank 0 serves a StoreServer bound there, on every interface when HOST
/// is a host name rather than an IPv4 address; every rank, rank 0 included,
/// talks to it through a RemoteStore) or a directory (a FileStore, created if
/// missing). Keep it alive as long as the Agent built on its store (the
/// Python and C agents keep theirs for their lifetime).
///
/// Agents made one after another in one job (train, then evaluate with
/// another config) each get a rendezvous of their own: the n-th Rendezvous a
/// process makes for one (address, rank), counted from 0, sees the store's
/// keys under "gen<n>/" (n >= 1; the first sees them unprefixed), so every
/// rank's n-th Agent meets the others' n-th and never an earlier one's keys.
/// Rank 0's server is made once per address and serves until the process
/// exits, so a rank still closing its first Agent and a rank already making
/// its second talk to the same server (its port stays bound until then).
/// The count is per process: a rank whose process is restarted into the job,
/// or a new process that joins it, counts from 0 again and so meets the
/// job's first Agent (as `gossamer-launch`, `membership.restarted` and
/// `gossamer-train --join` expect); a forked child counts afresh too.
class Rendezvous {
 public:
  /// @param requestTimeoutSeconds bound on each request to the server (> 0).
  /// @throws Error if rank 0 cannot bind the address (in use by another
  ///         process or by a server this process made otherwise, not an
  ///         address of this host); InvalidArgument on every rank for an
  ///         address openStore refuses (nothing is bound then).
  Rendezvous(const std::string& address, int rank, double requestTimeoutSeconds);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  /// The store this Rendezvous's Agent uses (its generation's keys).
  Store& store() { return prefixed_ ? *prefixed_ : *base_; }
  const std::string& address() const { return address_; }
  /// Which of this process's Rendezvous for (address, rank) this is, from 0.
  int generation() const noexcept { return generation_; }
  /// Gives the generation back: call it when the Agent built on this store
  /// did not come up (its constructor threw), so that the process's next
  /// Rendezvous for (address, rank), a retry, meets the other ranks' same
  /// Agent. Does nothing once a later one was made. The Python and C agents
  /// call it.
  void giveBack() noexcept;

 private:
  std::string address_;
  int rank_ = 0;
  int generation_ = 0;
  std::shared_ptr<StoreServer> server_;
  std::unique_ptr<Store> base_;
  std::unique_ptr<Store> prefixed_;  // generation 1 on: base_'s keys under gen<n>/
};

}  // namespace gossamer::zmq
