// gossamer-sparse: sparse mini-batch SGD (logistic regression or a
// factorization machine on LIBSVM data) over N processes, synchronised by
// dense allreduce, the existing sparse reduce + broadcast, or direct
// transmission (Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication";
// docs/sparse-sync.md).
//
//   gossamer-sparse --config examples/configs/sparse/sparse-sync.yaml [--set sparse.method=existing]
//       launches world_size ranks as processes on this machine;
//   gossamer-sparse --config x.yaml --rank R --rendezvous DIR|tcp://HOST:PORT
//       runs one rank.
// Rank 0 prints a one-line JSON summary (sparseSummaryJson) last.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>
#include <string>

#include "components.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/transports/zmq.hpp"
#include "launch_ranks.hpp"
#include "sparse_trainer.hpp"
#include "summary_file.hpp"

namespace {

int runOneRank(const gossamer::Registry& registry, const gossamer::Config& c, int rank,
               const std::string& rendezvous, const std::string& summaryPath) {
  gossamer::zmq::Rendezvous rv(rendezvous, rank, c.get<double>("transport.timeout_seconds"));
  gossamer::sparse::SparseSummary s;
  try {
    s = gossamer::sparse::runSparseRank(c, rank, rv.store(), registry);
  } catch (const std::bad_alloc&) {
    const int features = c.get<int>("sparse.features");
    throw gossamer::Error(
        "out of memory: the model's weights are sparse.features (" +
        (features > 0 ? std::to_string(features) : std::string("0: the largest index in the files")) +
        ") x (sparse.factors + 1 for model fm, 1 for lr) float32 per copy, and each rank holds several: "
        "lower sparse.features or sparse.factors");
  }
  if (s.writer) {
    const std::string json = gossamer::sparse::sparseSummaryJson(s, c);
    std::printf("%s\n", json.c_str());
    std::fflush(stdout);
    // The side of a job split for good that outranks the others keeps the file.
    if (!summaryPath.empty()) {
      const std::vector<int> standing = gossamer::apps::writeSummaryFile(summaryPath, json);
      if (!standing.empty())
        std::fprintf(stderr, "gossamer-sparse: the job ended split; '%s' keeps the summary of %zu ranks\n",
                     summaryPath.c_str(), standing.size());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gossamer-sparse: sparse models trained with sparse synchronisation"};
  std::string configPath, rendezvous, summaryPath;
  int rank = -1;
  std::vector<std::string> overrides;
  app.add_option("--config", configPath, "YAML config (docs/sparse-sync.md)")->required();
  app.add_option("--rank", rank, "run only this rank (needs --rendezvous)")->check(CLI::NonNegativeNumber);
  app.add_option("--rendezvous", rendezvous,
                 "with --rank: a shared directory, or tcp://HOST:PORT served by rank 0");
  app.add_option(
      "--summary-json", summaryPath,
      "also write the JSON summary to this file (rank 0's; with membership, that of the lowest rank of "
      "the final view, the larger side's of a job a partition split for good)");
  app.add_option("--set", overrides, "KEY=VALUE overriding a key of the config (repeatable)");
  CLI11_PARSE(app, argc, argv);
  try {
    const gossamer::Registry registry = gossamer::sparse::makeSparseRegistry();
    const gossamer::Config c = registry.load(configPath, overrides);
    if (rank >= 0) {
      if (rendezvous.empty()) throw gossamer::InvalidArgument("--rank needs --rendezvous");
      if (rank >= c.worldSize())
        throw gossamer::InvalidArgument("--rank " + std::to_string(rank) + " outside world_size " +
                                        std::to_string(c.worldSize()));
      return runOneRank(registry, c, rank, rendezvous, summaryPath);
    }
    return gossamer::sparse::launchRanks("gossamer-sparse", c, configPath, overrides, summaryPath);
  } catch (const std::exception& e) {
    if (rank >= 0)
      std::fprintf(stderr, "gossamer-sparse rank %d: error: %s\n", rank, e.what());
    else
      std::fprintf(stderr, "gossamer-sparse: error: %s\n", e.what());
    return 1;
  }
}
