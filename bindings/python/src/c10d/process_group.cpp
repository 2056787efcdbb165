// ProcessGroupGossamer (see process_group.hpp): argument checks, the dtype
// dispatch onto Gossamer's collective templates, and the two threads.
#include "process_group.hpp"

#include <ATen/core/ivalue.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>

#include "gossamer/errors.hpp"
#include "gossamer/half.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/kit/wire.hpp"

namespace gossamer::c10d_backend {

namespace {

// ---- the c10d store as a Gossamer rendezvous store ----------------------------

class C10dStore final : public Store {
 public:
  // torch's FileStore makes its file only on a first write, and its check()
  // waits for the file until the store's timeout (30 min under
  // init_process_group): a write first, which every store takes, so that
  // tryGet answers at once.
  C10dStore(c10::intrusive_ptr<::c10d::Store> store, std::string routeHost)
      : store_(std::move(store)), routeHost_(std::move(routeHost)) {
    TORCH_CHECK_VALUE(store_.defined(), "gossamer: the c10d store is null");
    store_->add("gossamer/c10d-store-opened", 1);
  }
  /// The address facing the store's host (transport.host: auto), if known.
  std::optional<std::string> localAddress() override {
    if (routeHost_.empty()) return std::nullopt;
    return routeAddressTo(routeHost_);
  }
  void set(const std::string& key, const std::string& value) override {
    checkStoreKey(key);
    checkStoreValue(key, value);
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::optional<std::string> tryGet(const std::string& key) override {
    checkStoreKey(key);
    if (!store_->check({key})) return std::nullopt;
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  }

 private:
  c10::intrusive_ptr<::c10d::Store> store_;
  std::string routeHost_;
};

// ---- arguments -------------------------------------------------------------------

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "gossamer: ", what, " takes one tensor per call, got ",
                    tensors.size());
  return tensors[0];
}

/// What an operation does with a tensor's elements: combines them (the
/// reductions: the dtypes Gossamer's collectives reduce), or only moves them
/// (any dtype, as its bytes).
enum class Use { kReduced, kMoved };

/// Whether Gossamer's collectives reduce elements of dtype `s` (float32,
/// float64, float16, bfloat16, int32, int64).
bool reducible(at::ScalarType s) {
  return s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16 || s == at::kInt ||
         s == at::kLong;
}

/// `t` is a tensor `what` (the operation, for the message) can take: defined,
/// dense, contiguous, and of a reducible dtype where `use` is kReduced. (A
/// lazily conjugated view arrives resolved: torch's dispatcher, which calls
/// the backend, materialises it.)
/// @throws c10::ValueError (layout, contiguity), c10::TypeError (dtype).
void checkTensor(const at::Tensor& t, const char* what, Use use = Use::kReduced) {
  TORCH_CHECK_VALUE(t.defined(), "gossamer: ", what, ": undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided && !t.is_quantized(), "gossamer: ", what, ": a ",
                    t.is_quantized() ? "quantized" : "sparse", " tensor is not supported (dense ones are)");
  TORCH_CHECK_VALUE(t.is_contiguous(), "gossamer: ", what, ": the tensor (shape ", t.sizes(),
                    ") is not contiguous");
  TORCH_CHECK_TYPE(use == Use::kMoved || reducible(t.scalar_type()), "gossamer: ", what, ": dtype ",
                   t.scalar_type(),
                   " is not supported (float32, float64, float16, bfloat16, int32, int64; broadcast, "
                   "all_gather, gather, scatter, all_to_all, send and recv take any dtype)");
}

/// b is a usable tensor of a's dtype.
void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* what, Use use = Use::kReduced) {
  checkTensor(b, what, use);
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "gossamer: ", what, ": dtypes differ (",
                   a.scalar_type(), " and ", b.scalar_type(), ")");
}

/// b is a usable tensor of a's dtype and number of elements.
void checkSame(const at::Tensor& a, const at::Tensor& b, const char* what, Use use = Use::kReduced) {
  checkSameType(a, b, what, use);
  TORCH_CHECK_VALUE(a.numel() == b.numel(), "gossamer: ", what, ": sizes differ (", a.sizes(), " and ",
                    b.sizes(), ")");
}

void checkRank(int r, int size, const char* what) {
  TORCH_CHECK_VALUE(r >= 0 && r < size, "gossamer: ", what, ": rank ", r, " outside [0, ", size, ")");
}

ReduceOp reduceOpOf(const ::c10d::ReduceOp& op) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG:
      return ReduceOp::kAverage;
    case ::c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProduct;
    case ::c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      break;
  }
  TORCH_CHECK_VALUE(false, "gossamer: reduce op ", static_cast<int>(op.op_),
                    " is not supported (SUM, AVG, PRODUCT, MIN, MAX)");
}

/// Calls f(T{}) with T the element type of a checked tensor's dtype.
template <typename F>
void withElement(at::ScalarType s, F&& f) {
  switch (s) {
    case at::kFloat:
      f(float{});
      return;
    case at::kDouble:
      f(double{});
      return;
    case at::kHalf:
      f(float16{});
      return;
    case at::kBFloat16:
      f(bfloat16{});
      return;
    case at::kInt:
      f(std::int32_t{});
      return;
    case at::kLong:
      f(std::int64_t{});
      return;
    default:
      TORCH_CHECK_TYPE(false, "gossamer: dtype ", s, " is not supported");
  }
}

