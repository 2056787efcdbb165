// The per-thread-of-execution state's seam (kit/context_local.hpp).
#include "gossamer/kit/context_local.hpp"

#include <atomic>

namespace gossamer {

namespace {
std::atomic<ContextLocalProvider> gProvider{nullptr};
}  // namespace

void setContextLocalProvider(ContextLocalProvider provider) noexcept {
  gProvider.store(provider, std::memory_order_release);
}

ContextLocal& contextLocal() noexcept {
  if (const auto provider = gProvider.load(std::memory_order_acquire))
    if (ContextLocal* c = provider()) return *c;
  thread_local ContextLocal local;
  return local;
}

}  // namespace gossamer
