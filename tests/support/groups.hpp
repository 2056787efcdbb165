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

/// Creates the n ranks of a networked transport at once (each waits in the
/// rendezvous for the others): make(rank, store) on one thread per rank,
/// meeting in one MemoryStore.
template <typename Make>
Group makeGroup(int n, Make make) {
  MemoryStore store;
  Group g(static_cast<std::size_t>(n));
  onEveryRank(n, [&](int r) { g[static_cast<std::size_t>(r)] = make(r, store); });
  return g;
}

/// n ranks of a networked transport whose factory takes `Options` (rank,
/// worldSize, protocol, timeoutSeconds, lingerSeconds) on loopback.
template <typename Options, typename Make>
Group networkGroup(int n, const char* protocol, double timeoutSeconds, double lingerSeconds, Make make) {
  return makeGroup(n, [&](int r, Store& store) {
    Options o;
    o.rank = r;
    o.worldSize = n;
    o.protocol = protocol;
    o.timeoutSeconds = timeoutSeconds;
    o.lingerSeconds = lingerSeconds;
    return make(o, store);
  });
}

/// n ranks over zmq tcp on loopback.
inline Group zmqGroup(int n, double timeoutSeconds) {
  return networkGroup<zmq::Options>(n, "tcp", timeoutSeconds, 2,
                                    [](const zmq::Options& o, Store& s) { return zmq::makeTransport(o, s); });
}

/// n ranks over the socket transport (`protocol` "tcp" on loopback, or "ipc").
inline Group socketGroup(int n, const char* protocol, double timeoutSeconds) {
  return networkGroup<sock::Options>(n, protocol, timeoutSeconds, 1, [](const sock::Options& o, Store& s) {
    return sock::makeTransport(o, s);
  });
}

}  // namespace gossamer::testing
