// gossamer-admm: 2D-TGA-ADMM, consensus ADMM on L2-regularised sparse
// logistic regression (Wang et al., "A Communication Efficient ADMM-based
// Distributed Algorithm Using Two-Dimensional Torus Grouping AllReduce"
// (2023), Algorithm 2, Eqs. 6-9, Table 4; docs/admm.md).
//
//   gossamer-admm --config examples/configs/sparse/admm-spam.yaml
//       launches world_size ranks as processes on this machine;
//   gossamer-admm --config x.yaml --rank R --rendezvous DIR|tcp://HOST:PORT
//       runs one rank.
//
// Each rank reads the LIBSVM files, keeps its contiguous shard of the
// training rows (partition.hpp shard()) and runs optimizers::runAdmm with
// the allreduce of `collectives.allreduce`, its iterations as the rounds of a
// gossamer::Session: with the membership service on, the survivors of a rank
// that dies go back to the last iteration all of them completed and finish
// over the view. Rank 0 first solves Eq. 8 on the whole training set with the
// same Newton-CG solver (the reference optimum f* of Eq. 9 and the central
// model) and broadcasts f*, the central accuracy and time (three float64). The lowest rank alive prints one
// line per iteration (f_rerr, update and sync-wait seconds) and, last, a
// one-line JSON summary (also written to --summary-json).

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <new>
#include <nlohmann/json.hpp>

#include "admm_config.hpp"
#include "admm_objective.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/admm.hpp"
#include "gossamer/session.hpp"
#include "gossamer/transports/zmq.hpp"
#include "launch_ranks.hpp"
#include "libsvm.hpp"
#include "partition.hpp"
#include "summary_file.hpp"

namespace {

using gossamer::Config;
namespace sparse = gossamer::sparse;
namespace opt = gossamer::optimizers;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Data {
  sparse::SparseDataset train, test;
};

Data loadData(const sparse::AdmmConfig& a) {
  Data d;
  d.train = sparse::readLibsvm(a.train, a.features);
  // (0 would also tell the test file's reader to take its width from that file.)
  if (d.train.features() == 0)
    throw sparse::LibsvmError(a.train, 0, 0, 0,
                              "holds no feature index: set admm.features to the data's width");
  if (a.test.empty()) throw gossamer::ConfigError("", 0, "admm.test", "is empty: give a LIBSVM test file");
  d.test = sparse::readLibsvm(a.test, d.train.features());
  // An accuracy over no rows would read as 0 %, a model that is always wrong.
  if (d.test.rows() == 0) throw gossamer::ConfigError("", 0, "admm.test", a.test + " holds no rows");
  return d;
}

// The central reference: Eq. 8 on the whole training set.
struct Central {
  double objective = 0, testAccuracy = 0, seconds = 0;
  int newtonSteps = 0;
  double gradientNorm = 0;
};

Central solveCentral(const sparse::AdmmConfig& a, const Data& data) {
  const auto t0 = std::chrono::steady_clock::now();
  sparse::LogisticObjective full(data.train, a.l2);
  opt::NewtonCgOptions o = a.admm.solver;
  o.maxIterations = 1000;
  o.gradientTolerance = a.referenceTolerance;
  const auto r = opt::minimizeNewtonCg(full, Eigen::VectorXd::Zero(full.dimension()), o);
  // It stops at the gradient test, or where its trust region collapses
  // (double precision resolves no further progress); running out of steps
  // means neither happened.
  if (!r.converged && r.iterations >= o.maxIterations)
    throw gossamer::Error("the central solve did not reach admm.reference_tolerance in 1000 Newton steps");
  return {r.value, sparse::linearAccuracy(data.test, r.x), secondsSince(t0), r.iterations, r.gradientNorm};
}

// The ADMM iterations as a Session's lockstep rounds: one iteration a round.
// With the membership service on, this rank commits its x_i, lambda_i and z
// after every iteration; after a view change the survivors return to the
// newest iteration every one of them completed and go on over the view (z
// is then the survivors' consensus; the lost ranks' data leaves the
// objective). The lowest rank of the view prints each iteration.
class AdmmRounds final : public gossamer::RoundProgram {
 public:
  AdmmRounds(gossamer::Session& session, opt::LocalObjective& local, const opt::AdmmOptions& o)
      : session_(session), admm_(local, o) {}
  bool run(std::uint64_t) override {
    auto& comm = session_.agent().communicator();
    history_.push_back(admm_.iterate(comm));
    if (comm.rank() == 0) {
      const auto& it = history_.back();
      std::printf(
          "iter %3d  f_rerr %.3e  f %.8g  residual %.3e  update %.4f s  sync wait %.4f s  newton %d\n",
          it.iteration, it.relativeError, it.objective, it.primalResidual, it.updateSeconds,
          it.syncWaitSeconds, it.solverIterations);
      std::fflush(stdout);
    }
    return !admm_.converged();
  }
  bool commit(std::uint64_t rounds) override {
    if (!session_.elastic()) return false;  // nothing to return to without view changes
    previous_ = std::move(newest_);
    newest_ = {rounds, admm_.state(), history_.size()};
    return true;
  }
  void restore(std::uint64_t rounds, const gossamer::ViewChange& change) override {
    const Commit c = newest_.rounds == rounds ? newest_ : previous_;
    admm_.setState(c.state);
    history_.resize(c.history);
    newest_ = previous_ = c;
    if (session_.agent().communicator().rank() == 0) {
      std::printf("view %llu: %zu ranks, back to iteration %llu\n",
                  static_cast<unsigned long long>(change.view.number), change.view.members.size(),
                  static_cast<unsigned long long>(rounds));
      std::fflush(stdout);
    }
  }
  const opt::ConsensusAdmm& admm() const { return admm_; }
  const std::vector<opt::AdmmIteration>& history() const { return history_; }

