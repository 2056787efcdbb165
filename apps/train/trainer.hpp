// The main job's per-rank training loop (apps/train/main.cpp drives it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "gossamer/config.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::train {

/// Metrics of one epoch, the same on every rank after the epoch's collectives
/// (accuracies are computed by rank 0 only and are NaN elsewhere).
struct EpochMetrics {
  int epoch = 0;                   ///< 1-based.
  double trainLoss = 0;            ///< Mean mini-batch loss over ranks and steps.
  double testAccuracyAverage = 0;  ///< Test accuracy of the peers' average model, in [0, 1].
  double testAccuracyRank0 = 0;  ///< Test accuracy of rank 0's own model (the lowest live rank's), in [0, 1].
  double consensusDistance = 0;  ///< (1/n) sum_i ||xbar - x_i||^2.
  double bytesSentPerPeer = 0;   ///< Training payload bytes sent, mean over ranks, cumulative.
  double messagesSentPerPeer = 0;  ///< Training messages sent, mean over ranks, cumulative.
  double seconds = 0;              ///< Wall time of the epoch (training + evaluation), seconds.
  int survivors = 0;               ///< Ranks in the view at the end of the epoch.
  bool stop = false;               ///< A rank saw training.stop_file: the run ends after this epoch.
};

/// What a finished run reports (rank 0's view).
struct TrainSummary {
  std::string algorithm;
  int worldSize = 0;
  int epochs = 0;
  int stepsPerEpoch = 0;
  double testAccuracy = 0;  ///< Average model, last epoch.
  double testAccuracyRank0 = 0;
  double consensusDistance = 0;
  double bytesSentPerPeer = 0;     ///< Payload bytes (frame headers excluded).
  double messagesSentPerPeer = 0;  ///< Messages (each adds a kFrameHeaderBytes header on the wire).
  double wallSeconds = 0;          ///< From the start of the rank to the end of training.
  /// Training steps per second (evaluation excluded), mean over the ranks
  /// other than the straggler (training.straggler_rank), and per rank.
  double stepsPerSecond = 0;
  std::vector<double> stepsPerSecondByRank;
  double pushSumWeightMin = 1;  ///< Lowest push-sum weight of any rank after any step (1 without push-sum).
  double pushSumWeightMax = 1;  ///< Highest.
  std::vector<EpochMetrics> history;
  /// This rank writes the run's summary: rank 0 of the last view (rank 0,
  /// unless it was lost).
  bool writer = false;
  /// The ranks alive at the end (global ranks), and the ranks lost on the way.
  std::vector<int> survivors;
  struct Lost {
    int rank = -1;                    ///< Global rank.
    std::uint64_t step = 0;           ///< Steps the survivors had completed when it was removed.
    double agreementSeconds = 0;      ///< How long the survivors took to agree on the view without it.
    std::uint64_t stepsSkipped = 0;   ///< Steps the ranks furthest behind skipped to realign.
    double resumedAtUnixSeconds = 0;  ///< When this rank installed that view (system clock).
  };
  std::vector<Lost> lost;
  struct Joined {
    int rank = -1;                      ///< Global rank.
    std::uint64_t step = 0;             ///< The step it resumed at (the others').
    double installedAtUnixSeconds = 0;  ///< When this rank installed the view with it (system clock).
  };
  /// Ranks taken (back) into the job: stopped and resumed, on the other side
  /// of a healed partition, or restarted (gossamer-train --rejoin).
  std::vector<Joined> joined;
  /// Steps at which this rank rejoined the job after being removed (it was
  /// stopped), taking the survivors' model and step.
  std::vector<std::uint64_t> rejoinedAtStep;
  /// The step the run resumed from (checkpoint.resume), or -1.
  std::int64_t resumedFromStep = -1;
  /// The epoch after which training.stop_file stopped the run, or -1.
  int stoppedAtEpoch = -1;
  /// CRC-32C of each rank's final model (float32 bytes), -1 for ranks lost.
  std::vector<double> modelCrcByRank;
  /// The run directory (run.dir) holding every rank's metrics, empty when
  /// the run writes none.
  std::string runDir;
  /// This rank's transport counters at the end (bytes, messages, refused
  /// connections, rejected frames by kind).
  TransportStats transportStats;
  /// The job's random identifier (apps::jobNonce), the same on every rank:
  /// it tells a summary file written by this job from one an earlier job left.
  std::string job;
};

/// Where a rank is after a training step (the progress display's input).
struct StepProgress {
  std::uint64_t step = 0;           ///< Steps done in all.
  std::uint64_t stepsPerEpoch = 0;  ///< Steps of one epoch.
  int epoch = 0;                    ///< The epoch in progress, 1-based.
  int epochs = 0;                   ///< Epochs of the run.
  double loss = 0;                  ///< Mean training loss of this epoch's steps so far.
};

/// Runs one rank of the job described by `config`: shards `data` (shared,
/// read-only) by config.data.partition, creates the Agent through `registry`
/// and `store`, trains for config.training.epochs and evaluates after each
/// epoch. `onEpoch` is called on rank 0 after each epoch; `onStep` (may be
/// empty) after each of this rank's training steps, on its thread.
/// @throws ConfigError, TimeoutError, PeerFailure, ProtocolError, DataError.
TrainSummary runRank(const Config& config, int rank, const FashionMnist& data, Store& store,
                     const Registry& registry, const std::function<void(const EpochMetrics&)>& onEpoch,
                     const std::function<void(const StepProgress&)>& onStep = {});

/// The summary as the one-line JSON object printed at the end of a run.
std::string summaryJson(const TrainSummary& summary, const Config& config);

}  // namespace gossamer::train
