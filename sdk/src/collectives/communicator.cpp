// Communicator: a transport, a timeout and a sequence counter, so each
// collective call gets its own tags; split() makes sub-communicators on
// SubTransport views, each with a context its members agree on.
#include <algorithm>
#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "detail.hpp"
#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "work_queue.hpp"

namespace gossamer {

namespace {
// How far past the sequences a failed calibration used the next collective
// starts: more than any calibration uses (a few hundred calls).
constexpr std::uint64_t kSequencesAfterFailedCalibration = std::uint64_t{1} << 20;
}  // namespace

// The split contexts held on this rank by the live split communicators whose
// views are on one top-level transport. One per top-level transport in the
// process, found through a registry, so that communicators of different trees
// over the same transport (say an optimizer's group communicator on a view of
// the main one's transport) never share a context.
struct Communicator::SplitContexts {
  std::mutex mu;
  std::bitset<kSplitContexts> live;

  static std::shared_ptr<SplitContexts> of(const Transport& root) {
    static std::mutex registryMu;
    static std::map<const Transport*, std::weak_ptr<SplitContexts>> registry;
    std::lock_guard<std::mutex> lk(registryMu);
    for (auto it = registry.begin(); it != registry.end();)  // forget transports without splits
      it = it->second.expired() ? registry.erase(it) : std::next(it);
    auto& slot = registry[&root];
    auto contexts = slot.lock();
    if (!contexts) slot = contexts = std::make_shared<SplitContexts>();
    return contexts;
  }
};

Communicator::Communicator(Transport& transport, double timeoutSeconds)
    : transport_(transport), timeout_(timeoutSeconds) {
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "timeout must be positive, got " << timeoutSeconds);
  if (auto* view = dynamic_cast<SubTransport*>(&transport)) {
    const int c = view->context();
    GOSSAMER_ENFORCE(c < kFirstSplitContext || c >= kFirstSplitContext + kSplitContexts,
                     "a communicator on a view of context " << c << ": contexts " << int{kFirstSplitContext}
                                                            << "-" << kFirstSplitContext + kSplitContexts - 1
                                                            << " are reserved for split");
  }
}

Communicator::Communicator(std::unique_ptr<Transport> view, double timeoutSeconds,
                           const CollectiveOptions& defaults, std::shared_ptr<SplitContexts> contexts,
                           std::uint8_t context)
    : owned_(std::move(view)),
      transport_(*owned_),
      timeout_(timeoutSeconds),
      defaults_(defaults),
      contexts_(std::move(contexts)),
      context_(context) {
  std::lock_guard<std::mutex> lk(contexts_->mu);  // held from here until the destructor
  contexts_->live.set(static_cast<std::size_t>(context_ - kFirstSplitContext));
}