/// For an operation that only moves elements: calls f(T{}) with T the
/// element type of a reducible dtype, std::byte for any other (its elements
/// then move as their bytes).
template <typename F>
void withMoved(at::ScalarType s, F&& f) {
  if (reducible(s))
    withElement(s, std::forward<F>(f));
  else
    f(std::byte{});
}

/// A contiguous tensor's storage as T (its elements, or its bytes for T = std::byte).
template <typename T>
std::span<T> elements(const at::Tensor& t) {
  return std::span<T>(static_cast<T*>(t.data_ptr()), t.nbytes() / sizeof(T));
}

/// gossamer::alltoallv of `from`'s elements into `to` (checked tensors of one dtype).
void alltoallvTensors(Transport& transport, const at::Tensor& from,
                      const std::vector<std::size_t>& sendCounts, const at::Tensor& to,
                      const std::vector<std::size_t>& recvCounts, const CollectiveOptions& o) {
  withMoved(from.scalar_type(), [&](auto e) {
    using T = decltype(e);
    // Counts of T: 1 per element, or its size per element for T = std::byte.
    const auto scale = static_cast<std::size_t>(from.element_size()) / sizeof(T);
    std::vector<std::size_t> sends(sendCounts), recvs(recvCounts);
    for (auto& c : sends) c *= scale;
    for (auto& c : recvs) c *= scale;
    const std::span<T> send = elements<T>(from);
    gossamer::alltoallv<T>(transport, std::span<const T>(send), sends, elements<T>(to), recvs, o);
  });
}

/// Ring reduce-scatter of `all` (reduced in place); this rank's piece is
/// copied into `out` (checked tensors of one dtype, all = size x out).
void reduceScatterInto(Transport& transport, const at::Tensor& all, const at::Tensor& out, ReduceOp op,
                       const CollectiveOptions& o) {
  withElement(out.scalar_type(), [&](auto e) {
    using T = decltype(e);
    const std::span<T> mine = gossamer::ringReduceScatter<T>(transport, elements<T>(all), op, o);
    std::copy(mine.begin(), mine.end(), elements<T>(out).begin());
  });
}

/// A collective thread's job that calls fn(elements<T>(t), options) with T
/// the element type of t's dtype (a checked tensor).
template <typename F>
std::function<void(const CollectiveOptions&)> onElements(const at::Tensor& t, F fn) {
  return [t, fn](const CollectiveOptions& o) {
    withElement(t.scalar_type(), [&](auto e) { fn(elements<decltype(e)>(t), o); });
  };
}

/// The same for an operation that only moves t's elements (withMoved).
template <typename F>
std::function<void(const CollectiveOptions&)> onMoved(const at::Tensor& t, F fn) {
  return [t, fn](const CollectiveOptions& o) {
    withMoved(t.scalar_type(), [&](auto e) { fn(elements<decltype(e)>(t), o); });
  };
}

/// A contiguous tensor's memory as bytes.
std::span<std::byte> bytes(const at::Tensor& t) { return elements<std::byte>(t); }

/// For the operations that only move elements: a tensor of a reducible dtype
/// as it is, any other as a 1-D uint8 view of its bytes (same memory), so that
/// the copies around the collective (cat, copy_) never need the dtype's own
/// kernels. `t` is contiguous.
at::Tensor movable(const at::Tensor& t) {
  return reducible(t.scalar_type()) ? t : t.reshape({-1}).view(at::kByte);
}

std::vector<at::Tensor> movable(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(movable(t));
  return out;
}

/// Elements per dim-0 row of `t` times each split (even splits when empty).
std::vector<std::size_t> countsOf(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                  const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const auto perRow = static_cast<std::size_t>(rows == 0 ? 0 : t.numel() / rows);
  std::vector<std::size_t> counts(static_cast<std::size_t>(size));
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "gossamer: ", what, ": dim 0 (", rows, ") does not divide by the ",
                      size, " ranks");
    std::fill(counts.begin(), counts.end(), static_cast<std::size_t>(rows / size) * perRow);
    return counts;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "gossamer: ", what, ": ", splits.size(),
                    " split sizes for ", size, " ranks");
  // Each size is checked before it is added (none negative, the running sum
  // never above dim 0), so the sum cannot wrap around.
  int64_t sum = 0;
  for (int r = 0; r < size; ++r) {
    TORCH_CHECK_VALUE(splits[r] >= 0, "gossamer: ", what, ": negative split size ", splits[r]);
    TORCH_CHECK_VALUE(splits[r] <= rows - sum, "gossamer: ", what,
                      ": split sizes add up to more than dim 0 (", rows, ") by split ", r, " (", splits[r],
                      ")");
    sum += splits[r];
    counts[r] = static_cast<std::size_t>(splits[r]) * perRow;
  }
  TORCH_CHECK_VALUE(sum == rows, "gossamer: ", what, ": split sizes add up to ", sum, ", dim 0 is ", rows);
  return counts;
}

/// Whether two contiguous tensors share any byte of memory (e.g. the same
/// tensor passed as input and output).
bool overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto* pa = static_cast<const std::byte*>(a.data_ptr());
  const auto* pb = static_cast<const std::byte*>(b.data_ptr());
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

/// `in`, or a copy of it when it overlaps `out`: alltoallv posts its
/// receives into its output before it sends from its input, and the
/// allgathers write into their output before they read their input, so an
/// input that shares memory with the output must be copied first (on the
/// collective thread, once the operations queued before have written it).
at::Tensor apart(const at::Tensor& in, const at::Tensor& out) { return overlap(in, out) ? in.clone() : in; }

