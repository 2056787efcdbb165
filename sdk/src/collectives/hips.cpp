// HiPS hierarchical allreduce (Geng et al., "HiPS: Hierarchical Parameter
// Synchronization in Large-Scale Distributed Machine Learning" (NetAI '18),
// Algorithms 1 and 2). Rank r has the mixed-radix address (digit_1, ...,
// digit_h) over the radices k_1..k_h. Stage i works on the portion
// [b, e) of the vector handed down by stage i-1 (the whole vector for stage 1)
// together with the k_i ranks that share every digit but digit i (GetPeers).
// Those ranks hold the same portion boundaries (they agree on digits 1..i-1),
// so they can reduce-scatter it: afterwards rank r holds
// chunkRange(e - b, k_i, digit_i) of the portion, reduced over the group. After
// stage h a portion is reduced over all N ranks; the allgathers then run over
// the same groups in reverse order and rebuild the whole vector everywhere. See
// docs/hips.md.
#include "gossamer/kit/hips.hpp"
#include "gossamer/kit/executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "detail.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/sub_transport.hpp"
#include "table.hpp"

namespace gossamer {

namespace {

constexpr int kContextBase = detail::kCtxHipsFirst;

// Checks the radices and returns their product (capped: INT32_MAX + 1 means "too large").
std::int64_t productOf(std::span<const int> levels) {
  std::int64_t p = 1;
  for (int k : levels) {
    GOSSAMER_ENFORCE(k >= 1, "HiPS level radix " << k << " must be >= 1");
    p = std::min<std::int64_t>(p * k, std::int64_t{INT32_MAX} + 1);
  }
  return p;
}

// Diffuse + collect (mesh synchronisation, paper Section 2.2) among the ranks
// of `sub` on `portion`, cut into k = sub.worldSize() chunks by chunkRange.
// Each chunk travels as pieces of at most options.chunkBytes; a piece's tag
// is (kAllreduce, sequence, segment = phase base + piece index), and the
// sender tells the senders apart, so one segment range serves all peers.
template <typename T>
class Mesh {
 public:
  Mesh(SubTransport& t, std::span<T> portion, const CollectiveOptions& o)
      : t_(t), data_(portion), o_(o), k_(t.worldSize()), d_(t.rank()) {
    const auto [b0, e0] = chunkRange(portion.size(), k_, 0);  // chunk 0 is a longest one
    const std::size_t maxChunk = e0 - b0;
    pieceElems_ = detail::pieceElemsFor<T>(o);
    piecesPerChunk_ = std::max<std::size_t>(1, (maxChunk + pieceElems_ - 1) / pieceElems_);
    const std::size_t maxPieces = (std::size_t{Tag::kMaxSegment} + 1) / 2;  // two phases
    if (piecesPerChunk_ > maxPieces) {
      piecesPerChunk_ = maxPieces;
      pieceElems_ = (maxChunk + piecesPerChunk_ - 1) / piecesPerChunk_;
      if (pieceElems_ > detail::maxMessageElems<T>(o))
        throw InvalidArgument("HiPS allreduce of " + std::to_string(portion.size_bytes()) + " bytes over " +
                              std::to_string(k_) + " ranks: too large");
    }
  }

  std::span<T> chunk(int i) const {
    const auto [b, e] = chunkRange(data_.size(), k_, i);
    return data_.subspan(b, e - b);
  }

  // Diffuse: every rank sends chunk j to peer j and reduces the k-1 copies of
  // its own chunk it receives: its own values first, then the peers' in
  // ascending local rank (not arrival order), so the result is reproducible.
  void reduceScatter(ReduceOp op) {
    const auto mine = chunk(d_);
    std::vector<T> buffer(static_cast<std::size_t>(k_ - 1) * mine.size());
    std::vector<std::vector<Request>> recvs(static_cast<std::size_t>(k_));
    for (int j = 0; j < k_; ++j) {
      if (j == d_) continue;
      auto slot = this->slot(buffer, j, mine.size());
      for (std::size_t p = 0; p < pieces(mine.size()); ++p)
        recvs[static_cast<std::size_t>(j)].push_back(t_.irecvOf<T>(j, tag(0, p), piece(slot, p)));
    }
    std::vector<Request> sends;
    for (int s = 1; s < k_; ++s) {  // start with the right neighbour: spreads the load
      const int j = (d_ + s) % k_;
      const auto c = chunk(j);
      for (std::size_t p = 0; p < pieces(c.size()); ++p)
        sends.push_back(t_.isendOf<T>(j, tag(0, p), std::span<const T>(piece(c, p))));
    }
    for (int j = 0; j < k_; ++j) {
      if (j == d_) continue;
      auto slot = this->slot(buffer, j, mine.size());
      for (std::size_t p = 0; p < pieces(mine.size()); ++p) {
        auto& req = recvs[static_cast<std::size_t>(j)][p];
        detail::await(t_, req, o_.timeoutSeconds, "HiPS allreduce");
        auto dst = piece(mine, p);
        detail::expectBytes(t_, req, dst.size_bytes(), j);
        detail::combine(op, dst.data(), piece(slot, p).data(), dst.size());
      }
    }
    detail::awaitAll(t_, sends, o_.timeoutSeconds, "HiPS allreduce");
  }

