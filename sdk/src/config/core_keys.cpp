// The SDK's own configuration keys: the top level, the network settings every
// transport shares, the four component selectors and `run:`. The
// collectives' keys are declared by the collectives (collectives/keys.cpp),
// `checkpoint:` by the Session (elastic/checkpoints.cpp), `network:` and
// `security:` by their own files; every key is read with Config::get like a
// component's.
#include <string>

#include "collectives/keys.hpp"
#include "elastic/checkpoint_settings.hpp"
#include "gossamer/config.hpp"
#include "gossamer/defaults.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::detail {

namespace {

void addTransportKeys(ConfigSchema& schema) {
  const RealRange nonNegative{0.0, true, kUnbounded, false};
  schema.addSelector("transport", "kind", "the transport every peer uses");
  schema.addSection("transport", "How peers reach each other.");
  schema.addKeys("transport", KeySet()
                                  .text("host", defaults::kHost, {},
                                        "address the transport binds to (ports are ephemeral); auto: this "
                                        "host's address on the interface that reaches the tcp rendezvous "
                                        "(127.0.0.1 with a directory)")
                                  .perRank()
                                  .text("protocol", defaults::kProtocol, {"tcp", "ipc"},
                                        "endpoint protocol of the zmq and socket transports")
                                  .real("timeout_seconds", defaults::kTimeoutSeconds,
                                        {0.0, false, 86400.0, true}, "bound on every network wait, seconds")
                                  .real("linger_seconds", defaults::kLingerSeconds, nonNegative,
                                        "on close: how long queued sends may still be delivered, seconds"));
}

void addSelectors(ConfigSchema& schema) {
  schema.addSelector("topology", "kind", "the gossip topology: who talks to whom at each step");
  schema.addSection("topology", "The communication graph of the gossip optimizers.");
  schema.addSelector("algorithm", "name", "the distributed optimizer");
  schema.addSection("algorithm", "The training algorithm.");
  schema.addSelector("compression", "kind",
                     "the compressor wrapped around the optimizer ('none': no compression)");
  schema.addSection("compression", "Compressed exchanges.");
}

void addRunKeys(ConfigSchema& schema) {
  schema.addSection("run", "What a run records and reports while it goes (docs/metrics.md).");
  schema.addKeys(
      "run", KeySet()
                 .text("dir", "auto", {},
                       "run directory for each rank's metrics (rank-R.jsonl) and the summary; auto: "
                       "results/runs/<UTC time>-<pid> below rank 0's working directory, shared with every "
                       "rank through the rendezvous; empty: no files")
                 .perRank()
                 .boolean("metrics", true, "record per-step metrics (files and Agent callbacks)")
                 .perRank()
                 .integer("metrics_every", 1, 1, 1000000, "steps per step record (each sums its steps)")
                 .perRank()
                 .real("stall_seconds", 10.0, {0.0, true, 86400.0, true},
                       "warn when this rank has waited this long on the same peer and operation (which "
                       "rank, which operation and step, since when, when that peer's last message came), "
                       "seconds; 0: off (read by the `run` transport service)")
                 .perRank());
}

}  // namespace

void addCoreKeys(ConfigSchema& schema) {
  schema.addKeys("", KeySet()
                         .integer("world_size", 4, 1, kMaxWorldSize, "number of peers")
                         .uint64("seed", 42, "shared seed: initial model, shards, topology"));
  addTransportKeys(schema);
  addSelectors(schema);
  addCollectiveKeys(schema);
  addRunKeys(schema);
  addCheckpointKeys(schema);
  addSecurityKeys(schema);
  addNetworkKeys(schema);
}

}  // namespace gossamer::detail