/// One tensor made of the list's tensors, in order (a copy).
at::Tensor flat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> views;
  views.reserve(list.size());
  for (const auto& t : list) views.push_back(t.reshape({-1}));
  return at::cat(views);
}

/// Ends `work` with `error`, swallowing what completing it throws (a Work
/// completed already): for the threads' last-resort handlers.
void completeQuietly(GossamerWork& work, const std::exception_ptr& error) noexcept {
  try {
    work.complete(error);
  } catch (...) {  // nothing left to tell: its future holds a result already
  }
}

/// Copies consecutive pieces of `from` into the tensors of `to`.
void unflatten(const at::Tensor& from, std::vector<at::Tensor>& to) {
  int64_t at = 0;
  for (auto& t : to) {
    t.view({-1}).copy_(from.narrow(0, at, t.numel()));
    at += t.numel();
  }
}

}  // namespace

// ---- staging through host memory ----------------------------------------------------

at::Tensor Staging::operator()(const at::Tensor& t, bool read, bool written) {
  if (!t.defined() || t.device().is_cpu()) return t;
  // to(kCPU) waits for the work queued on t's current stream, then copies.
  at::Tensor host = read ? t.to(at::kCPU) : at::empty(t.sizes(), t.options().device(at::kCPU));
  if (written)
    back_.emplace_back(t, host);
  else
    keep_.push_back(host);
  return host;
}

std::vector<at::Tensor> Staging::operator()(const std::vector<at::Tensor>& ts, bool read, bool written) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back((*this)(t, read, written));
  return out;
}

void Staging::copyBack() {
  for (auto& [device, host] : back_) {
    const c10::OptionalDeviceGuard guard(device.device());
    device.copy_(host);  // not non_blocking: returns once the copy is on the device
  }
  back_.clear();
  keep_.clear();
}

// ---- Work --------------------------------------------------------------------------

GossamerWork::GossamerWork(int rank, ::c10d::OpType type, std::vector<at::Tensor> outputs)
    : ::c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

namespace {

/// The Work whose future this thread is completing (its callbacks run inside),
/// and the error it ends with; nested completions stack on the C++ stack.
struct Completing {
  GossamerWork* work = nullptr;
  std::exception_ptr error;
};
thread_local Completing tCompleting;

}  // namespace

void GossamerWork::complete(std::exception_ptr error) {
  // The future completes first (a wait() that returned finds it done), then
  // finish releases wait(); a callback that destroys the group finishes it
  // early (finishTheOneCompletingHere).
  struct Restore {
    Completing outer;
    ~Restore() { tCompleting = std::move(outer); }
  } restore{std::exchange(tCompleting, Completing{this, error})};
  try {
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {  // a callback threw (or the future was completed already): wait() still returns
    finish(error);
    throw;
  }
  finish(error);
}

void GossamerWork::finishTheOneCompletingHere() noexcept {
  // (Work::finish sets a flag and notifies under the Work's own lock: again
  // when complete() goes on to it.)
  try {
    if (tCompleting.work != nullptr) tCompleting.work->finish(tCompleting.error);
  } catch (...) {  // a destructor's caller: nothing to tell; wait() then returns when complete() does
  }
}

// ---- construction and the threads ---------------------------------------------------

ProcessGroupGossamer::ProcessGroupGossamer(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                                           const Config& config, const Registry& registry,
                                           double timeoutSeconds, const std::string& storeHost)
    : BackendBase(rank, size), store_(std::make_unique<C10dStore>(store, storeHost)) {
  // (A null store is refused by C10dStore's constructor, before it is used.)
  TORCH_CHECK_VALUE(size >= 1, "gossamer: size ", size, " is not positive");
  checkRank(rank, size, "process group");
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "timeout must be positive, got " << timeoutSeconds);
  // About 31 years: a longer one (torch's timedelta.max) would overflow the clock's deadlines.
  constexpr double kLongestTimeoutSeconds = 1e9;
  agent_ = std::make_unique<Agent>(config, rank, *store_, registry);
  GOSSAMER_ENFORCE(agent_->worldSize() == size,
                   "the config's world_size " << agent_->worldSize() << " is not the group's " << size);
  defaults_ = agent_->communicator().options();
  defaults_.timeoutSeconds = std::min(timeoutSeconds, kLongestTimeoutSeconds);
  // (Each thread keeps its own reference to the flag: it reads it after the
  // group may have been destroyed.)
  collectiveThread_ = std::thread([this, gone = collectiveLetGo_] { runCollectives(*gone); });
  try {
    p2pThread_ = std::thread([this, gone = p2pLetGo_] { runPointToPoint(*gone); });
  } catch (...) {
    // The first thread is stopped and joined: a joinable std::thread's
    // destructor (run as this constructor unwinds) would terminate.
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    collectiveThread_.join();
    throw;
  }
}

