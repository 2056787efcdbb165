// The membership service: heartbeats, suspicion, view changes (see
// membership.hpp for the protocol and the bytes on the wire).
#include "gossamer/transports/membership.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/log.hpp"
#include "gossamer/registry.hpp"
#include "membership_codec.hpp"

namespace gossamer::membership {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// How long (in heartbeat periods) a view change waits for the report of a
/// peer that asked to join, before it decides without it.
constexpr double kJoinWaitBeats = 5;

/// The background thread's pass intervals: it reads what its peers sent,
/// sends heartbeats when due and suspects the silent once a pass. Every
/// 2 ms while a view change is under way or its peers sent anything but
/// heartbeats in the last pass (the rounds of an agreement follow each other
/// at that pace); every 10 ms otherwise, so that an idle rank costs its
/// process less CPU (with 4 ranks on 2 cores, that time comes out of their
/// forward and backward passes). A first message after quiet waits at most
/// 10 ms more.
constexpr auto kBusyPassInterval = std::chrono::milliseconds(2);
constexpr auto kIdlePassInterval = std::chrono::milliseconds(10);

/// Warnings about messages of replaced processes dropped, at most (one per
/// rank and incarnation).
constexpr std::size_t kStaleWarnings = 64;

using codec::decode;
using codec::encode;
using codec::kHeaderBytes;
using codec::Kind;
using codec::Message;

const Tag kControlTag{Op::kMembership, 0, 0};

// A view change the coordinator decided, not yet installed here.
struct Decided {
  View view;
  std::pair<std::uint64_t, int> from;  // the view it was decided from (number, coordinator)
  Message message;                     // as received, to pass on
  std::uint64_t resumeStep = 0;
  std::uint64_t fewestSteps = 0;
  bool evaluating = false;
  bool merged = false;
  int modelSource = -1;
};

// A view's identity: (number, coordinator).
using ViewKey = std::pair<std::uint64_t, int>;

// What one peer said in a view this rank has not installed yet (the view
// message is still on its way here from the coordinator, or another peer
// passes it on): kept and acted on when this rank installs that view.
//
// A peer's messages name the view it holds, and a rank only moves to newer
// views; so once a peer names another view, what it said in the one before
// is moot: it left that view, which then either went on without this rank
// (the next view needed this rank's report in it, sent only once it holds
// it) or was given up for a newer one that this rank follows too. Only the
// latest view each peer names is kept: a new one replaces it. What a peer
// can make this rank hold is then one view's worth, whatever view numbers
// (2^62 of them) and coordinators it names: a hostile rank sending ever
// newer numbers holds no more memory than an honest one. (A bound on how
// far ahead a view may be numbered would not do: a side of a healed
// partition numbers its next view up to 2^32 above its last.)
struct Early {
  std::optional<ViewKey> suspectsIn;  // the view `suspects` were suspected in
  std::set<int> suspects;             // ranks it suspected there
  std::optional<ViewKey> joins;       // the view it asked to join
};

// This process's incarnation: the wall clock's tenths of a second when its
// service started, modulo 2^24 (the codec's bytes 5-7; 19.4 days). A
// process started in place of a failed rank starts later, so its
// incarnation is newer by serial-number arithmetic (RFC 1982) than its
// predecessor's, as long as the two started less than 9.7 days apart and
// their hosts' clocks agree (else see Incarnations::meet). One started in
// the same tenth of a second as its predecessor would be taken for it.
std::uint32_t drawIncarnation() {
  const auto tenths = std::chrono::duration_cast<std::chrono::duration<std::int64_t, std::deci>>(
      std::chrono::system_clock::now().time_since_epoch());
  return static_cast<std::uint32_t>(static_cast<std::uint64_t>(tenths.count()) % codec::kIncarnationLimit);
}

// Whether incarnation `a` is newer than `b` (serial-number arithmetic on 24
// bits: a started less than 2^23 tenths of a second after b).
bool newerIncarnation(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t ahead = (a - b) % codec::kIncarnationLimit;
  return ahead != 0 && ahead < codec::kIncarnationLimit / 2;
}

// The processes of one peer rank this rank heard from: the current one, and
// the last kRetired it replaced, whose messages (the faults wrapper may
// deliver them late) are moot and prove no life.
struct Incarnations {
  static constexpr std::size_t kRetired = 4;
  std::optional<std::uint32_t> current;
  std::array<std::uint32_t, kRetired> retired{};
  std::size_t count = 0;  // processes replaced (the last kRetired kept)

  enum class Verdict { kSame, kReplaced, kStale };

  // Which process sent a message of incarnation `n`: the current one
  // (kSame; the first heard), one started in its place (kReplaced: newer,
  // or any other not retired once the transport lost the current one,
  // `lost`: that also takes back one whose clock is behind or that started
  // more than 9.7 days later), or a stale one (kStale: retired, or older
  // while the current one is not lost). Whatever its incarnation, a process
  // that speaks while the current one has been `silent` (for a suspect
  // period) is taken: a late frame taken for a newer process, or a
  // successor whose clock is behind, cannot shut the live one out.
  Verdict meet(std::uint32_t n, bool lost, bool silent) {
    if (!current) current = n;
    if (*current == n) return Verdict::kSame;
    const auto held = retired.begin() + static_cast<std::ptrdiff_t>(std::min(count, kRetired));
    if (!silent && std::find(retired.begin(), held, n) != held) return Verdict::kStale;
    if (!lost && !silent && !newerIncarnation(n, *current)) return Verdict::kStale;
    retired[count++ % kRetired] = *current;
    current = n;
    return Verdict::kReplaced;
  }
};

// A state message (step 2): a rank's completed steps when it reported.
struct Report {
  std::uint64_t steps = 0;
  bool evaluating = false;
  bool side = false;  // a joiner that trained on as a side of a partition (flags bit 1)
};

bool sameView(const View& v, std::uint64_t number, int coordinator) {
  return v.number == number && v.coordinator == coordinator;
}

class MembershipTransport final : public Transport, public Membership {
 public:
  MembershipTransport(std::unique_ptr<Transport> inner, const MembershipOptions& o)
      : inner_(std::move(inner)),
        options_(o),
        self_(inner_->rank()),
        world_(inner_->worldSize()),
        capacity_(inner_->capacity()),
        heard_(static_cast<std::size_t>(capacity_), Clock::now()),
        left_(static_cast<std::size_t>(capacity_), false),
        dead_(static_cast<std::size_t>(capacity_), false),
        lostAt_(static_cast<std::size_t>(capacity_)),
        askedAt_(static_cast<std::size_t>(capacity_)),
        lastAnswer_(static_cast<std::size_t>(capacity_), Clock::time_point{}) {
    for (int r = 0; r < world_; ++r) view_.members.push_back(r);
    localRank_ = self_;
    localSize_ = std::max(world_, self_ + 1);  // (a joiner's rank is world_ or more)
    buffers_.resize(static_cast<std::size_t>(capacity_));
    standing_.resize(static_cast<std::size_t>(capacity_));
    receiveErrors_.assign(static_cast<std::size_t>(capacity_), 0);
    early_.resize(static_cast<std::size_t>(capacity_));
    incarnations_.resize(static_cast<std::size_t>(capacity_));
    GOSSAMER_ENFORCE(self_ < world_ || o.restarted,
                     "rank " << self_ << " is beyond the job's first " << world_
                             << " ranks: it can only join the running job (MembershipOptions::restarted)");
    if (o.restarted) {
      // Outside the job until a view takes it in: it suspects nobody,
      // decides nothing, and its first step recovers (asks to join).
      outsider_ = true;
      restarted_ = true;
      revokeLocked(-1, self_ < world_ ? "this process restarts a failed rank: it joins the running job"
                                      : "this process is a new rank: it joins the running job");
    }
    for (int p = 0; p < capacity_; ++p)
      if (p != self_) post(p);
    thread_ = std::thread([this] { run(); });
  }
  ~MembershipTransport() override { stop(); }

