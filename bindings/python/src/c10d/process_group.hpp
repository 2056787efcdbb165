// ProcessGroupGossamer: torch.distributed's c10d::ProcessGroup (torch 1.13) or
// c10d::Backend (torch 2.x, which wraps it in a ProcessGroup for the CPU and
// CUDA device types) over a Gossamer Agent's transport, so that
// torch.distributed.init_process_group("gossamer") and DistributedDataParallel
// run on Gossamer's transports, with their CURVE keys, timeouts and failure
// verdicts.
//
// Collectives run in call order on one thread per process group (as gloo's
// process group does): every rank issues them in the same order, so the
// sequence number each gets, which names its messages on the wire, agrees.
// send/recv are posted on the caller's thread at once and completed by a
// second thread as each settles, so a receive never holds up a collective,
// nor one send or receive another. A failure (PeerFailure naming the peer,
// TimeoutError) ends the Work with the error: wait() raises it in Python as
// gossamer.PeerFailure or gossamer.TimeoutError (RuntimeErrors). A failed
// collective breaks the group from then on (c10d has no view changes): every
// later collective fails with the same error rather than run over the
// survivors. After an error other than a dead peer or a timeout (which the
// other ranks see too), such as a length only the receiver checks, the rank
// aborts its transport, so that the others fail their next collective with
// PeerFailure naming it instead of waiting out the timeout; its own pending
// and later sends and receives fail then too. Otherwise a failed send or
// receive fails only its own Work.
//
// Tensors on another device (CUDA) are staged through host memory: copied to
// a CPU tensor on the caller's thread (after the work queued on its current
// stream), reduced or sent there, and the outputs copied back, synchronously,
// on the thread that completes the Work, before its future completes.
//
// Bytes on the wire are those of the Gossamer collectives it calls
// (gossamer/collectives.hpp): allreduce by the configured algorithm
// (collectives.algorithm, default auto), binomial-tree broadcast and reduce,
// ring allgather and reduce-scatter, direct-exchange alltoallv; gather and
// scatter are alltoallv with one non-empty side.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/agent.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/store.hpp"

namespace gossamer::c10d_backend {

/// What a c10d backend derives from: c10d::Backend from torch 2.0 on (torch
/// wraps it in a ProcessGroup per device type), c10d::ProcessGroup before.
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = ::c10d::Backend;
#else
using BackendBase = ::c10d::ProcessGroup;
#endif

/// Host copies of one operation's tensors that live on another device
/// (CUDA): inputs are copied in on the caller's thread, outputs copied back
/// by copyBack() once the operation has succeeded. CPU tensors pass through.
class Staging {
 public:
  /// The CPU tensor to use for `t`. `read`: the operation reads its values
  /// (copied in now, synchronously with t's device); `written`: it writes
  /// them (copied back to `t` by copyBack()).
  at::Tensor operator()(const at::Tensor& t, bool read, bool written);
  /// The same for each tensor of a list.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& ts, bool read, bool written);
  /// Copies the written host tensors back to their devices (blocking until
  /// the copies are done). Throws what torch's copy throws.
  void copyBack();

 private:
  std::vector<at::Tensor> keep_;                         // host copies of read-only inputs
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (device tensor, its host copy)
};

/// The Work of one operation: completed by the process group's threads;
/// getFuture() completes with the output tensors (what DDP's communication
/// hook waits on).
class GossamerWork final : public ::c10d::Work {
 public:
  GossamerWork(int rank, ::c10d::OpType type, std::vector<at::Tensor> outputs);
  /// Ends the work: the future gets the outputs, or the error (nullptr: success),
  /// and its callbacks run on this thread; then wait() returns (Work::finish),
  /// also when completing the future throws.
  /// @throws c10::Error if the future was completed already; what a callback throws.
  void complete(std::exception_ptr error);
  /// Run by a destructor of the group inside a future's callback: releases
  /// wait() on the Work that this thread is completing, whose finish would
  /// come only after the callback returns (and so after the destructor's
  /// joins, which may wait for a callback waiting on it). No-op when this
  /// thread completes none. Never throws.
  static void finishTheOneCompletingHere() noexcept;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  /// The rank a recvAnysource matched (-1 otherwise).
  int sourceRank() const override { return source_; }
  void setSourceRank(int r) { source_ = r; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_ = -1;
};

/// The c10d process group. Tensors: dense and contiguous, one per call (the
/// per-device lists of c10d hold one tensor), on the CPU or staged through it
/// from another device (CUDA). The reductions (allreduce, reduce,
/// reduce-scatter) take float32, float64, float16, bfloat16, int32 or int64
/// with ops SUM, AVG (integers: the truncated quotient), PRODUCT, MIN, MAX;
/// the operations that only move elements (broadcast, allgather, gather,
/// scatter, all-to-all, send, recv) take any dtype, moved as its bytes (what
/// torch's *_object calls need: pickles in uint8 tensors).
class ProcessGroupGossamer final : public BackendBase {
 public:
  /// Joins the group: publishes this rank's endpoints in `store` (the c10d
  /// store init_process_group made) and connects to every peer.
  /// @param config the Gossamer configuration (world_size is set to `size`).
  /// @param timeoutSeconds bound on each collective's waits (the c10d timeout).
  /// @param storeHost the store server's host (MASTER_ADDR): `transport.host:
  ///        auto` binds to this host's address facing it; empty: 127.0.0.1.
  /// @throws gossamer::Error (TimeoutError if a peer never arrives).
  ProcessGroupGossamer(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       const Config& config, const Registry& registry, double timeoutSeconds,
                       const std::string& storeHost);
  /// Runs the collectives still queued, cancels the receives still posted
  /// (their Works fail with Cancelled), waits for the sends still posted
  /// (each bounded by the timeout), then closes the transport; without the
  /// GIL if the calling thread holds it. Never throws. Run on one of the
  /// group's own threads (a future's callback held the last reference), it
  /// lets that thread go instead of joining it: what is queued for that
  /// thread fails with Cancelled (the collectives queued behind the
  /// callback's, or the sends and receives not yet taken up), and the
  /// sends and receives it holds end as above, sends included (with the
  /// thread's error while it was failing them all after one); the other
  /// thread finishes as above, the callback waiting for it. Before that
  /// wait, wait() returns on the Work whose callback runs the destructor
  /// and on those the p2p thread held: a callback on the other thread may
  /// wait on them.
  ~ProcessGroupGossamer() override;

