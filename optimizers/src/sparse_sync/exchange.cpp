// The exchange of sparse synchronous SGD: one rank's reduce, direct sends and
// broadcast for each round, over a schedule computed before training (the
// existing method or direct transmission), with the keys omitted from the
// wire: every rank derives every message's feature list from D up front, so a
// round moves float64 values only.
//
// Source: Yokoyama and Araki, "Efficient Distributed Machine Learning for
// Large-scale Models by Reducing Redundant Communication", Algorithm 1 (the
// step w <- w - alpha sum_n g_n), Section V-A (symmetric nodes, each owning a
// range of the parameters), Section V-B (all-to-all with the keys omitted),
// Section IV-D (direct transmission; the exact form is planDirectTransmission's,
// sparse_sync.hpp).
//
// Per round m, on rank r (N ranks, rows of `width` float64):
//   broadcast(m)  one alltoallv: each owner sends rank n the rows of
//                 F^B_{n,m} in its range, taken from its reference copy;
//                 rank r writes them into its working copy.
//                 Bytes sent by r: 8 width sum_{n != r} |F^B_{n,m} in r's range|.
//   reduce(m)     1. for each feature of D_{r,m} that r alone touches in m:
//                    row <- row - rate (0 + g) in the working copy (the
//                    new value; what the owner would compute);
//                 2. one alltoallv; the message to rank j is [the rows of
//                    F^R_{r,m} in j's range][the rows of F^D(r, j, m)], each
//                    row the new value (feature touched by r alone) or the
//                    gradient (touched by several ranks); to itself it adds
//                    its own gradient rows for the direct gradients it
//                    receives (a local copy, not counted);
//                 3. the receiver, walking sources in rank order: a value
//                    overwrites (the owner's reference row, or the working
//                    row for a direct value); gradients add into a sum that
//                    starts at +0.0 (owner rows, or working rows for direct
//                    gradients), then row <- row - rate sum.
//                 Bytes sent by r: 8 width (sum_{j != owner} |F^R_{r,m} in
//                 j's range| + sum_{j != r} |F^D(r, j, m)|).
//   gather()      one alltoallv of each owner's range to every rank (after
//                 the last round, or between rounds: a commit of the table).
// The sums run over the touching ranks in rank order from +0.0; a dense sum
// over all N ranks in rank order adds +0.0 for the others, which changes no
// bit (a sum that starts at +0.0 is never -0.0), so the table equals dense
// synchronous SGD's bit for bit, with either schedule.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "gossamer/collectives.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/optimizers/sparse_sync.hpp"

