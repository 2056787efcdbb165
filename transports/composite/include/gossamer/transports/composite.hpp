// The composite transport: one Transport made of two, routed per destination.
// Ranks that share a host (or an island of the `network:` section) reach each
// other over a fast local transport (zmq or the socket transport over ipc,
// libfabric shm); every other destination goes over a remote transport (zmq tcp by
// default). Algorithms see one transport with the job's ranks, so every
// collective and optimizer runs over it unchanged.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::composite {

/// Builds one inner transport: rank `rank` of `worldSize` ranks, meeting its
/// peers through `store` (already namespaced for it; it may keep a reference
/// only while it is being built).
using InnerFactory = std::function<std::unique_ptr<Transport>(int rank, int worldSize, Store& store)>;

/// Options of one rank's composite transport.
struct Options {
  int rank = 0;
  int worldSize = 1;
  /// The job ranks reached over the local transport, in increasing order,
  /// this rank among them: its local group. Every member must pass the same
  /// list (the local transport's rank i is localGroup[i]).
  std::vector<int> localGroup;
  /// Default bound for waits on the composite's requests, seconds.
  double timeoutSeconds = 60.0;
};

/// The composite transport of rank `o.rank`. The local transport is
/// makeLocal(index of o.rank in o.localGroup, localGroup size, store under
/// "composite/local/<first rank of the group>/"); the remote transport is
/// makeRemote(o.rank, o.worldSize, store under "composite/remote/") and spans
/// every rank, though only messages to other groups use it.
///
/// What it does per call, with the costs it adds:
/// - isend/isendBorrowed/irecvView to or from one rank: routed to the inner
///   transport that reaches it, ranks translated (no copy; the request is the
///   inner transport's, with Request::peer() and PeerFailure/ProtocolError
///   renamed to job ranks).
/// - irecv from ranks all on one side: the same.
/// - irecv from ranks on both sides: one receive on each inner transport (the
///   remote one into a scratch buffer of the same size, so a message from a
///   remote rank is copied once more); whichever completes first wins. A
///   message that completed on the other side before it could be cancelled is
///   kept and given to the next receive that matches it (one waiting already
///   or one posted later), so none is lost and each source's messages are
///   received in send order: a receive posted while such a receive sharing a
///   source and the tag waits is made the same way, even from one rank (one
///   copy more from a remote rank, none handed over by irecvView), and the
///   receives posted before one settle before it does. Such a receive that is
///   cancelled after a side completed completes with that message (cancel()
///   lost the race, as on the inner transports). Such a receive progresses in
///   the threads that wait on or test it.
/// Statistics are the sum of both inner transports'.
/// @throws InvalidArgument if o.localGroup is empty, unsorted, has ranks
///         outside [0, worldSize) or lacks o.rank; whatever the factories throw.
std::unique_ptr<Transport> makeTransport(const Options& o, Store& store, const InnerFactory& makeLocal,
                                         const InnerFactory& makeRemote);

/// A string naming this process's host as seen from the network: the
/// kernel's boot id, the network namespace and the host name. Two processes
/// with the same identity can use ipc sockets and shared memory with each
/// other and see the same loopback.
std::string hostIdentity();

/// The ranks whose hostIdentity() equals this process's, found by publishing
/// it in `store` under "<prefix>host/<rank>" and reading every rank's.
/// @throws TimeoutError if a rank has not published within `timeoutSeconds`.
std::vector<int> sameHostRanks(int rank, int worldSize, Store& store, const std::string& prefix,
                               double timeoutSeconds);

/// Registers transport.kind "composite" and its keys transport.local (kind of
/// the local transport, default "zmq"), transport.local_protocol (its
/// protocol, default "ipc"), transport.local_scope ("host": ranks with the
/// same hostIdentity(); "island": the islands of network.islands) and
/// transport.remote (kind of the remote transport, default "zmq", with the
/// job's transport.protocol). Other transport keys (host, timeout, provider,
/// security) go to both inner transports as they are.
void registerWith(Registry& registry);

}  // namespace gossamer::composite
