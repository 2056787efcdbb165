// Test support: every rank of a transport in one process, as a Group.
#pragma once

#include <memory>
#include <vector>

#include "threads.hpp"

#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"

namespace gossamer::testing {

/// The n ranks of one job, rank r at index r.
using Group = std::vector<std::unique_ptr<Transport>>;

/// n ranks over one inproc fabric; every wait bounded by timeoutSeconds.
inline Group inprocGroup(int n, double timeoutSeconds) {
  auto fabric = inproc::makeFabric(n);
  Group g;
  for (int r = 0; r < n; ++r) g.push_back(inproc::makeTransport(fabric, r, timeoutSeconds));
  return g;
}

/// n ranks over zmq tcp on loopback, meeting in a MemoryStore (each made on
/// its own thread, since each waits in the rendezvous for the others).
inline Group zmqGroup(int n, double timeoutSeconds) {
  MemoryStore store;
  Group g(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    zmq::Options o;
    o.rank = r;
    o.worldSize = n;
    o.protocol = "tcp";
    o.timeoutSeconds = timeoutSeconds;
    o.lingerSeconds = 2;
    g[static_cast<std::size_t>(r)] = zmq::makeTransport(o, store);
  });
  return g;
}

/// n ranks over the socket transport (`protocol` "tcp" on loopback, or
/// "ipc"), meeting in a MemoryStore as zmqGroup's do.
inline Group socketGroup(int n, const char* protocol, double timeoutSeconds) {
  MemoryStore store;
  Group g(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) {
    sock::Options o;
    o.rank = r;
    o.worldSize = n;
    o.protocol = protocol;
    o.timeoutSeconds = timeoutSeconds;
    o.lingerSeconds = 1;
    g[static_cast<std::size_t>(r)] = sock::makeTransport(o, store);
  });
  return g;
}

}  // namespace gossamer::testing