ProcessGroupGossamer::~ProcessGroupGossamer() {
  // The threads may hold the last reference to a tensor that Python has let
  // go of (a Work or a receive nobody waits on): torch then hands the Python
  // object to the C++ tensor, whose destructor takes the GIL to free it. A
  // destructor run from Python (destroy_process_group) holds the GIL, so it
  // lets go of it while the threads finish, or the join would wait forever.
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) nogil.emplace();
  // A Work's future callback that held the last reference to the group runs
  // this on one of the group's own threads, inside completing a Work: that
  // thread cannot be joined from itself. It is let go instead, and returns
  // without touching the group once the callback is done (its flag); what is
  // queued for it fails here, before the other thread is joined (which a
  // callback of it might wait on).
  const auto self = std::this_thread::get_id();
  const bool onCollective = collectiveThread_.get_id() == self, onP2p = p2pThread_.get_id() == self;
  if (onCollective) collectiveLetGo_->store(true);
  if (onP2p) p2pLetGo_->store(true);
  std::deque<Queued> collectives;
  std::deque<Posted> posted;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    if (onCollective) collectives.swap(collectives_);
    if (onP2p) posted.swap(pointToPoint_);
  }
  cv_.notify_all();
  // The joins below wait for the other thread's callbacks, which may wait on
  // a Work this thread holds: first the one whose callback runs this (its
  // wait() would be released only after the callback returns), then, on the
  // p2p thread, what it took up, in posting order.
  GossamerWork::finishTheOneCompletingHere();
  if (onP2p && endHeldPointToPoint_) endHeldPointToPoint_();  // (never throws)
  const auto why = std::make_exception_ptr(
      Cancelled("gossamer: the process group was destroyed (on its own thread, by a future's callback) "
                "before this operation ran"));
  for (auto& q : collectives) completeQuietly(*q.work, why);
  for (auto& p : posted) completeQuietly(*p.work, why);  // (destroying p cancels its request)
  collectives.clear();
  posted.clear();
  for (auto* thread : {&collectiveThread_, &p2pThread_}) {
    if (thread->get_id() == self)
      thread->detach();
    else if (thread->joinable())
      thread->join();
  }
  try {
    agent_->close();
  } catch (...) {  // a destructor does not throw; the peers see the connection end
  }
}

std::string ProcessGroupGossamer::transportName() const { return agent_->transport().name(); }

std::exception_ptr ProcessGroupGossamer::failure() {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void ProcessGroupGossamer::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!failure_) failure_ = error;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::enqueue(::c10d::OpType type,
                                                               std::vector<at::Tensor> outputs, Job job,
                                                               Staging staging) {
  auto work = c10::make_intrusive<GossamerWork>(rank_, type, std::move(outputs));
  std::exception_ptr gone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    TORCH_CHECK(!stop_, "gossamer: the process group is shut down");
    gone = collectiveThreadError_;
    if (!gone) collectives_.push_back({work, std::move(job), std::move(staging)});
  }
  if (gone) {
    work->complete(gone);  // the collective thread ended: nothing would run it
    return work;
  }
  cv_.notify_all();
  return work;
}

// Runs the queued collectives in order, each with the next sequence number.
// After a failure (a dead peer, a timeout) the group is broken: c10d has no
// view changes, so every later operation fails with the first error instead
// of running over whichever ranks are left.
//
// An exception outside a job (a lock, completing a Work) ends the thread:
// the operation it was running and every one queued fail with it, and so do
// those enqueued later (collectiveThreadError_). None escapes the thread.
void ProcessGroupGossamer::runCollectives(const std::atomic<bool>& letGo) {
  c10::intrusive_ptr<GossamerWork> running;  // until its Work is completed
  try {
    for (;;) {
      Queued q;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !collectives_.empty(); });
        if (collectives_.empty()) return;
        q = std::move(collectives_.front());
        collectives_.pop_front();
      }
      running = q.work;
      CollectiveOptions o = defaults_;
      o.sequence = sequence_++ & Tag::kMaxStep;
      std::exception_ptr error = failure();
      if (!error) {
        try {
          q.job(o);
          q.staging.copyBack();
        } catch (const PeerFailure&) {  // every rank sees it (the membership service)
          error = std::current_exception();
          fail(error);
        } catch (const TimeoutError&) {  // so do the others waiting on the same collective
          error = std::current_exception();
          fail(error);
        } catch (...) {
          // An error the others may not see (a length only the receiver
          // checks): the group is broken, and aborting the transport tells
          // them (its bye says it stopped after an error of its own, a
          // verdict every rank's waits poll, also those not waiting on this
          // rank); their next collective fails naming this rank rather than
          // waiting out the timeout. (Not for a dead peer: the others would
          // blame this rank instead of the dead one.)
          error = std::current_exception();
          fail(error);
          try {
            agent_->transport().abort();
          } catch (...) {  // the error above is the one to report
          }
        }
      }
      q.work->complete(error);
      running.reset();
      if (letGo) return;  // a callback of that Work's future destroyed the group: `this` is gone
    }
  } catch (...) {
    try {
      const std::exception_ptr error = std::current_exception();
      if (letGo) {  // (thrown by completing a Work after its callback destroyed the group)
        if (running) completeQuietly(*running, error);
        return;
      }
      std::deque<Queued> left;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!failure_) failure_ = error;
        collectiveThreadError_ = error;
        left.swap(collectives_);
      }
      if (running) completeQuietly(*running, error);
      for (auto& q : left) completeQuietly(*q.work, error);
    } catch (...) {  // no way left to report it; the thread ends rather than terminate the process
    }
  }
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::completeLater(::c10d::OpType type,
                                                                     std::vector<at::Tensor> outputs,
                                                                     Request request, int peer, int tag,
                                                                     Staging staging) {
  const std::size_t expected = outputs.empty() ? 0 : outputs[0].nbytes();
  auto work = c10::make_intrusive<GossamerWork>(rank_, type, std::move(outputs));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(defaults_.timeoutSeconds));
  const bool receive = type != ::c10d::OpType::SEND;
  std::exception_ptr gone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    TORCH_CHECK(!stop_, "gossamer: the process group is shut down");
    gone = p2pThreadError_;
    if (!gone)
      pointToPoint_.push_back(
          {work, std::move(request), peer, tag, receive, deadline, std::move(staging), expected});
  }
  if (gone) {
    // The thread that completes sends and receives ended: `request` is
    // cancelled as it goes out of scope here, and its Work fails.
    work->complete(gone);
    return work;
  }
  cv_.notify_all();
  return work;
}