  // Collect: every rank sends its (fully reduced) chunk to every peer and
  // receives theirs in place.
  void allgather() {
    const std::size_t base = piecesPerChunk_;
    std::vector<std::vector<Request>> recvs(static_cast<std::size_t>(k_));
    for (int j = 0; j < k_; ++j) {
      if (j == d_) continue;
      const auto c = chunk(j);
      for (std::size_t p = 0; p < pieces(c.size()); ++p)
        recvs[static_cast<std::size_t>(j)].push_back(t_.irecvOf<T>(j, tag(base, p), piece(c, p)));
    }
    const auto mine = chunk(d_);
    std::vector<Request> sends;
    for (int s = 1; s < k_; ++s) {
      const int j = (d_ + s) % k_;
      for (std::size_t p = 0; p < pieces(mine.size()); ++p)
        sends.push_back(t_.isendOf<T>(j, tag(base, p), std::span<const T>(piece(mine, p))));
    }
    for (int j = 0; j < k_; ++j) {
      if (j == d_) continue;
      const auto c = chunk(j);
      for (std::size_t p = 0; p < pieces(c.size()); ++p) {
        auto& req = recvs[static_cast<std::size_t>(j)][p];
        detail::await(t_, req, o_.timeoutSeconds, "HiPS allreduce");
        detail::expectBytes(t_, req, piece(c, p).size_bytes(), j);
      }
    }
    detail::awaitAll(t_, sends, o_.timeoutSeconds, "HiPS allreduce");
  }

 private:
  Tag tag(std::size_t base, std::size_t piece) const {
    return Tag::make(Op::kAllreduce, o_.sequence, static_cast<std::uint32_t>(base + piece));
  }
  std::size_t pieces(std::size_t elems) const { return (elems + pieceElems_ - 1) / pieceElems_; }
  std::span<T> piece(std::span<T> c, std::size_t p) const {
    const std::size_t b = p * pieceElems_;
    return c.subspan(b, std::min(pieceElems_, c.size() - b));
  }
  // Receive buffer of peer j (j != d_): the peers in ascending order, own rank left out.
  std::span<T> slot(std::vector<T>& buffer, int j, std::size_t len) const {
    const std::size_t index = static_cast<std::size_t>(j < d_ ? j : j - 1);
    return std::span<T>(buffer).subspan(index * len, len);
  }

  SubTransport& t_;
  std::span<T> data_;
  const CollectiveOptions& o_;
  int k_, d_;
  std::size_t pieceElems_ = 1, piecesPerChunk_ = 1;
};

// One pass of Algorithm 1 over `data`: the reduce-scatter stages in `order`
// (indices into `levels`, all radices > 1), the final scaling, then the
// allgather stages in reverse. Level `order[j]` uses context contextBase + order[j].
template <typename T>
void runStages(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options,
               HipsOptions::Stage stage, const std::vector<int>& levels, const std::vector<int>& order,
               int contextBase) {
  const ReduceOp reduceOp = detail::partialOp(op);
  const int rank = transport.rank();
  struct Level {
    std::unique_ptr<SubTransport> sub;
    std::size_t begin, end;  // the portion this stage works on (global element indices)
  };
  std::vector<Level> stages;
  std::size_t begin = 0, end = data.size();
  for (int level : order) {
    auto sub = std::make_unique<SubTransport>(transport, hipsPeers(rank, levels, level),
                                              static_cast<std::uint8_t>(contextBase + level));
    auto portion = data.subspan(begin, end - begin);
    if (stage == HipsOptions::Stage::kRing)
      ringReduceScatter(*sub, portion, reduceOp, options);
    else
      Mesh<T>(*sub, portion, options).reduceScatter(reduceOp);
    const auto [b, e] = chunkRange(portion.size(), sub->worldSize(), sub->rank());
    stages.push_back(Level{std::move(sub), begin, end});
    end = begin + e;
    begin += b;
  }
  detail::scaleIfAverage(op, data.subspan(begin, end - begin), transport.worldSize());
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    auto portion = data.subspan(it->begin, it->end - it->begin);
    if (stage == HipsOptions::Stage::kRing)
      ringAllgather(*it->sub, portion, options);
    else
      Mesh<T>(*it->sub, portion, options).allgather();
  }
}

}  // namespace

std::vector<int> hipsAutoLevels(int worldSize) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize << " must be >= 1");
  std::vector<int> factors;
  int n = worldSize;
  for (int p = 2; p <= n / p; ++p)
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  if (n > 1) factors.push_back(n);
  return factors;
}

