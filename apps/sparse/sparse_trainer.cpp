// gossamer-sparse's training loop (see sparse_trainer.hpp).
//
// Every rank reads the whole training file and derives every rank's shard
// (shardRows) and mini-batches, so every rank knows D_{n,m} for all n and m
// before training: the keys of the key omission (Yokoyama and Araki,
// "Efficient Distributed Machine Learning for Large-scale Models by Reducing
// Redundant Communication", Sec. V-B) and the
// input of Algorithms 2-3 (Sec. IV-C), computed before the data is used. Round
// m of epoch e is round e M + m of the schedule (the same batches each epoch;
// a rank whose shard has fewer batches has empty rounds).
//
// Per round: [broadcast] compute the gradient of the rank's batch on its
// touched rows [reduce + direct] (or: scatter into the full vector,
// allreduce, step every row). The synchronised table has d + 1 rows of width
// values: row j < d is feature j's ([w_j] or [w_j, v_j]), row d the bias
// [w_0, 0, ...], which every rank with a batch touches in every round.
#include "sparse_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "components.hpp"
#include "factorization_machine.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"
#include "gossamer/session.hpp"
#include "launch_ranks.hpp"
#include "libsvm.hpp"
#include "logistic_loss.hpp"
#include "partition.hpp"
#include "summary_file.hpp"

