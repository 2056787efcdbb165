// Per-rank training loop of gossamer-train, over a gossamer::Session (which
// owns the elastic protocol: steps, epochs, evaluations and checkpoints that
// survive view changes).
#include "trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/log.hpp"
#include "gossamer/session.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "model.hpp"
#include "summary_file.hpp"
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
  // The checkpoint's order must be one of this rank's own shard (the same
  // samples): anything else would read other samples, or past the data.
  void load(const Checkpoint& c) {
    auto shard = c.getArray<int>("sampler.shard");
    if (shard.size() != shard_.size())
      throw Error("sampler.shard holds " + std::to_string(shard.size()) + " samples, this rank's shard " +
                  std::to_string(shard_.size()));
    auto mine = shard_, theirs = shard;
    std::sort(mine.begin(), mine.end());
    std::sort(theirs.begin(), theirs.end());
    if (mine != theirs)
      throw Error(
          "sampler.shard is not an order of this rank's samples (another data partition, "
          "or a damaged file)");
    const auto pos = c.getValue<std::uint64_t>("sampler.position");
    if (pos > shard.size())
      throw Error("sampler.position " + std::to_string(pos) + " is past the shard's " +
                  std::to_string(shard.size()) + " samples");
    const auto& b = c.get("sampler.rng");
    std::istringstream rng(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
    std::mt19937_64 state;
    rng >> state;
    if (rng.fail()) throw Error("sampler.rng is not a generator state");
    shard_ = std::move(shard);
    pos_ = static_cast<std::size_t>(pos);
    rng_ = state;
  }

 private:
  std::vector<int> shard_;
  std::mt19937_64 rng_;
  std::size_t pos_ = 0;
};

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

/// What an allocation failure while building or training the model says:
/// which keys ask for how much.
std::string outOfMemoryText(const Config& c, const FashionMnist& data) {
  const TrainConfig t = trainConfigFrom(c);
  // The layer widths: inputs, hidden (an MLP's), classes; weights and biases.
  std::vector<double> widths = {static_cast<double>(data.train.images.cols())};
  if (t.model.kind == "mlp")
    for (int h : t.model.hidden) widths.push_back(h);
  widths.push_back(data.train.numClasses);
  double params = 0;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) params += widths[i] * widths[i + 1] + widths[i + 1];
  std::ostringstream os;
  os << "out of memory building or training the model: model.kind " << t.model.kind;
  if (t.model.kind == "mlp") os << " with model.hidden " << formatConfigValue(t.model.hidden);
  os << " has " << std::fixed << std::setprecision(0) << params << " parameters, " << std::setprecision(1)
     << params * 4 / (1 << 20)
     << " MiB per float32 copy, and each rank holds several (parameters, gradients, their average, the "
        "optimizer's buffers)"
     << (t.model.kind == "mlp" ? ": lower model.hidden, or run fewer ranks on this host" : "");
  return os.str();
}

// One rank of gossamer-train: its shard of the data, its model, the Session
// that runs the elastic training protocol, per-epoch evaluation (loss, bytes,
// the average model's accuracy, consensus distance) and the run's summary.
class RankTrainer {
 public:
  RankTrainer(const Config& config, int rank, const FashionMnist& data, Store& store,
              const Registry& registry, const std::function<void(const EpochMetrics&)>& onEpoch,
              const std::function<void(const StepProgress&)>& onStep)
      : config_(config),
        t_(trainConfigFrom(config)),
        rank_(rank),
        data_(data),
        onEpoch_(onEpoch),
        onStep_(onStep),
        spe_(stepsPerEpoch()),
        sampler_(shardOf(rank), topologies::splitmix64(config.seed() ^ (0x5EEDull << 32) ^
                                                       static_cast<std::uint64_t>(rank))),
        model_(makeModel(t_.model, static_cast<int>(data.train.images.cols()), data.train.numClasses)),
        params_(model_.numParams()),
        grads_(model_.numParams()),
        average_(model_.numParams()),
        rates_(static_cast<std::size_t>(maxWorldSize(config)), 0.0),
        crcs_(static_cast<std::size_t>(maxWorldSize(config)), -1.0),
        session_(config, rank, store, registry) {
    // Read once every rank's transport is up (rank 0 may wait for the others'
    // addresses before it publishes it): what tells this job's summary file
    // from an earlier job's.
    summary_.job = apps::jobNonce(store, rank, config.getOr("membership.restarted", false),
                                  config.get<double>("transport.timeout_seconds"));
    model_.init(params_, config.seed());  // same seed on every rank: identical starting models
    if (rank == t_.training.stragglerRank) {
      const auto delay = std::chrono::duration<double>(t_.training.stragglerDelaySeconds);
      straggle_ = [delay] { std::this_thread::sleep_for(delay); };
    }
  }

