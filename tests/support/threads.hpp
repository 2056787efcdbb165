// Test support: run one thread per rank and propagate failures. Assertions
// on those threads go through rank_checks.hpp's RANK_CHECK and RANK_REQUIRE.
#pragma once

#include "rank_checks.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gossamer::testing {

/// How long onEveryRank waits for its ranks, seconds: below ctest's 300 s
/// per case, so that a rank stuck forever (say, at a barrier that a rank
/// which threw will never reach) is reported with the others' errors.
inline constexpr double kRankThreadsSeconds = 240;

/// Runs fn(rank) on one thread per rank 0..n-1, joins them all, and rethrows
/// the first failure (by rank order). Ranks that are not done after
/// kRankThreadsSeconds cannot be joined or stopped: the ranks still running
/// and every failure so far are printed to stderr and the test process ends
/// with status 124 (a hang made a failure, not a silent wait).
template <typename F>
void onEveryRank(int n, F fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<char> done(static_cast<std::size_t>(n), 0);
  std::mutex mu;
  std::condition_variable cv;
  int left = n;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::exception_ptr error;
      try {
        fn(r);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu);
      errors[static_cast<std::size_t>(r)] = error;
      done[static_cast<std::size_t>(r)] = 1;
      --left;
      cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::duration<double>(kRankThreadsSeconds), [&] { return left == 0; })) {
      std::string report = "onEveryRank: after " + std::to_string(static_cast<int>(kRankThreadsSeconds)) +
                           " s, rank thread(s) still running:";
      for (int r = 0; r < n; ++r)
        if (!done[static_cast<std::size_t>(r)]) report += " " + std::to_string(r);
      for (int r = 0; r < n; ++r) {
        if (!errors[static_cast<std::size_t>(r)]) continue;
        try {
          std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
        } catch (const std::exception& e) {
          report += "\n  rank " + std::to_string(r) + " failed: " + e.what();
        } catch (...) {
          report += "\n  rank " + std::to_string(r) + " failed (not a std::exception)";
        }
      }
      std::fprintf(stderr, "%s\n", report.c_str());
      std::fflush(nullptr);
      std::_Exit(124);
    }
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gossamer::testing
