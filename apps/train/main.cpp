// gossamer-train: decentralised training of a Fashion-MNIST classifier.
//
//   gossamer-train --config examples/configs/quickstart-crossover.yaml
//       launches world_size peers as processes on this machine (zmq or
//       libfabric over loopback), or as threads when transport.kind is inproc;
//   gossamer-train --config x.yaml --rank R --rendezvous DIR|tcp://HOST:PORT
//       runs one rank; for multi-host runs use tcp://HOST:PORT (rank 0 serves
//       the rendezvous there) or a DIR on a shared file system;
//   mpirun -n 4 gossamer-train --config x.yaml    (or torchrun, srun, Hydra)
//       runs the rank the launcher's variables name (--from-env, automatic
//       when they name more than one rank; see gossamer/launch_env.hpp).
//
// On a terminal the progress rank (--progress-rank, default 0) draws a bar
// (epoch, step, steps/s, loss, ETA); otherwise it prints a plain line every
// --progress-seconds. Rank 0 prints one line per epoch and, last, one line
// that sums up the run; the JSON summary goes to <run.dir>/summary.json and
// to --summary-json.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli_checks.hpp"
#include "components.hpp"
#include "dataset.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/launch_env.hpp"
#include "gossamer/launcher.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"
#include "gossamer/transports/socket.hpp"
#include "gossamer/transports/zmq.hpp"
#include "progress.hpp"
#include "summary_file.hpp"
#include "train_config.hpp"
#include "trainer.hpp"
#ifdef GOSSAMER_HAVE_LIBFABRIC
#include "gossamer/transports/libfabric.hpp"
#endif

namespace {

using gossamer::Config;
namespace train = gossamer::train;

/// `v` as text that reads back as the same double ("1e-07", not
/// std::to_string's "0.000000"), for a child's command line.
std::string exactText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string epochLine(const Config& c, const train::EpochMetrics& m) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "epoch %d/%d  loss %.4f  test acc (avg model) %.2f%%  (rank 0) %.2f%%  consensus %.3e  "
                "sent/peer %.1f MB  %.1f s",
                m.epoch, c.get<int>("training.epochs"), m.trainLoss, 100 * m.testAccuracyAverage,
                100 * m.testAccuracyRank0, m.consensusDistance, m.bytesSentPerPeer / 1e6, m.seconds);
  return buf;
}

// How this process shows progress: the options, and the display when this
// process runs the progress rank (or prints epoch lines).
struct Display {
  train::ProgressMode mode = train::ProgressMode::kAuto;
  double lineSeconds = 10;
  int rank = 0;  // --progress-rank
  std::unique_ptr<train::Progress> progress;
  std::mutex mu;  // threads of the inproc job

  train::Progress& get() {
    if (!progress) progress = std::make_unique<train::Progress>(mode, lineSeconds);
    return *progress;
  }
  void epoch(const Config& c, const train::EpochMetrics& m) {
    std::lock_guard<std::mutex> lk(mu);
    get().line(epochLine(c, m));
  }
  std::function<void(const train::StepProgress&)> stepsOf(int r) {
    if (r != rank || mode == train::ProgressMode::kOff) return {};
    return [this, started = false](const train::StepProgress& p) mutable {
      std::lock_guard<std::mutex> lk(mu);
      if (!started) get().start(p.epochs, p.stepsPerEpoch);
      started = true;
      get().update(p.step, p.epoch, p.loss);
    };
  }
};

// "0, 1, 2": ranks for a message.
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Writes the JSON summary to `path` (if any) and to the run directory, and
// prints one line that sums the run up.
void emitSummary(Display& display, const train::TrainSummary& s, const Config& c, const std::string& path) {
  const std::string json = train::summaryJson(s, c);
  std::vector<std::string> written;
  for (const std::string& p : {path, s.runDir.empty() ? std::string() : s.runDir + "/summary.json"}) {
    if (p.empty()) continue;
    const std::vector<int> standing = gossamer::apps::writeSummaryFile(p, json);
    if (standing.empty())
      written.push_back(p);
    else
      std::fprintf(stderr,
                   "gossamer-train: the job ended split in views that never joined again; '%s' keeps the "
                   "summary of ranks %s, which outranks this view's (ranks %s)\n",
                   p.c_str(), rankList(standing).c_str(), rankList(s.survivors).c_str());
  }
  // The ranks of the final view: those that finished the job together.
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "done: %s, %d ranks, %d epochs in %.1f s: test accuracy %.2f%% (average model), consensus "
                "%.2e, %.1f MB sent per peer%s%s",
                s.algorithm.c_str(), s.survivors.empty() ? s.worldSize : static_cast<int>(s.survivors.size()),
                s.epochs, s.wallSeconds, 100 * s.testAccuracy, s.consensusDistance, s.bytesSentPerPeer / 1e6,
                written.empty() ? "" : "; summary: ", written.empty() ? "" : written.back().c_str());
  std::lock_guard<std::mutex> lk(display.mu);
  display.get().finish(buf);
}

