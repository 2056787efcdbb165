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

#include <cstdint>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

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

/// Logs a stream of like messages (refused connections, rejected frames) at
/// most `linesPerSecond` lines a second: one bad peer sending 100,000 frames
/// writes a few lines, not 100,000. Messages over the limit are counted; the
/// next line written says how many were left out, and so does flush() (call
/// it when the stream ends, e.g. when a transport closes). Thread-safe.
class LogLimiter {
 public:
  /// @param level the level of every line; @param linesPerSecond > 0.
  /// @param what the plural noun the summary counts ("rejected frames").
  LogLimiter(LogLevel level, int linesPerSecond, std::string what);
  /// Logs `message`, or counts it when this second's lines are used up.
  void operator()(const std::string& message) noexcept;
  /// The same for a message built by `make()` (returning std::string), which
  /// is called only when the line is written: a flood costs no formatting.
  template <typename MakeMessage>
  requires std::is_invocable_r_v<std::string, MakeMessage>
  void operator()(MakeMessage&& make) noexcept {
    if (!logEnabled(level_) || !take()) return;
    try {
      write(make());
    } catch (...) {  // out of memory: the line is lost, not the process
    }
  }
  /// Logs how many messages were left out since the last line, if any.
  void flush() noexcept;
  /// Messages left out in all (not logged because of the limit).
  std::uint64_t suppressed() const noexcept;

 private:
  bool take() noexcept;                      // a line may be written now (else counted)
  void write(std::string message) noexcept;  // adds the count left out since the last line
  mutable std::mutex mu_;
  LogLevel level_;
  int linesPerSecond_;
  std::string what_;
  double windowStart_ = -1;
  int linesInWindow_ = 0;
  std::uint64_t pending_ = 0, suppressedTotal_ = 0;
};

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
