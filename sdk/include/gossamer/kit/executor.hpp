// Where the SDK runs work beside the caller, behind one seam: a task is
// started and later joined (HiPS's parallel streams, DiLoCo's outer
// allreduce while the inner steps go on).
//
// By default a task is an OS thread (std::thread). A simulator whose ranks
// are not OS threads (the simgrid transport: SimGrid actors sharing one
// thread) installs a TaskStarter that makes each task an actor of the
// calling rank, on its simulated host, so that the algorithm that starts the
// task runs in the simulation unchanged.
#pragma once

#include <functional>
#include <memory>

namespace gossamer {

/// A started task, as a TaskStarter returns it.
class TaskHandle {
 public:
  virtual ~TaskHandle() = default;
  /// Blocks until the task's body has returned. Called once, or again
  /// after a call that threw. @throws InvalidArgument from inside the task.
  virtual void join() = 0;
};

/// Starts `body` beside the caller and returns its handle, never null.
/// Throws std::system_error when it cannot (as std::thread's constructor
/// does); `body` must not throw.
using TaskStarter = std::unique_ptr<TaskHandle> (*)(std::function<void()> body);

/// The default TaskStarter: `body` on a new OS thread (std::thread). For a
/// starter that falls back on it (a simulator's, outside its actors).
/// Throws std::system_error when no thread can be started.
std::unique_ptr<TaskHandle> startThread(std::function<void()> body);

/// Installs `starter` for the whole process (null: OS threads, the
/// default). Install it before the threads that use the SDK start, and
/// remove it after they end.
void setTaskStarter(TaskStarter starter) noexcept;

/// A task running beside the caller: a std::thread unless a TaskStarter is
/// installed. Like std::thread it is joined explicitly; unlike it, a Task
/// still joinable when destroyed is joined then rather than terminating the
/// process.
class Task {
 public:
  Task() = default;
  Task(Task&&) noexcept = default;
  Task& operator=(Task&& other) noexcept;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task();

  /// True from start until join.
  bool joinable() const noexcept { return handle_ != nullptr; }
  /// Blocks until the body has returned; then not joinable. Throws
  /// InvalidArgument when not joinable, or called from inside the task
  /// itself (it stays joinable then). The destructor and move-assignment
  /// join too, and swallow that error (the OS thread is detached then).
  void join();

 private:
  friend Task startTask(std::function<void()> body);
  std::unique_ptr<TaskHandle> handle_;
};

/// Runs `body` (which must not throw: catch inside it) beside the caller, on
/// the installed TaskStarter. Throws std::system_error when no task can be
/// started (as std::thread does), InvalidArgument when `body` is empty.
Task startTask(std::function<void()> body);

}  // namespace gossamer