namespace {

// The transport takes any message that fits a receive's buffer: a shorter
// one would leave the rest of the tensor as it was, so a receive of `r`
// (the user's `tag`) must have received its tensor's `bytes` exactly.
// @throws ProtocolError naming the sender and both sizes.
void expectReceived(const Request& r, int tag, std::size_t bytes) {
  if (r.bytes() != bytes)
    throw ProtocolError(r.peer(), frame_offset::kPayloadBytes,
                        "recv (tag " + std::to_string(tag) + ") of a " + std::to_string(bytes) +
                            "-byte tensor got a message of " + std::to_string(r.bytes()) +
                            " bytes (does the sender send a tensor of the same size and dtype?)");
}

/// Throws why a send or receive was cut off: TimeoutError after
/// `timedOutAfter` seconds, or (0) Cancelled as the group was destroyed.
/// `peer` -1: any rank.
[[noreturn]] void throwCutOff(bool receive, int peer, int tag, double timedOutAfter) {
  std::ostringstream message;
  message << "gossamer: " << (receive ? "recv from " : "send to ");
  if (peer < 0)
    message << "any rank";
  else
    message << "rank " << peer;
  message << " (tag " << tag << ")";
  if (timedOutAfter > 0) {
    message << " timed out after " << timedOutAfter << " s";
    throw TimeoutError(message.str());
  }
  message << ": the process group was destroyed before it completed";
  throw Cancelled(message.str());
}

}  // namespace

void ProcessGroupGossamer::endPosted(std::vector<Posted>& pending, std::vector<Request>& requests,
                                     std::size_t i, End end, double timeoutSeconds,
                                     std::exception_ptr failed) {
  std::exception_ptr error = std::move(failed);
  if (!error) {
    try {
      if (end != End::kSettled) requests[i].cancel();
      try {
        (void)requests[i].test();  // rethrows its failure
      } catch (const Cancelled&) {
        if (end == End::kSettled) throw;
        const Posted& p = pending[i];
        throwCutOff(p.receive, p.peer, p.tag, end == End::kTimedOut ? timeoutSeconds : 0);
      }
      if (pending[i].peer < 0) pending[i].work->setSourceRank(requests[i].peer());
      if (pending[i].receive) expectReceived(requests[i], pending[i].tag, pending[i].bytes);
      pending[i].staging.copyBack();
    } catch (...) {
      error = std::current_exception();
    }
  }
  auto work = std::move(pending[i].work);
  const auto at = static_cast<std::ptrdiff_t>(i);
  requests.erase(requests.begin() + at);  // cancels it if still pending: its buffer is not written after
  pending.erase(pending.begin() + at);
  work->complete(error);  // a failed send or receive does not break the group's collectives
}

