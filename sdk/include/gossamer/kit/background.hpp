// Background threads of the library (progress, membership, watchers,
// servers): one turn of their loops at a time, with whatever it throws kept
// inside the thread.
#pragma once

#include <exception>
#include <string>

#include "gossamer/log.hpp"

namespace gossamer {

/// Runs `pass`, one turn of a background thread's loop. An exception that
/// leaves it (std::bad_alloc while a message, a record or a log line is
/// built, say) is logged at kError as "<who>: <what()>" and only that turn is
/// lost: it never reaches the end of the thread, where it would terminate
/// the process (std::terminate). The log call itself may fail: then nothing
/// is said.
/// @param who names the thread in the log line, e.g. "membership".
/// @return true when `pass` returned, false when it threw.
template <typename F>
bool survivePass(const char* who, F&& pass) noexcept {
  try {
    pass();
    return true;
  } catch (const std::exception& e) {
    try {
      log(LogLevel::kError, std::string(who) + ": " + e.what());
    } catch (...) {  // (out of memory for the line too: nothing to say it with)
    }
  } catch (...) {
    try {
      log(LogLevel::kError, std::string(who) + ": an exception that is not a std::exception");
    } catch (...) {
    }
  }
  return false;
}

}  // namespace gossamer
