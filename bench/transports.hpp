// The transports the benchmarks compare, by name: zmq over tcp on 127.0.0.1
// or over ipc ("tcp" / "zmq-tcp", "ipc" / "zmq-ipc"), the native socket
// transport ("socket-tcp", "socket-ipc") and, when it is built,
// libfabric with its tcp provider on 127.0.0.1 or its shm provider
// ("libfabric-tcp", "libfabric-shm"); "composite-<local>" (local: zmq-ipc,
// socket-ipc, libfabric-shm) is the composite transport with the job split
// into two hosts, ranks [0, ceil(N/2)) and the rest, the local transport
// inside each and zmq tcp on 127.0.0.1 between them (two hosts on one
// machine, so that the ranks of both get a core each); "zmq-tcp-curve" is zmq tcp under CURVE
// with the key pair at $GOSSAMER_BENCH_CURVE_KEY (a gossamer-keygen secret
// certificate, its .pub beside it: every rank the same pair, which costs
// what distinct pairs cost). zmq tunes glibc's allocator
// (zmq::Options::recycleReceiveBuffers) only with GOSSAMER_BENCH_ZMQ_RECYCLE=1
// in the environment.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"
#include "gossamer/transports/composite.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"
#ifdef GOSSAMER_HAVE_LIBFABRIC
#include "gossamer/transports/libfabric.hpp"
#endif

namespace gossamer::bench {

/// Every name makeBenchTransport accepts in this build.
inline std::vector<std::string> benchTransportNames() {
  std::vector<std::string> names{"tcp",           "ipc",        "zmq-tcp",   "zmq-ipc",
                                 "zmq-tcp-curve", "socket-tcp", "socket-ipc"};
  names.push_back("composite-zmq-ipc");
  names.push_back("composite-socket-ipc");
#ifdef GOSSAMER_HAVE_LIBFABRIC
  names.push_back("libfabric-tcp");
  names.push_back("libfabric-shm");
  names.push_back("composite-libfabric-shm");
#endif
  return names;
}

/// Rank `rank` of `worldSize` of the transport `name` (see above); its
/// rendezvous keys live under `storePrefix` in `store`.
/// @throws InvalidArgument for an unknown name (or libfabric in a build without it).
inline std::unique_ptr<Transport> makeBenchTransport(const std::string& name, int rank, int worldSize,
                                                     double timeoutSeconds, Store& store,
                                                     const std::string& storePrefix) {
  if (name.rfind("composite-", 0) == 0) {
    const std::string local = name.substr(10);
    GOSSAMER_ENFORCE(local == "zmq-ipc" || local == "socket-ipc" || local == "libfabric-shm",
                     "unknown transport '" << name
                                           << "' (composite-zmq-ipc, composite-socket-ipc, "
                                              "composite-libfabric-shm)");
    composite::Options o;
    o.rank = rank;
    o.worldSize = worldSize;
    o.timeoutSeconds = timeoutSeconds;
    const int firstHost = (worldSize + 1) / 2;  // ranks of the first host; the second has the rest
    const int begin = rank < firstHost ? 0 : firstHost, end = rank < firstHost ? firstHost : worldSize;
    for (int r = begin; r < end; ++r) o.localGroup.push_back(r);
    auto inner = [timeoutSeconds, storePrefix](const std::string& kind) {
      return [=](int r, int n, Store& s) {
        return makeBenchTransport(kind, r, n, timeoutSeconds, s, storePrefix);
      };
    };
    return composite::makeTransport(o, store, inner(local), inner("zmq-tcp"));
  }
  const bool curve = name == "zmq-tcp-curve";
  const std::string zmqProtocol = curve ? "tcp" : name.rfind("zmq-", 0) == 0 ? name.substr(4) : name;
  // The fields every transport's Options has; the caller sets its own.
  auto common = [&](auto o) {
    o.rank = rank;
    o.worldSize = worldSize;
    o.host = "127.0.0.1";
    o.timeoutSeconds = timeoutSeconds;
    o.storePrefix = storePrefix;
    return o;
  };
  if (zmqProtocol == "tcp" || zmqProtocol == "ipc") {
    auto o = common(zmq::Options{});
    o.protocol = zmqProtocol;
    // GOSSAMER_BENCH_ZMQ_RECYCLE=1: zmq::Options::recycleReceiveBuffers (process-wide mallopt).
    const char* recycle = std::getenv("GOSSAMER_BENCH_ZMQ_RECYCLE");
    o.recycleReceiveBuffers = recycle != nullptr && std::string(recycle) == "1";
    if (curve) {
      const char* key = std::getenv("GOSSAMER_BENCH_CURVE_KEY");
      GOSSAMER_ENFORCE(key != nullptr,
                       "zmq-tcp-curve needs GOSSAMER_BENCH_CURVE_KEY (a gossamer-keygen secret file)");
      o.curve = loadCurveKeys(key, std::string(key) + ".pub");
    }
    return zmq::makeTransport(o, store);
  }
  if (name == "socket-tcp" || name == "socket-ipc") {
    auto o = common(sock::Options{});
    o.protocol = name.substr(7);
    return sock::makeTransport(o, store);
  }
#ifdef GOSSAMER_HAVE_LIBFABRIC
  if (name == "libfabric-tcp" || name == "libfabric-shm") {
    auto o = common(libfabric::Options{});
    o.provider = name.substr(10);
    return libfabric::makeTransport(o, store);
  }
#endif
  throw InvalidArgument("unknown transport '" + name + "' (this build has: " + [] {
    std::string s;
    for (const auto& n : benchTransportNames()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + ")");
}

}  // namespace gossamer::bench