  // ---- Transport: the current view --------------------------------------------

  int rank() const override { return localRank_.load(); }
  int worldSize() const override { return localSize_.load(); }
  std::string name() const override { return inner_->name() + "+membership"; }
  double timeoutSeconds() const override { return inner_->timeoutSeconds(); }
  TransportCapabilities capabilities() const noexcept override { return inner_->capabilities(); }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    const auto [g, t] = route(dst, tag);
    return inner_->isend(g, t, data, dtype);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    const auto [g, t] = route(dst, tag);
    return inner_->isendBorrowed(g, t, data, dtype, checksum);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    GOSSAMER_ENFORCE(!sources.empty(), "irecv with no sources");
    std::vector<int> global;
    Tag t;
    std::uint64_t revocations;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (revoked_) return revokedRequest();
      for (int s : sources) global.push_back(globalLocked(s));
      t = translateLocked(tag);
      revocations = revocations_;
    }
    return track(inner_->irecv(global, t, buffer), revocations);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    int g;
    Tag t;
    std::uint64_t revocations;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (revoked_) return revokedRequest();
      g = globalLocked(source);
      t = translateLocked(tag);
      revocations = revocations_;
    }
    return track(inner_->irecvView(g, t, buffer), revocations);
  }
  void close() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!closed_) {
        // Every rank still reachable, members or not: a rank that is
        // rejoining learns that the job is ending.
        Message m = headerLocked(Kind::kLeave);
        for (int p = 0; p < capacity_; ++p)
          if (p != self_) sendLocked(p, m);
      }
      closed_ = true;
    }
    stop();
    inner_->close();
  }
  void abort() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      closed_ = true;
    }
    stop();
    inner_->abort();
  }
  TransportStats stats() const override { return inner_->stats(); }
  // The inner transport's verdict on the job rank that view rank `rank` is,
  // unless that verdict is older than the rank's request to join: the view
  // took back a process restarted in place of one the transport lost, and
  // the transport has not heard the new one yet.
  std::exception_ptr peerFailure(int rank) const override {
    int g;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (rank < 0 || rank >= static_cast<int>(view_.members.size())) return nullptr;
      g = view_.members[static_cast<std::size_t>(rank)];
      const auto i = static_cast<std::size_t>(g);
      if (dead_[i] && lostAt_[i] <= askedAt_[i]) return nullptr;
    }
    return inner_->peerFailure(g);
  }

  // ---- Membership --------------------------------------------------------------

  View view() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return view_;
  }
  bool revoked() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return revoked_;
  }
  std::vector<int> lost() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return lost_;
  }

  // detail::heldForOtherViews: what early_ and reports_ hold of views other than view_.
  detail::HeldForOtherViews heldForOtherViews() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::set<ViewKey> views;
    detail::HeldForOtherViews out;
    for (const auto& e : early_) {
      if (e.suspectsIn && !e.suspects.empty()) views.insert(*e.suspectsIn);
      if (e.joins) views.insert(*e.joins);
      out.entries += e.suspects.size() + (e.joins ? 1 : 0);
    }
    for (const auto& [key, reports] : reports_)
      if (key != viewKey(view_) && !reports.empty()) {
        views.insert(key);
        out.entries += reports.size();
      }
    out.views = views.size();
    return out;
  }

  ViewChange recover(std::uint64_t completedSteps, bool evaluating) override {
    std::unique_lock<std::mutex> lk(mu_);
    GOSSAMER_ENFORCE(!closed_, "recover() after close");
    revokeLocked(-1, "this rank saw a peer fail");
    const auto start = revokedAt_;
    if (restarted_ && !joinAsked_ && view_.localRank(self_) < 0) {
      // A new rank (beyond the job's first view) asks at once: the members
      // take it in at their next view change (one change, whatever view
      // they hold: one that holds a newer view answers with it, and the
      // rank asks again there).
      joinAsked_ = true;
      const Message ask = headerLocked(Kind::kJoin);
      for (int p : view_.members) sendLocked(p, ask);
    }
    reportLocked(completedSteps, evaluating);
    coordinateLocked();
    const double limit = agreementLimit();
    auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    bool paused = false;
    for (;;) {
      while (!decided_) {
        if (closed_)
          throw Cancelled("rank " + std::to_string(self_) +
                          ": the transport was closed while it waited for view " +
                          std::to_string(view_.number + 1));
        if (outsider_ && everyMemberGoneLocked())
          throw Expelled(self_, "rank " + std::to_string(self_) +
                                    " cannot rejoin: the other ranks finished or left while it was stopped");
        // A minority pauses once, for a day: then it times out as any rank does.
        if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !decided_ && !paused &&
            pausesAsMinorityLocked(paused)) {
          deadline = Clock::now() + std::chrono::hours(24);
          continue;
        }
        if (!decided_ && Clock::now() >= deadline)
          throw TimeoutError("rank " + std::to_string(self_) + ": no new view agreed within " +
                             std::to_string(limit) + (paused ? " s and a day's pause as a minority" : " s") +
                             " after view " + std::to_string(view_.number) +
                             " was revoked (membership.agreement_seconds; " + agreementStateLocked() + ")");
      }
      Decided d = *decided_;
      decided_.reset();
      const bool listed = d.view.localRank(self_) >= 0;
      // A restarted process is not yet a member of a view that lists its
      // rank from before it failed: it waits for the one that removes it.
      if (restarted_ && !joinAsked_ && listed) {
        view_ = d.view;
        continue;
      }
      // A member installs the views decided from the one it holds: its
      // report for that view is what the coordinator decided with, and who
      // is lost or new is reckoned against that view, alike on every member.
      if (listed && d.from == viewKey(view_)) {
        ViewChange change;
        for (int p : view_.members)
          if (!std::binary_search(d.view.members.begin(), d.view.members.end(), p)) {
            change.lost.push_back(p);
            if (!outsider_) lost_.push_back(p);
          }
        for (int p : d.view.members)
          if (view_.localRank(p) < 0) change.joined.push_back(p);
        if (outsider_) change.lost.clear();  // it was this rank that was away
        outsider_ = false;
        fromSide_ = false;
        installLocked(d.view);
        change.view = view_;
        change.resumeStep = d.resumeStep;
        change.fewestSteps = d.fewestSteps;
        change.modelSource = d.modelSource;
        change.evaluating = d.evaluating;
        change.merged = d.merged;
        change.seconds = since(start);
        change.installedAtUnixSeconds =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        return change;
      }
      // Otherwise the view is newer than this rank's and this rank cannot
      // take its place in it: it was removed (it was stopped, or on the
      // other side of a partition), or it is listed from a report for a view
      // it has left since (two views were decided at once; it took the
      // other one). It leaves its view for that one and asks to join it.
      if (!options_.rejoin) {
        expelled_ = true;
        if (listed)
          throw Expelled(self_,
                         "rank " + std::to_string(self_) + " cannot take its place in view " +
                             std::to_string(d.view.number) +
                             ": it was decided from a view this rank has left (membership.rejoin is off)");
        throw Expelled(
            self_, "rank " + std::to_string(self_) + " was removed from the job by its peers (view " +
                       std::to_string(d.view.number) +
                       "): it was silent for longer than membership.suspect_seconds (stopped or cut off)");
      }
      if (logEnabled(LogLevel::kWarning))
        log(LogLevel::kWarning, "rank " + std::to_string(self_) +
                                    (listed ? " is listed in view " + std::to_string(d.view.number) +
                                                  " from a view it has left; asking to join it again"
                                            : " was removed from the job by its peers (view " +
                                                  std::to_string(d.view.number) + "); asking to rejoin"));
      leaveForLocked(d, listed, completedSteps, evaluating);
      deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    }
  }

 private:
  // Step 5: this rank leaves the view it holds for `d`, which it cannot take
  // its place in (see recover()), and asks to join it.
  void leaveForLocked(const Decided& d, bool listed, std::uint64_t completedSteps, bool evaluating) {
    // Out of every view until one takes it back: what peers sent it in the
    // views it held is stale. (A view of the same number from another
    // coordinator may still take it in: its messages are kept.) The view
    // that takes it back is decided after it asks, so none of its
    // messages is here yet.
    dropQueuedExceptLocked(d.view.number, d.view.number);
    // A side of a healed partition (its view has no member of the one it
    // goes to) trained on its own: it says so in its reports (merged).
    if (!outsider_) {
      fromSide_ = true;
      for (int p : view_.members) fromSide_ = fromSide_ && d.view.localRank(p) < 0;
    }
    // The members of the view it leaves (the other half of a healed
    // partition) would wait for its messages: it sends them the view it
    // goes to (they follow it there unless they hold a newer one) and a
    // suspicion of itself in the view it leaves.
    if (!outsider_ && !sameView(view_, d.view.number, d.view.coordinator)) {
      Message gone = headerLocked(Kind::kSuspect);
      gone.arg = self_;
      for (int p : view_.members) {
        sendLocked(p, d.message);
        sendLocked(p, gone);
      }
    }
    outsider_ = true;
    joinAsked_ = true;
    view_ = d.view;
    suspects_.clear();
    revoked_ = true;
    for (auto it = reports_.begin(); it != reports_.end();)
      it = it->first < viewKey(view_) ? reports_.erase(it) : std::next(it);
    // Listed in it, it is not a stranger its members would take in: they
    // would wait for it. A suspicion of itself in that view makes them
    // decide the next one without it, which it then asks to join.
    Message ask = headerLocked(listed ? Kind::kSuspect : Kind::kJoin);
    if (listed) ask.arg = self_;
    for (int p : view_.members) sendLocked(p, ask);
    reportLocked(completedSteps, evaluating);
  }

  static ViewKey viewKey(const View& v) { return {v.number, v.coordinator}; }
  // Seconds recover() waits for the survivors to agree.
  double agreementLimit() const {
    return options_.agreementSeconds > 0 ? options_.agreementSeconds : inner_->timeoutSeconds();
  }

  // The epoch of the view numbered `number` that `coordinator` issued, in tag
  // bits 24-31 of the step (0 for the first view). Views numbered 16 or more
  // apart share epochs, so the messages of views left behind are dropped
  // (dropQueuedExceptLocked) before their epoch comes back.
  static std::uint8_t epochOf(std::uint64_t number, int coordinator) {
    return static_cast<std::uint8_t>((number * 16 + static_cast<std::uint64_t>(coordinator + 1)) & 0xFF);
  }
  static std::uint8_t epochOf(const View& v) { return epochOf(v.number, v.coordinator); }
  // The epochs of every view numbered `from` .. `to`, whichever rank issued it.
  std::bitset<256> epochsOf(std::uint64_t from, std::uint64_t to) const {
    std::bitset<256> out;
    for (std::uint64_t n = from; n <= to; ++n) {
      if (n == 0) out.set(epochOf(0, -1));
      for (int c = 0; n > 0 && c < capacity_; ++c) out.set(epochOf(n, c));
    }
    return out;
  }
  // Drops the data messages still queued in the inner transport, unless their
  // epoch is one that a view numbered `from` .. `to` has: the others belong
  // to views this rank has left or never installed, and a receive of a later
  // view with the same epoch must not take them. The membership's own
  // messages carry no epoch and are kept.
  void dropQueuedExceptLocked(std::uint64_t from, std::uint64_t to) {
    const std::bitset<256> keep = epochsOf(from, to);
    if (keep.all()) return;
    const std::size_t dropped = inner_->discardArrived(
        [&](const Tag& t) { return t.op != Op::kMembership && !keep.test((t.step >> 24) & 0xFF); });
    if (dropped > 0 && logEnabled(LogLevel::kInfo))
      log(LogLevel::kInfo, "rank " + std::to_string(self_) + ": dropped " + std::to_string(dropped) +
                               " message(s) of earlier views");
  }
  Tag translateLocked(const Tag& tag) const {
    constexpr std::uint64_t kEpochBits = std::uint64_t{0xFF} << 24;
    return Tag{tag.op, tag.segment, (tag.step & ~kEpochBits) | (std::uint64_t{epochOf(view_)} << 24)};
  }
  int globalLocked(int local) const {
    GOSSAMER_ENFORCE(local >= 0 && local < static_cast<int>(view_.members.size()),
                     "rank " << local << " outside the view's " << view_.members.size() << " ranks");
    return view_.members[static_cast<std::size_t>(local)];
  }
  std::pair<int, Tag> route(int dst, const Tag& tag) {
    std::lock_guard<std::mutex> lk(mu_);
    return {globalLocked(dst), translateLocked(tag)};
  }
  Request revokedRequest() const {
    auto s = std::make_shared<gossamer::detail::RequestState>();
    s->what = "a receive through revoked view " + std::to_string(view_.number);
    s->fail(std::make_exception_ptr(revokedError()));
    return Request(std::move(s));
  }
  ViewChanged revokedError() const {
    return ViewChanged(firstSuspect_, "rank " + std::to_string(self_) + ": view " +
                                          std::to_string(view_.number) + " was revoked (" + revokeReason_ +
                                          "); recover with Session::recover()");
  }
  // Registers a receive posted through the view, for revokeLocked to fail.
  // `revocations` is revocations_ when the receive was checked against
  // revoked_: a revocation since then did not see it, so it fails here.
  Request track(Request r, std::uint64_t revocations) {
    {
      std::lock_guard<std::mutex> lk(pmu_);
      // Handles that are gone are dropped when the list has doubled since the
      // last sweep: amortised O(1) per receive.
      if (pending_.size() >= 2 * swept_ + 32) {
        std::erase_if(pending_,
                      [](const std::weak_ptr<gossamer::detail::RequestState>& w) { return w.expired(); });
        swept_ = pending_.size();
      }
      pending_.push_back(r.watch());
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (revocations_ != revocations) r.fail(std::make_exception_ptr(revokedError()));
    return r;
  }

  // ---- the view -----------------------------------------------------------------

  bool everyMemberGoneLocked() const {
    for (int p : view_.members)
      if (p != self_ && !dead_[static_cast<std::size_t>(p)] && !left_[static_cast<std::size_t>(p)])
        return false;
    return true;
  }

  // Step 2: this rank's completed steps, to every member it does not suspect.
  void reportLocked(std::uint64_t completedSteps, bool evaluating) {
    const bool side = outsider_ && fromSide_;
    storeReportLocked(self_, viewKey(view_), {completedSteps, evaluating, side});
    Message state = headerLocked(Kind::kState);
    state.value = completedSteps;
    state.flags = (evaluating ? 1u : 0u) | (side ? 2u : 0u);
    // The peers that asked this rank to join: the coordinator, which may
    // not have heard them yet, waits for their reports too.
    for (int p : joiners_)
      if (view_.localRank(p) < 0) state.members.push_back(p);
    sendToViewLocked(state);
    lastReport_ = state;
  }

  // Keeps `from`'s report for view `key`, and drops what it reported for
  // any view but that one and the one this rank holds. A peer's reports
  // name the view it holds, and it only moves to newer views: what it
  // reported for a view it left since is moot (see Early). So each sender
  // has at most two reports here (for view_ and for one other view), whatever
  // views it names: a hostile one cannot make this rank hold more.
  // A report for another view that arrives after one of `from`'s for a view
  // numbered higher was sent before it (the faults wrapper may reorder): moot,
  // and it replaces nothing. A report for view_ replaces nothing either.
  void storeReportLocked(int from, const ViewKey& key, const Report& report) {
    const ViewKey current = viewKey(view_);
    if (key != current) {
      for (const auto& [k, byRank] : reports_)
        if (k != current && k.first > key.first && byRank.count(from)) return;
      dropReportsLocked(from, key);
    }
    reports_[key][from] = report;
  }

  // Drops `from`'s reports for every view but view_ and `keep`.
  void dropReportsLocked(int from, const ViewKey& keep) {
    const ViewKey current = viewKey(view_);
    for (auto it = reports_.begin(); it != reports_.end();) {
      if (it->first != keep && it->first != current) it->second.erase(from);
      it = it->second.empty() && it->first != current ? reports_.erase(it) : std::next(it);
    }
  }

  // `m` to every member of the view this rank does not suspect (sendLocked
  // skips this rank and the peers it counts as dead).
  void sendToViewLocked(const Message& m) {
    for (int p : view_.members)
      if (!suspects_.count(p)) sendLocked(p, m);
  }

  Message headerLocked(Kind k) const {
    Message m;
    m.kind = k;
    m.viewNumber = view_.number;
    m.viewCoordinator = view_.coordinator;
    return m;
  }
  void sendLocked(int peer, const Message& m) {
    if (peer == self_ || dead_[static_cast<std::size_t>(peer)]) return;
    // Every message goes out with this process's incarnation, a view passed
    // on too (the receiver reads it as its sender's).
    Message out = m;
    out.incarnation = incarnation_;
    const auto bytes = encode(out);
    try {
      while (!sends_.empty() && sends_.front().test()) sends_.pop_front();
    } catch (const Error&) {
      sends_.pop_front();
    }
    try {
      sends_.push_back(inner_->isend(peer, kControlTag, bytes));
    } catch (const Error&) {
      // The peer is gone or the transport closing: its verdict reaches us through its receive.
    }
  }

  // Stops using the view: pending receives through it fail with ViewChanged.
  void revokeLocked(int suspect, const std::string& why) {
    if (revoked_) return;
    revoked_ = true;
    ++revocations_;
    revokedAt_ = Clock::now();
    firstSuspect_ = suspect;
    revokeReason_ = why;
    std::vector<std::weak_ptr<gossamer::detail::RequestState>> watched;
    {
      std::lock_guard<std::mutex> plk(pmu_);
      watched.swap(pending_);
      swept_ = 0;
    }
    const auto error = std::make_exception_ptr(revokedError());
    for (const auto& w : watched) Request::fail(w, error);
    if (logEnabled(LogLevel::kInfo))
      log(LogLevel::kInfo,
          "rank " + std::to_string(self_) + ": view " + std::to_string(view_.number) + " revoked: " + why);
  }

  void suspectLocked(int peer, const std::string& why) {
    if (peer == self_ || view_.localRank(peer) < 0 || suspects_.count(peer)) return;
    suspects_.insert(peer);
    revokeLocked(peer, "rank " + std::to_string(peer) + " " + why);
    Message m = headerLocked(Kind::kSuspect);
    m.arg = peer;
    sendToViewLocked(m);
    coordinateLocked();
  }

  // Partition policy `majority`: whether this rank is on a side that holds
  // no majority, and so waits for the majority's view (the heal) holding its
  // state instead of timing out; logs it the first time (`paused`).
  bool pausesAsMinorityLocked(bool& paused) {
    if (!options_.majority || outsider_) return false;
    const auto survivors = survivorsLocked();
    if (holdsMajorityLocked(survivors)) return false;
    if (!paused && logEnabled(LogLevel::kWarning))
      log(LogLevel::kWarning, "rank " + std::to_string(self_) + ": " + std::to_string(survivors.size()) +
                                  " of the " + std::to_string(view_.members.size()) + " ranks of view " +
                                  std::to_string(view_.number) +
                                  " are reachable, no majority: paused until the others' view reaches it "
                                  "(membership.partition: majority)");
    paused = true;
    return true;
  }

  // Partition policy `majority`: whether `survivors` may decide the next
  // view. Ranks that left (said goodbye) do not count: they are gone, not
  // on the other side of a partition; nor do ranks the transport lost by
  // the time the change was a suspect period old (a crash: the kernel
  // closes a dead process's connections at once). Ranks it lost later
  // count: a transport also gives up on a peer cut off for its timeout (a
  // send that stalls), and a side that discounted those would, once its
  // transport gave up on the other side, hold a "majority" of itself and
  // decide a view alongside the real majority's (wrap() requires the
  // transport's timeout to exceed two suspect periods, so that a cut-off
  // is suspected first).
  bool holdsMajorityLocked(const std::vector<int>& survivors) const {
    const auto crashWindow = revokedAt_ + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(options_.suspectSeconds));
    std::vector<int> base;
    for (int p : view_.members) {
      const auto i = static_cast<std::size_t>(p);
      if (!left_[i] && !(dead_[i] && lostAt_[i] <= crashWindow)) base.push_back(p);
    }
    if (base.empty()) return true;
    if (2 * survivors.size() > base.size()) return true;
    return 2 * survivors.size() == base.size() &&
           std::find(survivors.begin(), survivors.end(), base.front()) != survivors.end();
  }

  // The members that take part in the next view.
  std::vector<int> survivorsLocked() const {
    std::vector<int> out;
    for (int p : view_.members)
      if (!suspects_.count(p) && !left_[static_cast<std::size_t>(p)]) out.push_back(p);
    return out;
  }

  // What this rank's part in the view change stood at, for the error of an
  // agreement that timed out: the survivors it sees (the first coordinates),
  // the reports it holds for its view, and the states that keep a
  // coordinator from deciding.
  std::string agreementStateLocked() {
    auto list = [](const auto& ranks) {
      std::string out;
      for (int p : ranks) out += (out.empty() ? "" : ",") + std::to_string(p);
      return "[" + out + "]";
    };
    std::vector<int> reported;
    if (const auto it = reports_.find(viewKey(view_)); it != reports_.end())
      for (const auto& r : it->second) reported.push_back(r.first);
    const bool issued = issuedFor_ && *issuedFor_ == viewKey(view_);
    return "survivors " + list(survivorsLocked()) + ", reports " + list(reported) + ", suspects " +
           list(suspects_) + ", joiners " + list(joiners_) + (resumed_ ? ", resumed" : "") +
           (outsider_ ? ", outsider" : "") + (restarted_ ? ", restarted" : "") + (issued ? ", issued" : "");
  }

  // Step 3: the coordinator decides once every survivor reported. Peers
  // asking to rejoin that reported for this view are added to it; the model
  // source is a survivor (a rejoining peer needs its model, whatever its
  // steps).
  void coordinateLocked() {
    // A rank that was stopped waits to hear from its peers first: they may
    // have removed it (their answer carries that view). A rank outside the
    // view (rejoining) decides nothing, nor does one that holds a newer view
    // to go to (it installs that one, or leaves for it and takes the
    // members of this view along).
    if (!revoked_ || closed_ || resumed_ || outsider_ || decided_) return;
    const auto survivors = survivorsLocked();
    if (survivors.empty() || survivors.front() != self_) return;
    if (options_.majority && !holdsMajorityLocked(survivors)) return;  // a minority decides nothing
    const auto key = viewKey(view_);
    if (issuedFor_ == key) return;
    const auto& reports = reports_[key];
    std::uint64_t resume = 0, fewest = UINT64_MAX;
    bool evaluating = false;
    for (int p : survivors) {
      const auto it = reports.find(p);
      if (it == reports.end()) return;  // still waiting for p
      resume = std::max(resume, it->second.steps);
      fewest = std::min(fewest, it->second.steps);
    }
    for (int p : survivors)
      if (reports.at(p).steps == resume && reports.at(p).evaluating) evaluating = true;
    // A peer asking to join reports for this view once it has learnt it (a
    // heartbeat period or so): wait for that, for a bounded time, rather
    // than issue a view without it and revoke that one at once. The wait
    // ends within half of the agreement's limit (the members' recover()
    // fails at that limit), and a joiner the transport lost since it asked
    // is not waited for, nor taken.
    const double joinWait = std::min(kJoinWaitBeats * options_.heartbeatSeconds, agreementLimit() / 2);
    for (int p : joiners_)
      if (!reports.count(p) && view_.localRank(p) < 0 && !lostSinceAskedLocked(p) &&
          since(revokedAt_) < joinWait)
        return;
    std::vector<int> members = survivors;
    bool behind = fewest < resume;
    // Under membership.partition: merge, joiners that trained on as a side
    // of a partition bring their models: the members merge them (merged).
    // Any joiner needs a survivor's model (a model source) whatever steps it
    // reports: one that trained on may report as many as the survivors, or
    // more (the rest of a side whose other ranks merged in an earlier view
    // joins without the side flag), and its model is still its own.
    bool merged = false;
    for (int p : joiners_)
      if (reports.count(p) && view_.localRank(p) < 0 && !lostSinceAskedLocked(p)) {
        members.push_back(p);
        behind = true;
        merged = merged || (reports.at(p).side && !options_.majority);
      }
    std::sort(members.begin(), members.end());
    int source = -1;
    if (behind)
      for (int p : survivors)
        if (reports.at(p).steps == resume) {
          source = p;
          break;
        }
    issuedFor_ = key;
    Message m;
    m.kind = Kind::kView;
    m.viewNumber = std::max(view_.number, numberFloor_) + 1;
    m.viewCoordinator = self_;
    m.fromCoordinator = view_.coordinator;
    m.skipped = static_cast<std::uint32_t>(m.viewNumber - view_.number - 1);
    m.arg = source;
    m.value = resume;
    m.fewest = fewest;
    m.flags = (evaluating ? 1u : 0u) | (merged ? 2u : 0u);
    m.members = members;
    // The members, the suspects (so that they learn) and the joiners, also
    // those not taken this time (they report for the new view).
    std::set<int> to(view_.members.begin(), view_.members.end());
    to.insert(members.begin(), members.end());
    to.insert(joiners_.begin(), joiners_.end());
    for (int p : to) sendLocked(p, m);
    acceptLocked(m);
  }

  // A healed partition: `m` is the view of a side this side cannot see in
  // its own (no member in common) with fewer members but a higher number.
  // The larger side goes first: its next view is numbered above m's (the
  // coordinator starts that change now), so the smaller side takes it for
  // the newer one and joins it, whatever view changes it went through
  // alone. Returns whether m is such a view (it is then not accepted).
  bool outnumberLocked(const Message& m) {
    if (!options_.rejoin || outsider_ || m.members.size() >= view_.members.size()) return false;
    for (int p : m.members)
      if (view_.localRank(p) >= 0) return false;
    if (m.viewNumber <= std::max(view_.number, numberFloor_)) return true;  // outnumbered already
    // A number 2^32 or more above this view's: no side changes views that
    // often, and the next view's `skipped` (32 bits) could not say where it
    // was decided from. Not taken (the message is malformed or hostile).
    if (m.viewNumber - view_.number >= std::uint64_t{1} << 32) return true;
    numberFloor_ = m.viewNumber;
    const auto survivors = survivorsLocked();
    if (!survivors.empty() && survivors.front() == self_ && !revoked_)
      revokeLocked(-1, "a smaller side of the job (" + std::to_string(m.members.size()) +
                           " ranks) holds view " + std::to_string(m.viewNumber) +
                           ": this side's next view is numbered above it");
    coordinateLocked();
    return true;
  }

  // A view message: keep it if it is newer than anything seen.
  void acceptLocked(const Message& m) {
    Decided d;
    d.view.number = m.viewNumber;
    d.view.coordinator = m.viewCoordinator;
    d.view.members = m.members;
    d.resumeStep = m.value;
    d.fewestSteps = m.fewest;
    d.evaluating = (m.flags & 1) != 0;
    d.merged = (m.flags & 2) != 0;
    d.modelSource = m.arg;
    d.from = {m.viewNumber - 1 - m.skipped, m.fromCoordinator};
    d.message = m;
    if (!newer(d.view, view_)) return;
    if (decided_ && !newer(d.view, decided_->view)) return;
    decided_ = d;
    lastView_ = m;
    revokeLocked(-1, "view " + std::to_string(m.viewNumber) + " was decided by rank " +
                         std::to_string(m.viewCoordinator));
    cv_.notify_all();
  }

  void installLocked(const View& v) {
    view_ = v;
    // What peers sent in earlier views is stale. A faster peer may already
    // have installed the next view (numbered one more) and sent in it; none
    // is further ahead, since that needs this rank's report for v.
    dropQueuedExceptLocked(v.number, v.number + 1);
    for (int p : v.members) joiners_.erase(p);
    // Suspicions its members sent in v before it was installed here (acted
    // on below), and peers that asked to join v; what was said in the views
    // v leaves behind (numbered up to it) is dropped.
    std::map<int, int> early;  // suspect -> by whom
    for (int p = 0; p < capacity_; ++p) {
      auto& e = early_[static_cast<std::size_t>(p)];
      if (e.joins == viewKey(v) && v.localRank(p) < 0) addJoinerLocked(p);
      if (e.joins && e.joins->first <= v.number) e.joins.reset();
      if (e.suspectsIn == viewKey(v) && v.localRank(p) >= 0)
        for (int s : e.suspects) early.emplace(s, p);
      if (e.suspectsIn && e.suspectsIn->first <= v.number) {
        e.suspectsIn.reset();
        e.suspects.clear();
      }
    }
    std::set<int> keep;
    for (int p : suspects_)
      if (v.localRank(p) >= 0) keep.insert(p);
    suspects_ = keep;
    revoked_ = false;
    if (!suspects_.empty()) revokeLocked(*suspects_.begin(), "a member was suspected during the view change");
    // A peer that asked to join and has been silent since (it died, or its
    // request came through another member's report only), or that the
    // transport lost, is dropped: a live one asks again when the view
    // reaches it.
    std::erase_if(joiners_, [&](int p) {
      return lostSinceAskedLocked(p) || since(heard_[static_cast<std::size_t>(p)]) > options_.suspectSeconds;
    });
    if (!joiners_.empty()) revokeLocked(-1, "a peer asks to rejoin");
    // A member that installed v first may have started its next change
    // already (a peer asked to join while this rank, rejoining, had not
    // installed v and could not take the request): its report for v is
    // here, and this rank takes part in that change rather than step in v
    // alone until its receives time out.
    if (const auto it = reports_.find(viewKey(v)); it != reports_.end()) {
      const auto started = std::find_if(it->second.begin(), it->second.end(), [&](const auto& entry) {
        return entry.first != self_ && v.localRank(entry.first) >= 0;
      });
      if (started != it->second.end())
        revokeLocked(-1, "rank " + std::to_string(started->first) + " started a change of view " +
                             std::to_string(v.number));
    }
    const auto now = Clock::now();
    for (int p : v.members) heard_[static_cast<std::size_t>(p)] = now;
    for (auto it = reports_.begin(); it != reports_.end();)
      it = (it->first <= viewKey(v)) && it->first != viewKey(v) ? reports_.erase(it) : std::next(it);
    for (const auto& [p, by] : early)
      suspectLocked(p, "failed (suspected by rank " + std::to_string(by) + ")");
    localRank_ = v.localRank(self_);
    localSize_ = static_cast<int>(v.members.size());
    if (logEnabled(LogLevel::kInfo)) {
      std::string ms;
      for (int p : v.members) ms += (ms.empty() ? "" : ",") + std::to_string(p);
      log(LogLevel::kInfo,
          "rank " + std::to_string(self_) + ": installed view " + std::to_string(v.number) + " {" + ms + "}");
    }
    coordinateLocked();
  }

  // ---- the background thread ---------------------------------------------------

  void post(int p) {
    auto& buf = buffers_[static_cast<std::size_t>(p)];
    buf.resize(kHeaderBytes + 4 * static_cast<std::size_t>(capacity_));
    try {
      standing_[static_cast<std::size_t>(p)] = inner_->irecv(p, kControlTag, buf);
    } catch (const Error&) {
      standing_[static_cast<std::size_t>(p)] = Request();
      std::lock_guard<std::mutex> lk(mu_);
      peerDeadLocked(p);
    }
  }

  // A peer asks to join (itself, or through a member's report).
  void addJoinerLocked(int p) {
    if (joiners_.insert(p).second) askedAt_[static_cast<std::size_t>(p)] = Clock::now();
  }

  // Whether the transport lost joiner p after it asked: a process restarted
  // in place of one lost before is not (this rank may not have heard it yet
  // while the members that did report its request).
  bool lostSinceAskedLocked(int p) const {
    const auto i = static_cast<std::size_t>(p);
    return dead_[i] && lostAt_[i] > askedAt_[i];
  }

  // What `from`'s previous process said about views not installed here:
  // a process started in its place begins again at view 0, and what it says
  // in views numbered below those is not moot (Early, storeReportLocked).
  void forgetEarlyLocked(int from) {
    early_[static_cast<std::size_t>(from)] = Early{};
    dropReportsLocked(from, viewKey(view_));
  }

  void peerDeadLocked(int p) {
    if (dead_[static_cast<std::size_t>(p)]) return;
    dead_[static_cast<std::size_t>(p)] = true;
    lostAt_[static_cast<std::size_t>(p)] = Clock::now();
    cv_.notify_all();
    if (!left_[static_cast<std::size_t>(p)] && !closed_ && !outsider_)
      suspectLocked(p, "failed (the transport lost it)");
  }

  void handle(int from, const Message& m) {
    std::lock_guard<std::mutex> lk(mu_);
    // Which process of rank `from` sent it (Incarnations::meet): a stale
    // one's message says nothing.
    auto& incarnations = incarnations_[static_cast<std::size_t>(from)];
    const auto verdict =
        incarnations.meet(m.incarnation, dead_[static_cast<std::size_t>(from)],
                          since(heard_[static_cast<std::size_t>(from)]) > options_.suspectSeconds);
    if (verdict == Incarnations::Verdict::kStale) {
      if (staleWarned_.size() < kStaleWarnings && staleWarned_.insert({from, m.incarnation}).second)
        log(LogLevel::kWarning, "membership: dropped what rank " + std::to_string(from) + "'s process " +
                                    std::to_string(m.incarnation) + " sent: process " +
                                    std::to_string(*incarnations.current) +
                                    " replaced it (a late message, or a clock behind)");
      return;
    }
    const bool replaced = verdict == Incarnations::Verdict::kReplaced;
    heard_[static_cast<std::size_t>(from)] = Clock::now();
    if (dead_[static_cast<std::size_t>(from)] || replaced) {
      // Reachable again (the transport took back a process started in its
      // place, or lost it by mistake), or restarted: it gets this view at once.
      dead_[static_cast<std::size_t>(from)] = false;
      left_[static_cast<std::size_t>(from)] = false;
      lastAnswer_[static_cast<std::size_t>(from)] = Clock::time_point{};
    }
    // A process started in place of `from`'s begins again at view 0: what
    // its predecessor said is not its own. The same process found dead by
    // mistake keeps its word.
    if (replaced) forgetEarlyLocked(from);
    resumed_ = false;  // a peer answered: what it says (a view without us) decides
    // A peer behind us (or on the other side of a healed partition) gets our
    // view (at most once per heartbeat period); it decides which is newer.
    if (lastView_ && !sameView(view_, m.viewNumber, m.viewCoordinator) && m.viewNumber <= view_.number &&
        m.kind != Kind::kView) {
      auto& t = lastAnswer_[static_cast<std::size_t>(from)];
      if (since(t) > options_.heartbeatSeconds) {
        t = Clock::now();
        sendLocked(from, *lastView_);
      }
    }
    switch (m.kind) {
      case Kind::kHeartbeat:
        break;
      case Kind::kLeave:
        left_[static_cast<std::size_t>(from)] = true;
        coordinateLocked();
        cv_.notify_all();
        break;
      case Kind::kSuspect:
        if (sameView(view_, m.viewNumber, m.viewCoordinator)) {
          if (m.arg != self_ && view_.localRank(from) >= 0 && !outsider_)
            suspectLocked(m.arg, "failed (suspected by rank " + std::to_string(from) + ")");
        } else if (m.viewNumber >= view_.number && m.arg != self_) {
          // A view this rank may not have installed yet (its view message
          // is still on the way from the coordinator): kept for then, with
          // what `from` said in it before (Early: only its latest view).
          // One sent before, in a view numbered lower, that arrives late
          // (the faults wrapper may reorder) is moot and replaces nothing.
          auto& e = early_[static_cast<std::size_t>(from)];
          if (e.suspectsIn && m.viewNumber < e.suspectsIn->first) break;
          if (e.suspectsIn != ViewKey{m.viewNumber, m.viewCoordinator}) e.suspects.clear();
          e.suspectsIn = ViewKey{m.viewNumber, m.viewCoordinator};
          e.suspects.insert(m.arg);
        }
        break;
      case Kind::kState:
        // A report for a view numbered below this rank's is never read: a
        // rank only moves to newer views, and decides with the reports for
        // the one it holds.
        if (m.viewNumber < view_.number) break;
        storeReportLocked(from, {m.viewNumber, m.viewCoordinator},
                          {m.value, (m.flags & 1) != 0, (m.flags & 2) != 0});
        if (sameView(view_, m.viewNumber, m.viewCoordinator)) {
          if (options_.rejoin && !outsider_ && view_.localRank(from) >= 0)
            for (int p : m.members)
              if (p != self_ && view_.localRank(p) < 0) addJoinerLocked(p);
          revokeLocked(-1, "rank " + std::to_string(from) + " started a view change");
          coordinateLocked();
        }
        break;
      case Kind::kView:
        if (!outnumberLocked(m)) acceptLocked(m);
        break;
      case Kind::kJoin:
        if (!options_.rejoin) break;
        if (m.viewNumber <= view_.number &&
            !(decided_ && sameView(decided_->view, m.viewNumber, m.viewCoordinator))) {
          if (view_.localRank(from) < 0 && !outsider_) {
            addJoinerLocked(from);
            revokeLocked(-1, "rank " + std::to_string(from) + " asks to rejoin");
            coordinateLocked();
          }
        } else {
          // It asks to join a view this rank has not installed yet (the view
          // message is still on its way here): kept for then, as a suspicion
          // is (Early: only the latest view it asks to join).
          auto& joins = early_[static_cast<std::size_t>(from)].joins;
          if (!joins || m.viewNumber >= joins->first) joins = ViewKey{m.viewNumber, m.viewCoordinator};
        }
        break;
    }
  }

  // Reads what each peer sent since the last pass and handles it, then
  // listens again. Returns whether any of it was more than a heartbeat.
  bool receiveFromPeers() {
    bool busy = false;
    for (int p = 0; p < capacity_; ++p) {
      auto& r = standing_[static_cast<std::size_t>(p)];
      if (!r.valid()) continue;
      std::span<const std::byte> bytes;
      auto& errors = receiveErrors_[static_cast<std::size_t>(p)];
      bool received = false;
      try {
        if (!r.test()) continue;
        bytes = r.received(buffers_[static_cast<std::size_t>(p)]);
        received = true;
        errors = 0;
      } catch (const Cancelled&) {
        r = Request();
        continue;
      } catch (const PeerFailure&) {  // it left or died
        r = Request();
        std::lock_guard<std::mutex> lk(mu_);
        peerDeadLocked(p);
        continue;
      } catch (const Error& e) {
        // One message the transport refused (longer than the buffer, say)
        // is said and dropped, and the peer heard again; a receive that
        // fails again at once means the transport takes nothing more from
        // it (a peer that sent a malformed frame): failed, as one that died
        // (listened to again at each heartbeat, as such a peer is).
        if (errors++ > 0) {
          r = Request();
          std::lock_guard<std::mutex> lk(mu_);
          peerDeadLocked(p);
          continue;
        }
        log(LogLevel::kWarning, std::string("membership: ") + e.what());
      }
      // (What handling one message throws, out of memory, say, loses that
      // message only: the peer is listened to again, and the others read.)
      survivePass("membership", [&] {
        std::optional<Message> m;
        if (received) {
          try {
            m = decode(bytes, p, capacity_);
          } catch (const Error& e) {  // a malformed membership message: dropped, the peer heard again
            log(LogLevel::kWarning, std::string("membership: ") + e.what());
          }
        }
        if (m) {
          busy = busy || m->kind != Kind::kHeartbeat;
          handle(p, *m);
        }
      });
      post(p);
    }
    return busy;
  }

  void run() {
    auto nextBeat = Clock::now();
    auto lastPass = Clock::now();
    while (!stopping_.load()) {
      bool busy = false;  // a view change under way, or a peer said more than a heartbeat
      // (Out of memory in a pass, say: that pass is lost, not the process.)
      survivePass("membership", [&] {
        // A long gap since the last pass means this process was stopped (or
        // starved), not its peers: forget the silence it saw meanwhile, and
        // first read what they sent (a view that removed this rank).
        const auto passStart = Clock::now();
        if (std::chrono::duration<double>(passStart - lastPass).count() > options_.suspectSeconds / 2) {
          std::lock_guard<std::mutex> lk(mu_);
          for (auto& h : heard_) h = passStart;
          resumed_ = true;
          resumedAt_ = passStart;
        }
        lastPass = passStart;
        busy = receiveFromPeers();
        std::vector<int> repost;
        {
          std::lock_guard<std::mutex> lk(mu_);
          const auto now = Clock::now();
          if (now >= nextBeat) {
            nextBeat = now + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.heartbeatSeconds));
            // Ranks whose receive failed are listened to again: the transport
            // may have taken back a process restarted in place of one.
            for (int p = 0; p < capacity_; ++p)
              if (p != self_ && dead_[static_cast<std::size_t>(p)] &&
                  !standing_[static_cast<std::size_t>(p)].valid())
                repost.push_back(p);
            sendToViewLocked(headerLocked(Kind::kHeartbeat));
            // While the change waits, this rank's report goes again each beat:
            // a report can miss a peer (sent while this rank still counted a
            // process restarted in its place as dead), and the coordinator
            // decides nothing without it. Receivers store it once.
            if (revoked_ && !decided_ && lastReport_ &&
                sameView(view_, lastReport_->viewNumber, lastReport_->viewCoordinator))
              sendToViewLocked(*lastReport_);
            // With rejoin on, every fifth beat, ranks of the job outside the
            // view that are still reachable get this view: after a partition
            // heals, the side with the older view learns the newer one and
            // asks to join it.
            if (options_.rejoin && ++beats_ % 5 == 0 && lastView_ && !outsider_ && !revoked_)
              for (int p = 0; p < capacity_; ++p)
                if (view_.localRank(p) < 0 && !left_[static_cast<std::size_t>(p)]) sendLocked(p, *lastView_);
          }
          // A view change decides on the pass after the last thing it waited
          // for: a joiner's report or the end of its wait, and also this
          // rank's own pause. (A coordinator starved while the others
          // reported would otherwise hear only heartbeats afterwards, and
          // nothing would make it decide: the job would hang until
          // membership.agreement_seconds.)
          if (revoked_) coordinateLocked();
          busy = busy || revoked_ || decided_.has_value() || !joiners_.empty();
          // This pass itself took long: this process was stopped in it. The
          // silence is its own, not its peers'.
          const bool stalled =
              std::chrono::duration<double>(now - passStart).count() > options_.suspectSeconds / 2;
          if (stalled) {
            for (auto& h : heard_) h = now;
            resumed_ = true;
            resumedAt_ = now;
          } else if (resumed_ &&
                     std::chrono::duration<double>(now - resumedAt_).count() > options_.suspectSeconds) {
            // Nobody spoke for a whole suspect_seconds since: the silence is
            // theirs now (they died, or all are cut off), and is judged again.
            resumed_ = false;
          }
          for (int p : view_.members) {
            const auto i = static_cast<std::size_t>(p);
            if (stalled || resumed_ || outsider_ || p == self_ || left_[i] || suspects_.count(p)) continue;
            const double silent = std::chrono::duration<double>(now - heard_[i]).count();
            if (silent > options_.suspectSeconds)
              suspectLocked(p,
                            "was silent for " + std::to_string(silent) + " s (membership.suspect_seconds)");
          }
        }
        for (int p : repost) post(p);
      });
      std::unique_lock<std::mutex> lk(stopMu_);
      stopCv_.wait_for(lk, busy ? kBusyPassInterval : kIdlePassInterval, [this] { return stopping_.load(); });
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(stopMu_);
      stopping_ = true;
    }
    stopCv_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (auto& r : standing_) r.cancel();
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }

  std::unique_ptr<Transport> inner_;
  MembershipOptions options_;
  const int self_;
  const int world_;     // the job's first view: ranks 0..world_-1
  const int capacity_;  // global ranks there may ever be (the inner transport's capacity: joins)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  View view_;
  std::atomic<int> localRank_{0}, localSize_{1};
  std::set<int> suspects_;
  bool revoked_ = false;
  std::uint64_t revocations_ = 0;  // times revoked_ was set
  bool closed_ = false;
  bool expelled_ = false;
  // This process was stopped (or starved) for longer than half of
  // suspect_seconds and has not heard from any peer since: it suspects
  // nobody for silence and decides no view until it does, or until
  // suspect_seconds pass without a word from any.
  bool resumed_ = false;
  Clock::time_point resumedAt_{};  // when resumed_ was last set
  Clock::time_point revokedAt_{};
  int firstSuspect_ = -1;
  std::string revokeReason_;
  // Reports by view, then by sender (storeReportLocked: at most two per sender).
  std::map<ViewKey, std::map<int, Report>> reports_;
  // By sender: what it said in a view this rank had not installed (Early).
  std::vector<Early> early_;
  std::vector<Incarnations> incarnations_;               // by sender
  std::set<std::pair<int, std::uint32_t>> staleWarned_;  // (rank, incarnation) whose messages were dropped
  const std::uint32_t incarnation_ = drawIncarnation();  // this process's (bytes 5-7 of what it sends)
  std::set<int> joiners_;                                // peers outside the view that asked to rejoin
  bool outsider_ = false;                                // this rank was removed and asked to rejoin
  bool fromSide_ = false;   // ... from a side of a partition that trained on its own
  bool restarted_ = false;  // options_.restarted: this process replaces a failed rank
  bool joinAsked_ = false;  // it asked to join a view (a restarted process: since it started)
  std::optional<std::pair<std::uint64_t, int>> issuedFor_;
  // The next view this rank decides is numbered above this: a smaller side
  // of a healed partition holds a view numbered this high (outnumberLocked).
  std::uint64_t numberFloor_ = 0;
  std::optional<Decided> decided_;
  std::optional<Message> lastView_;    // the newest view message seen, for peers that missed it
  std::optional<Message> lastReport_;  // this rank's last state message, sent again while its change waits
  std::vector<Clock::time_point> heard_;
  std::vector<bool> left_, dead_;
  std::vector<Clock::time_point> lostAt_;   // by rank: when dead_ was last set
  std::vector<Clock::time_point> askedAt_;  // by rank: when it last entered joiners_
  std::vector<Clock::time_point> lastAnswer_;
  std::vector<int> lost_;
  std::deque<Request> sends_;
  std::uint64_t beats_ = 0;

  std::mutex pmu_;
  std::vector<std::weak_ptr<gossamer::detail::RequestState>> pending_;
  std::size_t swept_ = 0;  // pending_.size() after the last sweep

  // The background thread's own.
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<Request> standing_;
  std::vector<int> receiveErrors_;  // by rank: receives in a row that failed other than PeerFailure
  std::atomic<bool> stopping_{false};
  std::mutex stopMu_;
  std::condition_variable stopCv_;
  std::thread thread_;
};

}  // namespace

