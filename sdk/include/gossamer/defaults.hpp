// The library's default values, each written once. Every Options struct, the
// YAML schema and the docs take their defaults from here.
#pragma once

#include <cstddef>

namespace gossamer::defaults {

/// Bound on every network wait (rendezvous, receives, collectives, gossip
/// exchanges), seconds.
inline constexpr double kTimeoutSeconds = 30.0;

/// On close: how long queued sends may still be delivered, seconds.
inline constexpr double kLingerSeconds = 5.0;

/// Address the network transports bind to (ports are ephemeral).
inline constexpr const char* kHost = "127.0.0.1";

/// Endpoint protocol of the zmq and socket transports: "tcp" or "ipc".
inline constexpr const char* kProtocol = "tcp";

/// Ring allreduce pipelining: the largest piece of a chunk sent at once, bytes.
inline constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

/// `auto` allreduce without a cost model: vectors up to this size use
/// recursive doubling, larger ones Rabenseifner or the ring, bytes.
inline constexpr std::size_t kSmallMessageBytes = std::size_t{64} << 10;
/// Allreduce `auto` without a cost model: Rabenseifner up to this size (bytes),
/// the ring above. At 4 and 8 ranks over socket and zmq tcp it beat the ring
/// from 64 KiB to 1 MiB (docs/collectives.md).
inline constexpr std::size_t kMidMessageBytes = std::size_t{1} << 20;

}  // namespace gossamer::defaults
