// The `collectives:` section: how the synchronous collectives run. Declared
// here with CollectiveOptions' own defaults, read by collectiveOptionsFrom.
#include "collectives/keys.hpp"

#include <climits>
#include <optional>
#include <string>

#include "collectives/table.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/config.hpp"

namespace gossamer {

namespace {

/// collectives.torus_rows must divide world_size.
std::optional<ConfigIssue> torusRowsDivide(const Config& c) {
  const int rows = c.get<int>("collectives.torus_rows");
  if (rows == 0 || c.worldSize() % rows == 0) return std::nullopt;
  return ConfigIssue{"collectives.torus_rows", std::to_string(rows) + " rows do not divide world_size " +
                                                   std::to_string(c.worldSize()) + " (0 chooses a divisor)"};
}

/// collectives.small_message_bytes cannot exceed mid_message_bytes: the
/// size bands of auto (recursive doubling, Rabenseifner, ring) are in order.
std::optional<ConfigIssue> sizeBandsInOrder(const Config& c) {
  const int small = c.get<int>("collectives.small_message_bytes");
  const int mid = c.get<int>("collectives.mid_message_bytes");
  if (small <= mid) return std::nullopt;
  return ConfigIssue{"collectives.small_message_bytes",
                     std::to_string(small) + " exceeds collectives.mid_message_bytes " + std::to_string(mid) +
                         " (auto's size bands: recursive doubling up to small, Rabenseifner up to mid)"};
}

/// "auto" and every allreduce algorithm of the table the dispatch reads.
std::vector<std::string> allreduceChoices() {
  std::vector<std::string> out = {"auto"};
  for (const auto* e : detail::allreduceAlgorithms()) out.emplace_back(e->name);
  return out;
}

}  // namespace

void detail::addCollectiveKeys(ConfigSchema& schema) {
  const CollectiveOptions d;
  const RealRange nonNegative{0.0, true, kUnbounded, false};
  const RealRange unit{0.0, true, 1.0, true};
  schema.addSection("collectives", "How the synchronous collectives run (the Communicator's options).");
  schema.addKeys(
      "collectives",
      KeySet()
          .text("allreduce", toString(d.algorithm), allreduceChoices(),
                "allreduce algorithm; auto picks by size and model")
          .integer("chunk_bytes", static_cast<int>(d.chunkBytes), 1, INT_MAX,
                   "ring pipelining piece, bytes (at most 1 GiB counts: the largest message)")
          .integer("max_message_bytes", static_cast<int>(d.maxMessageBytes), 8, INT_MAX,
                   "the largest message the collectives and a rejoin's model transfer send, bytes (at "
                   "most 1 GiB counts: a transport's largest frame); larger vectors move as several")
          .integer("small_message_bytes", static_cast<int>(d.smallMessageBytes), 0, INT_MAX,
                   "auto without a cost model: recursive doubling up to this size, bytes")
          .integer(
              "mid_message_bytes", static_cast<int>(d.midMessageBytes), 0, INT_MAX,
              "auto without a cost model: Rabenseifner above small_message_bytes up to this size, the ring "
              "above, bytes")
          .integer("group_size", d.groupSize, 0, kMaxWorldSize,
                   "ranks per group of hierarchical and tga2d (0 = about sqrt(N); more than the job's ranks "
                   "makes one group of all of them)")
          .integer("torus_rows", d.torusRows, 0, kMaxWorldSize, "rows of torus2d's grid (0 = about sqrt(N))")
          .boolean("cost_model", d.useCostModel, "auto picks by the alpha-beta-gamma cost model")
          .real("alpha_seconds", d.model.alphaSeconds, unit, "model: per-message latency, seconds")
          .real("beta_seconds_per_byte", d.model.betaSecondsPerByte, unit,
                "model: inverse bandwidth, seconds per byte")
          .real("gamma_seconds_per_byte", d.model.gammaSecondsPerByte, unit,
                "model: reduction cost, seconds per byte")
          .real("contention", d.model.contention, nonNegative,
                "model: cost growth per extra concurrent sender")
          .boolean("calibrate", false,
                   "measure the model when the Agent starts (about a second) and let auto use it")
          .rule(torusRowsDivide)
          .rule(sizeBandsInOrder));
}

CollectiveOptions collectiveOptionsFrom(const Config& c) {
  CollectiveOptions o;
  o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
  o.algorithm = parseAllreduceAlgorithm(c.get<std::string>("collectives.allreduce"));
  o.chunkBytes = static_cast<std::size_t>(c.get<int>("collectives.chunk_bytes"));
  o.maxMessageBytes = static_cast<std::size_t>(c.get<int>("collectives.max_message_bytes"));
  o.smallMessageBytes = static_cast<std::size_t>(c.get<int>("collectives.small_message_bytes"));
  o.midMessageBytes = static_cast<std::size_t>(c.get<int>("collectives.mid_message_bytes"));
  o.groupSize = c.get<int>("collectives.group_size");
  o.torusRows = c.get<int>("collectives.torus_rows");
  // A measured model is there to be used.
  o.useCostModel = c.get<bool>("collectives.cost_model") || c.get<bool>("collectives.calibrate");
  o.model.alphaSeconds = c.get<double>("collectives.alpha_seconds");
  o.model.betaSecondsPerByte = c.get<double>("collectives.beta_seconds_per_byte");
  o.model.gammaSecondsPerByte = c.get<double>("collectives.gamma_seconds_per_byte");
  o.model.contention = c.get<double>("collectives.contention");
  return o;
}

}  // namespace gossamer