namespace detail {
HeldForOtherViews heldForOtherViews(const Membership& membership) {
  const auto* service = dynamic_cast<const MembershipTransport*>(&membership);
  GOSSAMER_ENFORCE(service != nullptr, "not the handle of a membership service (membership::wrap)");
  return service->heldForOtherViews();
}
}  // namespace detail

Service wrap(std::unique_ptr<Transport> inner, const MembershipOptions& o) {
  GOSSAMER_ENFORCE(inner != nullptr, "no transport to wrap");
  // At most a day each: a duration a steady_clock deadline can hold (an
  // infinite one would overflow the conversion, and silence would never
  // be judged).
  constexpr double kDay = 86400;
  GOSSAMER_ENFORCE(o.heartbeatSeconds > 0 && o.heartbeatSeconds <= kDay,
                   "heartbeat " << o.heartbeatSeconds << " s (in (0, 86400])");
  GOSSAMER_ENFORCE(o.suspectSeconds > o.heartbeatSeconds && o.suspectSeconds <= kDay,
                   "suspect_seconds " << o.suspectSeconds << " must exceed heartbeat_seconds "
                                      << o.heartbeatSeconds << " and be at most 86400");
  GOSSAMER_ENFORCE(o.agreementSeconds >= 0 && o.agreementSeconds <= kDay,
                   "agreement " << o.agreementSeconds << " s (in [0, 86400])");
  GOSSAMER_ENFORCE(!o.majority || inner->timeoutSeconds() > 2 * o.suspectSeconds,
                   "under partition: majority suspect_seconds "
                       << o.suspectSeconds << " must be below half of the transport's timeout "
                       << inner->timeoutSeconds() << " s");
  auto transport = std::make_unique<MembershipTransport>(std::move(inner), o);
  Membership* handle = transport.get();
  return {std::move(transport), handle};
}

