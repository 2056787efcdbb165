// ZeroMQ transport (cppzmq): one ROUTER socket per rank receives, one DEALER
// per peer sends. Endpoints are bound on ephemeral ports (tcp) or unique
// socket files (ipc) and exchanged through the rendezvous Store, so runs never
// collide on fixed ports. Only this factory header is public: nothing outside
// transports/zmq includes zmq.hpp.
#pragma once

#include <memory>
#include <string>

#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::zmq {

/// Options of one rank's ZeroMQ transport.
struct Options {
  int rank = 0;
  int worldSize = 1;
  std::string protocol = "tcp";     ///< "tcp" or "ipc".
  std::string host = "127.0.0.1";   ///< tcp: interface to bind (its port is picked by the OS).
  double timeoutSeconds = 30.0;     ///< Bound on rendezvous and default for waits, seconds.
  double lingerSeconds = 5.0;       ///< close(): how long queued messages may still be delivered.
  /// After a peer's connection drops without a goodbye frame, how long to keep
  /// reading its in-flight messages before declaring it failed, seconds.
  double failureGraceSeconds = 0.25;
  std::string storePrefix = "gossamer";  ///< Namespace of this job's keys in the store.
};

/// Creates the transport: binds, publishes "<prefix>/zmq/<rank>" in `store`,
/// waits for every peer's endpoint and connects. The store is used only here.
/// @throws InvalidArgument for bad options, TimeoutError if peers do not show
///         up within timeoutSeconds, Error if binding fails.
std::unique_ptr<Transport> makeTransport(const Options& options, Store& store);

}  // namespace gossamer::zmq

namespace gossamer {
class Registry;
}
namespace gossamer::zmq {
/// Registers transport kind "zmq", configured from the `transport:` section
/// (protocol, host, timeout_seconds, linger_seconds).
void registerWith(Registry& registry);
}  // namespace gossamer::zmq
