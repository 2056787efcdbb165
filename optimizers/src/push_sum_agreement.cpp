// Agreement at the end of an async push-sum phase; see push_sum_agreement.hpp.
#include "push_sum_agreement.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "gossamer/log.hpp"

namespace gossamer::optimizers::detail {

namespace {
// `collectives` with the agreement's own sequence and timeout.
CollectiveOptions withSequence(CollectiveOptions collectives, std::uint64_t sequence, double timeoutSeconds) {
  collectives.sequence = sequence;
  collectives.timeoutSeconds = timeoutSeconds;
  // An algorithm that builds views of its own (named, or auto's choice from
  // a cost model) needs a sequence below 2^32, which the agreement's are not
  // on a top-level transport: its few doubles go by recursive doubling.
  const bool mayBuildViews = collectives.algorithm == AllreduceAlgorithm::kAuto
                                 ? collectives.useCostModel
                                 : allreduceBuildsViews(collectives.algorithm);
  if (mayBuildViews) collectives.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
  return collectives;
}
}  // namespace

bool awaitArrival(std::span<Request> receives, double seconds) {
  const int k = Request::waitAny(receives, seconds);
  if (k < 0) return true;
  try {
    receives[static_cast<std::size_t>(k)].test();
  } catch (const PeerFailure&) {
    return false;
  }
  return true;
}

void agreePushSum(Transport& transport, std::span<const std::uint64_t> sentTo,
                  const std::function<std::uint64_t()>& foldArrived,
                  const std::function<bool(double)>& awaitArrival, std::span<float> z,
                  std::span<const std::pair<std::size_t, std::size_t>> blocks, std::span<double> weights,
                  const CollectiveOptions& collectives, std::uint64_t sequence, double timeoutSeconds,
                  double arrivalSeconds) {
  const int n = transport.worldSize(), rank = transport.rank();
  GOSSAMER_ENFORCE(sentTo.size() == static_cast<std::size_t>(n),
                   "expected " << n << " message counts, got " << sentTo.size());
  GOSSAMER_ENFORCE(blocks.size() == weights.size(), blocks.size()
                                                        << " blocks but " << weights.size() << " weights");
  // 1. Nothing in flight: take in every message sent to this rank. Every
  // rank must reach it first: the wait is arrivalSeconds.
  std::vector<double> counts(sentTo.begin(), sentTo.end());
  allreduce(transport, std::span<double>(counts), ReduceOp::kSum,
            withSequence(collectives, sequence, std::max(timeoutSeconds, arrivalSeconds)));
  const auto expected = static_cast<std::uint64_t>(counts[static_cast<std::size_t>(rank)]);
  // Half the timeout, so that the others (waiting in step 2) are still there.
  const auto deadline = Clock::now() + clockDuration(std::chrono::duration<double>(timeoutSeconds / 2));
  for (std::uint64_t got = foldArrived(); got < expected; got = foldArrived()) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0 || !awaitArrival(left)) {
      GOSSAMER_LOG(kWarning, "push-sum agreement: rank "
                                 << rank << " received " << got << " of the " << expected
                                 << " messages sent to it"
                                 << (left <= 0 ? " within " + std::to_string(timeoutSeconds / 2) + " s"
                                               : " before every other rank left")
                                 << "; the mass of the others is not in the average");
      break;
    }
  }

  // 2. The push-sum average of each block, in float64.
  std::size_t p = 0;
  for (const auto& [b, e] : blocks) p += e - b;
  std::vector<double> mass(p + blocks.size());
  std::size_t k = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (std::size_t j = blocks[i].first; j < blocks[i].second; ++j)
      mass[k++] = weights[i] * static_cast<double>(z[j]);
  for (std::size_t i = 0; i < blocks.size(); ++i) mass[p + i] = weights[i];
  allreduce(transport, std::span<double>(mass), ReduceOp::kSum,
            withSequence(collectives, sequence + 1, timeoutSeconds));
  k = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const double w = mass[p + i];
    for (std::size_t j = blocks[i].first; j < blocks[i].second; ++j) z[j] = static_cast<float>(mass[k++] / w);
    weights[i] = 1.0;
  }
}

std::uint64_t agreementSequence(const Transport& transport, std::uint64_t n) {
  if (dynamic_cast<const SubTransport*>(&transport) != nullptr) {
    constexpr std::uint64_t kViewBase = std::uint64_t{1} << 23;
    return kViewBase + ((2 * n) & (kViewBase - 1));
  }
  return (std::uint64_t{1} << 39) + 2 * (n & ((std::uint64_t{1} << 37) - 1));
}

}  // namespace gossamer::optimizers::detail