// Completes the posted sends and receives as each settles, in whatever order
// they do: a send is never held up by a receive posted before it, nor the
// other way round (as on gloo). One still pending `timeout` seconds after it
// was posted is cancelled and fails with TimeoutError; once the group is being
// destroyed, so are the receives still pending (the sends go on, bounded by
// their timeouts). Sends and receives posted while others are pending join
// the wait within kPickUpSeconds (the thread wakes that often while any is
// pending; a lone one's completion wakes it at once); with none pending it
// sleeps until one is posted or the group stops. A failure of the
// transport's progress itself fails every pending one with it. An exception
// outside that (a lock, completing a Work) ends the thread: every pending and
// queued one is cancelled and fails with it, and so do those posted later
// (p2pThreadError_). None escapes the thread.
void ProcessGroupGossamer::runPointToPoint(const std::atomic<bool>& letGo) {
  constexpr double kPickUpSeconds = 0.001;
  const double timeoutSeconds = defaults_.timeoutSeconds;  // (settle reads no member: see orphaned)
  std::vector<Posted> pending;    // in posting order; their requests moved into `requests`
  std::vector<Request> requests;  // requests[i] is pending[i]'s
  const auto settle = [&](std::size_t i, End end, std::exception_ptr failed = nullptr) {
    endPosted(pending, requests, i, end, timeoutSeconds, std::move(failed));
  };
  // Ends every pending one in posting order, with `why` (null: as at a
  // destroy), each cancelled before its Work completes; a completion that
  // throws does not stop the rest. `endingWith` tells a destructor that a
  // callback runs meanwhile (endHeldPointToPoint_) what to end the rest with.
  std::exception_ptr endingWith;
  const auto endAll = [&](const std::exception_ptr& why) noexcept {
    endingWith = why;
    while (!pending.empty()) {
      try {
        settle(0, why ? End::kSettled : End::kDestroyed, why);
      } catch (...) {  // its future holds a result already; the others still end
      }
    }
  };
  // (Called by a destructor run inside work->complete above, on this thread:
  // whoever loops over `pending` after settle returns checks its size anew.)
  endHeldPointToPoint_ = [&] { endAll(endingWith); };
  try {
    for (;;) {
      // A callback of a Work settled last turn destroyed the group (`this` is
      // gone): the rest end as at a destroy (settle touches no member).
      if (letGo) {
        endAll(nullptr);
        return;
      }
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (pending.empty()) cv_.wait(lk, [&] { return stop_ || !pointToPoint_.empty(); });
        // Room first: the push_backs below cannot throw, so requests[i] stays pending[i]'s.
        pending.reserve(pending.size() + pointToPoint_.size());
        requests.reserve(pending.capacity());
        for (; !pointToPoint_.empty(); pointToPoint_.pop_front()) {
          pending.push_back(std::move(pointToPoint_.front()));
          requests.push_back(std::move(pending.back().request));
        }
        stopping = stop_;
      }
      if (stopping)
        for (std::size_t i = 0; i < pending.size();) {
          if (pending[i].receive)
            settle(i, End::kDestroyed);
          else
            ++i;
        }
      if (pending.empty()) {
        if (stopping) return;
        continue;
      }
      int settled = -1;
      std::exception_ptr thrown;
      try {
        if (requests.size() == 1)  // the usual blocking send or recv: its own wait wakes at once
          settled = requests[0].waitFor(kPickUpSeconds) ? 0 : -1;
        else
          settled = Request::waitAny(requests, kPickUpSeconds);
      } catch (...) {
        // The lone request's own failure, or the transport's progress failing
        // (waitAny throws no request's own): either way theirs.
        thrown = std::current_exception();
      }
      if (thrown) {
        endAll(thrown);
        endingWith = nullptr;
        continue;
      }
      if (settled >= 0) settle(static_cast<std::size_t>(settled), End::kSettled);
      const auto now = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < pending.size();) {
        if (pending[i].deadline <= now)
          settle(i, End::kTimedOut);
        else
          ++i;
      }
    }
  } catch (...) {
    try {
      const std::exception_ptr error = std::current_exception();
      std::deque<Posted> queued;
      if (letGo) {  // (thrown by completing a Work after its callback destroyed the group)
        endAll(error);
        return;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        p2pThreadError_ = error;
        queued.swap(pointToPoint_);
      }
      pending.reserve(pending.size() + queued.size());
      requests.reserve(pending.capacity());
      for (auto& p : queued) {
        pending.push_back(std::move(p));
        requests.push_back(std::move(pending.back().request));
      }
      queued.clear();
      endAll(error);
    } catch (...) {  // no way left to report it; the thread ends rather than terminate the process
    }
  }
}