namespace gossamer::optimizers::sparse_sync {

namespace {

using Features = std::vector<std::uint32_t>;

enum class Action : std::uint8_t { kOwnerValue, kOwnerGradient, kWorkValue, kWorkGradient };

struct RecvItem {
  std::uint32_t feature;
  std::uint32_t slot;  // into the round's sums (gradients only)
  Action action;
};

struct Slot {
  std::uint32_t feature;
  bool owner;  // the reference row (else the working row)
};

// The part of sorted `list` in [lo, hi).
std::pair<Features::const_iterator, Features::const_iterator> inRange(const Features& list, std::size_t lo,
                                                                      std::size_t hi) {
  const auto b = std::lower_bound(list.begin(), list.end(), lo);
  const auto e = std::lower_bound(b, list.end(), hi);
  return {b, e};
}

}  // namespace

struct SparseExchange::Round {
  std::vector<std::size_t> bcastSendCounts, bcastRecvCounts;  // elements, per rank
  Features bcastSendRows, bcastRecvRows;                      // features, by rank
  Features keys;                                              // D_{r,m}
  std::vector<char> single;                                   // per key: touched by r alone
  std::vector<std::uint32_t> sendItems;                       // indices into D_{r,m}, by rank
  std::vector<std::size_t> sendCounts, recvCounts;            // elements, per rank
  std::vector<RecvItem> recvItems;                            // by rank
  std::vector<Slot> slots;
  std::uint64_t reduceSent = 0, directSent = 0, bcastSent = 0;  // elements, not to itself
};

SparseExchange::~SparseExchange() = default;

SparseExchange::SparseExchange(Transport& transport, const TouchedFeatures& touched,
                               const std::vector<std::size_t>& bounds, const DirectSchedule& schedule,
                               std::size_t width, std::span<const double> initial, double timeoutSeconds,
                               std::uint64_t sequence)
    : transport_(transport), width_(width), bounds_(bounds), timeout_(timeoutSeconds), sequence_(sequence) {
  checkRanges(bounds);
  const std::size_t n = touched.size();
  GOSSAMER_ENFORCE(bounds.size() == n + 1,
                   "sparse exchange: " << bounds.size() - 1 << " ranges for " << n << " ranks");
  dimension_ = bounds.back();
  const std::size_t rounds = checkTouched(touched, dimension_);
  GOSSAMER_ENFORCE(static_cast<std::size_t>(transport.worldSize()) == n,
                   "sparse exchange: the transport has " << transport.worldSize() << " ranks, D has " << n);
  GOSSAMER_ENFORCE(width >= 1, "sparse exchange: width must be >= 1");
  GOSSAMER_ENFORCE(initial.size() == dimension_ * width,
                   "sparse exchange: the initial table has "
                       << initial.size() << " values, d x width = " << dimension_ * width);
  GOSSAMER_ENFORCE(timeoutSeconds > 0, "sparse exchange: timeout must be > 0 seconds");
  const auto shaped = [&](const auto& v) { return v.size() == rounds && (rounds == 0 || v[0].size() == n); };
  GOSSAMER_ENFORCE(shaped(schedule.reduce) && shaped(schedule.broadcast) && shaped(schedule.direct),
                   "sparse exchange: the schedule is not M x N = " << rounds << " x " << n);
  for (std::size_t m = 0; m < rounds; ++m)
    for (std::size_t src = 0; src < n; ++src)
      GOSSAMER_ENFORCE(schedule.reduce[m][src].size() <= touched[src][m].size() &&
                           schedule.broadcast[m][src].size() <= touched[src][m].size() &&
                           schedule.direct[m][src].size() == n,
                       "sparse exchange: the schedule does not fit D at round " << m << ", rank " << src);
  const auto r = static_cast<std::size_t>(transport.rank());
  lo_ = bounds[r];
  hi_ = bounds[r + 1];
  owned_.assign(initial.begin() + static_cast<std::ptrdiff_t>(lo_ * width),
                initial.begin() + static_cast<std::ptrdiff_t>(hi_ * width));

  std::vector<std::uint32_t> ranksTouching(dimension_, 0);
  std::vector<std::uint32_t> ownerSlot(dimension_, UINT32_MAX), workSlot(dimension_, UINT32_MAX);
  rounds_.resize(rounds);
  for (std::size_t m = 0; m < rounds; ++m) {
    Round& rd = rounds_[m];
    for (std::size_t src = 0; src < n; ++src)
      for (std::uint32_t f : touched[src][m]) ++ranksTouching[f];
    const Features& mine = touched[r][m];
    const auto keyIndex = [&](std::uint32_t f) {
      const auto it = std::lower_bound(mine.begin(), mine.end(), f);
      GOSSAMER_ENFORCE(it != mine.end() && *it == f, "sparse exchange: rank "
                                                         << r << " sends feature " << f
                                                         << " it does not touch in round " << m);
      return static_cast<std::uint32_t>(it - mine.begin());
    };
    rd.keys = mine;
    rd.single.resize(mine.size());
    for (std::size_t i = 0; i < mine.size(); ++i) rd.single[i] = ranksTouching[mine[i]] == 1;
    // My own gradients for the direct gradients I receive (features several ranks touch).
    Features selfGradients;
    for (std::size_t src = 0; src < n; ++src)
      if (src != r)
        for (std::uint32_t f : schedule.direct[m][src][r])
          if (ranksTouching[f] > 1) selfGradients.push_back(f);
    std::sort(selfGradients.begin(), selfGradients.end());
    selfGradients.erase(std::unique(selfGradients.begin(), selfGradients.end()), selfGradients.end());

    rd.bcastSendCounts.assign(n, 0);
    rd.bcastRecvCounts.assign(n, 0);
    rd.sendCounts.assign(n, 0);
    rd.recvCounts.assign(n, 0);
    const auto slotFor = [&](std::vector<std::uint32_t>& table, std::uint32_t f, bool owner) {
      if (table[f] == UINT32_MAX) {
        table[f] = static_cast<std::uint32_t>(rd.slots.size());
        rd.slots.push_back({f, owner});
      }
      return table[f];
    };
    for (std::size_t j = 0; j < n; ++j) {
      // Broadcast: my rows to j; j's rows to me.
      const auto [sb, se] = inRange(schedule.broadcast[m][j], lo_, hi_);
      rd.bcastSendRows.insert(rd.bcastSendRows.end(), sb, se);
      rd.bcastSendCounts[j] = static_cast<std::size_t>(se - sb) * width;
      const auto [rb, re] = inRange(schedule.broadcast[m][r], bounds[j], bounds[j + 1]);
      rd.bcastRecvRows.insert(rd.bcastRecvRows.end(), rb, re);
      rd.bcastRecvCounts[j] = static_cast<std::size_t>(re - rb) * width;
      if (j != r) rd.bcastSent += rd.bcastSendCounts[j];
      // Reduce + direct: what I send j.
      const auto [qb, qe] = inRange(schedule.reduce[m][r], bounds[j], bounds[j + 1]);
      for (auto it = qb; it != qe; ++it) rd.sendItems.push_back(keyIndex(*it));
      const Features& direct = j == r ? selfGradients : schedule.direct[m][r][j];
      for (std::uint32_t f : direct) rd.sendItems.push_back(keyIndex(f));
      rd.sendCounts[j] = (static_cast<std::size_t>(qe - qb) + direct.size()) * width;
      if (j != r) {
        rd.reduceSent += static_cast<std::size_t>(qe - qb) * width;
        rd.directSent += direct.size() * width;
      }
      // What j sends me, in the same layout.
      const auto [pb, pe] = inRange(schedule.reduce[m][j], lo_, hi_);
      for (auto it = pb; it != pe; ++it) {
        const std::uint32_t f = *it;
        if (ranksTouching[f] == 1)
          rd.recvItems.push_back({f, 0, Action::kOwnerValue});
        else
          rd.recvItems.push_back({f, slotFor(ownerSlot, f, true), Action::kOwnerGradient});
      }
      const Features& incoming = j == r ? selfGradients : schedule.direct[m][j][r];
      for (std::uint32_t f : incoming) {
        if (ranksTouching[f] == 1)
          rd.recvItems.push_back({f, 0, Action::kWorkValue});
        else
          rd.recvItems.push_back({f, slotFor(workSlot, f, false), Action::kWorkGradient});
      }
      rd.recvCounts[j] = (static_cast<std::size_t>(pe - pb) + incoming.size()) * width;
    }
    for (const Slot& s : rd.slots) (s.owner ? ownerSlot : workSlot)[s.feature] = UINT32_MAX;
    for (std::size_t src = 0; src < n; ++src)
      for (std::uint32_t f : touched[src][m]) ranksTouching[f] = 0;
  }
}

void SparseExchange::exchange(std::span<const double> send, const std::vector<std::size_t>& sendCounts,
                              std::span<double> recv, const std::vector<std::size_t>& recvCounts) {
  CollectiveOptions options(sequence_ + collectives_++, timeout_);
  alltoallv<double>(transport_, send, sendCounts, recv, recvCounts, options);
}

void SparseExchange::broadcast(std::size_t m, std::span<double> params) {
  GOSSAMER_ENFORCE(m < rounds_.size() && next_ == 2 * m, "sparse exchange: broadcast of round "
                                                             << m << " out of order (" << rounds_.size()
                                                             << " rounds, next step " << next_ << ")");
  GOSSAMER_ENFORCE(params.size() == dimension_ * width_, "sparse exchange: the table has "
                                                             << params.size() << " values, expected "
                                                             << dimension_ * width_);
  const auto start = Clock::now();
  const Round& rd = rounds_[m];
  const std::size_t w = width_;
  sendBuf_.resize(rd.bcastSendRows.size() * w);
  for (std::size_t i = 0; i < rd.bcastSendRows.size(); ++i)
    std::copy_n(owned_.begin() + static_cast<std::ptrdiff_t>((rd.bcastSendRows[i] - lo_) * w), w,
                sendBuf_.begin() + static_cast<std::ptrdiff_t>(i * w));
  recvBuf_.resize(rd.bcastRecvRows.size() * w);
  exchange(sendBuf_, rd.bcastSendCounts, recvBuf_, rd.bcastRecvCounts);
  for (std::size_t i = 0; i < rd.bcastRecvRows.size(); ++i)
    std::copy_n(recvBuf_.begin() + static_cast<std::ptrdiff_t>(i * w), w,
                params.begin() + static_cast<std::ptrdiff_t>(std::size_t{rd.bcastRecvRows[i]} * w));
  ++next_;
  stats_.broadcastElements += rd.bcastSent;
  stats_.broadcastSeconds += secondsSince(start);
}

void SparseExchange::reduce(std::size_t m, std::span<const double> grads, double rate,
                            std::span<double> params) {
  GOSSAMER_ENFORCE(m < rounds_.size() && next_ == 2 * m + 1, "sparse exchange: reduce of round "
                                                                 << m << " out of order (" << rounds_.size()
                                                                 << " rounds, next step " << next_ << ")");
  const Round& rd = rounds_[m];
  const std::size_t w = width_;
  GOSSAMER_ENFORCE(params.size() == dimension_ * w, "sparse exchange: the table has " << params.size()
                                                                                      << " values, expected "
                                                                                      << dimension_ * w);
  GOSSAMER_ENFORCE(grads.size() == rd.single.size() * w,
                   "sparse exchange: " << grads.size() << " gradient values in round " << m << ", expected "
                                       << rd.single.size() * w);
  GOSSAMER_ENFORCE(std::isfinite(rate), "sparse exchange: the rate must be finite");
  const auto start = Clock::now();
  const Features& keys = rd.keys;
  // 1. New values of the features this rank alone touches (the owner's step).
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!rd.single[i]) continue;
    double* row = params.data() + std::size_t{keys[i]} * w;
    const double* g = grads.data() + i * w;
    for (std::size_t c = 0; c < w; ++c) row[c] = row[c] - rate * (0.0 + g[c]);
  }
  // 2. Values of those features, gradients of the others, in the send layout.
  sendBuf_.resize(rd.sendItems.size() * w);
  for (std::size_t i = 0; i < rd.sendItems.size(); ++i) {
    const std::uint32_t k = rd.sendItems[i];
    const double* from =
        rd.single[k] ? params.data() + std::size_t{keys[k]} * w : grads.data() + std::size_t{k} * w;
    std::copy_n(from, w, sendBuf_.begin() + static_cast<std::ptrdiff_t>(i * w));
  }
  recvBuf_.resize(rd.recvItems.size() * w);
  exchange(sendBuf_, rd.sendCounts, recvBuf_, rd.recvCounts);
  // 3. Sources in rank order: values overwrite, gradients add up from +0.0.
  sum_.assign(rd.slots.size() * w, 0.0);
  for (std::size_t i = 0; i < rd.recvItems.size(); ++i) {
    const RecvItem& item = rd.recvItems[i];
    const double* v = recvBuf_.data() + i * w;
    switch (item.action) {
      case Action::kOwnerValue:
        std::copy_n(v, w, owned_.begin() + static_cast<std::ptrdiff_t>((item.feature - lo_) * w));
        break;
      case Action::kWorkValue:
        std::copy_n(v, w, params.begin() + static_cast<std::ptrdiff_t>(std::size_t{item.feature} * w));
        break;
      case Action::kOwnerGradient:
      case Action::kWorkGradient: {
        double* s = sum_.data() + std::size_t{item.slot} * w;
        for (std::size_t c = 0; c < w; ++c) s[c] += v[c];
        break;
      }
    }
  }
  for (std::size_t k = 0; k < rd.slots.size(); ++k) {
    const Slot& slot = rd.slots[k];
    double* row =
        slot.owner ? owned_.data() + (slot.feature - lo_) * w : params.data() + std::size_t{slot.feature} * w;
    const double* s = sum_.data() + k * w;
    for (std::size_t c = 0; c < w; ++c) row[c] = row[c] - rate * s[c];
  }
  stats_.reduceElements += rd.reduceSent;
  stats_.directElements += rd.directSent;
  ++next_;
  stats_.reduceSeconds += secondsSince(start);
}

std::vector<double> SparseExchange::gather() {
  GOSSAMER_ENFORCE(next_ % 2 == 0, "sparse exchange: gather between a round's broadcast and its reduce");
  const std::size_t n = bounds_.size() - 1;
  std::vector<std::size_t> sendCounts(n, owned_.size()), recvCounts(n);
  for (std::size_t j = 0; j < n; ++j) recvCounts[j] = (bounds_[j + 1] - bounds_[j]) * width_;
  sendBuf_.resize(owned_.size() * n);
  for (std::size_t j = 0; j < n; ++j)
    std::copy(owned_.begin(), owned_.end(),
              sendBuf_.begin() + static_cast<std::ptrdiff_t>(j * owned_.size()));
  std::vector<double> table(dimension_ * width_);
  exchange(sendBuf_, sendCounts, table, recvCounts);
  return table;
}

}  // namespace gossamer::optimizers::sparse_sync
