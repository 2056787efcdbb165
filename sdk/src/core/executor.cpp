// The SDK's executor seam (kit/executor.hpp): OS threads unless a simulator
// installs its own tasks.
#include "gossamer/kit/executor.hpp"

#include <atomic>
#include <thread>
#include <utility>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

std::atomic<TaskStarter> gStarter{nullptr};

class ThreadHandle final : public TaskHandle {
 public:
  explicit ThreadHandle(std::function<void()> body) : thread_(std::move(body)) {}
  void join() override { thread_.join(); }

 private:
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TaskHandle> startThread(std::function<void()> body) {
  return std::make_unique<ThreadHandle>(std::move(body));
}

void setTaskStarter(TaskStarter starter) noexcept { gStarter.store(starter, std::memory_order_release); }

Task& Task::operator=(Task&& other) noexcept {
  if (this != &other) {
    if (handle_) handle_->join();
    handle_ = std::move(other.handle_);
  }
  return *this;
}

Task::~Task() {
  if (handle_) handle_->join();
}

void Task::join() {
  GOSSAMER_ENFORCE(handle_ != nullptr, "join() on a Task that is not joinable");
  const auto h = std::move(handle_);
  h->join();
}

Task startTask(std::function<void()> body) {
  GOSSAMER_ENFORCE(static_cast<bool>(body), "startTask: an empty body");
  Task t;
  if (const auto starter = gStarter.load(std::memory_order_acquire))
    t.handle_ = starter(std::move(body));
  else
    t.handle_ = startThread(std::move(body));
  return t;
}

}  // namespace gossamer