namespace {
/// The membership keys that constrain each other, when the service is on.
std::optional<ConfigIssue> checkSettings(const Config& c) {
  const int most = c.get<int>("membership.max_world_size");
  if (most != 0 && most < c.worldSize())
    return ConfigIssue{"membership.max_world_size",
                       std::to_string(most) + " is below world_size " + std::to_string(c.worldSize()) +
                           " (0, or at least world_size: the most ranks the job may hold)"};
  if (!c.get<bool>("membership.enabled")) return std::nullopt;
  const double heartbeat = c.get<double>("membership.heartbeat_seconds");
  if (c.get<double>("membership.suspect_seconds") <= heartbeat)
    return ConfigIssue{"membership.suspect_seconds",
                       "must exceed membership.heartbeat_seconds (" + formatConfigValue(heartbeat) + " s)"};
  const bool majority = c.get<std::string>("membership.partition") == "majority";
  const double timeout = c.get<double>("transport.timeout_seconds");
  if (majority && timeout <= 2 * c.get<double>("membership.suspect_seconds"))
    return ConfigIssue{"membership.suspect_seconds",
                       "under partition: majority it must be below half of transport.timeout_seconds (" +
                           formatConfigValue(timeout) +
                           " s): a peer cut off is then suspected before the transport gives up on it, "
                           "and is told from a crash"};
  if (c.get<bool>("membership.rejoin")) return std::nullopt;
  if (majority)
    return ConfigIssue{"membership.partition",
                       "majority needs membership.rejoin: true (a paused minority joins on heal)"};
  if (c.get<bool>("membership.restarted"))
    return ConfigIssue{"membership.restarted", "needs membership.rejoin: true"};
  if (maxWorldSize(c) > c.worldSize())
    return ConfigIssue{"membership.max_world_size",
                       "needs membership.rejoin: true (a rank that joins is taken in as a rejoining one)"};
  return std::nullopt;
}
}  // namespace

