// The library's one way to report what it cannot throw: a log hook.
//
// Every message the library writes (a progress thread's failure, a dropped
// message, a launcher's report on its ranks) goes through gossamer::log(). By
// default it is written to stderr as one line; an embedding application sets
// its own sink (its logger, a Python callback, a test's capture) with
// setLogSink, and chooses the least severe level that still reaches it with
// setLogLevel. The sink is process-wide and may be called from any thread,
// including the transports' progress threads: it must be thread-safe and must
// not call back into the transport that logged.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

namespace gossamer {

/// Severity of a log message, least severe first.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

/// "debug", "info", "warning", "error" or "off".
const char* toString(LogLevel level) noexcept;

/// Receives each message at or above the current level: its level and text
/// (one line, no trailing newline). Called from the thread that logs.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

/// Replaces the sink; an empty function restores the default (stderr, as
/// "gossamer [level] message"). Thread-safe. Returns the previous sink (empty
/// when it was the default).
LogSink setLogSink(LogSink sink);

/// Messages below `level` are dropped before they are formatted (default
/// kWarning, or the environment's GOSSAMER_LOG_LEVEL: debug, info, warning,
/// error or off). Thread-safe. Returns the previous level.
LogLevel setLogLevel(LogLevel level) noexcept;

/// The current level.
LogLevel logLevel() noexcept;

/// True when a message at `level` would reach the sink.
inline bool logEnabled(LogLevel level) noexcept { return level >= logLevel() && level != LogLevel::kOff; }

/// Hands `message` to the sink if `level` is enabled. Never throws: a sink
/// that throws is ignored for that message.
void log(LogLevel level, std::string_view message) noexcept;

}  // namespace gossamer

/// Logs a message built from stream arguments, formatting it only when the
/// level is enabled: GOSSAMER_LOG(kWarning, "rank " << r << ": " << e.what()).
#define GOSSAMER_LOG(level, msg)                                                        \
  do {                                                                                  \
    if (::gossamer::logEnabled(::gossamer::LogLevel::level)) {                          \
      std::ostringstream gossamer_log_os_;                                              \
      gossamer_log_os_ << msg; /* NOLINT(bugprone-macro-parentheses): a stream chain */ \
      ::gossamer::log(::gossamer::LogLevel::level, gossamer_log_os_.str());             \
    }                                                                                   \
  } while (0)
