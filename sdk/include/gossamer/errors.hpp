// Error types of the Gossamer SDK.
//
// Two tiers: GOSSAMER_ENFORCE for bad API arguments (throws InvalidArgument
// with file, line and the failed condition) and GOSSAMER_CHECK for the
// library's own invariants (throws InternalError: a bug in Gossamer, not in
// the caller), and an exception hierarchy for what comes from outside:
// configuration, frames off the wire, timeouts and dead peers. The library
// never calls exit() or abort().
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gossamer {

/// Base class of every exception thrown by Gossamer.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A bad argument to a public API call: the caller's mistake.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what) {}
};

/// A broken invariant inside the library: a bug in Gossamer, never the
/// caller's input. Thrown by GOSSAMER_CHECK; worth a bug report.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error(what) {}
};

/// A configuration error. `file()`, `line()` (1-based; 0 when unknown) and
/// `key()` (dotted path such as "training.batch_size") locate it.
class ConfigError : public Error {
 public:
  ConfigError(std::string file, int line, std::string key, const std::string& msg);
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  const std::string& key() const noexcept { return key_; }

 private:
  std::string file_;
  int line_;
  std::string key_;
};

/// Why a transport rejected bytes it received: the kinds counted in
/// TransportStats::rejectedFrames.
enum class FrameFault : std::uint8_t {
  kMalformed = 0,  ///< a header field out of range (kind, dtype, op, step, count, reserved, parts)
  kGarbage,        ///< not a Gossamer frame at all (bad magic, or no hello on a new connection)
  kVersion,        ///< a protocol version this build does not speak
  kOversized,      ///< announces a payload above the limit, before anything is allocated for it
  kTruncated,      ///< shorter than its header announced (or a header shorter than 48 bytes)
  kChecksum,       ///< the CRC-32C does not match (corrupted)
  kStranger,       ///< well formed, but from a connection that is not a current peer's
};
/// Number of FrameFault values.
constexpr std::size_t kFrameFaultCount = 7;
/// "malformed", "garbage", "version", "oversized", "truncated", "checksum", "stranger".
const char* toString(FrameFault fault) noexcept;

/// A malformed frame received from a peer. `peer()` is the rank the bytes came
/// from (-1 when unknown), `offset()` the byte offset of the bad field within
/// the frame and `fault()` what kind of fault it is.
class ProtocolError : public Error {
 public:
  ProtocolError(int peer, std::size_t offset, const std::string& msg,
                FrameFault fault = FrameFault::kMalformed);
  int peer() const noexcept { return peer_; }
  std::size_t offset() const noexcept { return offset_; }
  FrameFault fault() const noexcept { return fault_; }

 private:
  int peer_;
  std::size_t offset_;
  FrameFault fault_;
};

/// A wait that did not complete within its timeout.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

/// A peer that left (closed its agent) or died while others still needed it.
class PeerFailure : public Error {
 public:
  PeerFailure(int peer, const std::string& msg);
  int peer() const noexcept { return peer_; }

 private:
  int peer_;
};

/// A request that was cancelled (Request::cancel or Transport::close) before it
/// completed.
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& what) : Error(what) {}
};

namespace detail {
[[noreturn]] void enforceFailed(const char* file, int line, const char* cond, const std::string& msg);
[[noreturn]] void checkFailed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace gossamer

/// Throws gossamer::InvalidArgument naming file, line, the condition and a
/// message built from the stream arguments: GOSSAMER_ENFORCE(n > 0, "n=" << n).
#define GOSSAMER_ENFORCE(cond, msg)                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::ostringstream gossamer_enforce_os_;                                                  \
      gossamer_enforce_os_ << msg; /* NOLINT(bugprone-macro-parentheses): a stream chain */     \
      ::gossamer::detail::enforceFailed(__FILE__, __LINE__, #cond, gossamer_enforce_os_.str()); \
    }                                                                                           \
  } while (0)

/// Throws gossamer::InternalError when a library invariant does not hold:
/// GOSSAMER_CHECK(offset <= size, "offset " << offset). For the caller's
/// arguments use GOSSAMER_ENFORCE.
#define GOSSAMER_CHECK(cond, msg)                                                           \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::ostringstream gossamer_check_os_;                                                \
      gossamer_check_os_ << msg; /* NOLINT(bugprone-macro-parentheses): a stream chain */   \
      ::gossamer::detail::checkFailed(__FILE__, __LINE__, #cond, gossamer_check_os_.str()); \
    }                                                                                       \
  } while (0)