void registerWith(Registry& registry) {
  registry.addTransportService(
      "membership",
      "failure detector and agreed membership views: survivors of a dead or silent peer go on "
      "(Session::recover)",
      KeySet()
          .boolean("enabled", true,
                   "run the membership service (heartbeats, views, recovery; false: a dead peer is a "
                   "PeerFailure that ends gossamer-train)")
          .real("heartbeat_seconds", 0.2, {0.0, false, 60.0, true},
                "interval between heartbeats to each member")
          .real("suspect_seconds", 3.0, {0.0, false, 3600.0, true},
                "silence after which a member is suspected and removed (> heartbeat_seconds)")
          .real("agreement_seconds", 0.0, {0.0, true, 3600.0, true},
                "longest wait for the survivors to agree on a new view (0: transport.timeout_seconds)")
          .boolean("rejoin", true,
                   "a rank removed while it was stopped (or cut off by a partition) asks to rejoin and is "
                   "taken back at the next view change (false: it stops with Expelled; gossamer-sparse and "
                   "gossamer-admm default to false: their rounds take no rank back)")
          .text("partition", "merge", {"merge", "majority"},
                "when the job splits: merge (every side trains on as a view of its own; on heal the side "
                "with fewer ranks joins the other, and their models merge: averaged, weighted by side size, "
                "for AllReduce-SGD, kept with their push-sum weights for gossip) or majority (only a side "
                "holding a strict majority of "
                "the last view trains on; the others pause with their state and join it on heal)")
          .boolean("restarted", false,
                   "this process replaces a failed rank of the running job, or is a new rank beyond "
                   "world_size, and joins it (gossamer-train --rejoin and --join set it; needs rejoin and a "
                   "transport that takes restarted ranks back: zmq, socket, libfabric)")
          .perRank()
          .integer("max_world_size", 0, 0, 1024,
                   "the most ranks the job may hold: ranks world_size..max_world_size-1 may join it while it "
                   "runs (gossamer-train --join; needs rejoin and zmq, socket or libfabric; 0: world_size, "
                   "no joins)")
          .rule(checkSettings),
      [](const TransportContext& ctx, std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
        const Config& c = ctx.config;
        if (!c.get<bool>("membership.enabled")) return inner;
        MembershipOptions o;
        o.heartbeatSeconds = c.get<double>("membership.heartbeat_seconds");
        o.suspectSeconds = c.get<double>("membership.suspect_seconds");
        o.agreementSeconds = c.get<double>("membership.agreement_seconds");
        o.rejoin = c.get<bool>("membership.rejoin");
        o.restarted = c.get<bool>("membership.restarted");
        o.majority = c.get<std::string>("membership.partition") == "majority";
        // A Config the Agent runs passed checkSettings already (Agent validates it).
        if (auto issue = checkSettings(c)) throw ConfigError(c.sourceFile, 0, issue->key, issue->message);
        if (ctx.rank >= c.worldSize() && !o.restarted)
          throw ConfigError(c.sourceFile, 0, "membership.restarted",
                            "rank " + std::to_string(ctx.rank) + " is beyond world_size " +
                                std::to_string(c.worldSize()) +
                                ": it joins the running job (restarted: true)");
        Service service = wrap(std::move(inner), o);
        if (ctx.capabilities != nullptr) ctx.capabilities->offerMembership(*service.membership);
        return std::move(service.transport);
      });
}

}  // namespace gossamer::membership
