// Test support: run one thread per rank and propagate failures. Assertions
// on those threads go through rank_checks.hpp's RANK_CHECK and RANK_REQUIRE.
#pragma once

#include "rank_checks.hpp"

#include <exception>
#include <thread>
#include <vector>

namespace gossamer::testing {

/// Runs fn(rank) on one thread per rank 0..n-1, joins them all, and rethrows
/// the first failure (by rank order).
template <typename F>
void onEveryRank(int n, F fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gossamer::testing
