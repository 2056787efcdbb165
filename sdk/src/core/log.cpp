// The log hook (see gossamer/log.hpp).
#include "gossamer/log.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

namespace gossamer {

namespace {

// The initial level: GOSSAMER_LOG_LEVEL (debug, info, warning, error, off, in
// any case), else warning; an unknown value is said once on stderr.
LogLevel initialLevel() noexcept {
  const char* v = std::getenv("GOSSAMER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarning;
  char lower[16] = {};
  std::size_t n = 0;
  for (const char* p = v; *p != '\0'; ++p, ++n)
    if (n < sizeof lower) lower[n] = static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  const std::string_view s = n <= sizeof lower ? std::string_view(lower, n) : std::string_view();
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warning" || s == "warn") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  std::fprintf(stderr,
               "gossamer [warning] GOSSAMER_LOG_LEVEL '%.32s' is none of debug, info, warning, error, off: "
               "using warning\n",
               v);
  return LogLevel::kWarning;
}

std::atomic<LogLevel> gLevel{initialLevel()};

/// The sink lives behind a shared_ptr so a message being delivered keeps its
/// sink alive while another thread replaces it.
std::mutex gSinkMu;
std::shared_ptr<const LogSink> gSink;  // null: stderr

void writeStderr(LogLevel level, std::string_view message) {
  // One fprintf call per line, so lines from several threads do not interleave.
  std::fprintf(stderr, "gossamer [%s] %.*s\n", toString(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace

const char* toString(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

LogSink setLogSink(LogSink sink) {
  std::shared_ptr<const LogSink> next;
  if (sink) next = std::make_shared<const LogSink>(std::move(sink));
  std::lock_guard<std::mutex> lock(gSinkMu);
  std::shared_ptr<const LogSink> prev = std::exchange(gSink, std::move(next));
  return prev ? *prev : LogSink{};
}

LogLevel setLogLevel(LogLevel level) noexcept { return gLevel.exchange(level); }

LogLevel logLevel() noexcept { return gLevel.load(std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) noexcept {
  if (!logEnabled(level)) return;
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(gSinkMu);
    sink = gSink;
  }
  try {
    if (sink) {
      (*sink)(level, message);
    } else {
      writeStderr(level, message);
    }
  } catch (...) {
    // A sink's failure must not take down the thread that logged.
  }
}

LogLimiter::LogLimiter(LogLevel level, int linesPerSecond, std::string what)
    : level_(level), linesPerSecond_(linesPerSecond > 0 ? linesPerSecond : 1), what_(std::move(what)) {}

bool LogLimiter::take() noexcept {
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lk(mu_);
  if (windowStart_ < 0 || now - windowStart_ >= 1.0) {
    windowStart_ = now;
    linesInWindow_ = 0;
  }
  if (linesInWindow_ >= linesPerSecond_) {
    ++pending_;
    ++suppressedTotal_;
    return false;
  }
  ++linesInWindow_;
  return true;
}

void LogLimiter::write(std::string message) noexcept {
  std::uint64_t before = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    before = std::exchange(pending_, 0);
  }
  try {
    if (before > 0) message += " (" + std::to_string(before) + " more " + what_ + " before it not logged)";
  } catch (...) {
  }
  log(level_, message);
}

void LogLimiter::operator()(const std::string& message) noexcept {
  if (!logEnabled(level_) || !take()) return;
  try {
    write(message);
  } catch (...) {
  }
}

void LogLimiter::flush() noexcept {
  std::uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    n = pending_;
    pending_ = 0;
  }
  if (n == 0 || !logEnabled(level_)) return;
  try {
    log(level_, std::to_string(n) + " more " + what_ + " not logged (at most " +
                    std::to_string(linesPerSecond_) + " lines a second)");
  } catch (...) {
  }
}

std::uint64_t LogLimiter::suppressed() const noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  return suppressedTotal_;
}

}  // namespace gossamer
