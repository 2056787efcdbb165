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

FailureScope::FailureScope(const Transport& job) noexcept : saved_(contextLocal().failureScope) {
  contextLocal().failureScope = &job;
}

FailureScope::~FailureScope() { contextLocal().failureScope = saved_; }

}  // namespace gossamer