  Session& session() { return session_; }

  TrainSummary run() {
    start();
    while (session_.nextEpoch()) {
      const auto epochStart = Clock::now();
      const auto before = session_.agent().transport().stats();
      trainSteps();
      trainSeconds_ += since(epochStart);  // (steps only: the flush waits for the slowest rank)
      const auto after = session_.agent().transport().stats();
      trainBytes_ += static_cast<double>(after.bytesSent - before.bytesSent);
      trainMessages_ += static_cast<double>(after.messagesSent - before.messagesSent);
      EpochMetrics m;
      if (!session_.evaluate([&](const EpochEnd& e) { m = evaluate(e); })) continue;
      report(m, epochStart);
      if (m.stop) {
        summary_.stoppedAtEpoch = m.epoch;
        break;
      }
    }
    session_.finish();
    return summarize();
  }

 private:
  int stepsPerEpoch() const {
    const int n = config_.worldSize(), batch = t_.training.batchSize;
    const int spe = data_.train.size() / (n * batch);
    if (spe < 1)
      throw ConfigError(
          config_.sourceFile, 0, "training.batch_size",
          "the training set (" + std::to_string(data_.train.size()) +
              " samples) is smaller than world_size * batch_size = " + std::to_string(n * batch));
    return spe;
  }

  std::vector<int> shardOf(int rank) const {
    auto shards = partitionIndices(data_.train.labels, data_.train.numClasses, config_.worldSize(),
                                   t_.data.partition, t_.data.dirichletAlpha, config_.seed());
    // A rank that joined beyond world_size trains on a copy of rank
    // (rank mod world_size)'s shard.
    return std::move(shards[static_cast<std::size_t>(rank % config_.worldSize())]);
  }

  // The plan the Session trains: the model, the epochs, the closing
  // collectives and the sampler in the checkpoints.
  void start() {
    TrainingPlan plan;
    plan.params = params_;
    plan.tensorSizes = model_.tensorSizes();
    plan.stepsPerEpoch = static_cast<std::uint64_t>(spe_);
    plan.epochs = t_.training.epochs;
    plan.closing = [this] { closing(); };
    plan.saveState = [this](Checkpoint& c) { sampler_.save(c); };
    plan.loadState = [this](const Checkpoint& c) { sampler_.load(c); };
    auto& optimizer = session_.train(plan);
    weightLow_ = weightHigh_ = optimizer.pushSumWeight();
    summary_.algorithm = config_.get<std::string>("algorithm.name");
    summary_.worldSize = config_.worldSize();
    summary_.epochs = t_.training.epochs;
    summary_.stepsPerEpoch = spe_;
    summary_.resumedFromStep = session_.resumedFromStep();
  }

  // The epoch's steps: each draws a mini-batch from this rank's shard,
  // computes the local gradient, and hands it to the Session, whose
  // optimizer exchanges with the peers and updates the model in place.
  void trainSteps() {
    RowMatrix x;
    std::vector<std::uint8_t> y;
    auto& optimizer = session_.agent().optimizer();
    double lossSum = 0;
    const std::uint64_t epochStartStep = spe_ * static_cast<std::uint64_t>(session_.epoch() - 1);
    while (session_.stepping()) {
      sampler_.next(data_.train, t_.training.batchSize, x, y);
      const double loss = model_.lossAndGradient(params_, x, y.data(), grads_);
      if (straggle_) straggle_();
      if (!session_.step(grads_, loss)) break;
      lossSum += loss;
      weightLow_ = std::min(weightLow_, optimizer.pushSumWeight());
      weightHigh_ = std::max(weightHigh_, optimizer.pushSumWeight());
      if (onStep_) {
        const std::uint64_t step = session_.steps(),
                            inEpoch = step > epochStartStep ? step - epochStartStep : 0;
        onStep_(StepProgress{step, static_cast<std::uint64_t>(spe_), session_.epoch(), t_.training.epochs,
                             inEpoch > 0 ? lossSum / static_cast<double>(inEpoch) : 0.0});
      }
    }
  }

