// gossamer-sparse's training loop (see sparse_trainer.hpp).
//
// Every rank reads the whole training file and derives every rank's shard
// (shardRows) and mini-batches, so every rank knows D_{n,m} for all n and m
// before training: the keys of the key omission (paper 001, Sec. V-B) and the
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
#include <cstring>
#include <optional>
#include <sstream>

#include "factorization_machine.hpp"
#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"
#include "libsvm.hpp"
#include "logistic_loss.hpp"
#include "partition.hpp"

namespace gossamer::sparse {

namespace ss = gossamer::optimizers::sparse_sync;

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
          .text("test", d.test, {}, "LIBSVM test file (empty: no test accuracy)")
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

}  // namespace

SparseSummary runSparseRank(const Config& config, int rank, Store& store, const Registry& registry) {
  const SparseTrainConfig sc = sparseConfigFrom(config);
  const int n = config.worldSize();
  const auto planStart = Clock::now();
  SparseDataset all = readLibsvm(sc.train, sc.features);
  const int d = all.features();
  const bool fm = sc.model == "fm";
  const std::size_t width = fm ? static_cast<std::size_t>(sc.factors) + 1 : 1;
  // Every rank's shard and batches: D for the schedule.
  std::vector<SparseDataset> shards;
  std::vector<std::vector<MiniBatch>> batches;
  std::size_t perEpoch = 0;
  for (int r = 0; r < n; ++r) {
    shards.push_back(shard(all, r, n));
    batches.push_back(batchesWithFeatures(shards.back().x, sc.batchSize));
    perEpoch = std::max(perEpoch, batches.back().size());
  }
  if (sc.rounds > 0) perEpoch = std::min(perEpoch, static_cast<std::size_t>(sc.rounds));
  if (perEpoch == 0) throw ConfigError(config.sourceFile, 0, "sparse.train", "no training rows");
  const std::size_t rounds = perEpoch * static_cast<std::size_t>(sc.epochs);
  // Row d of the synchronised table is the bias [w_0, 0, ...]: touched by
  // every rank in every round it has a batch, as the last key.
  const auto biasRow = static_cast<std::uint32_t>(d);
  ss::TouchedFeatures touched(static_cast<std::size_t>(n), std::vector<std::vector<std::uint32_t>>(rounds));
  for (std::size_t r = 0; r < touched.size(); ++r)
    for (std::size_t m = 0; m < rounds; ++m) {
      const std::size_t b = m % perEpoch;
      if (b >= batches[r].size()) continue;
      touched[r][m].assign(batches[r][b].features.begin(), batches[r][b].features.end());
      touched[r][m].push_back(biasRow);
    }
  const SparseDataset& mine = shards[static_cast<std::size_t>(rank)];
  const auto& myBatches = batches[static_cast<std::size_t>(rank)];

  // Initial model, the same on every rank: w = 0, w_0 = 0, factors N(0, s^2).
  // `w` ((d + 1) x width) is what is synchronised; the factorization machine
  // reads the touched rows from it into `p` before each gradient.
  FmParameters p;
  std::optional<FactorizationMachine> machine;
  if (fm) {
    machine.emplace(d, sc.factors, sc.lambda);
    p = machine->initialParameters(sc.initStddev, config.seed());
  } else {
    p.table = DenseRows::Zero(d, 1);
  }
  const std::size_t tableSize = static_cast<std::size_t>(d) * width;
  std::vector<double> w(tableSize + width, 0.0);
  std::copy_n(p.table.data(), tableSize, w.begin());
  w[tableSize] = p.w0;

  Agent agent(config, rank, store, registry);
  Communicator& comm = agent.communicator();
  std::optional<ss::SparseExchange> exchange;
  if (sc.method != "dense") {
    const auto bounds = ss::partitionRanges(ss::featureCounts(touched, static_cast<std::size_t>(d) + 1), n);
    const auto schedule =
        sc.method == "direct" ? ss::planDirectTransmission(touched) : ss::existingSchedule(touched);
    // A sequence range of its own, far above the communicator's.
    exchange.emplace(agent.transport(), touched, bounds, schedule, width, w,
                     config.get<double>("transport.timeout_seconds"), std::uint64_t{1} << 36);
  }
  SparseSummary s;
  s.writer = rank == 0;
  s.roundsPerEpoch = perEpoch;
  s.planSeconds = sumOverRanks(comm, since(planStart), ReduceOp::kMax);

  std::vector<double> dense(sc.method == "dense" ? w.size() : 0), grads, lrRows;
  FmGradient g;
  double compute = 0, reduceSeconds = 0, lossSum = 0;
  int lossCount = 0;
  comm.barrier();
  const auto start = Clock::now();
  for (std::size_t m = 0; m < rounds; ++m) {
    const std::size_t b = m % perEpoch;
    const bool active = b < myBatches.size();
    if (exchange) exchange->broadcast(m, w);
    const auto t0 = Clock::now();
    grads.clear();
    if (active) {
      const MiniBatch& batch = myBatches[b];
      double loss = 0, g0 = 0;
      if (fm) {
        for (int f : batch.features)
          std::copy_n(w.data() + static_cast<std::size_t>(f) * width, width,
                      p.table.data() + static_cast<std::size_t>(f) * width);
        p.w0 = w[tableSize];
        loss = machine->lossAndGradient(p, mine, batch, g);
        grads.assign(g.rows.data(), g.rows.data() + g.rows.size());
        g0 = g.w0;
      } else {
        loss = lrLossAndGradient(mine, batch, w.data(), w[tableSize], sc.lambda, lrRows, g0);
        grads = lrRows;
      }
      grads.push_back(g0);  // the bias row, last
      grads.resize(grads.size() + width - 1, 0.0);
      if (m >= rounds - perEpoch) {
        lossSum += loss;
        ++lossCount;
      }
    }
    compute += since(t0);
    const auto t1 = Clock::now();
    if (exchange) {
      exchange->reduce(m, grads, sc.learningRate, w);
    } else {
      std::fill(dense.begin(), dense.end(), 0.0);
      if (active) {
        const auto& keys = touched[static_cast<std::size_t>(rank)][m];
        for (std::size_t k = 0; k < keys.size(); ++k)
          std::copy_n(grads.data() + k * width, width,
                      dense.data() + static_cast<std::size_t>(keys[k]) * width);
      }
      comm.allreduce(std::span<double>(dense), ReduceOp::kSum);
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] - sc.learningRate * dense[i];
    }
    reduceSeconds += since(t1);
  }
  const double total = since(start);
  if (exchange) w = exchange->gather();
  std::copy_n(w.begin(), tableSize, p.table.data());
  p.w0 = w[tableSize];
  const double epochs = sc.epochs;
  s.epochSeconds = sumOverRanks(comm, total, ReduceOp::kMax) / epochs;
  s.computeSeconds = sumOverRanks(comm, compute, ReduceOp::kMax) / epochs;
  if (exchange) {
    const auto& st = exchange->stats();
    s.broadcastSeconds = sumOverRanks(comm, st.broadcastSeconds, ReduceOp::kMax) / epochs;
    s.reduceSeconds = sumOverRanks(comm, reduceSeconds, ReduceOp::kMax) / epochs;
    s.elementsReduce = static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.reduceElements)));
    s.elementsDirect = static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.directElements)));
    s.elementsBroadcast =
        static_cast<std::uint64_t>(sumOverRanks(comm, static_cast<double>(st.broadcastElements)));
  } else {
    s.reduceSeconds = sumOverRanks(comm, reduceSeconds, ReduceOp::kMax) / epochs;
    // Each rank of a ring allreduce sends 2 (N - 1) / N of the vector.
    s.elementsReduce = static_cast<std::uint64_t>(2 * (n - 1)) * w.size() * rounds;
  }
  s.trainLoss = sumOverRanks(comm, lossSum) / std::max(1.0, sumOverRanks(comm, lossCount));
  // The model's bits: the table, then the bias row.
  const std::uint32_t crc = crc32c(std::as_bytes(std::span<const double>(w)));
  s.crc = crc;
  if (rank == 0 && !sc.test.empty()) {
    const SparseDataset test = readLibsvm(sc.test, d);
    int correct = 0;
    for (int i = 0; i < test.rows(); ++i) {
      double z = p.w0;
      if (fm) {
        z = machine->predict(p, test.x, i);
      } else {
        for (CsrMatrix::InnerIterator it(test.x, i); it; ++it)
          z += w[static_cast<std::size_t>(it.col())] * it.value();
      }
      correct += (z >= 0 ? 1.0 : -1.0) == test.y[i];
    }
    s.testAccuracy = test.rows() > 0 ? static_cast<double>(correct) / test.rows() : -1;
  }
  agent.close();
  return s;
}

std::string sparseSummaryJson(const SparseSummary& s, const Config& config) {
  const SparseTrainConfig sc = sparseConfigFrom(config);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", s.crc);
  std::ostringstream o;
  o.precision(9);
  o << "{\"model\":\"" << sc.model << "\",\"method\":\"" << sc.method
    << "\",\"world_size\":" << config.worldSize() << ",\"batch_size\":" << sc.batchSize
    << ",\"epochs\":" << sc.epochs << ",\"rounds_per_epoch\":" << s.roundsPerEpoch
    << ",\"elements_reduce\":" << s.elementsReduce << ",\"elements_direct\":" << s.elementsDirect
    << ",\"elements_broadcast\":" << s.elementsBroadcast << ",\"epoch_seconds\":" << s.epochSeconds
    << ",\"reduce_seconds\":" << s.reduceSeconds << ",\"broadcast_seconds\":" << s.broadcastSeconds
    << ",\"compute_seconds\":" << s.computeSeconds << ",\"plan_seconds\":" << s.planSeconds
    << ",\"crc32c\":\"" << crc << "\",\"train_loss\":" << s.trainLoss
    << ",\"test_accuracy\":" << s.testAccuracy << "}";
  return o.str();
}

}  // namespace gossamer::sparse
