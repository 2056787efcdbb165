// The log hook (see gossamer/log.hpp).
#include "gossamer/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

namespace gossamer {

namespace {

// The initial level: GOSSAMER_LOG_LEVEL (debug, info, warning, error, off), else warning.
LogLevel initialLevel() noexcept {
  const char* v = std::getenv("GOSSAMER_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarning;
  const std::string_view s(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
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

}  // namespace gossamer
