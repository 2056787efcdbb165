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
// Bytes: the two allreduces, 8 n + 8 (P + B) bytes of payload per rank
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

#include "gossamer/transport.hpp"

namespace gossamer::optimizers::detail {

/// One async push-sum rank's side of the agreement above; every rank of
/// `transport` calls it at the same point (a collective).
/// @param sentTo       messages this rank sent to each rank so far (n counts).
/// @param foldArrived  folds in every message that has arrived and returns
///                     the number folded in so far (cumulative).
/// @param z            the de-biased model (P float32), replaced by the average.
/// @param blocks       [begin, end) element ranges with a weight each (SGP:
///                     one block; Crossover-SGD: its segments).
/// @param weights      the blocks' push-sum weights; each becomes 1.
/// @param sequence     the collectives' sequence (distinct per call, same on all ranks).
/// @param arrivalSeconds the longest wait for every rank to reach step 1
///         (ranks that step slower come later); the rest is bounded by
///         `timeoutSeconds`.
/// @throws PeerFailure if a rank is gone (nothing is changed then);
///         TimeoutError if another rank does not take part within
///         `arrivalSeconds`, or a step then takes over `timeoutSeconds`.
void agreePushSum(Transport& transport, std::span<const std::uint64_t> sentTo,
                  const std::function<std::uint64_t()>& foldArrived, std::span<float> z,
                  std::span<const std::pair<std::size_t, std::size_t>> blocks, std::span<double> weights,
                  std::uint64_t sequence, double timeoutSeconds, double arrivalSeconds);

/// Collective sequences the optimizers' own agreements use, clear of the
/// ones a Communicator on the same transport counts up from 0.
constexpr std::uint64_t kAgreementSequenceBase = std::uint64_t{1} << 39;

}  // namespace gossamer::optimizers::detail