 private:
  struct Commit {
    std::uint64_t rounds = 0;
    opt::ConsensusAdmm::State state;
    std::size_t history = 0;
  };
  gossamer::Session& session_;
  opt::ConsensusAdmm admm_;
  std::vector<opt::AdmmIteration> history_;
  Commit newest_{0, admm_.state(), 0}, previous_ = newest_;
};

// The rank-0 summary of a run: the convergence curve, the times split as in
// Table 4, the test accuracies, and the ranks the job lost on the way.
nlohmann::json summaryOf(const Config& c, const opt::AdmmOptions& o, const Data& data, const Central& central,
                         const AdmmRounds& rounds, gossamer::Session& session, double seconds) {
  auto& comm = session.agent().communicator();
  nlohmann::json curve = nlohmann::json::array();
  double update = 0, sync = 0;
  int toTolerance = -1;
  for (const auto& it : rounds.history()) {
    curve.push_back({{"iteration", it.iteration},
                     {"f_rerr", it.relativeError},
                     {"objective", it.objective},
                     {"primal_residual", it.primalResidual},
                     {"update_seconds", it.updateSeconds},
                     {"sync_wait_seconds", it.syncWaitSeconds}});
    update += it.updateSeconds;
    sync += it.syncWaitSeconds;
    if (toTolerance < 0 && it.relativeError <= 1e-3) toTolerance = it.iteration;
  }
  const double iters = static_cast<double>(rounds.history().size());
  std::vector<int> lost;
  for (const auto& change : session.viewChanges())
    lost.insert(lost.end(), change.lost.begin(), change.lost.end());
  return {{"program", "gossamer-admm"},
          {"allreduce_algorithm", gossamer::toString(comm.options().algorithm)},
          {"transport", c.get<std::string>("transport.kind")},
          {"world_size", c.worldSize()},
          {"survivors", session.view().members},
          {"lost", lost},
          {"rho", o.rho},
          {"features", rounds.admm().z().size()},
          {"train_rows", data.train.rows()},
          {"test_rows", data.test.rows()},
          {"iterations", rounds.history().size()},
          {"converged", rounds.admm().converged()},
          {"tolerance", o.tolerance},
          {"iterations_to_1e-3", toTolerance < 0 ? nlohmann::json(nullptr) : nlohmann::json(toTolerance)},
          {"final_f_rerr", rounds.history().back().relativeError},
          {"update_seconds", update},  // the totals, as the paper's Table 4
          {"sync_wait_seconds", sync},
          {"update_seconds_per_iteration", update / iters},
          {"sync_wait_seconds_per_iteration", sync / iters},
          {"seconds", seconds},
          {"reference_objective", central.objective},
          {"test_accuracy", sparse::linearAccuracy(data.test, rounds.admm().z())},
          {"central_test_accuracy", central.testAccuracy},
          {"central_seconds", central.seconds},
          {"curve", curve}};
}

// One rank: its shard, the central reference on rank 0, then the ADMM
// iterations over the Session. Returns the summary on the lowest rank of the
// last view, null elsewhere.
nlohmann::json runRank(const Config& c, int rank, const Data& data, gossamer::Store& store,
                       const gossamer::Registry& registry) {
  const sparse::AdmmConfig a = sparse::admmConfigFrom(c);
  gossamer::Session session(c, rank, store, registry);
  // (Read once every rank's transport is up: see apps::jobNonce.)
  const std::string job = gossamer::apps::jobNonce(store, rank, c.getOr("membership.restarted", false),
                                                   c.get<double>("transport.timeout_seconds"));
  auto& comm = session.agent().communicator();
  const int n = comm.worldSize();
  const sparse::SparseDataset shard = sparse::shard(data.train, rank, n);
  sparse::LogisticObjective local(shard, a.l2 / n);

  Central central;
  if (rank == 0) {
    central = solveCentral(a, data);
    std::printf("central: f* %.10g  test accuracy %.2f%%  (%d Newton steps, gradient norm %.1e, %.2f s)\n",
                central.objective, 100 * central.testAccuracy, central.newtonSteps, central.gradientNorm,
                central.seconds);
    std::fflush(stdout);
  }
  // f*, and the central model's accuracy and time for whichever rank writes the summary.
  double reference[3] = {central.objective, central.testAccuracy, central.seconds};
  comm.broadcast(std::span<double>(reference, 3), 0);
  central.objective = reference[0];
  central.testAccuracy = reference[1];
  central.seconds = reference[2];

  opt::AdmmOptions o = a.admm;
  // f_rerr divides by f*: it must be a positive number (an empty training
  // file gives 0, separable data without l2 a value near 0).
  if (!(central.objective > 1e-12) || !std::isfinite(central.objective))
    throw gossamer::Error("admm: the central optimum f* is " + std::to_string(central.objective) +
                          ", and f_rerr = |f - f*| / f* needs it well above 0 (no training rows, or data a "
                          "line separates with admm.l2 0: set admm.l2 above 0)");
  o.referenceObjective = central.objective;
  if (rank == 0)
    std::printf("admm: %d ranks, allreduce %s, rho %g, d %d, %d training rows (%d on rank 0)\n", n,
                gossamer::toString(comm.options().algorithm), o.rho, local.dimension(), data.train.rows(),
                shard.rows());
  const auto t0 = std::chrono::steady_clock::now();
  AdmmRounds rounds(session, local, o);
  session.runRounds(static_cast<std::uint64_t>(o.maxIterations), rounds);
  const double seconds = secondsSince(t0);
  nlohmann::json summary;
  if (session.agent().communicator().rank() == 0) {
    summary = summaryOf(c, o, data, central, rounds, session, seconds);
    summary["job"] = job;
  }
  session.close();
  return summary;
}

void emitSummary(const nlohmann::json& summary, const std::string& path) {
  nlohmann::json line = summary;
  line.erase("curve");  // the console line stays short; the file has the curve
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  // The side of a job split for good that outranks the others keeps the file.
  if (!path.empty()) {
    const std::vector<int> standing = gossamer::apps::writeSummaryFile(path, summary.dump());
    if (!standing.empty())
      std::fprintf(stderr, "gossamer-admm: the job ended split; '%s' keeps the summary of %zu ranks\n",
                   path.c_str(), standing.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamer-admm: consensus ADMM (2D-TGA-ADMM) on sparse logistic regression"};
  std::string configPath, rendezvous, summaryPath;
  int rank = -1;
  app.add_option("--config", configPath, "YAML config (section admm:, collectives.allreduce)")->required();
  app.add_option("--rank", rank, "run only this rank (needs --rendezvous)")->check(CLI::NonNegativeNumber);
  app.add_option("--rendezvous", rendezvous,
                 "with --rank: a directory shared by all ranks, or tcp://HOST:PORT served by rank 0");
  app.add_option(
      "--summary-json", summaryPath,
      "also write the JSON summary (with the curve) to this file (rank 0's; with membership, that "
      "of the lowest rank of the final view, the larger side's of a job a partition split for good)");
  std::vector<std::string> overrides;
  app.add_option("--set", overrides,
                 "KEY=VALUE: overrides a key of the config (repeatable; checked like the file)");
  CLI11_PARSE(app, argc, argv);
  try {
    const gossamer::Registry registry = sparse::makeAdmmRegistry();
    const Config c = registry.load(configPath, overrides);
    if (rank >= 0) {
      if (rendezvous.empty()) throw gossamer::InvalidArgument("--rank needs --rendezvous DIR");
      if (rank >= c.worldSize())
        throw gossamer::InvalidArgument("--rank " + std::to_string(rank) + " outside world_size " +
                                        std::to_string(c.worldSize()));
      try {
        const Data data = loadData(sparse::admmConfigFrom(c));
        gossamer::zmq::Rendezvous rv(rendezvous, rank, c.get<double>("transport.timeout_seconds"));
        const auto summary = runRank(c, rank, data, rv.store(), registry);
        if (!summary.is_null()) emitSummary(summary, summaryPath);
      } catch (const std::bad_alloc&) {
        const int features = c.get<int>("admm.features");
        throw gossamer::Error("out of memory: each rank holds several float64 vectors of admm.features (" +
                              (features > 0 ? std::to_string(features) + ", " +
                                                  std::to_string((features + (1 << 17) - 1) / (1 << 17)) +
                                                  " MiB each, rounded up"
                                            : std::string("0: the largest index in the files")) +
                              ") entries: lower admm.features");
      }
      return 0;
    }
    return gossamer::sparse::launchRanks("gossamer-admm", c, configPath, overrides, summaryPath);
  } catch (const std::exception& e) {
    if (rank >= 0)
      std::fprintf(stderr, "gossamer-admm rank %d: error: %s\n", rank, e.what());
    else
      std::fprintf(stderr, "gossamer-admm: error: %s\n", e.what());
    return 1;
  }
}