Communicator::~Communicator() {
  worker_.reset();  // its queued collectives run on context_: finished before the context is freed
  if (context_ == 0) return;
  std::lock_guard<std::mutex> lk(contexts_->mu);
  contexts_->live.reset(static_cast<std::size_t>(context_ - kFirstSplitContext));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  synchronize();
  GOSSAMER_ENFORCE(
      color >= 0 || color == kUndefinedColor,
      "split: color " << color << " must be >= 0 or kUndefinedColor (" << kUndefinedColor << ")");
  // A split of a split (or of a communicator on a view) is a view on the
  // top-level transport.
  auto* view = dynamic_cast<SubTransport*>(&transport_);
  Transport& root = view ? view->parent() : transport_;
  if (!contexts_) contexts_ = SplitContexts::of(root);
  // Every rank's color, key and held contexts (in words of 28 bits, exact in
  // a double), by a sum in which each entry has one contributor.
  constexpr int kWords = (kSplitContexts + 27) / 28, kStride = 2 + kWords;
  const int n = worldSize(), me = rank();
  std::vector<double> all(static_cast<std::size_t>(n * kStride), 0.0);
  double* mine = all.data() + static_cast<std::ptrdiff_t>(me) * kStride;
  mine[0] = color;
  mine[1] = key;
  std::bitset<kSplitContexts> held;
  {
    std::lock_guard<std::mutex> lk(contexts_->mu);
    held = contexts_->live;
  }
  for (int c = 0; c < kSplitContexts; ++c)
    if (held.test(static_cast<std::size_t>(c))) mine[2 + c / 28] += static_cast<double>(1 << (c % 28));
  CollectiveOptions o = next();
  o.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
  gossamer::allreduce<double>(transport_, all, ReduceOp::kSum, o);
  if (color == kUndefinedColor) return nullptr;

  // The members, ordered by (key, rank here); the lowest context that no
  // member holds.
  std::vector<std::pair<double, int>> order;
  std::bitset<kSplitContexts> taken;
  for (int r = 0; r < n; ++r) {
    const double* row = all.data() + static_cast<std::ptrdiff_t>(r) * kStride;
    if (row[0] != color) continue;
    order.emplace_back(row[1], r);
    for (int c = 0; c < kSplitContexts; ++c)
      if ((static_cast<std::uint32_t>(row[2 + c / 28]) >> (c % 28)) & 1u)
        taken.set(static_cast<std::size_t>(c));
  }
  std::sort(order.begin(), order.end());
  int free = 0;
  while (free < kSplitContexts && taken.test(static_cast<std::size_t>(free))) ++free;
  GOSSAMER_ENFORCE(free < kSplitContexts,
                   "split: the members of color "
                       << color << " hold all " << kSplitContexts
                       << " split contexts between them; destroy split communicators first");
  std::vector<int> members;
  for (const auto& [k, r] : order) members.push_back(view ? view->globalRank(r) : r);
  const auto context = static_cast<std::uint8_t>(kFirstSplitContext + free);
  auto sub = std::make_unique<SubTransport>(root, std::move(members), context);
  return std::unique_ptr<Communicator>(
      new Communicator(std::move(sub), timeout_, defaults_, contexts_, context));
}

CollectiveOptions Communicator::next() {
  CollectiveOptions o = defaults_;
  o.sequence = sequence_++ & Tag::kMaxStep;
  o.timeoutSeconds = timeout_;
  return o;
}

#define GOSSAMER_COMMUNICATOR_CALLS(T)                                  \
  void Communicator::allreduce(std::span<T> data, ReduceOp op) {        \
    gossamer::allreduce(transport_, data, op, ordered());               \
  }                                                                     \
  void Communicator::broadcast(std::span<T> data, int root) {           \
    gossamer::broadcast(transport_, data, root, ordered());             \
  }                                                                     \
  void Communicator::reduce(std::span<T> data, int root, ReduceOp op) { \
    gossamer::reduce(transport_, data, root, op, ordered());            \
  }
GOSSAMER_FLOAT_TYPES(GOSSAMER_COMMUNICATOR_CALLS)
#undef GOSSAMER_COMMUNICATOR_CALLS

CostModel Communicator::calibrate(int reps) {
  CalibrationOptions c;
  c.reps = reps;
  return calibrate(c);
}

CostModel Communicator::calibrate(const CalibrationOptions& calibration) {
  synchronize();
  CollectiveOptions o = defaults_;
  const std::uint64_t first = sequence_ & Tag::kMaxStep;
  o.sequence = first;
  o.timeoutSeconds = timeout_;
  try {
    defaults_.model = calibrateCostModel(transport_, o, calibration);
  } catch (...) {
    // The ranks may have got to different sequences, and messages of the
    // calibration may still be queued. Leaving them all well behind keeps a
    // later collective from taking one of them: it fails (its peers
    // disagree on where the calibration stopped) rather than reading them.
    sequence_ += o.sequence - first + kSequencesAfterFailedCalibration;
    throw;
  }
  sequence_ += o.sequence - first;
  return defaults_.model;
}

void Communicator::barrier() { gossamer::barrier(transport_, ordered()); }

void barrier(Transport& transport, const CollectiveOptions& options) {
  detail::disseminationBarrier(transport, Op::kBarrier, options.sequence, options.timeoutSeconds);
}

}  // namespace gossamer