// ---- collectives --------------------------------------------------------------------

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::broadcast(std::vector<at::Tensor>& tensors,
                                                                 const ::c10d::BroadcastOptions& opts) {
  checkTensor(single(tensors, "broadcast"), "broadcast", Use::kMoved);
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "broadcast root");
  Staging staging;
  const at::Tensor t = staging(tensors[0], rank_ == root, rank_ != root);
  return enqueue(::c10d::OpType::BROADCAST, tensors,
                 onMoved(t,
                         [this, root](auto data, const CollectiveOptions& o) {
                           gossamer::broadcast(agent_->transport(), data, root, o);
                         }),
                 std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::allreduce(std::vector<at::Tensor>& tensors,
                                                                 const ::c10d::AllreduceOptions& opts) {
  checkTensor(single(tensors, "allreduce"), "allreduce");
  const ReduceOp op = reduceOpOf(opts.reduceOp);
  Staging staging;
  const at::Tensor t = staging(tensors[0], true, true);
  return enqueue(::c10d::OpType::ALLREDUCE, tensors,
                 onElements(t,
                            [this, op](auto data, const CollectiveOptions& o) {
                              gossamer::allreduce(agent_->transport(), data, op, o);
                            }),
                 std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "gossamer: allreduce_coalesced: no tensors");
  for (const auto& t : tensors) checkSameType(tensors[0], t, "allreduce_coalesced");
  const ReduceOp op = reduceOpOf(opts.reduceOp);
  Staging staging;
  std::vector<at::Tensor> list = staging(tensors, true, true);
  return enqueue(
      ::c10d::OpType::ALLREDUCE_COALESCED, tensors,
      [this, list, op](const CollectiveOptions& o) mutable {
        at::Tensor all = flat(list);  // one allreduce for all of them
        withElement(all.scalar_type(), [&](auto e) {
          using T = decltype(e);
          gossamer::allreduce<T>(agent_->transport(), elements<T>(all), op, o);
        });
        unflatten(all, list);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::reduce(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::ReduceOptions& opts) {
  checkTensor(single(tensors, "reduce"), "reduce");
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "reduce root");
  const ReduceOp op = reduceOpOf(opts.reduceOp);
  Staging staging;
  const at::Tensor t = staging(tensors[0], true, true);
  return enqueue(::c10d::OpType::REDUCE, tensors,
                 onElements(t,
                            [this, root, op](auto data, const CollectiveOptions& o) {
                              gossamer::reduce(agent_->transport(), data, root, op, o);
                            }),
                 std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  checkTensor(single(inputs, "allgather"), "allgather", Use::kMoved);
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                    "gossamer: allgather needs one list of ", size_, " output tensors");
  for (const auto& t : outputs[0]) checkSame(inputs[0], t, "allgather output", Use::kMoved);
  Staging staging;
  const at::Tensor in = movable(staging(inputs[0], true, false));
  std::vector<at::Tensor> outs = movable(staging(outputs[0], false, true));
  return enqueue(
      ::c10d::OpType::ALLGATHER, outputs[0],
      [this, in, outs](const CollectiveOptions& o) mutable {
        at::Tensor all = at::empty({in.numel() * size_}, in.options());
        all.narrow(0, in.numel() * rank_, in.numel()).copy_(in.reshape({-1}));
        withMoved(in.scalar_type(), [&](auto e) {
          using T = decltype(e);
          gossamer::ringAllgather<T>(agent_->transport(), elements<T>(all), o);
        });
        unflatten(all, outs);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                       const ::c10d::AllgatherOptions&) {
  checkTensor(input, "allgather_into_tensor", Use::kMoved);
  checkTensor(output, "allgather_into_tensor", Use::kMoved);
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "gossamer: allgather_into_tensor: dtypes differ");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size_,
                    "gossamer: allgather_into_tensor: the output has ", output.numel(), " elements, not ",
                    size_, " x ", input.numel());
  Staging staging;
  const at::Tensor in = movable(staging(input, true, false)), out = movable(staging(output, false, true));
  return enqueue(
      ::c10d::OpType::_ALLGATHER_BASE, {output},
      [this, in, out](const CollectiveOptions& o) {
        // This rank's piece of `out`: the input is copied there unless it is
        // that piece already (FSDP's in-place call); cloned first only when
        // it overlaps the piece otherwise.
        at::Tensor mine = out.view({-1}).narrow(0, in.numel() * rank_, in.numel());
        if (in.data_ptr() != mine.data_ptr()) mine.copy_(apart(in, mine).reshape({-1}));
        withMoved(in.scalar_type(), [&](auto e) {
          using T = decltype(e);
          gossamer::ringAllgather<T>(agent_->transport(), elements<T>(out), o);
        });
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const ::c10d::GatherOptions& opts) {
  checkTensor(single(inputs, "gather"), "gather", Use::kMoved);
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "gather root");
  Staging staging;
  const at::Tensor in = movable(staging(inputs[0], true, false));
  std::vector<at::Tensor> results, outs;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                      "gossamer: gather needs one list of ", size_, " output tensors on the root");
    for (const auto& t : outputs[0]) checkSame(inputs[0], t, "gather output", Use::kMoved);
    results = outputs[0];
    outs = movable(staging(results, false, true));
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "gossamer: gather: only the root takes outputs");
  }
  return enqueue(
      ::c10d::OpType::GATHER, results,
      [this, in, outs, root](const CollectiveOptions& o) mutable {
        const auto n = static_cast<std::size_t>(in.numel());
        std::vector<std::size_t> sendCounts(size_, 0), recvCounts(size_, rank_ == root ? n : 0);
        sendCounts[root] = n;
        at::Tensor all = at::empty({rank_ == root ? in.numel() * size_ : 0}, in.options());
        alltoallvTensors(agent_->transport(), in, sendCounts, all, recvCounts, o);
        if (rank_ == root) unflatten(all, outs);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const ::c10d::ScatterOptions& opts) {
  checkTensor(single(outputs, "scatter"), "scatter", Use::kMoved);
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "scatter root");
  Staging staging;
  const at::Tensor out = movable(staging(outputs[0], false, true));
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                      "gossamer: scatter needs one list of ", size_, " input tensors on the root");
    for (const auto& t : inputs[0]) checkSame(outputs[0], t, "scatter input", Use::kMoved);
    ins = movable(staging(inputs[0], true, false));
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "gossamer: scatter: only the root takes inputs");
  }
  return enqueue(
      ::c10d::OpType::SCATTER, outputs,
      [this, out, ins, root](const CollectiveOptions& o) {
        // Read when it runs (after the operations queued before it), as a copy.
        const at::Tensor all = ins.empty() ? at::empty({0}, out.options()) : flat(ins);
        const auto n = static_cast<std::size_t>(out.numel());
        std::vector<std::size_t> sendCounts(size_, rank_ == root ? n : 0), recvCounts(size_, 0);
        recvCounts[root] = n;
        alltoallvTensors(agent_->transport(), all, sendCounts, out, recvCounts, o);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  checkTensor(single(outputs, "reduce_scatter"), "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                    "gossamer: reduce_scatter needs one list of ", size_, " input tensors");
  for (const auto& t : inputs[0]) checkSame(outputs[0], t, "reduce_scatter input");
  const ReduceOp op = reduceOpOf(opts.reduceOp);
  Staging staging;
  const at::Tensor out = staging(outputs[0], false, true);
  std::vector<at::Tensor> ins = staging(inputs[0], true, false);
  return enqueue(
      ::c10d::OpType::REDUCE_SCATTER, outputs,
      [this, out, ins, op](const CollectiveOptions& o) {
        at::Tensor all = flat(ins);
        reduceScatterInto(agent_->transport(), all, out, op, o);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "reduce_scatter_tensor");
  checkTensor(output, "reduce_scatter_tensor");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "gossamer: reduce_scatter_tensor: dtypes differ");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * size_,
                    "gossamer: reduce_scatter_tensor: the input has ", input.numel(), " elements, not ",
                    size_, " x ", output.numel());
  const ReduceOp op = reduceOpOf(opts.reduceOp);
  Staging staging;
  const at::Tensor in = staging(input, true, false), out = staging(output, false, true);
  return enqueue(
      ::c10d::OpType::_REDUCE_SCATTER_BASE, {output},
      [this, in, out, op](const CollectiveOptions& o) {
        at::Tensor all = in.clone();  // the reduce-scatter works in place; the input stays the caller's
        reduceScatterInto(agent_->transport(), all, out, op, o);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                     std::vector<int64_t>& outputSplits,
                                                                     std::vector<int64_t>& inputSplits,
                                                                     const ::c10d::AllToAllOptions&) {
  checkTensor(input, "all_to_all_single", Use::kMoved);
  checkTensor(output, "all_to_all_single", Use::kMoved);
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "gossamer: all_to_all_single: dtypes differ");
  const auto sendCounts = countsOf(input, inputSplits, size_, "all_to_all_single input");
  const auto recvCounts = countsOf(output, outputSplits, size_, "all_to_all_single output");
  // Checked here, before anything is queued: on the collective thread the
  // same check would break the group for every later operation.
  TORCH_CHECK_VALUE(sendCounts[rank_] == recvCounts[rank_], "gossamer: all_to_all_single: rank ", rank_,
                    " sends itself ", sendCounts[rank_], " elements (input_split_sizes[", rank_,
                    "], or the input's even share) but receives ", recvCounts[rank_],
                    " from itself (output_split_sizes[", rank_,
                    "], or the output's even share); the two must agree");
  Staging staging;
  const at::Tensor in = staging(input, true, false), out = staging(output, false, true);
  return enqueue(
      ::c10d::OpType::ALLTOALL_BASE, {output},
      [this, in, out, sendCounts, recvCounts](const CollectiveOptions& o) {
        alltoallvTensors(agent_->transport(), apart(in, out), sendCounts, out, recvCounts, o);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::alltoall(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const ::c10d::AllToAllOptions&) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                    "gossamer: all_to_all needs ", size_, " input and ", size_, " output tensors");
  for (const auto& t : inputs) checkSameType(inputs[0], t, "all_to_all input", Use::kMoved);
  for (const auto& t : outputs) checkSameType(inputs[0], t, "all_to_all output", Use::kMoved);
  TORCH_CHECK_VALUE(inputs[rank_].numel() == outputs[rank_].numel(), "gossamer: all_to_all: rank ", rank_,
                    " sends itself ", inputs[rank_].numel(), " elements (input ", rank_, ") but receives ",
                    outputs[rank_].numel(), " from itself (output ", rank_, "); the two must agree");
  Staging staging;
  std::vector<at::Tensor> ins = movable(staging(inputs, true, false)),
                          outs = movable(staging(outputs, false, true));
  std::vector<std::size_t> sendCounts, recvCounts;  // elements of the movable tensors
  for (const auto& t : ins) sendCounts.push_back(static_cast<std::size_t>(t.numel()));
  for (const auto& t : outs) recvCounts.push_back(static_cast<std::size_t>(t.numel()));
  return enqueue(
      ::c10d::OpType::ALLTOALL, outputs,
      [this, ins, outs, sendCounts, recvCounts](const CollectiveOptions& o) mutable {
        at::Tensor from = flat(ins);
        at::Tensor to = at::empty(
            {static_cast<int64_t>(std::accumulate(recvCounts.begin(), recvCounts.end(), std::size_t{0}))},
            from.options());
        alltoallvTensors(agent_->transport(), from, sendCounts, to, recvCounts, o);
        unflatten(to, outs);
      },
      std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::barrier(const ::c10d::BarrierOptions&) {
  // Its own tag space: a rank's barrier never pairs with another's allreduce.
  return enqueue(::c10d::OpType::BARRIER, {},
                 [this](const CollectiveOptions& o) { gossamer::barrier(agent_->transport(), o); });
}

// ---- point to point -------------------------------------------------------------------

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                            int tag) {
  checkTensor(single(tensors, "send"), "send", Use::kMoved);
  checkRank(dstRank, size_, "send destination");
  TORCH_CHECK_VALUE(tag >= 0, "gossamer: send: negative tag ", tag);
  Staging staging;
  const at::Tensor t = staging(tensors[0], true, false);
  Request r =
      agent_->transport().isend(dstRank, Tag::make(Op::kUser, static_cast<std::uint64_t>(tag)), bytes(t));
  return completeLater(::c10d::OpType::SEND, tensors, std::move(r), dstRank, tag, std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                            int tag) {
  checkTensor(single(tensors, "recv"), "recv", Use::kMoved);
  checkRank(srcRank, size_, "recv source");
  TORCH_CHECK_VALUE(tag >= 0, "gossamer: recv: negative tag ", tag);
  Staging staging;
  const at::Tensor t = staging(tensors[0], false, true);
  Request r =
      agent_->transport().irecv(srcRank, Tag::make(Op::kUser, static_cast<std::uint64_t>(tag)), bytes(t));
  return completeLater(::c10d::OpType::RECV, tensors, std::move(r), srcRank, tag, std::move(staging));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupGossamer::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                     int tag) {
  checkTensor(single(tensors, "recv"), "recv", Use::kMoved);
  TORCH_CHECK_VALUE(tag >= 0, "gossamer: recv: negative tag ", tag);
  Staging staging;
  const at::Tensor t = staging(tensors[0], false, true);
  std::vector<int> sources;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) sources.push_back(r);
  TORCH_CHECK_VALUE(!sources.empty(), "gossamer: recv from any source in a group of one");
  Request r = agent_->transport().irecv(std::span<const int>(sources),
                                        Tag::make(Op::kUser, static_cast<std::uint64_t>(tag)), bytes(t));
  return completeLater(::c10d::OpType::RECVANYSOURCE, tensors, std::move(r), -1, tag, std::move(staging));
}

}  // namespace gossamer::c10d_backend
