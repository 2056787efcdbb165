// A log sink that records what the library reports, for tests.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gossamer/log.hpp"

namespace gossamer::testing {

/// Installs a capturing sink and `level` for its lifetime, restoring the
/// previous sink and level after.
class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::kWarning) : level_(setLogLevel(level)) {
    previous_ = setLogSink([this](LogLevel l, std::string_view m) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(l, std::string(m));
    });
  }
  ~LogCapture() {
    setLogSink(std::move(previous_));
    setLogLevel(level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  /// Every message recorded so far: its level and text.
  std::vector<std::pair<LogLevel, std::string>> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  LogLevel level_;
  LogSink previous_;
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

}  // namespace gossamer::testing
