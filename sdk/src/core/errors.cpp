#include "gossamer/errors.hpp"

namespace gossamer {

namespace {
std::string configWhat(const std::string& file, int line, const std::string& key, const std::string& msg) {
  std::ostringstream os;
  os << (file.empty() ? "<config>" : file);
  if (line > 0) os << ':' << line;
  os << ": ";
  if (!key.empty()) os << "key '" << key << "': ";
  os << msg;
  return os.str();
}
}  // namespace

ConfigError::ConfigError(std::string file, int line, std::string key, const std::string& msg)
    : Error(configWhat(file, line, key, msg)), file_(std::move(file)), line_(line), key_(std::move(key)) {}

const char* toString(FrameFault fault) noexcept {
  switch (fault) {
    case FrameFault::kMalformed:
      return "malformed";
    case FrameFault::kGarbage:
      return "garbage";
    case FrameFault::kVersion:
      return "version";
    case FrameFault::kOversized:
      return "oversized";
    case FrameFault::kTruncated:
      return "truncated";
    case FrameFault::kChecksum:
      return "checksum";
    case FrameFault::kStranger:
      return "stranger";
  }
  return "?";
}

ProtocolError::ProtocolError(int peer, std::size_t offset, const std::string& msg, FrameFault fault)
    : Error("protocol error from peer " + std::to_string(peer) + " at byte offset " + std::to_string(offset) +
            ": " + msg),
      peer_(peer),
      offset_(offset),
      fault_(fault) {}

PeerFailure::PeerFailure(int peer, const std::string& msg)
    : Error("peer " + std::to_string(peer) + " failed: " + msg), peer_(peer) {}

namespace detail {
void enforceFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << file << ':' << line << ": check failed: " << cond;
  if (!msg.empty()) os << " (" << msg << ')';
  throw InvalidArgument(os.str());
}

void checkFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << file << ':' << line << ": internal error (a bug in Gossamer): " << cond;
  if (!msg.empty()) os << " (" << msg << ')';
  throw InternalError(os.str());
}
}  // namespace detail

}  // namespace gossamer
