// The summary gossamer-train's lowest surviving rank writes (--summary-json,
// and the last line of its output): one JSON object per run.
#include "trainer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <variant>

#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/log.hpp"
#include "train_config.hpp"

namespace gossamer::train {

std::string summaryJson(const TrainSummary& s, const Config& c) {
  const TrainConfig t = trainConfigFrom(c);
  nlohmann::json j;
  j["algorithm"] = s.algorithm;
  j["run_dir"] = s.runDir;
  j["rendezvous"] = s.rendezvous;
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

namespace {

// The survivors a parsed summary names (none if it names none).
std::vector<int> survivorsOf(const nlohmann::json& j) {
  std::vector<int> out;
  if (!j.is_object() || !j.contains("survivors") || !j["survivors"].is_array()) return out;
  for (const auto& r : j["survivors"])
    if (r.is_number_integer()) out.push_back(r.get<int>());
  return out;
}

// `key`'s string in a parsed summary, or "" when it has none.
std::string stringOf(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// An exclusive flock on a directory, held while the object lives, so that
// the writers of files there take turns; waited for at most `seconds`, then
// (or where the file system cannot lock) the writer goes on without it.
class DirectoryTurn {
 public:
  DirectoryTurn(const std::string& dir, double seconds) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if ((err != EWOULDBLOCK && err != EINTR) || std::chrono::steady_clock::now() >= deadline) {
        GOSSAMER_LOG(kWarning, "summary: no turn on '"
                                   << dir << "' (" << (err == EWOULDBLOCK ? "still held" : std::strerror(err))
                                   << "): writing without it");
        ::close(fd_);
        fd_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~DirectoryTurn() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  DirectoryTurn(const DirectoryTurn&) = delete;
  DirectoryTurn& operator=(const DirectoryTurn&) = delete;

 private:
  int fd_ = -1;
};

bool shareARank(const std::vector<int>& a, const std::vector<int>& b) {
  return std::any_of(a.begin(), a.end(), [&](int r) { return std::find(b.begin(), b.end(), r) != b.end(); });
}

}  // namespace

bool summaryOutranks(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return a.size() > b.size();
  if (a.empty()) return false;
  return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
}

std::vector<int> survivorsInSummary(const std::string& path) {
  std::ifstream in(path);
  if (path.empty() || !in) return {};
  return survivorsOf(nlohmann::json::parse(in, nullptr, false));
}

std::vector<int> writeSummaryFile(const std::string& path, const std::string& json,
                                  const TrainSummary& summary) {
  const std::filesystem::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  DirectoryTurn turn(dir, 10.0);
  if (!summary.rendezvous.empty()) {
    std::ifstream in(path);
    const auto held = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    const auto ours = nlohmann::json::parse(json, nullptr, false);
    const std::vector<int> theirs = survivorsOf(held);
    if (stringOf(held, "rendezvous") == stringOf(ours, "rendezvous") &&
        stringOf(held, "run_dir") == stringOf(ours, "run_dir") && !shareARank(theirs, summary.survivors) &&
        summaryOutranks(theirs, summary.survivors))
      return theirs;
  }
  // A name no other writer takes: this process's id and a counter of its own.
  static std::atomic<unsigned> written{0};
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(written++);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw Error("cannot write summary to '" + temporary + "': " + std::strerror(errno));
  const std::string text = json + '\n';
  int writeErr = 0;
  for (std::size_t done = 0; done < text.size() && writeErr == 0;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n == 0 || errno != EINTR)
      writeErr = n == 0 ? EIO : errno;
  }
  if (::close(fd) != 0 || writeErr != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = writeErr != 0 ? writeErr : errno;
    ::unlink(temporary.c_str());
    throw Error("cannot write summary to '" + path + "': " + std::strerror(err));
  }
  return {};
}

}  // namespace gossamer::train