train::FashionMnist loadData(const Config& c) {
  const train::DataConfig d = train::trainConfigFrom(c).data;
  return train::loadFashionMnist(d.path, d.trainLimit, d.testLimit, d.standardize);
}

// One rank of a multi-process job. `rendezvous` is a directory shared by all
// ranks (FileStore), or tcp://HOST:PORT, where rank 0 serves the store.
int runOneRank(const gossamer::Registry& registry, const Config& c, int rank, const std::string& rendezvous,
               const std::string& summaryPath, Display& display) {
  const auto data = loadData(c);
  gossamer::zmq::Rendezvous rv(rendezvous, rank, c.get<double>("transport.timeout_seconds"));
  auto& store = rv.store();
  const auto s = train::runRank(
      c, rank, data, store, registry, [&](const train::EpochMetrics& m) { display.epoch(c, m); },
      display.stepsOf(rank));
  if (s.writer) emitSummary(display, s, c, summaryPath);
  return 0;
}

// Without --rank: the rank, world size and rendezvous a launcher's variables
// name (discoverLaunch), taken with --from-env or when they name more than
// one rank (a world of one without a rendezvous runs here, as a job of one
// rank). A --rendezvous given here wins over the launcher's.
// @throws InvalidArgument with --from-env and no launcher's variables, or
//         from discoverLaunch.
void rankFromLauncher(bool fromEnv, int& rank, std::string& rendezvous, std::vector<std::string>& overrides) {
  const gossamer::EnvLookup processEnv = gossamer::processEnvironment();
  const std::string given = rendezvous;
  const auto launch = gossamer::discoverLaunch([&](const std::string& name) -> std::optional<std::string> {
    if (name == "GOSSAMER_RENDEZVOUS" && !given.empty()) return given;
    return processEnv(name);
  });
  if (fromEnv && !launch)
    throw gossamer::InvalidArgument(
        "--from-env: none of RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, "
        "SLURM_PROCID/NTASKS is set");
  if (launch && (fromEnv || launch->worldSize > 1)) {
    // The launcher decides the world size; the config is checked with it.
    overrides.push_back("world_size=" + std::to_string(launch->worldSize));
    // A world of one that names no rendezvous meets nobody: it runs here,
    // as a job of one rank started by this process.
    if (launch->rendezvous.empty()) return;
    rank = launch->rank;
    rendezvous = launch->rendezvous;
  }
}

// --job ID (the running job's rendezvous on this host) and --join ID: the
// rendezvous they name; --join and --rejoin also turn the membership
// service's joining on.
void resolveJob(const std::string& job, const std::string& join, bool rejoin, int rank,
                std::string& rendezvous, std::vector<std::string>& overrides) {
  if (!job.empty()) {
    if (!rendezvous.empty()) throw gossamer::InvalidArgument("--job and --rendezvous both name the job");
    rendezvous = gossamer::jobRendezvous(job);
  }
  if (!join.empty()) {
    if (rank >= 0 || rejoin || !rendezvous.empty())
      throw gossamer::InvalidArgument(
          "--join takes no --rank, --rejoin, --job or --rendezvous: it claims a rank");
    rendezvous = join.find('/') == std::string::npos ? gossamer::jobRendezvous(join) : join;
  }
  if (rejoin || !join.empty()) {
    if (rank < 0 && join.empty()) throw gossamer::InvalidArgument("--rejoin needs --rank and --job");
    for (const char* kv : {"membership.enabled=true", "membership.rejoin=true", "membership.restarted=true"})
      overrides.emplace_back(kv);
  }
}

// The rank a process started with --join takes: the lowest free one from
// world_size up to membership.max_world_size (claimJoinRank).
int claimRank(const Config& c, const std::string& rendezvous) {
  const int most = gossamer::maxWorldSize(c);
  if (most <= c.worldSize())
    throw gossamer::ConfigError(c.sourceFile, 0, "membership.max_world_size",
                                "the job takes no rank beyond world_size " + std::to_string(c.worldSize()) +
                                    ": start it with membership.max_world_size above that");
  // A client only: it serves nothing, and the Rendezvous of the rank it
  // claims is still this process's first.
  const auto store = gossamer::zmq::openStore(rendezvous, c.get<double>("transport.timeout_seconds"));
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return gossamer::claimJoinRank(*store, c.worldSize(), most,
                                 std::string(host) + ":" + std::to_string(::getpid()));
}