namespace gossamer::sparse {

namespace ss = gossamer::optimizers::sparse_sync;

Registry makeSparseRegistry() {
  Registry registry = train::makeTrainRegistry();
  registerSparseSection(registry);
  registry.setKeyDefault("membership", "rejoin", false);
  requireProcessTransport(registry, "gossamer-sparse");
  return registry;
}

void registerSparseSection(Registry& registry) {
  const SparseTrainConfig d;
  registry.addSection(
      "sparse", "gossamer-sparse: sparse models and their synchronisation (docs/sparse-sync.md).",
      KeySet()
          .text("model", d.model, {"lr", "fm"}, "logistic regression or factorization machine")
          .integer("factors", d.factors, 1, 1024, "k, the factorization machine's factors per feature")
          .integer("batch_size", d.batchSize, 1, 1 << 24, "rows per rank per round")
          .integer("epochs", d.epochs, 1, 1 << 20, "passes over the shards")
          .integer("rounds", d.rounds, 0, 1 << 30, "rounds per epoch at most (0 = the whole shard)")
          .real("learning_rate", d.learningRate, {0.0, false, kUnbounded, false}, "SGD step")
          .real("lambda", d.lambda, {0.0, true, kUnbounded, false}, "L2 coefficient on the touched rows")
          .real("init_stddev", d.initStddev, {0.0, true, kUnbounded, false},
                "standard deviation of the factors' initial values")
          .text("method", d.method, {"dense", "existing", "direct"},
                "dense allreduce, sparse reduce + broadcast, or with direct transmission")
          .text("train", d.train, {}, "LIBSVM training file")
          .perRank()
          .text("test", d.test, {}, "LIBSVM test file (empty: no test accuracy)")
          .perRank()
          .integer("features", d.features, 0, 1 << 30, "d (0: the largest index in the files)"));
}

SparseTrainConfig sparseConfigFrom(const Config& c) {
  SparseTrainConfig s;
  s.model = c.get<std::string>("sparse.model");
  s.factors = c.get<int>("sparse.factors");
  s.batchSize = c.get<int>("sparse.batch_size");
  s.epochs = c.get<int>("sparse.epochs");
  s.rounds = c.get<int>("sparse.rounds");
  s.learningRate = c.get<double>("sparse.learning_rate");
  s.lambda = c.get<double>("sparse.lambda");
  s.initStddev = c.get<double>("sparse.init_stddev");
  s.method = c.get<std::string>("sparse.method");
  s.train = c.get<std::string>("sparse.train");
  s.test = c.get<std::string>("sparse.test");
  s.features = c.get<int>("sparse.features");
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Logistic regression on the rows of a batch: mean logistic loss of
// w_0 + sum_j w_j x_j plus (lambda / 2) on the touched w_j; the gradient's
// touched rows in key order (width 1) and its bias entry.
double lrLossAndGradient(const SparseDataset& data, const MiniBatch& batch, const double* w, double w0,
                         double lambda, std::vector<double>& rows, double& g0) {
  const auto& keys = batch.features;
  rows.assign(keys.size(), 0.0);
  g0 = 0;
  double loss = 0;
  const double scale = 1.0 / batch.rows.size();
  for (int i = batch.rows.begin; i < batch.rows.end; ++i) {
    double z = w0;
    for (CsrMatrix::InnerIterator it(data.x, i); it; ++it) z += w[it.col()] * it.value();
    const double y = data.y[i];
    loss += logisticLoss(y * z);
    const double c = -y * sigmoid(-y * z) * scale;
    g0 += c;
    for (CsrMatrix::InnerIterator it(data.x, i); it; ++it) {
      const auto k = std::lower_bound(keys.begin(), keys.end(), it.col()) - keys.begin();
      rows[static_cast<std::size_t>(k)] += c * it.value();
    }
  }
  for (std::size_t k = 0; k < keys.size(); ++k) rows[k] += lambda * w[keys[k]];
  return loss * scale;
}

double sumOverRanks(Communicator& comm, double x, ReduceOp op = ReduceOp::kSum) {
  comm.allreduce(std::span<double>(&x, 1), op);
  return x;
}

// gossamer-sparse's rounds as a Session's lockstep rounds. Every rank reads
// the whole training file and derives every rank's shard and mini-batches
// (D for the schedule). Round m of epoch e is round e M + m of the schedule
// (the same batches each epoch; a rank whose shard has fewer batches has
// empty rounds). With the membership service on, the rank commits the
// synchronised table at the end of each epoch (one gather of the owners'
// rows for `existing` and `direct`; the table every rank holds for `dense`);
// after a view change the survivors return to the newest epoch every one of
// them committed, plan the remaining rounds over the view (the lost ranks'
// batches leave the schedule) and run them again.
class SparseRounds final : public RoundProgram {
 public:
  SparseRounds(const Config& config, int rank, Session& session)
      : sc_(sparseConfigFrom(config)), rank_(rank), session_(session), planStart_(Clock::now()) {
    load(config);
    plan(session.view().members, 0);
  }

  bool run(std::uint64_t round) override {
    const std::size_t m = static_cast<std::size_t>(round);
    const std::size_t b = m % perEpoch_;
    const bool active = b < batches_[static_cast<std::size_t>(rank_)].size();
    if (exchange_) exchange_->broadcast(m - first_, w_);
    const auto t0 = Clock::now();
    grads_.clear();
    if (active) {
      const double loss = gradient(batches_[static_cast<std::size_t>(rank_)][b]);
      if (m >= rounds_ - perEpoch_) {
        lossSum_ += loss;
        ++lossCount_;
      }
    }
    compute_ += since(t0);
    const auto t1 = Clock::now();
    if (exchange_) {
      exchange_->reduce(m - first_, grads_, sc_.learningRate, w_);
    } else {
      denseStep(m, active);
    }
    reduceSeconds_ += since(t1);
    if ((m + 1) % perEpoch_ == 0 && session_.agent().communicator().rank() == 0) {
      std::printf("epoch %zu/%d  %zu rounds\n", (m + 1) / perEpoch_, sc_.epochs, m + 1);
      std::fflush(stdout);
    }
    return true;
  }

  bool commit(std::uint64_t rounds) override {
    if (!session_.elastic() || (rounds % perEpoch_ != 0 && rounds != rounds_)) return false;
    const auto t0 = Clock::now();
    if (exchange_) w_ = exchange_->gather();
    previous_ = std::move(newest_);
    newest_ = {rounds, w_, lossSum_, lossCount_};
    // Direct transmission's schedule runs one epoch at a time then, so that
    // its owners hold every row at each commit.
    if (rounds < rounds_ && rounds == last_) plan(session_.view().members, static_cast<std::size_t>(rounds));
    commitSeconds_ += since(t0);
    return true;
  }

  void restore(std::uint64_t rounds, const ViewChange& change) override {
    const Commit c = newest_.rounds == rounds ? newest_ : previous_;
    w_ = c.table;
    lossSum_ = c.lossSum;
    lossCount_ = c.lossCount;
    newest_ = previous_ = c;
    plan(change.view.members, static_cast<std::size_t>(rounds));
  }

  // After the last round: the model's bits, the element counts and times
  // summed or maxed over the ranks, the test accuracy on the writing rank.
  SparseSummary finish(double seconds) {
    Communicator& comm = session_.agent().communicator();
    const bool committed = session_.elastic() && newest_.rounds == rounds_;  // gathered then
    if (exchange_ && !committed) w_ = exchange_->gather();
    std::copy_n(w_.begin(), tableSize_, p_.table.data());
    p_.w0 = w_[tableSize_];
    SparseSummary s;
    s.writer = comm.rank() == 0;
    s.roundsPerEpoch = perEpoch_;
    s.planSeconds = sumOverRanks(comm, planSeconds_, ReduceOp::kMax);
    const double epochs = sc_.epochs;
    s.epochSeconds = sumOverRanks(comm, seconds - commitSeconds_, ReduceOp::kMax) / epochs;
    s.computeSeconds = sumOverRanks(comm, compute_, ReduceOp::kMax) / epochs;
    s.reduceSeconds = sumOverRanks(comm, reduceSeconds_, ReduceOp::kMax) / epochs;
    s.commitSeconds = sumOverRanks(comm, commitSeconds_, ReduceOp::kMax);
    if (exchange_) {
      ExchangeTotals st = totals_;
      st.add(exchange_->stats());
      s.broadcastSeconds = sumOverRanks(comm, st.broadcastSeconds, ReduceOp::kMax) / epochs;
      s.elementsReduce =
          static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.reduceElements)));
      s.elementsDirect =
          static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.directElements)));
      s.elementsBroadcast =
          static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.broadcastElements)));
    } else {
      // Each rank of a ring allreduce sends 2 (N - 1) / N of the vector.
      const auto n = static_cast<std::uint64_t>(comm.worldSize());
      s.elementsReduce = 2 * (n - 1) * w_.size() * rounds_;
    }
    s.trainLoss = sumOverRanks(comm, lossSum_) / std::max(1.0, sumOverRanks(comm, lossCount_));
    // A loss past the double range makes every later score NaN, and the
    // "accuracy" of NaN scores the share of one label: not a result.
    if (!std::isfinite(s.trainLoss))
      throw Error("training diverged: the mean training loss is " + std::to_string(s.trainLoss) +
                  " (lower sparse.learning_rate or sparse.init_stddev, or scale the features)");
    s.crc = crc32c(std::as_bytes(std::span<const double>(w_)));  // the table, then the bias row
    if (s.writer && !sc_.test.empty()) s.testAccuracy = testAccuracy();
    for (const auto& change : session_.viewChanges())
      s.lost.insert(s.lost.end(), change.lost.begin(), change.lost.end());
    s.survivors = session_.view().members;
    return s;
  }

  std::size_t rounds() const { return rounds_; }

 private:
  struct Commit {
    std::uint64_t rounds = 0;
    std::vector<double> table;
    double lossSum = 0;
    int lossCount = 0;
  };
  struct ExchangeTotals : ss::ExchangeStats {
    void add(const ss::ExchangeStats& o) {
      reduceElements += o.reduceElements;
      directElements += o.directElements;
      broadcastElements += o.broadcastElements;
      broadcastSeconds += o.broadcastSeconds;
    }
  };

  // The data, every rank's batches, the rounds and the initial model, the
  // same on every rank: w = 0, w_0 = 0, the factors N(0, s^2).
  void load(const Config& config) {
    SparseDataset all = readLibsvm(sc_.train, sc_.features);
    d_ = all.features();
    // (0 would also tell the test file's reader to take its width from that
    // file, whose indices would then be unbounded.)
    if (d_ == 0)
      throw LibsvmError(sc_.train, 0, 0, 0,
                        "holds no feature index: set sparse.features to the data's width");
    // The test file is read now, on every rank, so that a bad one fails the
    // job before it trains rather than after.
    if (!sc_.test.empty()) {
      test_ = readLibsvm(sc_.test, d_);
      if (test_->rows() == 0) throw ConfigError("", 0, "sparse.test", sc_.test + " holds no rows");
    }
    fm_ = sc_.model == "fm";
    width_ = fm_ ? static_cast<std::size_t>(sc_.factors) + 1 : 1;
    const int n = config.worldSize();
    for (int r = 0; r < n; ++r) {
      shards_.push_back(shard(all, r, n));
      batches_.push_back(batchesWithFeatures(shards_.back().x, sc_.batchSize));
      perEpoch_ = std::max(perEpoch_, batches_.back().size());
    }
    if (sc_.rounds > 0) perEpoch_ = std::min(perEpoch_, static_cast<std::size_t>(sc_.rounds));
    if (perEpoch_ == 0) throw ConfigError(config.sourceFile, 0, "sparse.train", "no training rows");
    rounds_ = perEpoch_ * static_cast<std::size_t>(sc_.epochs);
    if (fm_) {
      machine_.emplace(d_, sc_.factors, sc_.lambda);
      p_ = machine_->initialParameters(sc_.initStddev, config.seed());
    } else {
      p_.table = DenseRows::Zero(d_, 1);
    }
    tableSize_ = static_cast<std::size_t>(d_) * width_;
    w_.assign(tableSize_ + width_, 0.0);
    std::copy_n(p_.table.data(), tableSize_, w_.begin());
    w_[tableSize_] = p_.w0;
    newest_ = previous_ = {0, session_.elastic() ? w_ : std::vector<double>{}, 0, 0};
  }

  // The schedule of rounds [first, last_) over the view's members (view
  // rank v runs global rank members[v]'s batches): the rest of the run, or,
  // for direct transmission in an elastic run, the epoch (its owners hold
  // every row only at the end of a schedule, and a commit gathers them). Row
  // d of the table is the bias [w_0, 0, ...]: touched by every rank in every
  // round it has a batch, as the last key.
  void plan(const std::vector<int>& members, std::size_t first) {
    const auto planStart = Clock::now();
    first_ = first;
    last_ = sc_.method == "direct" && session_.elastic() ? std::min(rounds_, first + perEpoch_) : rounds_;
    const auto biasRow = static_cast<std::uint32_t>(d_);
    touched_.assign(members.size(), std::vector<std::vector<std::uint32_t>>(last_ - first));
    for (std::size_t v = 0; v < members.size(); ++v) {
      const auto& mine = batches_[static_cast<std::size_t>(members[v])];
      for (std::size_t m = first; m < last_; ++m) {
        const std::size_t b = m % perEpoch_;
        if (b >= mine.size()) continue;
        auto& keys = touched_[v][m - first];
        keys.assign(mine[b].features.begin(), mine[b].features.end());
        keys.push_back(biasRow);
      }
    }
    if (exchange_) totals_.add(exchange_->stats());
    exchange_.reset();
    if (sc_.method != "dense") {
      const int n = static_cast<int>(members.size());
      const auto bounds =
          ss::partitionRanges(ss::featureCounts(touched_, static_cast<std::size_t>(d_) + 1), n);
      const auto schedule =
          sc_.method == "direct" ? ss::planDirectTransmission(touched_) : ss::existingSchedule(touched_);
      // A sequence range of its own, far above the communicator's, and apart
      // for each schedule (at most 2 per round and a gather each).
      exchange_.emplace(session_.agent().transport(), touched_, bounds, schedule, width_, w_,
                        session_.agent().config().get<double>("transport.timeout_seconds"),
                        (std::uint64_t{1} << 36) + 4 * static_cast<std::uint64_t>(first));
    }
    dense_.assign(sc_.method == "dense" ? w_.size() : 0, 0.0);
    planSeconds_ += first == 0 ? since(planStart_) : since(planStart);
  }

  // This rank's gradient of batch `batch` into grads_ (the touched rows in
  // key order, then the bias row); returns the batch's loss.
  double gradient(const MiniBatch& batch) {
    const SparseDataset& mine = shards_[static_cast<std::size_t>(rank_)];
    double loss = 0, g0 = 0;
    if (fm_) {
      for (int f : batch.features)
        std::copy_n(w_.data() + static_cast<std::size_t>(f) * width_, width_,
                    p_.table.data() + static_cast<std::size_t>(f) * width_);
      p_.w0 = w_[tableSize_];
      loss = machine_->lossAndGradient(p_, mine, batch, g_);
      grads_.assign(g_.rows.data(), g_.rows.data() + g_.rows.size());
      g0 = g_.w0;
    } else {
      loss = lrLossAndGradient(mine, batch, w_.data(), w_[tableSize_], sc_.lambda, lrRows_, g0);
      grads_ = lrRows_;
    }
    grads_.push_back(g0);  // the bias row, last
    grads_.resize(grads_.size() + width_ - 1, 0.0);
    return loss;
  }

  // `dense`: the gradient scattered into the full vector, summed by an
  // allreduce over the view, every row stepped.
  void denseStep(std::size_t m, bool active) {
    std::fill(dense_.begin(), dense_.end(), 0.0);
    if (active) {
      const auto& keys =
          touched_[static_cast<std::size_t>(session_.agent().communicator().rank())][m - first_];
      for (std::size_t k = 0; k < keys.size(); ++k)
        std::copy_n(grads_.data() + k * width_, width_,
                    dense_.data() + static_cast<std::size_t>(keys[k]) * width_);
    }
    session_.agent().communicator().allreduce(std::span<double>(dense_), ReduceOp::kSum);
    for (std::size_t i = 0; i < w_.size(); ++i) w_[i] = w_[i] - sc_.learningRate * dense_[i];
  }

  double testAccuracy() const {
    const SparseDataset& test = *test_;
    int correct = 0;
    for (int i = 0; i < test.rows(); ++i) {
      double z = p_.w0;
      if (fm_) {
        z = machine_->predict(p_, test.x, i);
      } else {
        for (CsrMatrix::InnerIterator it(test.x, i); it; ++it)
          z += w_[static_cast<std::size_t>(it.col())] * it.value();
      }
      correct += (z >= 0 ? 1.0 : -1.0) == test.y[i];
    }
    return test.rows() > 0 ? static_cast<double>(correct) / test.rows() : -1;
  }

  const SparseTrainConfig sc_;
  const int rank_;
  Session& session_;
  const Clock::time_point planStart_;
  int d_ = 0;
  bool fm_ = false;
  std::size_t width_ = 1, tableSize_ = 0, perEpoch_ = 0, rounds_ = 0, first_ = 0, last_ = 0;
  std::vector<SparseDataset> shards_;
  std::optional<SparseDataset> test_;  // sparse.test, when set
  std::vector<std::vector<MiniBatch>> batches_;
  FmParameters p_;
  std::optional<FactorizationMachine> machine_;
  std::vector<double> w_, dense_, grads_, lrRows_;
  FmGradient g_;
  ss::TouchedFeatures touched_;
  std::optional<ss::SparseExchange> exchange_;
  ExchangeTotals totals_;
  Commit newest_, previous_;
  double compute_ = 0, reduceSeconds_ = 0, commitSeconds_ = 0, planSeconds_ = 0, lossSum_ = 0;
  int lossCount_ = 0;
};

}  // namespace

