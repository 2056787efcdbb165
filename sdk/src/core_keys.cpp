// The SDK's own configuration keys: the top level, the network settings every
// transport shares, the four component selectors and the collectives'
// options. They are stored in Config's typed members (bound here); every
// other key is declared by the component that reads it.
#include <climits>
#include <string>

#include "collectives/table.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"
#include "gossamer/network.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/security.hpp"

namespace gossamer::detail {

namespace {

/// Binds `section.key` to the typed member `ref` returns.
template <typename T, typename Ref>
void bindMember(ConfigSchema& schema, const std::string& section, const std::string& key, Ref ref) {
  schema.bind(
      section, key,
      // Reading only: the accessor takes a mutable Config to serve both ways.
      [ref](const Config& c) { return ConfigValue(T(ref(const_cast<Config&>(c)))); },
      [ref](Config& c, const ConfigValue& v) { ref(c) = std::get<T>(v); });
}

/// collectives.torus_rows must divide world_size.
std::optional<ConfigIssue> torusRowsDivide(const Config& c) {
  const int rows = c.collectives.torusRows;
  if (rows == 0 || c.worldSize % rows == 0) return std::nullopt;
  return ConfigIssue{"collectives.torus_rows", std::to_string(rows) + " rows do not divide world_size " +
                                                   std::to_string(c.worldSize) + " (0 chooses a divisor)"};
}

/// "auto" and every allreduce algorithm of the table the dispatch reads.
std::vector<std::string> allreduceChoices() {
  std::vector<std::string> out = {"auto"};
  for (const auto* e : detail::allreduceAlgorithms()) out.emplace_back(e->name);
  return out;
}

}  // namespace

void addCoreKeys(ConfigSchema& schema) {
  const Config d;  // The typed members' initialisers are the defaults.
  const RealRange nonNegative{0.0, true, kUnbounded, false};

  schema.addKeys("", KeySet()
                         .integer("world_size", d.worldSize, 1, kMaxWorldSize, "number of peers")
                         .uint64("seed", d.seed, "shared seed: initial model, shards, topology"));
  bindMember<int>(schema, "", "world_size", [](Config& c) -> int& { return c.worldSize; });
  bindMember<std::uint64_t>(schema, "", "seed", [](Config& c) -> std::uint64_t& { return c.seed; });

  schema.addSelector("transport", "kind", "the transport every peer uses");
  schema.addSection("transport", "How peers reach each other.");
  schema.addKeys("transport", KeySet()
                                  .text("host", d.transport.host, {},
                                        "address the transport binds to (ports are ephemeral); auto: this "
                                        "host's address on the interface that reaches the tcp rendezvous "
                                        "(127.0.0.1 with a directory)")
                                  .text("protocol", d.transport.protocol, {"tcp", "ipc"},
                                        "endpoint protocol of the zmq and socket transports")
                                  .real("timeout_seconds", d.transport.timeoutSeconds,
                                        {0.0, false, 86400.0, true}, "bound on every network wait, seconds")
                                  .real("linger_seconds", d.transport.lingerSeconds, nonNegative,
                                        "on close: how long queued sends may still be delivered, seconds"));
  bindMember<std::string>(schema, "transport", "kind",
                          [](Config& c) -> std::string& { return c.transport.kind; });
  bindMember<std::string>(schema, "transport", "host",
                          [](Config& c) -> std::string& { return c.transport.host; });
  bindMember<std::string>(schema, "transport", "protocol",
                          [](Config& c) -> std::string& { return c.transport.protocol; });
  bindMember<double>(schema, "transport", "timeout_seconds",
                     [](Config& c) -> double& { return c.transport.timeoutSeconds; });
  bindMember<double>(schema, "transport", "linger_seconds",
                     [](Config& c) -> double& { return c.transport.lingerSeconds; });

  schema.addSelector("topology", "kind", "the gossip topology: who talks to whom at each step");
  schema.addSection("topology", "The communication graph of the gossip optimizers.");
  bindMember<std::string>(schema, "topology", "kind",
                          [](Config& c) -> std::string& { return c.topology.kind; });

  schema.addSelector("algorithm", "name", "the distributed optimizer");
  schema.addSection("algorithm", "The training algorithm.");
  bindMember<std::string>(schema, "algorithm", "name",
                          [](Config& c) -> std::string& { return c.algorithm.name; });

  schema.addSelector("compression", "kind",
                     "the compressor wrapped around the optimizer ('none': no compression)");
  schema.addSection("compression", "Compressed exchanges.");
  bindMember<std::string>(schema, "compression", "kind",
                          [](Config& c) -> std::string& { return c.compression.kind; });

  const CollectivesConfig& cc = d.collectives;
  schema.addSection("collectives", "How the synchronous collectives run (the Communicator's options).");
  schema.addKeys(
      "collectives",
      KeySet()
          .text("allreduce", cc.allreduce, allreduceChoices(),
                "allreduce algorithm; auto picks by size and model")
          .integer("chunk_bytes", cc.chunkBytes, 1, INT_MAX, "ring pipelining piece, bytes")
          .integer("small_message_bytes", cc.smallMessageBytes, 0, INT_MAX,
                   "auto without a cost model: recursive doubling up to this size, bytes")
          .integer("group_size", cc.groupSize, 0, kMaxWorldSize,
                   "ranks per group of hierarchical and tga2d (0 = about sqrt(N))")
          .integer("torus_rows", cc.torusRows, 0, kMaxWorldSize, "rows of torus2d's grid (0 = about sqrt(N))")
          .boolean("cost_model", cc.costModel, "auto picks by the alpha-beta-gamma cost model")
          .real("alpha_seconds", cc.alphaSeconds, {0.0, true, 1.0, true},
                "model: per-message latency, seconds")
          .real("beta_seconds_per_byte", cc.betaSecondsPerByte, {0.0, true, 1.0, true},
                "model: inverse bandwidth, seconds per byte")
          .real("gamma_seconds_per_byte", cc.gammaSecondsPerByte, {0.0, true, 1.0, true},
                "model: reduction cost, seconds per byte")
          .real("contention", cc.contention, nonNegative, "model: cost growth per extra concurrent sender")
          .boolean("calibrate", cc.calibrate, "measure the model when the Agent starts (about a second)")
          .rule(torusRowsDivide));
  bindMember<std::string>(schema, "collectives", "allreduce",
                          [](Config& c) -> std::string& { return c.collectives.allreduce; });
  bindMember<int>(schema, "collectives", "chunk_bytes",
                  [](Config& c) -> int& { return c.collectives.chunkBytes; });
  bindMember<int>(schema, "collectives", "small_message_bytes",
                  [](Config& c) -> int& { return c.collectives.smallMessageBytes; });
  bindMember<int>(schema, "collectives", "group_size",
                  [](Config& c) -> int& { return c.collectives.groupSize; });
  bindMember<int>(schema, "collectives", "torus_rows",
                  [](Config& c) -> int& { return c.collectives.torusRows; });
  bindMember<bool>(schema, "collectives", "cost_model",
                   [](Config& c) -> bool& { return c.collectives.costModel; });
  bindMember<double>(schema, "collectives", "alpha_seconds",
                     [](Config& c) -> double& { return c.collectives.alphaSeconds; });
  bindMember<double>(schema, "collectives", "beta_seconds_per_byte",
                     [](Config& c) -> double& { return c.collectives.betaSecondsPerByte; });
  bindMember<double>(schema, "collectives", "gamma_seconds_per_byte",
                     [](Config& c) -> double& { return c.collectives.gammaSecondsPerByte; });
  bindMember<double>(schema, "collectives", "contention",
                     [](Config& c) -> double& { return c.collectives.contention; });
  bindMember<bool>(schema, "collectives", "calibrate",
                   [](Config& c) -> bool& { return c.collectives.calibrate; });

  schema.addSection("run", "What a run records and reports while it goes (docs/metrics.md).");
  schema.addKeys(
      "run", KeySet()
                 .text("dir", "auto", {},
                       "run directory for each rank's metrics (rank-R.jsonl) and the summary; auto: "
                       "results/runs/<UTC time>-<pid> below rank 0's working directory, shared with every "
                       "rank through the rendezvous; empty: no files")
                 .boolean("metrics", true, "record per-step metrics (files and Agent callbacks)")
                 .integer("metrics_every", 1, 1, 1000000, "steps per step record (each sums its steps)"));

  addSecurityKeys(schema);
  addNetworkKeys(schema);
}

}  // namespace gossamer::detail
