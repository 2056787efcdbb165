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
  ThreadHandle(const ThreadHandle&) = delete;
  ThreadHandle& operator=(const ThreadHandle&) = delete;
  // Joined unless its own thread destroys it (a join that threw): then
  // detached, rather than std::terminate.
  ~ThreadHandle() override {
    if (thread_.joinable()) thread_.detach();
  }
  void join() override {
    if (thread_.get_id() == std::this_thread::get_id())
      throw InvalidArgument("a task cannot join itself (join() from inside its own body)");
    thread_.join();
  }

 private:
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TaskHandle> startThread(std::function<void()> body) {
  return std::make_unique<ThreadHandle>(std::move(body));
}

void setTaskStarter(TaskStarter starter) noexcept { gStarter.store(starter, std::memory_order_release); }

namespace {
// Joins `h` if set, and drops it: a join that throws (from inside the task
// itself) leaves it to the handle's destructor.
void joinQuietly(std::unique_ptr<TaskHandle>& h) noexcept {
  if (!h) return;
  try {
    h->join();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report it
  }
  h.reset();
}
}  // namespace

Task& Task::operator=(Task&& other) noexcept {
  if (this != &other) {
    joinQuietly(handle_);
    handle_ = std::move(other.handle_);
  }
  return *this;
}

Task::~Task() { joinQuietly(handle_); }

void Task::join() {
  GOSSAMER_ENFORCE(handle_ != nullptr, "join() on a Task that is not joinable");
  handle_->join();  // (throws with the task still joinable)
  handle_.reset();
}

Task startTask(std::function<void()> body) {
  GOSSAMER_ENFORCE(static_cast<bool>(body), "startTask: an empty body");
  Task t;
  if (const auto starter = gStarter.load(std::memory_order_acquire)) {
    t.handle_ = starter(std::move(body));
    GOSSAMER_CHECK(t.handle_ != nullptr, "the installed TaskStarter returned no task");
  } else {
    t.handle_ = startThread(std::move(body));
  }
  return t;
}

}  // namespace gossamer
