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
#include "gossamer/kit/context_local.hpp"
#include "gossamer/kit/peer_lifecycle.hpp"

namespace gossamer::detail {

const Transport& collectiveGroup(const Transport& t) {
  if (const Transport* job = contextLocal().failureScope) return *job;  // (FailureScope)
  const auto* view = dynamic_cast<const SubTransport*>(&t);
  if (view != nullptr && view->context() >= kCtxInternalFirst) return view->parent();
  return t;
}

// Whether `why` says its rank stopped after an error of its own: often a
// survivor of the failure that held this collective up, not its cause.
bool stoppedAfterError(const std::exception_ptr& why) {
  try {
    std::rethrow_exception(why);
  } catch (const std::exception& e) {
    return std::string(e.what()).find(PeerLifecycle::kStoppedAfterError) != std::string::npos;
  } catch (...) {
    return false;
  }
}

void throwIfGroupFailed(const Transport& t, const char* collective) {
  const Transport& group = collectiveGroup(t);
  const int self = group.rank();
  // The first failed rank that did not stop after an error of its own (the
  // cause, more likely), else the first failed rank.
  std::exception_ptr why;
  int r = -1;
  for (int p = 0; p < group.worldSize(); ++p) {
    if (p == self) continue;
    auto verdict = group.peerFailure(p);
    if (!verdict || (why && stoppedAfterError(verdict))) continue;
    const bool cause = !stoppedAfterError(verdict);
    why = std::move(verdict);
    r = p;
    if (cause) break;
  }
  if (why) {
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
