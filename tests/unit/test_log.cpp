// The log hook and the two error tiers (gossamer/log.hpp, gossamer/errors.hpp).
#include <catch2/catch.hpp>

#include "log_capture.hpp"

#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"

namespace {

using Capture = gossamer::testing::LogCapture;

}  // namespace

TEST_CASE("log: messages at or above the level reach the sink, the rest are not formatted", "[log]") {
  Capture capture(gossamer::LogLevel::kWarning);
  int formatted = 0;
  auto count = [&formatted] {
    ++formatted;
    return "x";
  };
  GOSSAMER_LOG(kInfo, "dropped " << count());
  GOSSAMER_LOG(kWarning, "rank " << 3 << ": kept " << count());
  GOSSAMER_LOG(kError, "also kept");
  auto lines = capture.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].first == gossamer::LogLevel::kWarning);
  CHECK(lines[0].second == "rank 3: kept x");
  CHECK(lines[1].first == gossamer::LogLevel::kError);
  CHECK(formatted == 1);
}

TEST_CASE("log: kOff silences everything, and a throwing sink is contained", "[log]") {
  {
    Capture capture(gossamer::LogLevel::kOff);
    gossamer::log(gossamer::LogLevel::kError, "silenced");
    CHECK(capture.lines().empty());
  }
  auto previous = gossamer::setLogSink([](gossamer::LogLevel, std::string_view) { throw 42; });
  CHECK_NOTHROW(gossamer::log(gossamer::LogLevel::kError, "to a throwing sink"));
  gossamer::setLogSink(std::move(previous));
}

TEST_CASE("log: many threads log through one sink", "[log]") {
  Capture capture(gossamer::LogLevel::kDebug);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 100; ++i) GOSSAMER_LOG(kDebug, "thread " << t << " message " << i);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(capture.lines().size() == 400);
}

TEST_CASE("errors: GOSSAMER_CHECK throws InternalError, GOSSAMER_ENFORCE InvalidArgument", "[errors]") {
  auto invariant = [](int v) { GOSSAMER_CHECK(v >= 0, "v=" << v); };
  auto argument = [](int v) { GOSSAMER_ENFORCE(v >= 0, "v=" << v); };
  CHECK_NOTHROW(invariant(1));
  CHECK_THROWS_AS(invariant(-1), gossamer::InternalError);
  CHECK_THROWS_AS(argument(-1), gossamer::InvalidArgument);
  try {
    invariant(-2);
  } catch (const gossamer::InternalError& e) {
    const std::string what = e.what();
    CHECK(what.find("internal error") != std::string::npos);
    CHECK(what.find("v=-2") != std::string::npos);
  }
}
