// What the SDK keeps per thread of execution, behind one seam.
//
// By default that is per OS thread (thread_local). A simulator that runs many
// ranks on one OS thread, switching between them at its own calls (SimGrid's
// actors in the simgrid transport), installs a provider that returns the
// running rank's instead, so that one rank's collective never writes into
// the scratch another rank is still reading.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gossamer {

class Transport;

/// State the SDK keeps per thread of execution.
struct ContextLocal {
  /// Receive scratch of the collectives, by slot (detail::ScratchSlot),
  /// grow-only, in bytes.
  std::array<std::vector<std::byte>, 4> scratch;
  /// Nanoseconds this thread of execution spent blocked in Request::wait
  /// (threadWaitSeconds).
  std::int64_t waitNanos = 0;
  /// When set, the collectives' waits end with PeerFailure once any rank of
  /// this transport has failed, not only one of the collective's own group
  /// (a split communicator's collective whose ranks wait on work that a
  /// failure elsewhere in the job stopped: FailureScope).
  const Transport* failureScope = nullptr;
};

/// Sets contextLocal().failureScope to `job` for its lifetime (restoring the
/// previous one after), on the running thread of execution.
class FailureScope {
 public:
  explicit FailureScope(const Transport& job) noexcept;
  ~FailureScope();
  FailureScope(const FailureScope&) = delete;
  FailureScope& operator=(const FailureScope&) = delete;

 private:
  const Transport* saved_;
};

/// Returns the running thread of execution's ContextLocal, or null to use
/// the OS thread's.
using ContextLocalProvider = ContextLocal* (*)() noexcept;

/// Installs `provider` for the whole process (null: every OS thread has its
/// own, the default). Install it before the threads that use the SDK start,
/// and remove it after they end.
void setContextLocalProvider(ContextLocalProvider provider) noexcept;

/// The running thread of execution's ContextLocal (the provider's, else the
/// OS thread's).
ContextLocal& contextLocal() noexcept;

}  // namespace gossamer
