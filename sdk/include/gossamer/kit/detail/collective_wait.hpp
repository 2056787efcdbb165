// The collectives' waits, shared with the algorithms whose exchanges are
// collectives in all but name (gossip in sync and overlap modes: a rank
// waits for given peers each round): a rank that waits on a live peer that
// is itself held up by a failed rank learns of the failure from its own
// transport (Transport::peerFailure) within kFailureCheckSeconds, not at the
// timeout. Implemented in sdk/src/collectives/await.cpp. Internal: not
// installed (sdk/CMakeLists.txt).
#pragma once

#include <span>

#include "gossamer/transport.hpp"

namespace gossamer::detail {

/// How long (seconds) a collective's wait runs between two looks at whether
/// a rank of its group failed: a wait that completes sooner never looks.
inline constexpr double kFailureCheckSeconds = 0.05;

/// The transport whose ranks make up the collective that runs on `t`: the
/// running thread's FailureScope when one is set (kit/context_local.hpp);
/// else `t`'s parent for a view an algorithm built inside the collective
/// (context at or above kCtxInternalFirst: a torus row, a leaders' ring, a
/// HiPS stage), else `t` itself (a top-level transport or a split
/// communicator).
const Transport& collectiveGroup(const Transport& t);

/// Throws PeerFailure naming the rank (as the transport's own errors name
/// it) if the transport of `t`'s collective group (collectiveGroup) knows
/// that one of its ranks failed (Transport::peerFailure): the collective
/// cannot complete without it, so a rank that waits on another one it holds
/// up would otherwise wait for the timeout. `collective` names the
/// operation in the message. Costs one peerFailure call per rank of the group.
/// @throws PeerFailure as said.
void throwIfGroupFailed(const Transport& t, const char* collective);

/// Every wait of a collective on `t`: r.wait(timeoutSeconds), but after each
/// kFailureCheckSeconds of waiting it calls throwIfGroupFailed (the request
/// is then cancelled as the exception unwinds its handle, as after a
/// timeout). A request that completes in the first slice pays nothing more.
/// @throws TimeoutError, the request's failure (PeerFailure, ProtocolError,
///         Cancelled), or throwIfGroupFailed's PeerFailure.
void await(const Transport& t, Request& r, double timeoutSeconds, const char* collective);
/// await on a request the caller does not keep (a send it only waits for).
inline void await(const Transport& t, Request&& r, double timeoutSeconds, const char* collective) {
  await(t, r, timeoutSeconds, collective);
}

/// await for every request, up to `timeoutSeconds` (seconds) in all (as
/// waitAll). @throws like await; InvalidArgument for a negative timeout.
void awaitAll(const Transport& t, std::span<Request> requests, double timeoutSeconds, const char* collective);

}  // namespace gossamer::detail
