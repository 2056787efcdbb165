// The collectives' waits: a rank that waits on a live peer that is itself
// held up by a failed rank learns of the failure from its own transport
// (Transport::peerFailure), not at the timeout. "In collectives a dead peer
// becomes PeerFailure on every rank, never a hang."
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "detail.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"

namespace gossamer::detail {

const Transport& collectiveGroup(const Transport& t) {
  const auto* view = dynamic_cast<const SubTransport*>(&t);
  if (view != nullptr && view->context() >= kCtxInternalFirst) return view->parent();
  return t;
}

void throwIfGroupFailed(const Transport& t, const char* collective) {
  const Transport& group = collectiveGroup(t);
  const int self = group.rank();
  for (int r = 0; r < group.worldSize(); ++r) {
    if (r == self) continue;
    auto why = group.peerFailure(r);
    if (!why) continue;
    const std::string during =
        std::string("during ") + collective + " (a rank this one waited on is held up by it): ";
    try {
      std::rethrow_exception(why);
    } catch (const PeerFailure& e) {
      throw PeerFailure(e.peer(), during + e.what());
    } catch (const ProtocolError& e) {
      throw PeerFailure(e.peer(), during + e.what());
    } catch (const std::exception& e) {
      throw PeerFailure(r, during + e.what());
    }
  }
}

void await(const Transport& t, Request& r, double timeoutSeconds, const char* collective) {
  r.wait(timeoutSeconds, kFailureCheckSeconds, [&] { throwIfGroupFailed(t, collective); });
}

void awaitAll(const Transport& t, std::span<Request> requests, double timeoutSeconds,
              const char* collective) {
  GOSSAMER_ENFORCE(timeoutSeconds >= 0, "negative timeout " << timeoutSeconds);
  const auto deadline = deadlineAfter<std::chrono::steady_clock>(timeoutSeconds);
  for (auto& r : requests) {
    const double left =
        std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
    await(t, r, left, collective);
  }
}

}  // namespace gossamer::detail