std::vector<int> hipsPeers(int rank, std::span<const int> levels, int level) {
  const std::int64_t n = productOf(levels);
  GOSSAMER_ENFORCE(level >= 0 && static_cast<std::size_t>(level) < levels.size(),
                   "HiPS level " << level << " outside [0, " << levels.size() << ")");
  GOSSAMER_ENFORCE(n <= INT32_MAX, "HiPS levels multiply to more than 2^31 - 1");
  GOSSAMER_ENFORCE(rank >= 0 && rank < n,
                   "rank " << rank << " outside the " << n << " addresses of the levels");
  int stride = 1;
  for (int i = 0; i < level; ++i) stride *= levels[static_cast<std::size_t>(i)];
  const int k = levels[static_cast<std::size_t>(level)];
  const int digit = (rank / stride) % k;
  std::vector<int> peers;
  peers.reserve(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) peers.push_back(rank + (j - digit) * stride);
  return peers;
}

template <typename T>
void hipsAllreduce(Transport& transport, std::span<T> data, ReduceOp op, const CollectiveOptions& options,
                   const HipsOptions& hips) {
  const int n = transport.worldSize();
  const std::vector<int> given = hips.levels.empty() ? hipsAutoLevels(n) : hips.levels;
  const std::int64_t product = productOf(given);
  GOSSAMER_ENFORCE(product == n, "HiPS levels multiply to " << product << ", not the world size " << n);
  GOSSAMER_ENFORCE(dynamic_cast<SubTransport*>(&transport) == nullptr,
                   "hipsAllreduce needs a top-level transport (sub-transports cannot be nested)");
  GOSSAMER_ENFORCE(options.sequence < (std::uint64_t{1} << 32),
                   "hipsAllreduce: sequence " << options.sequence << " must be below 2^32");
  std::vector<int> levels;  // radix-1 levels are no-ops
  std::copy_if(given.begin(), given.end(), std::back_inserter(levels), [](int k) { return k > 1; });
  const int h = static_cast<int>(levels.size());
  const int streams = hips.parallelStreams && h > 1 ? h : 1;
  GOSSAMER_ENFORCE(kContextBase + streams * h - 1 <= 255,
                   "HiPS: " << h << " levels x " << streams << " streams need more than the "
                            << 256 - kContextBase << " sub-transport contexts");
  if (n == 1 || data.empty()) return;
  op = detail::premultipliedAverage(data, op, n);

  auto orderFor = [&](int s) {
    std::vector<int> order;
    for (int j = 0; j < h; ++j) order.push_back((s + j) % h);
    return order;
  };
  if (streams == 1) {
    runStages(transport, data, op, options, hips.stage, levels, orderFor(0), kContextBase);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(streams));
  auto run = [&](int s) {
    try {
      const auto [b, e] = chunkRange(data.size(), streams, s);
      runStages(transport, data.subspan(b, e - b), op, options, hips.stage, levels, orderFor(s),
                kContextBase + s * h);
    } catch (...) {
      errors[static_cast<std::size_t>(s)] = std::current_exception();
    }
  };
  // Streams whose task cannot be started run on this thread after stream 0:
  // they use their own contexts, so running them one after another is safe.
  std::vector<Task> tasks;
  int started = 1;
  try {
    for (; started < streams; ++started) tasks.push_back(startTask([&run, started] { run(started); }));
  } catch (const std::system_error&) {
  }
  run(0);
  for (int s = started; s < streams; ++s) run(s);
  for (auto& t : tasks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

#define GOSSAMER_INSTANTIATE(T)                                                                \
  template void hipsAllreduce<T>(Transport&, std::span<T>, ReduceOp, const CollectiveOptions&, \
                                 const HipsOptions&);
GOSSAMER_COLLECTIVE_TYPES(GOSSAMER_INSTANTIATE)
#undef GOSSAMER_INSTANTIATE

namespace detail {

namespace {

template <typename T>
void hipsAll(Transport& t, std::span<T> d, ReduceOp op, const CollectiveOptions& o) {
  hipsAllreduce(t, d, op, o, HipsOptions{});
}

// Stage i: N / k_i rings of k_i ranks on the portion left by stage i-1 (only
// the groups whose portion is non-empty send); the allgathers in reverse.
void hipsRounds(Rounds& out, std::size_t bytes, int n, const CollectiveOptions& o) {
  const auto levels = hipsAutoLevels(n);
  Rounds gathers;
  double portion = modelElements(bytes), nonEmpty = 1;  // product over earlier stages of min(k_j, portion_j)
  double later = n;                                     // product of k_j over this and later stages
  for (int k : levels) {
    later /= k;
    const double groups = nonEmpty * later;
    addRing(out, portion, k, groups, true, false, o);
    Rounds g;
    addRing(g, portion, k, groups, false, true, o);
    gathers.insert(gathers.begin(), g.begin(), g.end());
    nonEmpty *= std::min<double>(k, portion);
    portion = std::ceil(portion / k);
  }
  out.insert(out.end(), gathers.begin(), gathers.end());
}

}  // namespace

const AllreduceEntry kHipsEntry{AllreduceAlgorithm::kHips,
                                "hips",
                                "HiPS: ring reduce-scatter stages over the prime factors of N, then the "
                                "allgathers in reverse",
                                true,
                                GOSSAMER_ALLREDUCE_RUNNERS(hipsAll),
                                &hipsRounds};

}  // namespace detail

}  // namespace gossamer
