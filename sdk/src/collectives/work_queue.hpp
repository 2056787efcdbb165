// The communication thread of a Communicator's non-blocking collectives
// (nonblocking.cpp): a FIFO of jobs, each with the Work state it completes.
// Private to sdk/src/collectives.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "gossamer/collectives.hpp"

namespace gossamer {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;  // the collective's, or the one it inherited

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};

struct Communicator::Worker {
  using Job = std::pair<std::function<void()>, std::shared_ptr<Work::State>>;

  Worker();
  /// Runs what is queued, then stops.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void push(Job job);
  /// Blocks until the queue is empty and no job runs.
  void drain();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  bool stop_ = false;
  bool busy_ = false;
  std::exception_ptr poison_;   // the error of the last failed job
  std::size_t poisonLeft_ = 0;  // jobs that were queued behind it, and fail with it
  std::thread thread_;          // last: starts once the rest is built
};

}  // namespace gossamer
