// Per-rank training loop of gossamer-train.
#include "trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "gossamer/agent.hpp"
#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/log.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "model.hpp"
#include "train_config.hpp"

namespace gossamer::train {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Model makeModel(const ModelConfig& m, int inputs, int classes) {
  if (m.kind == "softmax") return Model::softmax(inputs, classes);
  return Model::mlp(inputs, m.hidden, classes);
}

// Serves this rank's mini-batches: its shard, reshuffled at every pass.
class BatchSampler {
 public:
  BatchSampler(std::vector<int> shard, std::uint64_t seed) : shard_(std::move(shard)), rng_(seed) {
    GOSSAMER_ENFORCE(!shard_.empty(), "empty shard");
    std::shuffle(shard_.begin(), shard_.end(), rng_);
  }
  void next(const Dataset& d, int batch, RowMatrix& x, std::vector<std::uint8_t>& y) {
    x.resize(batch, d.images.cols());
    y.resize(static_cast<std::size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      if (pos_ == shard_.size()) {
        pos_ = 0;
        std::shuffle(shard_.begin(), shard_.end(), rng_);
      }
      const int idx = shard_[pos_++];
      x.row(b) = d.images.row(idx);
      y[static_cast<std::size_t>(b)] = d.labels[static_cast<std::size_t>(idx)];
    }
  }
  // The shard's order, the position in it and the generator's state.
  void save(Checkpoint& c) const {
    c.putArray<int>("sampler.shard", shard_);
    c.putValue<std::uint64_t>("sampler.position", pos_);
    std::ostringstream rng;
    rng << rng_;
    const std::string text = rng.str();
    c.put("sampler.rng", std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  void load(const Checkpoint& c) {
    auto shard = c.getArray<int>("sampler.shard");
    GOSSAMER_ENFORCE(shard.size() == shard_.size(),
                     "checkpoint shard of " << shard.size() << " samples, this rank's has " << shard_.size());
    shard_ = std::move(shard);
    pos_ = c.getValue<std::uint64_t>("sampler.position");
    GOSSAMER_ENFORCE(pos_ <= shard_.size(), "checkpoint sampler position " << pos_);
    const auto& b = c.get("sampler.rng");
    std::istringstream rng(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
    rng >> rng_;
    GOSSAMER_ENFORCE(!rng.fail(), "checkpoint sampler state is malformed");
  }

 private:
  std::vector<int> shard_;
  std::mt19937_64 rng_;
  std::size_t pos_ = 0;
};

// The training loop itself, the part to copy into a program of one's own:
// each step draws a mini-batch from this rank's shard, computes the local
// gradient, and hands it to the distributed optimizer, which exchanges with
// the peers (gossip or allreduce, as configured) and updates `params` in
// place. Returns the epoch's mean training loss. `afterGradient` (may be
// empty) runs between the gradient and the step.
// Steps until the optimizer has taken `endStep` steps in all (its steps()
// drive the loop: a rank that rejoins a job jumps to the others' step).
// `afterStep(step, lossSum)` runs after each step. Returns the loss summed
// over this call's steps, added to `lossSum`. Call optimizer.flush(params)
// before evaluating or saving the model.
double trainEpoch(Model& model, DistributedOptimizer& optimizer, std::span<float> params,
                  std::span<float> grads, BatchSampler& sampler, const Dataset& train, int batch,
                  std::uint64_t endStep, const std::function<void()>& afterGradient, double lossSum = 0,
                  const std::function<void(std::uint64_t, double)>& afterStep = {}) {
  RowMatrix x;
  std::vector<std::uint8_t> y;
  while (optimizer.steps() < endStep) {
    sampler.next(train, batch, x, y);
    lossSum += model.lossAndGradient(params, x, y.data(), grads);
    if (afterGradient) afterGradient();
    const std::uint64_t before = optimizer.steps();
    optimizer.step(params, grads);
    // A step that did not count one: a view change moved this rank (it
    // rejoined and jumped to the others' step, maybe in another epoch, or it
    // goes back to the evaluation of the step it had completed). The caller
    // realigns its epochs.
    if (optimizer.steps() != before + 1) break;
    if (afterStep) afterStep(optimizer.steps(), lossSum);
  }
  return lossSum;
}

// The error record's `error` field: the library's exception type.
std::string errorKind(const std::exception& e) {
  if (dynamic_cast<const Expelled*>(&e)) return "Expelled";
  if (dynamic_cast<const PeerFailure*>(&e)) return "PeerFailure";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const ProtocolError*>(&e)) return "ProtocolError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const DataError*>(&e)) return "DataError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

std::string checkpointPath(const std::string& dir, int rank, std::uint64_t step) {
  return dir + "/rank-" + std::to_string(rank) + "-step-" + std::to_string(step) + ".ckpt";
}

// The steps this rank has checkpoints for in `dir`, ascending.
std::vector<std::uint64_t> checkpointSteps(const std::string& dir, int rank) {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  const std::regex name("rank-" + std::to_string(rank) + "-step-([0-9]+)\\.ckpt");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name)) out.push_back(std::stoull(m[1].str()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// The harness around trainEpoch: data shards, the Agent, per-epoch
// evaluation (loss, bytes, the average model's accuracy, consensus distance)
// and the run's summary.
TrainSummary runRank(const Config& config, int rank, const FashionMnist& data, Store& store,
                     const Registry& registry, const std::function<void(const EpochMetrics&)>& onEpoch,
                     const std::function<void(const StepProgress&)>& onStep) {
  const auto start = Clock::now();
  const TrainConfig t = trainConfigFrom(config);
  const int n = config.worldSize();
  const int batch = t.training.batchSize;
  const int stepsPerEpoch = data.train.size() / (n * batch);
  if (stepsPerEpoch < 1)
    throw ConfigError(config.sourceFile, 0, "training.batch_size",
                      "the training set (" + std::to_string(data.train.size()) +
                          " samples) is smaller than "
                          "world_size * batch_size = " +
                          std::to_string(n * batch));

  auto shards = partitionIndices(data.train.labels, data.train.numClasses, n, t.data.partition,
                                 t.data.dirichletAlpha, config.seed());
  BatchSampler sampler(
      std::move(shards[static_cast<std::size_t>(rank)]),
      topologies::splitmix64(config.seed() ^ (0x5EEDull << 32) ^ static_cast<std::uint64_t>(rank)));
  Model model = makeModel(t.model, static_cast<int>(data.train.images.cols()), data.train.numClasses);
  std::vector<float> params(model.numParams()), grads(model.numParams()), average(model.numParams());
  model.init(params, config.seed());  // same seed on every rank: identical starting models

  Agent agent(config, rank, store, registry);
  try {
    auto& optimizer = agent.makeOptimizer(model.tensorSizes());
    // A2SGD synchronises the models after the last step (paper 002, Algorithm 1, lines 9-10).
    optimizer.setTotalSteps(static_cast<std::uint64_t>(stepsPerEpoch) *
                            static_cast<std::uint64_t>(t.training.epochs));
    TrainSummary summary;
    summary.algorithm = config.get<std::string>("algorithm.name");
    summary.worldSize = n;
    summary.epochs = t.training.epochs;
    summary.stepsPerEpoch = stepsPerEpoch;
    double trainBytes = 0, trainMessages = 0, trainSeconds = 0;
    std::function<void()> emulateStraggler;
    if (rank == t.training.stragglerRank) {
      const auto delay = std::chrono::duration<double>(t.training.stragglerDelaySeconds);
      emulateStraggler = [delay] { std::this_thread::sleep_for(delay); };
    }
    // Checkpoints: every rank saves at the same steps; a resumed run starts
    // from the newest step every rank has (a rank killed while writing has
    // its previous one, so the ranks keep the last two).
    const auto& ck = t.checkpoint;
    std::uint64_t startStep = 0;
    double startLossSum = 0;
    // A process that replaces a failed rank of a running job (gossamer-train
    // --rejoin) takes its own newest checkpoint: the others are not resuming.
    const bool restarted = agent.hasMembership() && config.get<bool>("membership.restarted");
    if (ck.resume || restarted) {
      const auto mine = checkpointSteps(ck.dir, rank);
      double newest = mine.empty() ? 1.0 : -static_cast<double>(mine.back());  // max of -x: the min of x
      if (!restarted) agent.communicator().allreduce(std::span<double>(&newest, 1), ReduceOp::kMax);
      if (newest <= 0) {
        const auto step = static_cast<std::uint64_t>(-newest);
        GOSSAMER_ENFORCE(std::find(mine.begin(), mine.end(), step) != mine.end(),
                         "rank " << rank << " has no checkpoint of step " << step << " in " << ck.dir
                                 << ", the newest every rank has");
        const Checkpoint c = Checkpoint::load(checkpointPath(ck.dir, rank, step));
        GOSSAMER_ENFORCE(
            c.getValue<std::int32_t>("world_size") == n && c.getValue<std::uint64_t>("seed") == config.seed(),
            "checkpoint of step " << step << " was written by a job of another world size or seed");
        auto saved = c.getArray<float>("model");
        GOSSAMER_ENFORCE(saved.size() == params.size(), "checkpoint model of "
                                                            << saved.size() << " parameters, this model has "
                                                            << params.size());
        std::copy(saved.begin(), saved.end(), params.begin());
        sampler.load(c);
        optimizer.loadState(c, "optimizer.");
        startStep = step;
        startLossSum = c.getValue<double>("epoch_loss_sum");
        summary.resumedFromStep = static_cast<std::int64_t>(step);
        if (restarted)
          GOSSAMER_LOG(kWarning, "rank " << rank << " restarts from its checkpoint of step " << step
                                         << " and asks the running job to take it back");
      }
    }
    const std::uint64_t totalSteps = static_cast<std::uint64_t>(stepsPerEpoch) * t.training.epochs;
    auto saveCheckpoint = [&](std::uint64_t step, double lossSum) {
      optimizer.flush(params);  // a consistent cut: nothing in flight
      Checkpoint c;
      c.putArray<float>("model", params);
      c.putValue<std::uint64_t>("step", step);
      c.putValue<std::int32_t>("world_size", n);
      c.putValue<std::uint64_t>("seed", config.seed());
      c.putValue<double>("epoch_loss_sum", lossSum);
      const auto members = agent.view().members;
      c.putArray<int>("view", members);
      sampler.save(c);
      optimizer.saveState(c, "optimizer.");
      std::filesystem::create_directories(ck.dir);
      c.save(checkpointPath(ck.dir, rank, step));
      // Keep the last two.
      const auto have = checkpointSteps(ck.dir, rank);
      for (std::size_t i = 0; i + 2 < have.size(); ++i)
        std::filesystem::remove(checkpointPath(ck.dir, rank, have[i]));
    };
    // The epochs, driven by the optimizer's step count. A rank that rejoins
    // after being removed (it was stopped) jumps to the survivors' step and
    // skips the epochs (and their evaluations) they are past.
    const std::uint64_t spe = static_cast<std::uint64_t>(stepsPerEpoch);
    int evaluated = static_cast<int>(startStep / spe);  // epochs whose evaluation is behind this rank
    std::size_t changesSeen = agent.viewChanges().size();
    // After the view changes since the last call, the epochs whose
    // evaluation is behind every member of the view: each change puts this
    // rank at the survivors' step s = c.resumeStep (a rank that rejoined
    // jumped there; in lockstep algorithms the others are there or skip to
    // it), and the survivors are past every epoch that ended by s, except
    // one that ends at s if one of them still had its evaluation to run
    // (c.evaluating): then every member runs it, also one that had
    // completed it. Returns whether `evaluated` changed or this rank rejoined.
    auto realign = [&] {
      const int was = evaluated;
      bool rejoined = false;
      const auto& changes = agent.viewChanges();
      for (; changesSeen < changes.size(); ++changesSeen) {
        const auto& c = changes[changesSeen];
        const bool joined = std::find(c.joined.begin(), c.joined.end(), rank) != c.joined.end();
        if (!joined && !optimizer.lockstep()) continue;  // async: each rank keeps its own step
        const std::uint64_t s = c.resumeStep;
        int done = static_cast<int>(s / spe);
        if (c.evaluating && s % spe == 0 && done > 0) --done;
        evaluated = done;  // also back, if this side of a partition was ahead
        if (joined) {
          rejoined = true;
          summary.rejoinedAtStep.push_back(s);
        }
      }
      return rejoined || evaluated != was;
    };
    // Between the last step of an epoch and the end of its evaluation (the
    // flush included), a view change must know: a rank that rejoins at that
    // step evaluates with the others, one inside the next step does not.
    agent.setCollectivePending([&] {
      return evaluated < t.training.epochs &&
             optimizer.steps() >= spe * static_cast<std::uint64_t>(evaluated + 1);
    });
    double lossSum = startLossSum;
    // The range of this rank's push-sum weight after its steps.
    double weightLow = optimizer.pushSumWeight(), weightHigh = weightLow;
    // The job's closing collectives, run with the last epoch's evaluation (one
    // collective at the last step, so that a view change during it has every
    // member run the same one again): the training throughput of every rank
    // (steps per second, evaluation excluded), the push-sum weights' range
    // over every rank and step (-low: one max), and each survivor's final
    // model as its CRC-32C (a resumed run must match an uninterrupted one).
    std::vector<double> rates(static_cast<std::size_t>(n), 0.0), crcs(static_cast<std::size_t>(n), -1.0);
    double range[2] = {-weightLow, weightHigh};
    auto closing = [&] {
      std::fill(rates.begin(), rates.end(), 0.0);
      rates[static_cast<std::size_t>(rank)] = stepsPerEpoch * t.training.epochs / trainSeconds;
      agent.communicator().allreduce(std::span<double>(rates));
      range[0] = -weightLow;
      range[1] = weightHigh;
      agent.communicator().allreduce(std::span<double>(range, 2), ReduceOp::kMax);
      std::fill(crcs.begin(), crcs.end(), -1.0);
      crcs[static_cast<std::size_t>(rank)] = crc32c(std::as_bytes(std::span<const float>(params)));
      agent.communicator().allreduce(std::span<double>(crcs), ReduceOp::kMax);
    };
    bool closed = false;  // the last epoch's evaluation ran them
    // The mean training loss of the last epoch this rank evaluated, for an
    // evaluation it runs again without training (sent back to it).
    int lossEpoch = 0;
    double epochLoss = 0;
    while (evaluated < t.training.epochs) {
      const int epoch = evaluated + 1;
      const auto epochStart = Clock::now();
      const std::uint64_t firstStep = optimizer.steps();
      const auto before = agent.transport().stats();
      double notedSum = lossSum;  // the loss of each step goes to the step records
      const auto afterStep = [&](std::uint64_t step, double sum) {
        agent.metrics().note("loss", sum - notedSum);
        notedSum = sum;
        if (onStep) {
          const std::uint64_t inEpoch = step - spe * static_cast<std::uint64_t>(epoch - 1);
          onStep(StepProgress{step, spe, epoch, t.training.epochs,
                              inEpoch > 0 ? sum / static_cast<double>(inEpoch) : 0.0});
        }
        weightLow = std::min(weightLow, optimizer.pushSumWeight());
        weightHigh = std::max(weightHigh, optimizer.pushSumWeight());
        if (ck.everySteps > 0 && step % static_cast<std::uint64_t>(ck.everySteps) == 0 && step < totalSteps)
          saveCheckpoint(step, sum);
      };
      lossSum = trainEpoch(model, optimizer, params, grads, sampler, data.train, batch, spe * epoch,
                           emulateStraggler, lossSum, afterStep);
      trainSeconds += since(epochStart);  // (steps only: the flush waits for the slowest rank)
      // Completes exchanges still in flight (overlap); async modes agree on the push-sum average.
      optimizer.flush(params);
      const auto after = agent.transport().stats();
      trainBytes += static_cast<double>(after.bytesSent - before.bytesSent);
      trainMessages += static_cast<double>(after.messagesSent - before.messagesSent);
      if (realign()) {
        lossSum = 0;
        continue;
      }
      double loss = lossSum / static_cast<double>(spe);
      if (optimizer.steps() == firstStep && lossEpoch == epoch) loss = epochLoss;
      lossEpoch = epoch;
      epochLoss = loss;

      // Evaluation collectives: [loss sum, training bytes, messages], then the
      // average model; over the survivors, when peers were lost (survive()
      // redoes them after a view change).
      double sums[3] = {};
      double dist = 0;
      const bool completed = agent.survive([&] {
        sums[0] = loss;
        sums[1] = trainBytes;
        sums[2] = trainMessages;
        agent.communicator().allreduce(std::span<double>(sums, 3), ReduceOp::kAverage);
        std::copy(params.begin(), params.end(), average.begin());
        agent.average(average);
        dist = 0;
        for (std::size_t i = 0; i < params.size(); ++i) {
          const double d = static_cast<double>(average[i]) - static_cast<double>(params[i]);
          dist += d * d;
        }
        agent.communicator().allreduce(std::span<double>(&dist, 1), ReduceOp::kAverage);
        if (epoch == t.training.epochs) closing();
      });
      closed = false;
      if (!completed || realign()) {
        lossSum = 0;
        continue;
      }
      closed = epoch == t.training.epochs;
      lossSum = 0;
      evaluated = epoch;
      const bool evaluator = agent.communicator().rank() == 0;  // the lowest rank alive

      EpochMetrics m;
      m.epoch = epoch;
      m.trainLoss = sums[0];
      m.bytesSentPerPeer = sums[1];
      m.messagesSentPerPeer = sums[2];
      m.consensusDistance = dist;
      m.testAccuracyAverage = m.testAccuracyRank0 = std::numeric_limits<double>::quiet_NaN();
      m.survivors = agent.communicator().worldSize();
      if (evaluator) {
        m.testAccuracyRank0 = model.accuracy(params, data.test);
        m.testAccuracyAverage = model.accuracy(average, data.test);
      }
      m.seconds = since(epochStart);
      // A rank that went back to the survivors' step (a healed partition) redoes epochs.
      while (!summary.history.empty() && summary.history.back().epoch >= epoch) summary.history.pop_back();
      summary.history.push_back(m);
      if (evaluator) {
        agent.metrics().emit("epoch", optimizer.steps(),
                             {{"epoch", std::int64_t{epoch}},
                              {"loss", m.trainLoss},
                              {"test_accuracy", m.testAccuracyAverage},
                              {"test_accuracy_rank0", m.testAccuracyRank0},
                              {"consensus_distance", m.consensusDistance},
                              {"seconds", m.seconds},
                              {"bytes_sent_per_peer", m.bytesSentPerPeer},
                              {"survivors", std::int64_t{m.survivors}}});
        if (onEpoch) onEpoch(m);
      }
    }
    agent.setCollectivePending({});
    if (!closed) agent.survive(closing);
    summary.stepsPerSecondByRank = rates;
    summary.pushSumWeightMin = -range[0];
    summary.pushSumWeightMax = range[1];
    double sumFast = 0;
    int fast = 0;
    const auto alive = agent.view().members;
    for (int r : alive)
      if (r != t.training.stragglerRank) {
        sumFast += rates[static_cast<std::size_t>(r)];
        ++fast;
      }
    summary.stepsPerSecond = fast ? sumFast / fast : 0;
    const auto& last = summary.history.back();
    summary.testAccuracy = last.testAccuracyAverage;
    summary.testAccuracyRank0 = last.testAccuracyRank0;
    summary.consensusDistance = last.consensusDistance;
    summary.bytesSentPerPeer = last.bytesSentPerPeer;
    summary.messagesSentPerPeer = last.messagesSentPerPeer;
    summary.wallSeconds = since(start);
    summary.modelCrcByRank = crcs;
    summary.transportStats = agent.transport().stats();
    summary.writer = agent.communicator().rank() == 0;
    summary.survivors = alive;
    for (const auto& change : agent.viewChanges()) {
      for (int p : change.lost)
        summary.lost.push_back({p, change.resumeStep, change.seconds, change.resumeStep - change.fewestSteps,
                                change.installedAtUnixSeconds});
      for (int p : change.joined)
        summary.joined.push_back({p, change.resumeStep, change.installedAtUnixSeconds});
    }
    summary.runDir = agent.metrics().dir();
    agent.close();
    return summary;
  } catch (const std::exception& e) {
    std::uint64_t steps = 0;
    try {
      steps = agent.optimizer().steps();
    } catch (const InvalidArgument&) {
      // no optimizer yet
    }
    agent.metrics().emit("error", steps, {{"error", errorKind(e)}, {"message", std::string(e.what())}});
    agent.abort();  // do not linger on messages to peers that are gone
    throw;
  } catch (...) {
    agent.abort();
    throw;
  }
}

std::string summaryJson(const TrainSummary& s, const Config& c) {
  const TrainConfig t = trainConfigFrom(c);
  nlohmann::json j;
  j["algorithm"] = s.algorithm;
  j["run_dir"] = s.runDir;
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
    for (const auto& [key, value] : c.values) {
      if (key.rfind(prefix, 0) != 0) continue;
      std::visit([&](const auto& v) { settings[key.substr(prefix.size())] = v; }, value);
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
  return j.dump();
}

}  // namespace gossamer::train