// Every rank as a thread of this process over the inproc transport.
// One process per rank (`option`: --rank, --join) needs a transport that
// links processes (not inproc, whose ranks are threads of one process): a
// rank alone would lose its peers at once and train by itself.
void requireProcessTransport(const gossamer::Registry& registry, const Config& c, const std::string& option) {
  const std::string kind = c.get<std::string>("transport.kind");
  if (!registry.transportTraits(kind).spansProcesses)
    throw gossamer::InvalidArgument(option + " with transport.kind " + kind +
                                    ", whose ranks are threads of one process: use zmq, socket or libfabric");
}

int runThreads(const gossamer::Registry& registry, const Config& c, const std::string& summaryPath,
               Display& display) {
  const auto data = loadData(c);
  gossamer::MemoryStore store;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(c.worldSize()));
  // Rank 0 of each final view is a writer: one, or one per side of a
  // partition that never healed, of which the outranking one's summary stands.
  std::mutex writersMu;
  train::TrainSummary summary0;
  std::vector<std::vector<int>> views;
  std::vector<std::thread> threads;
  for (int r = 0; r < c.worldSize(); ++r) {
    threads.emplace_back([&, r] {
      try {
        auto s = train::runRank(
            c, r, data, store, registry, [&](const train::EpochMetrics& m) { display.epoch(c, m); },
            display.stepsOf(r));
        if (!s.writer) return;
        std::lock_guard<std::mutex> lk(writersMu);
        views.push_back(s.survivors);
        if (views.size() == 1 || gossamer::apps::summaryOutranks(s.survivors, summary0.survivors))
          summary0 = std::move(s);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.worldSize(); ++r)
    if (errors[static_cast<std::size_t>(r)]) {
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gossamer-train rank %d: error: %s\n", r, e.what());
      }
      return 1;
    }
  if (views.size() > 1) {
    std::string sides;
    for (const auto& v : views) sides += std::string(sides.empty() ? "" : "; ") + "ranks " + rankList(v);
    std::fprintf(stderr,
                 "gossamer-train: the job ended split in %zu views that never joined again (%s); the summary "
                 "is that of ranks %s\n",
                 views.size(), sides.c_str(), rankList(summary0.survivors).c_str());
  }
  emitSummary(display, summary0, c, summaryPath);
  return 0;
}

// Where the ranks of a job whose rendezvous is a directory write the summary
// when --summary-json names no file, so that the launcher that made the
// directory reads it; "" for a tcp:// rendezvous.
std::string rendezvousSummary(const std::string& rendezvous) {
  return rendezvous.rfind("tcp://", 0) == 0 ? std::string() : rendezvous + "/summary.json";
}

// Launches every rank as a child process and waits for them. A rank that
// fails makes its peers fail within the transport timeout (PeerFailure or
// TimeoutError); the launcher only reports, and reaps stragglers after that.
// " --set 'K=V'" for each override, quoted for a POSIX shell.
std::string shellSets(const std::vector<std::string>& overrides) {
  std::string out;
  for (const auto& o : overrides) {
    std::string quoted = "'";
    for (char ch : o) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += " --set " + quoted + "'";
  }
  return out;
}

int launchProcesses(const Config& c, const std::string& configPath, const std::vector<std::string>& overrides,
                    const std::string& summaryPath, const std::string& binding,
                    const std::vector<std::string>& progressArgs) {
  gossamer::LaunchOptions o;
  o.worldSize = c.worldSize();
  o.binding = gossamer::parseCpuBinding(binding);
  // With the membership service the survivors of a dead rank go on to the
  // end; without it they stop within their transport timeout.
  const bool membership = c.getOr("membership.enabled", false);
  const double stopSeconds =
      c.get<double>("transport.timeout_seconds") + c.get<double>("transport.linger_seconds") + 5;
  o.failureGraceSeconds = membership ? std::numeric_limits<double>::infinity() : stopSeconds;
  // Once a rank finished, the job has ended: a rank it removed that never
  // exits (stopped, hung) is killed, after the time to notice and stop (and
  // at least as long again as the job had run, for the other side of a
  // partition that never healed, which trains to its own end).
  o.finishGraceSeconds = stopSeconds + (membership ? c.get<double>("membership.suspect_seconds") +
                                                         c.get<double>("membership.agreement_seconds") + 30
                                                   : 0.0);
  o.name = "gossamer-train";
  // A rank killed and restarted in place (--job ID --rank R --rejoin), or
  // one that joined, runs on without the launcher: it waits for them.
  o.followJob = membership;
  // With membership, the ranks also write the summary into the rendezvous
  // directory (unless --summary-json names a file), so that the launcher
  // can tell a rank whose process it saw killed but that a restarted
  // process brought back.
  std::string summaryFile = summaryPath;
  // The ranks of the job's final view, from the summary that stands (none
  // when it cannot be read): a rank there whose launched process was killed
  // came back in a process restarted in its place.
  if (membership)
    o.replacedRanks = [&](const std::string&) { return gossamer::apps::survivorsInSummary(summaryFile); };
  const auto result = gossamer::launchLocalRanks(o, [&](int r, const std::string& rendezvous) {
    if (r == 0) {
      if (membership && summaryFile.empty()) summaryFile = rendezvousSummary(rendezvous);
      const std::string id = gossamer::jobIdOf(rendezvous);
      std::fprintf(stderr, "gossamer-train: job %s (rendezvous %s)\n", id.c_str(), rendezvous.c_str());
      if (membership) {
        // With this launch's overrides: a process of the job runs with its settings.
        const std::string sets = shellSets(overrides);
        std::fprintf(stderr,
                     "gossamer-train: restart a failed rank R with: gossamer-train --config %s%s --job %s "
                     "--rank R --rejoin\n",
                     configPath.c_str(), sets.c_str(), id.c_str());
        if (gossamer::maxWorldSize(c) > c.worldSize())
          std::fprintf(stderr,
                       "gossamer-train: add a rank (up to %d) with: gossamer-train --config %s%s --join %s\n",
                       gossamer::maxWorldSize(c), configPath.c_str(), sets.c_str(), id.c_str());
      }
    }
    std::vector<std::string> args = {"gossamer-train",  "--config",     configPath, "--rank",
                                     std::to_string(r), "--rendezvous", rendezvous};
    for (const auto& o : overrides) {
      args.push_back("--set");
      args.push_back(o);
    }
    args.insert(args.end(), progressArgs.begin(), progressArgs.end());
    if ((r == 0 || membership) && !summaryFile.empty()) {  // the lowest survivor writes it
      args.push_back("--summary-json");
      args.push_back(summaryFile);
    }
    return args;
  });
  for (std::size_t r = 0; r < result.ranks.size(); ++r)
    if (result.ranks[r].outcome == gossamer::RankOutcome::kReplaced)
      std::fprintf(
          stderr,
          "gossamer-train: rank %zu's first process was killed (signal %d); a process restarted in its "
          "place rejoined the job and finished with it\n",
          r, result.ranks[r].signal);
  if (result.signal != 0) return 128 + result.signal;  // as a shell reports a process ended by it
  if (membership && !result.killed) {
    // The job succeeded if every rank that was not killed from outside
    // finished, and some rank finished: one of the launcher's, or a process
    // restarted in place of one that was killed.
    bool finished = false, failed = false;
    for (const auto& x : result.ranks) {
      const bool done =
          x.outcome == gossamer::RankOutcome::kFinished || x.outcome == gossamer::RankOutcome::kReplaced;
      finished = finished || done;
      failed = failed || (!done && x.signal == 0);
    }
    return finished && !failed ? 0 : 1;
  }
  return result.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamer-train: decentralised training of a Fashion-MNIST classifier"};
  std::string configPath, rendezvous, summaryPath;
  int rank = -1;
  app.add_option("--config", configPath, "YAML config (see README, 'YAML schema')")->required();
  app.add_option("--rank", rank, "run only this rank (needs --rendezvous)")->check(CLI::NonNegativeNumber);
  app.add_option("--rendezvous", rendezvous,
                 "with --rank (or under a launcher: it wins over the launcher's): a directory shared by all "
                 "ranks, or tcp://HOST:PORT served by rank 0");
  app.add_option(
      "--summary-json", summaryPath,
      "also write the JSON summary to this file (it always goes to <run.dir>/summary.json when the "
      "run has a run directory)");
  std::string progress = "auto";
  app.add_option(
         "--progress", progress,
         "auto (default): a bar on a terminal, plain lines otherwise; bar; lines; off (epoch lines and "
         "the final line only)")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}));
  int progressRank = 0;
  app.add_option("--progress-rank", progressRank, "the rank that shows step progress (default 0)")
      ->check(CLI::NonNegativeNumber);
  double progressSeconds = 10;
  app.add_option("--progress-seconds", progressSeconds,
                 "seconds between plain progress lines, 0.001 to 86400 (default 10)")
      ->check(gossamer::apps::finiteIn(0.001, 86400.0));
  std::vector<std::string> overrides;
  app.add_option("--set", overrides,
                 "KEY=VALUE: overrides a key of the config after loading it, e.g. --set training.epochs=1 "
                 "(repeatable; checked like the file)");
  std::string binding = "none";
  app.add_option(
         "--bind", binding,
         "processes on this machine: core puts rank r on CPU r mod C only; none (default) lets the OS "
         "place them")
      ->check(CLI::IsMember({"core", "none"}));
  bool rejoin = false;
  app.add_flag(
      "--rejoin", rejoin,
      "with --rank: this process replaces that rank of a running job, which failed; it loads its "
      "newest checkpoint (checkpoint.dir) if there is one, asks the others to take it back and "
      "receives their model (sets membership.enabled, rejoin and restarted; zmq, socket or libfabric "
      "transport)");
  std::string job;
  app.add_option("--job", job,
                 "with --rank: the running job's id, which the launcher printed (its rendezvous directory on "
                 "this host), instead of --rendezvous");
  std::string join;
  app.add_option(
      "--join", join,
      "join the running job with this id (or rendezvous directory, or tcp://HOST:PORT) as a new rank: "
      "it claims the lowest free rank from world_size up to membership.max_world_size, and the "
      "members take it in and give it their model (sets membership.enabled, rejoin and restarted)");
  bool fromEnv = false;
  app.add_flag("--from-env", fromEnv,
               "run the rank that the launcher's variables name (torchrun, mpirun, srun, Hydra; automatic "
               "when they name more than one rank and --rank is not given)");
  CLI11_PARSE(app, argc, argv);
  try {
    const gossamer::Registry registry = train::makeTrainRegistry();
    if (rank < 0) rankFromLauncher(fromEnv, rank, rendezvous, overrides);
    resolveJob(job, join, rejoin, rank, rendezvous, overrides);
    const Config c = registry.load(configPath, overrides);
    Display display;
    display.mode = train::parseProgressMode(progress);
    display.lineSeconds = progressSeconds;
    display.rank = progressRank;
    // The children of the local launcher show what this process was asked to.
    const std::vector<std::string> progressArgs = {"--progress",         progress,
                                                   "--progress-rank",    std::to_string(progressRank),
                                                   "--progress-seconds", exactText(progressSeconds)};
    if (binding != "none" && (rank >= 0 || c.get<std::string>("transport.kind") == "inproc"))
      std::fprintf(stderr, "gossamer-train: --bind %s ignored: %s\n", binding.c_str(),
                   rank >= 0 ? "with --rank, whoever starts the ranks places them"
                             : "inproc ranks are threads of this process");
    if (!join.empty() || rank >= 0) requireProcessTransport(registry, c, !join.empty() ? "--join" : "--rank");
    if (!join.empty()) {
      rank = claimRank(c, rendezvous);
      std::fprintf(stderr, "gossamer-train: joins the job as rank %d\n", rank);
      if (summaryPath.empty()) summaryPath = rendezvousSummary(rendezvous);
      const gossamer::JobProcessMark mark(rendezvous);  // the launcher waits for this process
      return runOneRank(registry, c, rank, rendezvous, summaryPath, display);
    }
    if (rank >= 0) {
      if (rendezvous.empty()) throw gossamer::InvalidArgument("--rank needs --rendezvous DIR or --job ID");
      // A rank beyond world_size that joined and failed may be restarted too.
      const int most = rejoin ? gossamer::maxWorldSize(c) : c.worldSize();
      if (rank >= most)
        throw gossamer::InvalidArgument("--rank " + std::to_string(rank) + " outside world_size " +
                                        std::to_string(most));
      // A restarted rank writes the summary where the launcher reads it,
      // as the launcher's own ranks do (it may be the one that writes it).
      if (rejoin && summaryPath.empty()) summaryPath = rendezvousSummary(rendezvous);
      const gossamer::JobProcessMark mark(rendezvous);  // the launcher waits for this process
      return runOneRank(registry, c, rank, rendezvous, summaryPath, display);
    }
    if (c.get<std::string>("transport.kind") == "inproc")
      return runThreads(registry, c, summaryPath, display);
    return launchProcesses(c, configPath, overrides, summaryPath, binding, progressArgs);
  } catch (const std::exception& e) {
    if (rank >= 0)
      std::fprintf(stderr, "gossamer-train rank %d: error: %s\n", rank, e.what());
    else
      std::fprintf(stderr, "gossamer-train: error: %s\n", e.what());
    return 1;
  }
}
