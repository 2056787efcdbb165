// The seam for the SDK's per-thread state (kit/context_local.hpp): per OS
// thread by default, the provider's while one is installed.
#include <catch2/catch.hpp>

#include <thread>

#include "gossamer/kit/context_local.hpp"
#include "gossamer/metrics.hpp"

using namespace gossamer;

namespace {
ContextLocal gShared;
ContextLocal* sharedLocal() noexcept { return &gShared; }
ContextLocal* noLocal() noexcept { return nullptr; }
}  // namespace

TEST_CASE("context-local state is per OS thread by default and the provider's when installed",
          "[context_local]") {
  ContextLocal* mine = &contextLocal();
  CHECK(&contextLocal() == mine);
  ContextLocal* other = nullptr;
  std::thread([&] { other = &contextLocal(); }).join();
  CHECK(other != mine);

  setContextLocalProvider(&sharedLocal);
  CHECK(&contextLocal() == &gShared);
  std::thread([&] { other = &contextLocal(); }).join();
  CHECK(other == &gShared);
  // The time a thread waited is the provider's too.
  gShared.waitNanos = 2'500'000'000;
  CHECK(threadWaitSeconds() == Approx(2.5));

  // A provider that has nothing for the running thread leaves it its own.
  setContextLocalProvider(&noLocal);
  CHECK(&contextLocal() == mine);

  setContextLocalProvider(nullptr);
  CHECK(&contextLocal() == mine);
  CHECK(threadWaitSeconds() != Approx(2.5));
}