SparseSummary runSparseRank(const Config& config, int rank, Store& store, const Registry& registry) {
  Session session(config, rank, store, registry);
  // (Read once every rank's transport is up: see apps::jobNonce.)
  const std::string job = apps::jobNonce(store, rank, config.getOr("membership.restarted", false),
                                         config.get<double>("transport.timeout_seconds"));
  SparseRounds program(config, rank, session);
  Communicator& comm = session.agent().communicator();
  comm.barrier();
  const auto start = Clock::now();
  session.runRounds(program.rounds(), program);
  SparseSummary s = program.finish(since(start));
  s.job = job;
  session.close();
  return s;
}

std::string sparseSummaryJson(const SparseSummary& s, const Config& config) {
  const SparseTrainConfig sc = sparseConfigFrom(config);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", s.crc);
  nlohmann::json j = {{"model", sc.model},
                      {"method", sc.method},
                      {"world_size", config.worldSize()},
                      {"batch_size", sc.batchSize},
                      {"epochs", sc.epochs},
                      {"rounds_per_epoch", s.roundsPerEpoch},
                      {"elements_reduce", s.elementsReduce},
                      {"elements_direct", s.elementsDirect},
                      {"elements_broadcast", s.elementsBroadcast},
                      {"epoch_seconds", s.epochSeconds},
                      {"reduce_seconds", s.reduceSeconds},
                      {"broadcast_seconds", s.broadcastSeconds},
                      {"compute_seconds", s.computeSeconds},
                      {"plan_seconds", s.planSeconds},
                      {"commit_seconds", s.commitSeconds},
                      {"crc32c", crc},
                      {"train_loss", s.trainLoss},
                      {"test_accuracy", s.testAccuracy},
                      {"survivors", s.survivors},
                      {"job", s.job},
                      {"lost", s.lost}};
  return j.dump();
}

}  // namespace gossamer::sparse
