// Job configurations for the multi-process tests: a small gossamer-train job
// (an MLP on 6,000 Fashion-MNIST images) over a named transport.
#pragma once

#include <string>

#include "dataset.hpp"

namespace gossamer::testing {

/// The `transport:` keys of "zmq", "socket", "inproc", "libfabric-tcp",
/// "libfabric-shm" or "composite" (socket over ipc inside an island, zmq tcp
/// between islands; see islandsOf).
inline std::string transportKeys(const std::string& transport) {
  if (transport.rfind("libfabric-", 0) == 0) return "kind: libfabric\n  provider: " + transport.substr(10);
  if (transport == "composite") return "kind: composite\n  local_scope: island";
  return "kind: " + transport;
}

/// For "composite": a `network:` section with two islands, the even and the
/// odd ranks (so that ranks are renumbered inside an island and gossip
/// crosses between them); for other transports nothing.
inline std::string islandsOf(const std::string& transport, int worldSize) {
  if (transport != "composite") return "";
  std::string s = "network:\n  islands: [";
  for (int parity = 0; parity < 2 && parity < worldSize; ++parity) {
    s += parity ? ", [" : "[";
    for (int r = parity; r < worldSize; r += 2) s += (r > parity ? ", " : "") + std::to_string(r);
    s += "]";
  }
  return s + "]\n";
}

/// A `worldSize`-rank job of `epochs` epochs running `algorithm` (3 segments
/// where it has segments, groups of 2 for hierarchical) with every wait
/// bounded by `timeout` seconds.
inline std::string smallConfig(const std::string& transport, const std::string& algorithm, int worldSize,
                               int epochs, double timeout) {
  // (A key the algorithm does not read is a config error.)
  const bool segmented = algorithm == "crossover_sgd" || algorithm == "hierarchical" || algorithm == "d2" ||
                         algorithm == "gradient_tracking" || algorithm == "quasi_global_momentum";
  return "world_size: " + std::to_string(worldSize) + "\nseed: 7\ntransport:\n  " + transportKeys(transport) +
         "\n  timeout_seconds: " + std::to_string(timeout) +
         "\n  linger_seconds: 1\ntopology:\n  kind: fair_roulette\nalgorithm:\n  name: " + algorithm +
         (segmented ? "\n  segments: 3" : "") + (algorithm == "hierarchical" ? "\n  group_size: 2" : "") +
         "\nmodel:\n  kind: mlp\n  hidden: [32]\ndata:\n  path: " + gossamer::testing::fashionMnistDir() +
         "\n  train_limit: 6000\n  test_limit: 1000\ntraining:\n  epochs: " + std::to_string(epochs) +
         "\n  batch_size: 32\n  learning_rate: 0.01\n  momentum: 0.9\n" + islandsOf(transport, worldSize);
}

}  // namespace gossamer::testing
