// libfabric transport: the one seam tests use to make a rank send what no
// honest rank sends. Not installed; nothing but tests sets it.
#pragma once

#include <atomic>

namespace gossamer::libfabric::impl {

/// When it holds a rank of a transport in this process, that rank's next
/// large payload (sent in pieces, after an announcement) goes out with a
/// header checksum that is off by one bit, as if its bytes had been
/// corrupted after they were checksummed; then it holds -1 again. A test
/// of a corrupt payload over a real endpoint (a hostile peer would need the
/// job's key to be taken in as a rank). -1 by default: no rank.
extern std::atomic<int> corruptNextLargeChecksumOf;

}  // namespace gossamer::libfabric::impl
