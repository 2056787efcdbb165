// gossamer-sparse's training: mini-batch SGD of logistic regression or a
// factorization machine on sparse data, every rank on its shard, the ranks
// synchronised every round by one of three methods (Yokoyama and Araki's
// sparse synchronisation, Algorithm 1 and Sections IV-V):
//   dense     allreduce of the full gradient vector (d x width float64)
//   existing  SparseExchange over existingSchedule: reduce of the touched
//             rows to their owners and broadcast back, keys omitted
//   direct    SparseExchange over planDirectTransmission
// `existing` and `direct` give the same model bit for bit (the summary's CRC).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/store.hpp"

namespace gossamer::sparse {

/// The `sparse:` section of gossamer-sparse's config.
struct SparseTrainConfig {
  std::string model = "fm";       ///< "lr" (logistic regression) or "fm" (factorization machine)
  int factors = 8;                ///< k of the factorization machine (>= 1)
  int batchSize = 64;             ///< rows per rank per round (>= 1)
  int epochs = 1;                 ///< passes over the shards (>= 1)
  int rounds = 0;                 ///< rounds per epoch, at most (0 = the whole shard)
  double learningRate = 0.1;      ///< SGD step (> 0)
  double lambda = 0.0;            ///< L2 on the touched rows (>= 0)
  double initStddev = 0.01;       ///< the factors' initial N(0, s^2)
  std::string method = "direct";  ///< "dense", "existing" or "direct"
  std::string train = "data/spam/spam-train.libsvm";  ///< LIBSVM training file
  std::string test = "data/spam/spam-test.libsvm";    ///< LIBSVM test file ("" = none)
  int features = 262144;                              ///< d (0 = the largest index in the files)
};

/// Declares `sparse:` in `registry`. @throws InvalidArgument on a clash.
void registerSparseSection(Registry& registry);

/// gossamer-sparse's registry: gossamer-train's components, `sparse:`, and
/// membership.rejoin false by default (the rounds go back to the newest
/// commit every member holds, which a rank that was away does not hold), and
/// a transport that links processes (requireProcessTransport).
Registry makeSparseRegistry();

/// The section's values. @throws InvalidArgument if a key is missing.
SparseTrainConfig sparseConfigFrom(const Config& config);

/// What rank 0 reports (elements summed over the ranks; seconds the slowest
/// rank's, per epoch). For `dense`, elementsReduce is 2 (N - 1) times the
/// vector per round, what a ring allreduce sends (the configured allreduce
/// may send otherwise), and the other element counts are 0.
struct SparseSummary {
  std::uint64_t elementsReduce = 0, elementsDirect = 0, elementsBroadcast = 0;
  double epochSeconds = 0, reduceSeconds = 0, broadcastSeconds = 0, computeSeconds = 0;
  double planSeconds = 0;    ///< building the schedule and the exchange (again after a view change)
  double commitSeconds = 0;  ///< the end-of-epoch commits (elastic runs), in all; not in epochSeconds
  std::size_t roundsPerEpoch = 0;
  std::uint32_t crc = 0;  ///< crc32c of the final (d + 1) x width table's float64 bytes, bias row last
  double trainLoss = 0;   ///< mean of the ranks' batch losses over the last epoch
  double testAccuracy = -1;
  bool writer = false;         ///< the lowest rank of the last view
  std::vector<int> survivors;  ///< the ranks of the last view
  std::vector<int> lost;       ///< the ranks lost on the way
  std::string job;             ///< the job's random identifier (apps::jobNonce), empty if none was drawn
};

/// Trains rank `rank` (see the file comment) through a gossamer::Session:
/// with the membership service on, the survivors of a rank that dies return
/// to the newest epoch every one of them committed and finish over the view.
/// Collective over the job.
/// @throws ConfigError, InvalidArgument, IoError for bad config or data (and
///         ConfigError for membership.rejoin, which round programs refuse);
///         TimeoutError; PeerFailure without the membership service.
SparseSummary runSparseRank(const Config& config, int rank, Store& store, const Registry& registry);

/// One line of JSON with the config's identifying keys and the summary.
std::string sparseSummaryJson(const SparseSummary& s, const Config& config);

}  // namespace gossamer::sparse
