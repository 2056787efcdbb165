// The summary the lowest rank of gossamer-train's final view writes
// (--summary-json, <run_dir>/summary.json; apps/common/summary_file.hpp keeps
// the larger side's of a job split for good): one JSON object per run.
#include "trainer.hpp"

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "gossamer/kit/wire.hpp"
#include "train_config.hpp"

namespace gossamer::train {

std::string summaryJson(const TrainSummary& s, const Config& c) {
  const TrainConfig t = trainConfigFrom(c);
  nlohmann::json j;
  j["algorithm"] = s.algorithm;
  j["run_dir"] = s.runDir;
  j["job"] = s.job;
  j["world_size"] = s.worldSize;
  j["epochs"] = s.epochs;
  j["test_accuracy"] = s.testAccuracy;
  j["test_accuracy_rank0"] = s.testAccuracyRank0;
  j["consensus_distance"] = s.consensusDistance;
  j["bytes_sent_per_peer"] = s.bytesSentPerPeer;
  j["wall_seconds"] = s.wallSeconds;
  j["steps_per_epoch"] = s.stepsPerEpoch;
  const double totalSteps = static_cast<double>(s.stepsPerEpoch) * s.epochs;
  j["bytes_per_step"] = s.bytesSentPerPeer / totalSteps;
  j["messages_per_step"] = s.messagesSentPerPeer / totalSteps;
  // On the wire: the payload plus one frame header per message.
  j["wire_bytes_per_step"] =
      (s.bytesSentPerPeer + static_cast<double>(kFrameHeaderBytes) * s.messagesSentPerPeer) / totalSteps;
  double secs = 0;
  for (const auto& m : s.history) secs += m.seconds;
  j["seconds_per_epoch"] = s.history.empty() ? 0.0 : secs / static_cast<double>(s.history.size());
  j["steps_per_second"] = s.stepsPerSecond;
  j["steps_per_second_by_rank"] = s.stepsPerSecondByRank;
  j["push_sum_weight_min"] = s.pushSumWeightMin;
  j["push_sum_weight_max"] = s.pushSumWeightMax;
  j["mode"] = c.getOr<std::string>("algorithm.mode", "sync");
  j["segments"] = c.getOr("algorithm.segments", 1);
  j["straggler_rank"] = t.training.stragglerRank;
  j["straggler_delay_seconds"] = t.training.stragglerDelaySeconds;
  j["transport"] = c.get<std::string>("transport.kind");
  j["topology"] = c.get<std::string>("topology.kind");
  j["model"] = t.model.kind;
  j["partition"] = t.data.partition;
  j["batch_size"] = t.training.batchSize;
  j["learning_rate"] = t.training.learningRate;
  j["compression"] = c.get<std::string>("compression.kind");
  if (c.get<std::string>("compression.kind") != "none") {
    // Every key the compressors declare, as configured.
    const std::string prefix = "compression.";
    nlohmann::json settings = nlohmann::json::object();
    for (const auto& entry : c.values) {  // (not a structured binding: clang 14 cannot capture one)
      if (entry.first.rfind(prefix, 0) != 0) continue;
      const std::string name = entry.first.substr(prefix.size());
      std::visit([&](const auto& v) { settings[name] = v; }, entry.second);
    }
    j["compression_settings"] = settings;
  }
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& m : s.history)
    hist.push_back({{"epoch", m.epoch},
                    {"train_loss", m.trainLoss},
                    {"test_accuracy", m.testAccuracyAverage},
                    {"test_accuracy_rank0", m.testAccuracyRank0},
                    {"consensus_distance", m.consensusDistance},
                    {"bytes_sent_per_peer", m.bytesSentPerPeer},
                    {"seconds", m.seconds},
                    {"survivors", m.survivors}});
  j["history"] = hist;
  j["survivors"] = s.survivors;
  j["resumed_from_step"] = s.resumedFromStep;
  j["stopped_at_epoch"] = s.stoppedAtEpoch;
  j["rejoined_at_step"] = s.rejoinedAtStep;
  j["model_crc32c_by_rank"] = s.modelCrcByRank;
  // The writing rank's own transport counters.
  const auto& ts = s.transportStats;
  nlohmann::json rejected = nlohmann::json::object();
  for (std::size_t k = 0; k < kFrameFaultCount; ++k) rejected[toString(FrameFault(k))] = ts.rejectedFrames[k];
  j["transport_stats"] = {
      {"bytes_sent", ts.bytesSent},           {"bytes_received", ts.bytesReceived},
      {"messages_sent", ts.messagesSent},     {"messages_received", ts.messagesReceived},
      {"messages_pulled", ts.messagesPulled}, {"refused_connections", ts.refusedConnections},
      {"rejected_frames", rejected}};
  nlohmann::json lost = nlohmann::json::array();
  for (const auto& l : s.lost)
    lost.push_back({{"rank", l.rank},
                    {"step", l.step},
                    {"agreement_seconds", l.agreementSeconds},
                    {"steps_skipped", l.stepsSkipped},
                    {"resumed_at_unix_seconds", l.resumedAtUnixSeconds}});
  j["lost"] = lost;
  nlohmann::json joined = nlohmann::json::array();
  for (const auto& l : s.joined)
    joined.push_back(
        {{"rank", l.rank}, {"step", l.step}, {"installed_at_unix_seconds", l.installedAtUnixSeconds}});
  j["joined"] = joined;
  // A path (run_dir) is bytes, JSON text UTF-8: bytes that are not UTF-8
  // become U+FFFD rather than fail the finished run.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gossamer::train