  // The evaluation collectives: [loss sum, steps, training bytes, messages,
  // the stop file seen] (the mean loss over every step the ranks took: a
  // rank that rejoined inside the epoch took fewer), then the average model
  // and the consensus distance; redone over the survivors by the Session
  // when a peer fails inside them.
  EpochMetrics evaluate(const EpochEnd& e) {
    auto& comm = session_.agent().communicator();
    std::error_code ec;
    const bool stop = !t_.training.stopFile.empty() && std::filesystem::exists(t_.training.stopFile, ec);
    const auto steps = static_cast<double>(e.lossSteps);
    double sums[5] = {e.loss * steps, steps, trainBytes_, trainMessages_, stop ? 1.0 : 0.0};
    comm.allreduce(std::span<double>(sums, 5), ReduceOp::kAverage);
    const double loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    // The same average on every rank: they all stop here, with the reason,
    // rather than train on a model of NaNs and report success.
    if (!std::isfinite(loss))
      throw Error("training diverged: the average training loss of epoch " + std::to_string(e.epoch) +
                  " is " + std::to_string(loss) + " (training.learning_rate " +
                  std::to_string(t_.training.learningRate) + " too large?)");
    std::copy(params_.begin(), params_.end(), average_.begin());
    session_.agent().average(average_);
    double dist = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const double d = static_cast<double>(average_[i]) - static_cast<double>(params_[i]);
      dist += d * d;
    }
    comm.allreduce(std::span<double>(&dist, 1), ReduceOp::kAverage);
    EpochMetrics m;
    m.epoch = e.epoch;
    m.trainLoss = loss;
    m.bytesSentPerPeer = sums[2];
    m.messagesSentPerPeer = sums[3];
    m.consensusDistance = dist;
    m.stop = sums[4] > 0;  // some rank saw the stop file: every rank stops here
    return m;
  }

  // The job's closing collectives, run by the Session with the last epoch's
  // evaluation: the training throughput of every rank (steps per second,
  // evaluation excluded), the push-sum weights' range over every rank and
  // step (-low: one max), and each survivor's final model as its CRC-32C (a
  // resumed run must match an uninterrupted one).
  void closing() {
    auto& comm = session_.agent().communicator();
    std::fill(rates_.begin(), rates_.end(), 0.0);
    rates_[static_cast<std::size_t>(rank_)] = static_cast<double>(session_.steps()) / trainSeconds_;
    comm.allreduce(std::span<double>(rates_));
    range_[0] = -weightLow_;
    range_[1] = weightHigh_;
    comm.allreduce(std::span<double>(range_, 2), ReduceOp::kMax);
    std::fill(crcs_.begin(), crcs_.end(), -1.0);
    crcs_[static_cast<std::size_t>(rank_)] = crc32c(std::as_bytes(std::span<const float>(params_)));
    comm.allreduce(std::span<double>(crcs_), ReduceOp::kMax);
  }

  // An epoch every member evaluated: the lowest rank alive tests the models.
  void report(EpochMetrics m, Clock::time_point epochStart) {
    Agent& agent = session_.agent();
    const bool evaluator = agent.communicator().rank() == 0;
    m.testAccuracyAverage = m.testAccuracyRank0 = std::numeric_limits<double>::quiet_NaN();
    m.survivors = agent.communicator().worldSize();
    if (evaluator) {
      m.testAccuracyRank0 = model_.accuracy(params_, data_.test);
      m.testAccuracyAverage = model_.accuracy(average_, data_.test);
    }
    m.seconds = since(epochStart);
    // A rank that went back to the survivors' step (a healed partition) redoes epochs.
    auto& history = summary_.history;
    while (!history.empty() && history.back().epoch >= m.epoch) history.pop_back();
    history.push_back(m);
    if (!evaluator) return;
    agent.metrics().emit("epoch", session_.steps(),
                         {{"epoch", std::int64_t{m.epoch}},
                          {"loss", m.trainLoss},
                          {"test_accuracy", m.testAccuracyAverage},
                          {"test_accuracy_rank0", m.testAccuracyRank0},
                          {"consensus_distance", m.consensusDistance},
                          {"seconds", m.seconds},
                          {"bytes_sent_per_peer", m.bytesSentPerPeer},
                          {"survivors", std::int64_t{m.survivors}}});
    if (onEpoch_) onEpoch_(m);
  }

  TrainSummary summarize() {
    TrainSummary& s = summary_;
    Agent& agent = session_.agent();
    s.stepsPerSecondByRank = rates_;
    s.pushSumWeightMin = -range_[0];
    s.pushSumWeightMax = range_[1];
    double sumFast = 0;
    int fast = 0;
    s.survivors = agent.view().members;
    for (int r : s.survivors)
      if (r != t_.training.stragglerRank) {
        sumFast += rates_[static_cast<std::size_t>(r)];
        ++fast;
      }
    s.stepsPerSecond = fast ? sumFast / fast : 0;
    const auto& last = s.history.back();
    s.testAccuracy = last.testAccuracyAverage;
    s.testAccuracyRank0 = last.testAccuracyRank0;
    s.consensusDistance = last.consensusDistance;
    s.bytesSentPerPeer = last.bytesSentPerPeer;
    s.messagesSentPerPeer = last.messagesSentPerPeer;
    s.wallSeconds = since(startTime_);
    s.modelCrcByRank = crcs_;
    s.transportStats = agent.transport().stats();
    s.writer = agent.communicator().rank() == 0;
    s.rejoinedAtStep = session_.rejoinedAtStep();
    for (const auto& change : session_.viewChanges()) {
      for (int p : change.lost)
        s.lost.push_back({p, change.resumeStep, change.seconds, change.resumeStep - change.fewestSteps,
                          change.installedAtUnixSeconds});
      for (int p : change.joined) s.joined.push_back({p, change.resumeStep, change.installedAtUnixSeconds});
    }
    s.runDir = agent.metrics().dir();
    session_.close();
    return s;
  }

  const Clock::time_point startTime_ = Clock::now();
  const Config& config_;
  const TrainConfig t_;
  const int rank_;
  const FashionMnist& data_;
  const std::function<void(const EpochMetrics&)>& onEpoch_;
  const std::function<void(const StepProgress&)>& onStep_;
  const int spe_;
  BatchSampler sampler_;
  Model model_;
  std::vector<float> params_, grads_, average_;
  std::function<void()> straggle_;
  double trainBytes_ = 0, trainMessages_ = 0, trainSeconds_ = 0;
  double weightLow_ = 1, weightHigh_ = 1;  // this rank's push-sum weight's range after its steps
  std::vector<double> rates_, crcs_;
  double range_[2] = {-1, 1};
  TrainSummary summary_;
  Session session_;
};

}  // namespace

