// Synchronous collectives over any Transport.
#pragma once

#include <cstdint>
#include <span>

#include "gossamer/transport.hpp"

namespace gossamer {

enum class ReduceOp { kSum, kAverage };

/// Options shared by the collectives. Every rank of a collective must pass the
/// same `sequence`: it keeps the messages of successive calls apart (the
/// Communicator below numbers them for you).
struct CollectiveOptions {
  std::uint64_t sequence = 0;    ///< Distinct per call, same on all ranks (< 2^40).
  double timeoutSeconds = 30.0;  ///< Bound on each wait inside the collective.
};

/// Ring allreduce (paper 000_a4345579c41fcb1d.txt, Eq. 2 and Section 2): a
/// reduce-scatter of N-1 steps followed by an allgather of N-1 steps over the
/// ring rank -> rank+1. Each rank sends 2(N-1)/N of the vector in all. The
/// vector is split into N chunks whose lengths differ by at most one element,
/// so any length (including 0 and lengths below N) works; N = 1 returns at once.
/// In place: `data` (length L elements, the same L on every rank) holds the sum
/// or the average on return.
/// @throws TimeoutError, PeerFailure, ProtocolError (a peer sent a chunk of the
///         wrong length), InvalidArgument.
template <typename T>
void ringAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options);

/// Binomial-tree broadcast of `data` (L elements, same L on every rank) from
/// `root`: ceil(log2 N) rounds. @throws as ringAllreduce.
template <typename T>
void broadcast(Transport& transport, std::span<T> data, int root, const CollectiveOptions& options);

/// Binomial-tree reduce of `data` (L elements, same L on every rank) to
/// `root`: ceil(log2 N) rounds; on return the root holds the sum (or average),
/// other ranks' `data` holds partial sums (unspecified). @throws as ringAllreduce.
template <typename T>
void reduce(Transport& transport, std::span<T> data, int root, ReduceOp op, const CollectiveOptions& options);

/// Numbers collective calls so that every rank uses the same sequence, and
/// carries the default timeout. One per Transport; not thread-safe (all ranks
/// must issue collectives in the same order, as in MPI).
class Communicator {
 public:
  /// @param timeoutSeconds bound on each wait (> 0).
  explicit Communicator(Transport& transport, double timeoutSeconds);

  int rank() const { return transport_.rank(); }
  int worldSize() const { return transport_.worldSize(); }
  Transport& transport() { return transport_; }
  double timeoutSeconds() const { return timeout_; }

  /// In-place ring allreduce of float32 / float64 vectors; see ringAllreduce.
  void allreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  void allreduce(std::span<double> data, ReduceOp op = ReduceOp::kSum);
  /// Broadcast from `root`; see broadcast.
  void broadcast(std::span<float> data, int root);
  void broadcast(std::span<double> data, int root);
  /// Reduce to `root`; see reduce.
  void reduce(std::span<float> data, int root, ReduceOp op = ReduceOp::kSum);
  /// Returns once every rank has entered the barrier (dissemination barrier:
  /// ceil(log2 N) rounds of one-byte messages).
  void barrier();

 private:
  CollectiveOptions next();
  Transport& transport_;
  double timeout_;
  std::uint64_t sequence_ = 0;
};

}  // namespace gossamer
