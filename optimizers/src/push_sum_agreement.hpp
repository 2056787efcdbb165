// Agreement at the end of an async push-sum phase (async SGP, async
// Crossover-SGD): every rank ends with the exact push-sum average.
//
// Async push-sum waits for no peer in particular, so when the ranks stop stepping their
// de-biased models z_i = x_i / w_i still differ and some pushes are still in
// flight. The mass (sum_i w_i z_i, sum_i w_i) is kept exactly, so its
// average is known; this collective hands it to every rank. Steps:
//   1. an allreduce (sum, float64, n elements) of the messages each rank
//      sent to each rank: each rank learns how many were sent to it, and
//      folds in arrivals until it has received them all: nothing is in
//      flight any more (a message still missing after half the timeout was
//      lost on the way, and its mass with it: a warning says so);
//   2. an allreduce (sum, float64, P + B elements) of [w_b z_b for every
//      block b; w_b for every block]: each block becomes
//      z_b = sum_i w_ib z_ib / sum_i w_ib, and its weight 1.
//      Between arrivals the rank waits on its standing receives
//      (Request::waitAny), not in a polling loop.
// Bytes: the two allreduces, with the job's allreduce algorithm
// (collectives.allreduce), 8 n + 8 (P + B) bytes of payload per rank
// before the algorithm's factor (a ring: about twice that).
// Paper: the push-sum average that SGP (Assran, Loizou, Ballas, Rabbat,
// ICML 2019, Alg. 1; the baseline of Yeo et al., "Crossover-SGD: A gossip-based
// communication in distributed deep learning for alleviating large mini-batch
// problem and enhancing scalability") de-biases towards; Kempe, Dobra and
// Gehrke (FOCS 2003) for push-sum's invariant sum_i w_i z_i.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "gossamer/collectives.hpp"
#include "gossamer/transport.hpp"

namespace gossamer::optimizers::detail {

/// One async push-sum rank's side of the agreement above; every rank of
/// `transport` calls it at the same point (a collective).
/// @param sentTo       messages this rank sent to each rank so far (n counts).
/// @param foldArrived  folds in every message that has arrived and returns
///                     the number folded in so far (cumulative).
/// @param awaitArrival waits up to the given seconds for a message to arrive
///                     (awaitArrival below, on the rank's standing receives);
///                     false once none can arrive any more.
/// @param z            the de-biased model (P float32), replaced by the average.
/// @param blocks       [begin, end) element ranges with a weight each (SGP:
///                     one block; Crossover-SGD: its segments).
/// @param weights      the blocks' push-sum weights; each becomes 1.
/// @param collectives  the allreduces' settings (algorithm, thresholds, cost
///                     model); their sequence and timeout are set here. An
///                     algorithm that builds views of its own (torus2d,
///                     hierarchical, tga2d, hips, or auto with a cost model)
///                     runs as recursive doubling.
/// @param sequence     the collectives' sequence (distinct per call, same on all ranks).
/// @param arrivalSeconds the longest wait for every rank to reach step 1
///         (ranks that step slower come later); the rest is bounded by
///         `timeoutSeconds`.
/// @throws PeerFailure if a rank is gone (nothing is changed then);
///         TimeoutError if another rank does not take part within
///         `arrivalSeconds`, or a step then takes over `timeoutSeconds`.
void agreePushSum(Transport& transport, std::span<const std::uint64_t> sentTo,
                  const std::function<std::uint64_t()>& foldArrived,
                  const std::function<bool(double)>& awaitArrival, std::span<float> z,
                  std::span<const std::pair<std::size_t, std::size_t>> blocks, std::span<double> weights,
                  const CollectiveOptions& collectives, std::uint64_t sequence, double timeoutSeconds,
                  double arrivalSeconds);

/// Waits up to `seconds` (SDK clock) for one of a rank's standing receives
/// (from any rank) to settle (Request::waitAny). Returns false if the one
/// that settled failed with PeerFailure (every rank it could come from has
/// left: nothing more will arrive on it), true otherwise: a message
/// arrived, or the time ran out. Other failures are left for the caller's
/// test() to throw.
bool awaitArrival(std::span<Request> receives, double seconds);

/// The collective sequence of an optimizer's `n`-th agreement (n from 0; it
/// takes this one and the next) on `transport`: apart from the sequences a
/// Communicator on the same transport counts up from 0, in the bits of a
/// message's step that reach the peer unchanged.
///   - A top-level transport: 2^39 + 2n. The membership service writes its
///     view's epoch into bits 24-31 of every step; bits 32-39 keep the
///     agreement apart from the first 2^32 collectives.
///   - A SubTransport view (the leaders of Hierarchical): 2^23 + (2n mod
///     2^23). A view's steps are 32 bits (its context takes bits 32-39) and
///     bits 24-31 again carry the epoch, so bit 23 keeps it apart from the
///     view's first 2^23 collectives.
std::uint64_t agreementSequence(const Transport& transport, std::uint64_t n);

}  // namespace gossamer::optimizers::detail