TrainSummary runRank(const Config& config, int rank, const FashionMnist& data, Store& store,
                     const Registry& registry, const std::function<void(const EpochMetrics&)>& onEpoch,
                     const std::function<void(const StepProgress&)>& onStep) {
  std::optional<RankTrainer> made;
  try {
    made.emplace(config, rank, data, store, registry, onEpoch, onStep);
  } catch (const std::bad_alloc&) {
    throw Error(outOfMemoryText(config, data));
  }
  RankTrainer& trainer = *made;
  // The error record (metrics.md), then abort: do not linger on messages to
  // peers that are gone.
  const auto fail = [&](const std::string& kind, const std::string& message) {
    Session& session = trainer.session();
    try {
      session.agent().metrics().emit("error", session.steps(), {{"error", kind}, {"message", message}});
    } catch (...) {  // no record (out of memory again, a full disk): the error itself still goes up
    }
    session.abort();
  };
  try {
    return trainer.run();
  } catch (const std::bad_alloc&) {
    const std::string message = outOfMemoryText(config, data);
    fail("OutOfMemory", message);
    throw Error(message);
  } catch (const std::exception& e) {
    fail(errorKind(e), e.what());
    throw;
  } catch (...) {
    trainer.session().abort();
    throw;
  }
}

}  // namespace gossamer::train
