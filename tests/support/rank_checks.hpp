// Test support: Catch2 assertions from threads other than the test's own.
//
// Catch2 v2 records every assertion in one unsynchronised object (its run
// context: the last assertion, the counts, the captured messages), so CHECK
// or REQUIRE on two rank threads at once is a data race (ThreadSanitizer
// reports it; at worst two threads copy the same strings at once). These
// macros evaluate the expression on the calling thread first, as CHECK does
// (operands decomposed, so a failure prints their values), and only then
// report it to Catch under one process-wide lock. The expression itself runs
// outside the lock, so it may wait on another rank (a receive, a collective)
// without holding up that rank's checks.
//
//   RANK_CHECK(expr), RANK_REQUIRE(expr), RANK_CHECK_FALSE(expr)
//   RANK_CHECK_THROWS_AS(expr, Type), RANK_CHECK_THROWS_WITH(expr, matcher)
//
// Unlike CHECK, an exception thrown while evaluating `expr` is not recorded
// as this assertion's failure: it leaves the thread, and onEveryRank rethrows
// it on the test's thread, which fails the test. A RANK_REQUIRE that fails
// throws Catch's failure exception the same way.
#pragma once
// As catch.hpp does: `Decomposer() <= a == b` is how Catch takes an expression
// apart, and GCC ignores the _Pragma that would silence -Wparentheses in a
// macro expansion, so the macros' own tokens are a system header's.
#pragma GCC system_header

#include <catch2/catch.hpp>

#include <exception>
#include <mutex>

namespace gossamer::testing {

/// The lock every RANK_* macro holds while it reports to Catch.
inline std::mutex& catchLock() {
  static std::mutex m;
  return m;
}

/// Reports an expression already evaluated (and decomposed by
/// Catch::Decomposer) as one assertion, under catchLock(). Throws Catch's
/// TestFailureException for a failed REQUIRE-style disposition.
template <typename Expr>
void reportExpression(Catch::StringRef macro, const Catch::SourceLineInfo& line, Catch::StringRef text,
                      Catch::ResultDisposition::Flags disposition, const Expr& expr) {
  std::lock_guard<std::mutex> lock(catchLock());
  Catch::AssertionHandler handler(macro, line, text, disposition);
  handler.handleExpr(expr);
  handler.complete();
}

/// What running an expression threw: nothing (null), or the exception.
template <typename F>
std::exception_ptr thrownBy(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

/// Reports a CHECK_THROWS-style assertion under catchLock(): a failure when
/// nothing was thrown, else `judge(handler)` inside a handler of `thrown`
/// (so `throw;` and Catch's translation of the active exception work there).
template <typename Judge>
void reportThrown(Catch::StringRef macro, const Catch::SourceLineInfo& line, Catch::StringRef text,
                  const std::exception_ptr& thrown, Judge judge) {
  std::lock_guard<std::mutex> lock(catchLock());
  Catch::AssertionHandler handler(macro, line, text, Catch::ResultDisposition::ContinueOnFailure);
  if (!thrown) {
    handler.handleUnexpectedExceptionNotThrown();
  } else {
    try {
      std::rethrow_exception(thrown);
    } catch (...) {
      judge(handler);
    }
  }
  handler.complete();
}

/// Reports whether `thrown` is an `E` (CHECK_THROWS_AS).
template <typename E>
void reportThrowsAs(Catch::StringRef macro, const Catch::SourceLineInfo& line, Catch::StringRef text,
                    const std::exception_ptr& thrown) {
  reportThrown(macro, line, text, thrown, [](Catch::AssertionHandler& handler) {
    try {
      throw;
    } catch (const E&) {
      handler.handleExceptionThrownAsExpected();
    } catch (...) {
      handler.handleUnexpectedInflightException();
    }
  });
}

/// Reports whether `thrown`'s message matches `matcher` (a string or a
/// Catch string matcher, as CHECK_THROWS_WITH takes).
template <typename M>
void reportThrowsWith(Catch::StringRef macro, const Catch::SourceLineInfo& line, Catch::StringRef text,
                      const std::exception_ptr& thrown, const M& matcher, Catch::StringRef matcherText) {
  reportThrown(macro, line, text, thrown, [&](Catch::AssertionHandler& handler) {
    Catch::handleExceptionMatchExpr(handler, matcher, matcherText);
  });
}

}  // namespace gossamer::testing

#define GOSSAMER_RANK_TEST(macro, disposition, ...)                                           \
  do {                                                                                        \
    CATCH_INTERNAL_START_WARNINGS_SUPPRESSION                                                 \
    CATCH_INTERNAL_SUPPRESS_PARENTHESES_WARNINGS                                              \
    ::gossamer::testing::reportExpression(macro, CATCH_INTERNAL_LINEINFO,                     \
                                          CATCH_INTERNAL_STRINGIFY(__VA_ARGS__), disposition, \
                                          Catch::Decomposer() <= __VA_ARGS__);                \
    CATCH_INTERNAL_STOP_WARNINGS_SUPPRESSION                                                  \
  } while (false)

/// CHECK for a thread other than the test's (see the top of this file).
#define RANK_CHECK(...) \
  GOSSAMER_RANK_TEST("RANK_CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__)
/// REQUIRE for a thread other than the test's: a failure throws out of the thread.
#define RANK_REQUIRE(...) GOSSAMER_RANK_TEST("RANK_REQUIRE", Catch::ResultDisposition::Normal, __VA_ARGS__)
/// CHECK_FALSE for a thread other than the test's.
#define RANK_CHECK_FALSE(...)                                                                           \
  GOSSAMER_RANK_TEST("RANK_CHECK_FALSE",                                                                \
                     Catch::ResultDisposition::ContinueOnFailure | Catch::ResultDisposition::FalseTest, \
                     __VA_ARGS__)
/// CHECK_THROWS_AS for a thread other than the test's.
#define RANK_CHECK_THROWS_AS(expr, Type)                                                     \
  ::gossamer::testing::reportThrowsAs<Type>("RANK_CHECK_THROWS_AS", CATCH_INTERNAL_LINEINFO, \
                                            #expr ", " #Type,                                \
                                            ::gossamer::testing::thrownBy([&] { static_cast<void>(expr); }))
/// CHECK_THROWS_WITH for a thread other than the test's.
#define RANK_CHECK_THROWS_WITH(expr, matcher)                                 \
  ::gossamer::testing::reportThrowsWith(                                      \
      "RANK_CHECK_THROWS_WITH", CATCH_INTERNAL_LINEINFO, #expr ", " #matcher, \
      ::gossamer::testing::thrownBy([&] { static_cast<void>(expr); }), matcher, #matcher)
