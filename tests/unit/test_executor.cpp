// The SDK's executor seam (kit/executor.hpp): tasks are OS threads by
// default and the installed TaskStarter's otherwise.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/executor.hpp"

using namespace gossamer;

namespace {
// A starter that runs the body at join, on the joining thread, and counts.
std::atomic<int> gStarted{0};
class Deferred final : public TaskHandle {
 public:
  explicit Deferred(std::function<void()> body) : body_(std::move(body)) {}
  void join() override { body_(); }

 private:
  std::function<void()> body_;
};
std::unique_ptr<TaskHandle> deferred(std::function<void()> body) {
  ++gStarted;
  return std::make_unique<Deferred>(std::move(body));
}
}  // namespace

TEST_CASE("a task is an OS thread by default joined explicitly or when destroyed", "[executor]") {
  const auto caller = std::this_thread::get_id();
  std::thread::id ran;
  Task t = startTask([&] { ran = std::this_thread::get_id(); });
  CHECK(t.joinable());
  t.join();
  CHECK_FALSE(t.joinable());
  CHECK(ran != caller);
  CHECK_THROWS_AS(t.join(), InvalidArgument);
  CHECK_THROWS_AS(startTask(nullptr), InvalidArgument);

  std::atomic<bool> done{false};
  {
    Task u = startTask([&] { done = true; });
  }  // joined here
  CHECK(done);
  Task a = startTask([] {});
  a = startTask([] {});  // the first is joined before the second replaces it
  a.join();
}

TEST_CASE("a task that joins itself gets InvalidArgument, not std::terminate", "[executor]") {
  Task t;
  std::atomic<bool> ready{false}, refused{false}, stillJoinable{false};
  t = startTask([&] {
    while (!ready) std::this_thread::yield();
    try {
      t.join();
    } catch (const InvalidArgument&) {
      refused = true;
    }
    stillJoinable = t.joinable();
  });
  ready = true;
  t.join();  // from this thread: joins
  CHECK(refused);
  CHECK(stillJoinable);
  CHECK_FALSE(t.joinable());
}

TEST_CASE("an installed task starter runs the SDK's tasks", "[executor]") {
  setTaskStarter(&deferred);
  int value = 0;
  Task t = startTask([&] { value = 7; });
  CHECK(gStarted == 1);
  CHECK(value == 0);  // this starter runs the body at join
  t.join();
  CHECK(value == 7);
  setTaskStarter(nullptr);
  Task u = startTask([&] { value = 8; });
  u.join();
  CHECK(gStarted == 1);
  CHECK(value == 8);
}
