// Non-blocking collectives: Communicator::iallreduce / ibroadcast queue the
// blocking collective, with the sequence number and options of the call, on
// the communicator's communication thread, which runs them one at a time in
// call order (as gloo's process group does with its work queue), and return
// a Work to test or wait on. No bytes of their own: each sends what the
// blocking collective it runs sends (see that algorithm's file). A blocking
// call first waits for the non-blocking ones before it (Communicator's
// ordered()), so every rank runs the collectives in the same order.
#include <chrono>

#include "detail.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "work_queue.hpp"

namespace gossamer {

bool Work::test() const {
  GOSSAMER_ENFORCE(state_, "test() on an empty Work");
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

void Work::wait() const {
  GOSSAMER_ENFORCE(state_, "wait() on an empty Work");
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::wait(double timeoutSeconds) const {
  GOSSAMER_ENFORCE(state_, "wait() on an empty Work");
  GOSSAMER_ENFORCE(timeoutSeconds >= 0, "wait timeout " << timeoutSeconds << " s is negative");
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->cv.wait_until(lk, deadlineAfter<std::chrono::steady_clock>(timeoutSeconds),
                             [&] { return state_->done; }))
    throw TimeoutError("a non-blocking collective did not finish within " + std::to_string(timeoutSeconds) +
                       " s");
  if (state_->error) std::rethrow_exception(state_->error);
}

Communicator::Worker::Worker() : thread_([this] { run(); }) {}

Communicator::Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Communicator::Worker::push(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void Communicator::Worker::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

void Communicator::Worker::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    wake_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    std::exception_ptr error;
    if (poisonLeft_ > 0) {  // queued behind a failed one
      --poisonLeft_;
      error = poison_;
    }
    lk.unlock();
    if (!error) {
      try {
        job.first();
      } catch (...) {
        error = std::current_exception();
      }
    }
    lk.lock();
    // The jobs queued behind a failed one are those queued before its caller
    // could see the failure: counted before finish() wakes the caller, so a
    // job it queues once it caught the error runs.
    if (error && poisonLeft_ == 0 && error != poison_) {
      poison_ = error;
      poisonLeft_ = queue_.size();
    }
    lk.unlock();
    job.second->finish(error);
    lk.lock();
    busy_ = false;
    idle_.notify_all();
  }
}

Work Communicator::enqueue(std::function<void()> job) {
  if (!worker_) worker_ = std::make_unique<Worker>();
  auto state = std::make_shared<Work::State>();
  worker_->push({std::move(job), state});
  return Work(state);
}

void Communicator::synchronize() {
  if (worker_) worker_->drain();
}

CollectiveOptions Communicator::ordered() {
  synchronize();
  return next();
}

#define GOSSAMER_NONBLOCKING_CALLS(T)                                                                   \
  Work Communicator::iallreduce(std::span<T> data, ReduceOp op) {                                       \
    return enqueue([this, data, op, o = next()] { gossamer::allreduce(transport_, data, op, o); });     \
  }                                                                                                     \
  Work Communicator::ibroadcast(std::span<T> data, int root) {                                          \
    return enqueue([this, data, root, o = next()] { gossamer::broadcast(transport_, data, root, o); }); \
  }
GOSSAMER_FLOAT_TYPES(GOSSAMER_NONBLOCKING_CALLS)
#undef GOSSAMER_NONBLOCKING_CALLS

}  // namespace gossamer