  const std::string getBackendName() const override { return "gossamer"; }
  /// The transport's kind ("zmq", "socket", ...).
  std::string transportName() const;

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& outputSplits,
                                                 std::vector<int64_t>& inputSplits,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  /// Receives one message of exactly tensors[0]'s bytes: a message of
  /// another size fails the Work with gossamer::ProtocolError naming both
  /// sizes (the tensor may hold part of it). So does recvAnysource.
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;

 private:
  using Job = std::function<void(const CollectiveOptions&)>;
  /// Queues `job` for the collective thread; its Work completes when it returns or throws.
  /// `staging`'s outputs are copied back after the job succeeds.
  c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, std::vector<at::Tensor> outputs, Job job,
                                           Staging staging = {});
  /// Completes the Work of `type` (SEND, RECV, RECVANYSOURCE) once `request`
  /// (posted already, to or from `peer`, -1 for any, with user tag `tag`)
  /// settles, on the p2p thread, or fails it with TimeoutError ("gossamer:
  /// recv from rank 0 (tag 5) timed out after N s") if it is still pending
  /// the group's timeout after now.
  c10::intrusive_ptr<::c10d::Work> completeLater(::c10d::OpType type, std::vector<at::Tensor> outputs,
                                                 Request request, int peer, int tag, Staging staging);
  /// The threads' bodies. Neither lets an exception escape: one thrown
  /// outside an operation's job ends the thread after failing every Work it
  /// holds or has queued (collectiveThreadError_, p2pThreadError_).
  /// `letGo`: set by the destructor when a callback of a Work this thread
  /// completed destroyed the group; the thread then touches no member: the
  /// collective thread returns after that completion, the p2p thread (whose
  /// settling reads no member) at its next turn. Before such a destructor
  /// waits for the other thread, whose callbacks may wait on this thread's
  /// Works, it releases the Work whose callback runs it
  /// (GossamerWork::finishTheOneCompletingHere) and, on the p2p thread, ends
  /// what that thread holds (endHeldPointToPoint_).
  void runCollectives(const std::atomic<bool>& letGo);
  void runPointToPoint(const std::atomic<bool>& letGo);
  /// The error that broke the group (null while it works), and recording it.
  std::exception_ptr failure();
  void fail(std::exception_ptr error);

  std::unique_ptr<Store> store_;  // the c10d store, seen as a Gossamer store
  std::unique_ptr<Agent> agent_;
  CollectiveOptions defaults_;
  std::uint64_t sequence_ = 0;  // the collective thread's

  struct Queued {
    c10::intrusive_ptr<GossamerWork> work;
    Job job;
    Staging staging;
  };
  struct Posted {
    c10::intrusive_ptr<GossamerWork> work;
    Request request;
    int peer;                                        // the destination or source; -1: any source
    int tag;                                         // the user's
    bool receive;                                    // cancelled when the group is destroyed (sends go on)
    std::chrono::steady_clock::time_point deadline;  // posted + the group's timeout
    Staging staging;
    std::size_t bytes = 0;  // a receive's: its tensor's (a message of another size is refused)
  };
  /// How the p2p thread ends a posted send or receive.
  enum class End { kSettled, kTimedOut, kDestroyed };
  /// Ends pending[i] and removes it and requests[i] (its request, cancelled
  /// if still pending: its buffer is not written after), then completes its
  /// Work: with `failed` if given; else as its request settled (kSettled), or
  /// cut off: TimeoutError after `timeoutSeconds` (kTimedOut) or Cancelled
  /// (kDestroyed), unless it completed meanwhile (it succeeds). Reads no
  /// member. @throws what completing the Work throws (it is removed first).
  static void endPosted(std::vector<Posted>& pending, std::vector<Request>& requests, std::size_t i, End end,
                        double timeoutSeconds, std::exception_ptr failed);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> collectives_;
  std::deque<Posted> pointToPoint_;
  bool stop_ = false;
  std::exception_ptr failure_;  // the first collective's error: every later collective fails with it
  // The error that ended a thread outside any operation's own work (a lock,
  // completing a Work): null while it runs. Once set, that thread's queued
  // operations have failed with it, and later ones fail with it at once.
  std::exception_ptr collectiveThreadError_;
  std::exception_ptr p2pThreadError_;
  /// Set by a destructor run on that thread, which is let go (it holds a
  /// reference of its own: it reads the flag once the group is gone).
  std::shared_ptr<std::atomic<bool>> collectiveLetGo_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> p2pLetGo_ = std::make_shared<std::atomic<bool>>(false);
  /// Set by runPointToPoint as it starts, and called only on that thread
  /// (by a destructor a callback runs there): ends the sends and receives
  /// the thread has taken up, in posting order, sends included, as the
  /// thread was ending them (with its error while it fails them all after
  /// one; else with Cancelled, unless one completed meanwhile: it succeeds).
  std::function<void()> endHeldPointToPoint_;
  std::thread collectiveThread_;
  std::thread p2pThread_;
};

}  // namespace gossamer::c10d_backend
