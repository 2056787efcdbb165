// The composite transport (composite.hpp): per-destination routing between a
// local transport over each host's (or island's) ranks and a remote transport
// over all ranks.
//
// Steps per call: a send or a receive from ranks on one side is the inner
// transport's own call with ranks translated, so it adds no bytes on the wire
// and no copy. A receive from ranks on both sides posts one receive per side
// and keeps the first to complete; the other is cancelled, and a message it
// completed with in the meantime is kept for the next matching receive: one
// already waiting, or any posted later. Inner transports match in posting
// order, so a receive posted while one from both sides that shares a source
// waits (even one from a single rank) is made the same way, and a receive
// lets those posted before it settle (keeping their older messages) before it
// takes a message itself: each source's messages stay in send order. A
// receive from both sides that is cancelled after a side completed completes
// with that message instead.
#include "gossamer/transports/composite.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "gossamer/errors.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/kit/security.hpp"
#include "gossamer/log.hpp"

namespace gossamer::composite {

namespace {

using detail::RequestState;

/// A message one side completed with after the other side had won: it goes
/// to the next receive that matches it.
struct Kept {
  int source;
  Tag tag;
  std::vector<std::byte> bytes;
};

/// One receive from ranks on both sides, or from one side while such a
/// receive that shares a source with it waits (one side then stays empty).
struct Mixed {
  std::mutex mu;          // serialises progress on this receive
  std::uint64_t seq = 0;  // posting order (MixEngine::add)
  std::shared_ptr<RequestState> outer;
  std::span<std::byte> buffer;
  std::vector<int> sources;  // job ranks
  Tag tag;
  Request local;   // into buffer
  Request remote;  // into scratch
  std::unique_ptr<std::byte[]> scratch;
  bool localAlive = true;
  bool remoteAlive = true;
  // Whether every source of a side has a failure verdict from its inner
  // transport (set by CompositeTransport::mixed; see MixEngine::completed).
  std::function<bool()> localGone;
  std::function<bool()> remoteGone;
  std::exception_ptr lastFailure;  // of a side whose sources are all gone
  std::exception_ptr fatal;        // any other failure: fails the receive
  bool finished = false;
};

/// Drives the receives from both sides in the threads that wait on them, and
/// keeps the messages a losing side completed with.
class MixEngine final : public detail::ProgressEngine {
 public:
  /// Caller holds m->mu, before posting m's sides (so that a receive posted
  /// after it sees it in overlapsPending).
  void add(const std::shared_ptr<Mixed>& m) {
    std::lock_guard<std::mutex> lk(mu_);
    m->seq = nextSeq_++;
    pending_[m->outer.get()] = m;
    pendingCount_ = pending_.size();
  }

  /// Caller holds m.mu: m will not be posted after all (a side threw).
  void forget(Mixed& m) { finish(m); }

  /// True if a pending receive under `tag` shares a source with `sources`:
  /// one of its sides may hold an older message from that source, which it
  /// keeps if the other side wins.
  bool overlapsPending(std::span<const int> sources, const Tag& tag) {
    if (pendingCount_.load() == 0) return false;  // the common case, without the lock
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [key, m] : pending_)
      if (overlaps(*m, sources, tag)) return true;
    return false;
  }

  void waitUntil(RequestState& state, std::chrono::steady_clock::time_point deadline) override {
    auto m = find(state);
    if (!m) return;
    // Wait on one side in short slices and look at the other between them.
    constexpr double kSliceSeconds = 0.0005;
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(m->mu);
        progressLocked(*m);
        if (m->finished) return;
        const double left =
            std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) return;
        Request& side = m->localAlive ? m->local : m->remote;
        try {
          side.waitFor(std::min(left, kSliceSeconds));
        } catch (const std::exception&) {
          // progressLocked sees the failure on its next pass.
        }
      }
    }
  }

  void poke() override {
    std::vector<std::shared_ptr<Mixed>> all;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [key, m] : pending_) all.push_back(m);
    }
    for (auto& m : all) {
      std::unique_lock<std::mutex> lk(m->mu, std::try_to_lock);
      if (lk.owns_lock()) progressLocked(*m);
    }
  }

  // A side that completed before the cancel wins the race, as a Mailbox's
  // receive does: the receive completes with its message (one side's; the
  // other's, if both did, is kept), so that a later receive from the same
  // source does not get a newer message before it.
  void cancelLocked(RequestState& state) override {
    auto m = find(state);
    if (!m) return;
    std::lock_guard<std::mutex> lk(m->mu);
    if (m->finished) return;
    const bool local = completedAfterCancel(m->local);
    const bool remote = completedAfterCancel(m->remote);
    if (local || remote) {
      settleEarlier(*m);
      if (completeWithKept(*m)) return;
    }
    completeWith(*m, local, remote);
    finish(*m);
  }

  /// Takes the oldest kept message from one of `sources` under `tag` into
  /// `buffer`: a completed request, or null if none is kept.
  std::shared_ptr<RequestState> takeKept(std::span<const int> sources, const Tag& tag,
                                         std::span<std::byte> buffer) {
    auto k = popKept(sources, tag);
    if (!k) return nullptr;
    auto s = std::make_shared<RequestState>();
    if (auto error = deliver(*k, tag, buffer))
      s->fail(error);
    else
      s->complete(k->source, k->bytes.size(), std::nullopt);
    return s;
  }

  std::size_t discardKept(const std::function<bool(const Tag&)>& stale) {
    std::lock_guard<std::mutex> lk(mu_);
    const auto before = kept_.size();
    std::erase_if(kept_, [&](const Kept& k) { return stale(k.tag); });
    keptCount_ = kept_.size();
    return before - kept_.size();
  }

  /// Cancels every pending receive from both sides and drops the kept
  /// messages, as the inner transports' close() drops what arrived unreceived
  /// (close).
  void cancelAll() {
    std::vector<std::shared_ptr<Mixed>> all;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [key, m] : pending_) all.push_back(m);
    }
    for (auto& m : all) {
      std::lock_guard<std::mutex> ex(exclusive);
      cancelLocked(*m->outer);
      m->outer->cancelIfPending();
    }
    discardKept([](const Tag&) { return true; });
  }

 private:
  std::shared_ptr<Mixed> find(RequestState& state) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pending_.find(&state);
    return it == pending_.end() ? nullptr : it->second;
  }

  static bool overlaps(const Mixed& m, std::span<const int> sources, const Tag& tag) {
    return m.tag == tag && std::any_of(sources.begin(), sources.end(), [&](int s) {
             return std::find(m.sources.begin(), m.sources.end(), s) != m.sources.end();
           });
  }

  // Caller holds m.mu. Lets the pending receives posted before m under its
  // tag settle first, oldest first: inner transports match in posting order,
  // so one of theirs may hold an older message from a source of m's than m's
  // sides do, and keeps it (for m to take) if its other side wins. Each is
  // advanced once, after those posted before it (not recursively: n receives
  // pending under one tag cost n advances, not 2^n). Locks are taken from
  // later receives to earlier ones only, one earlier one at a time.
  void settleEarlier(const Mixed& m) {
    std::vector<std::shared_ptr<Mixed>> earlier;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [key, e] : pending_)
        if (e->seq < m.seq && e->tag == m.tag) earlier.push_back(e);
    }
    std::sort(earlier.begin(), earlier.end(), [](const auto& a, const auto& b) { return a->seq < b->seq; });
    for (auto& e : earlier) {
      std::lock_guard<std::mutex> lk(e->mu);
      advanceLocked(*e);
    }
  }

  // After cancel(): did the request complete first (its message is then ours)?
  static bool completedAfterCancel(Request& r) {
    if (!r.valid()) return false;  // a side this receive does not have
    r.cancel();
    try {
      return r.test();
    } catch (const std::exception&) {
      return false;
    }
  }

  // Caller holds m.mu. True if `side` completed; records a failure otherwise.
  // A side whose sources are all gone leaves the receive to the other side,
  // as a plain transport keeps a receive from several ranks for those still
  // alive: a PeerFailure, or a ProtocolError for a bad frame (the inner
  // transport dropped its sender: any fault but kMalformed, or a kMalformed
  // one once every source of the side has a verdict). Any other error (a
  // message too long for the buffer is kMalformed, and drops no one) fails
  // the receive.
  static bool completed(Mixed& m, Request& side, bool& alive, const std::function<bool()>& gone) {
    if (!alive) return false;
    try {
      return side.test();
    } catch (const PeerFailure&) {
      alive = false;  // every source on that side is gone; the other may still deliver
      m.lastFailure = std::current_exception();
    } catch (const ProtocolError& e) {
      alive = false;
      const bool dropped = e.fault() != FrameFault::kMalformed || (gone && gone());
      (dropped ? m.lastFailure : m.fatal) = std::current_exception();
    } catch (const std::exception&) {
      alive = false;
      m.fatal = std::current_exception();
    }
    return false;
  }

  // The oldest kept message from one of `sources` under `tag`, removed.
  std::optional<Kept> popKept(std::span<const int> sources, const Tag& tag) {
    if (keptCount_.load() == 0) return std::nullopt;
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (!(it->tag == tag) || std::find(sources.begin(), sources.end(), it->source) == sources.end())
        continue;
      Kept k = std::move(*it);
      kept_.erase(it);
      keptCount_ = kept_.size();
      return k;
    }
    return std::nullopt;
  }

  // Copies a kept message into `buffer`; the error if it does not fit.
  static std::exception_ptr deliver(const Kept& k, const Tag& tag, std::span<std::byte> buffer) {
    if (k.bytes.size() > buffer.size())
      return std::make_exception_ptr(
          ProtocolError(k.source, kFrameHeaderBytes + buffer.size(),
                        "message of " + std::to_string(k.bytes.size()) + " bytes does not fit the " +
                            std::to_string(buffer.size()) + "-byte receive buffer (" + toString(tag) + ")"));
    std::copy(k.bytes.begin(), k.bytes.end(), buffer.begin());
    return nullptr;
  }

  // Caller holds m.mu. A message another receive kept (it arrived for that
  // one with a second) came before anything m's sides hold: completes m with
  // the oldest that matches and keeps what m's sides completed with after it.
  // False if none is kept.
  bool completeWithKept(Mixed& m) {
    auto k = popKept(m.sources, m.tag);
    if (!k) return false;
    if (completedAfterCancel(m.local)) keepLocal(m);
    if (completedAfterCancel(m.remote)) keepRemote(m);
    if (auto error = deliver(*k, m.tag, m.buffer))
      m.outer->fail(error);
    else
      m.outer->complete(k->source, k->bytes.size(), std::nullopt);
    finish(m);
    return true;
  }

  // Caller holds m.mu. Settles the receives posted before m (also when
  // neither of m's sides completed: one of them may hold the message m waits
  // for, and be waited on by no thread), then advances m.
  void progressLocked(Mixed& m) {
    if (m.finished) return;
    settleEarlier(m);
    advanceLocked(m);
  }

  // Caller holds m.mu, and the receives posted before m were settled: m
  // takes a kept message, or completes with a side, or fails.
  void advanceLocked(Mixed& m) {
    if (m.finished) return;
    const bool local = completed(m, m.local, m.localAlive, m.localGone);
    const bool remote = completed(m, m.remote, m.remoteAlive, m.remoteGone);
    if (completeWithKept(m)) return;
    if (local || remote) {
      // The other side, cancelled, may have completed too (its message kept).
      const bool localToo = local || completedAfterCancel(m.local);
      completeWith(m, localToo, remote || completedAfterCancel(m.remote));
    } else if (m.fatal) {
      if (completedAfterCancel(m.local)) keepLocal(m);
      if (completedAfterCancel(m.remote)) keepRemote(m);
      m.outer->fail(m.fatal);
    } else if (!m.localAlive && !m.remoteAlive) {
      m.outer->fail(m.lastFailure);
    } else {
      return;
    }
    finish(m);
  }

  // Completes the receive with the side that completed, the local one when
  // both did (the remote one's message is kept); nothing when neither did.
  // Caller holds m.mu.
  void completeWith(Mixed& m, bool local, bool remote) {
    if (local) {
      if (remote) keepRemote(m);
      m.outer->complete(m.local.peer(), m.local.bytes(), m.local.payloadChecksum());
    } else if (remote) {
      std::memcpy(m.buffer.data(), m.scratch.get(), m.remote.bytes());
      m.outer->complete(m.remote.peer(), m.remote.bytes(), m.remote.payloadChecksum());
    }
  }

  void keepLocal(Mixed& m) { keep(m.local.peer(), m.tag, m.buffer.first(m.local.bytes())); }
  void keepRemote(Mixed& m) {
    keep(m.remote.peer(), m.tag, std::span<const std::byte>(m.scratch.get(), m.remote.bytes()));
  }

  // Keeps a message that arrived after its receive was cancelled, for the
  // next receive. Reached from paths that cannot throw (a request's settle,
  // the destructor) as well as from progress: without memory for the copy,
  // the message is dropped, said in the log, and the receive that would have
  // taken it waits out its timeout instead.
  void keep(int source, const Tag& tag, std::span<const std::byte> bytes) noexcept {
    try {
      std::vector<std::byte> copy(bytes.begin(), bytes.end());
      std::lock_guard<std::mutex> lk(mu_);
      kept_.push_back(Kept{source, tag, std::move(copy)});
      keptCount_ = kept_.size();
    } catch (const std::exception& e) {
      GOSSAMER_LOG(kWarning, "composite: a " << bytes.size() << "-byte message from rank " << source << " ("
                                             << toString(tag) << ") that arrived after its receive was "
                                             << "cancelled is dropped: " << e.what());
    }
  }

  void finish(Mixed& m) {
    m.finished = true;
    std::lock_guard<std::mutex> lk(mu_);
    pending_.erase(m.outer.get());
    pendingCount_ = pending_.size();
  }

  std::mutex mu_;  // guards pending_ and kept_; taken after a Mixed's mu
  std::map<RequestState*, std::shared_ptr<Mixed>> pending_;
  std::deque<Kept> kept_;
  std::atomic<std::size_t> keptCount_{0};     // kept_.size(), read without mu_
  std::atomic<std::size_t> pendingCount_{0};  // pending_.size(), read without mu_
  std::uint64_t nextSeq_ = 0;                 // Mixed::seq of the next add
};

std::string listOf(std::span<const int> ranks) {
  std::ostringstream os;
  os << '{';
  for (std::size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  os << '}';
  return os.str();
}

// Runs every step, also after one threw; then rethrows the first error.
void everyStep(std::initializer_list<std::function<void()>> steps) {
  std::exception_ptr first;
  for (const auto& step : steps) {
    try {
      step();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

class CompositeTransport final : public Transport {
 public:
  CompositeTransport(const Options& o, std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote)
      : rank_(o.rank),
        worldSize_(o.worldSize),
        timeoutSeconds_(o.timeoutSeconds),
        names_(std::make_shared<const std::vector<int>>(o.localGroup)),
        localIndex_(static_cast<std::size_t>(o.worldSize), -1),
        local_(std::move(local)),
        remote_(std::move(remote)),
        engine_(std::make_shared<MixEngine>()) {
    for (std::size_t i = 0; i < o.localGroup.size(); ++i)
      localIndex_[static_cast<std::size_t>(o.localGroup[i])] = static_cast<int>(i);
  }

  ~CompositeTransport() override {
    try {
      engine_->cancelAll();
    } catch (...) {  // a destructor cannot throw
      GOSSAMER_LOG(kWarning, "composite: cancelling the requests left at destruction failed");
    }
  }

  int rank() const override { return rank_; }
  int worldSize() const override { return worldSize_; }
  std::string name() const override { return "composite(" + local_->name() + "+" + remote_->name() + ")"; }
  double timeoutSeconds() const override { return timeoutSeconds_; }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    checkRank(dst, "destination");
    if (isLocal(dst)) return onLocal([&] { return local_->isend(localIndex(dst), tag, data, dtype); });
    return remote_->isend(dst, tag, data, dtype);
  }

  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    checkRank(dst, "destination");
    if (isLocal(dst))
      return onLocal([&] { return local_->isendBorrowed(localIndex(dst), tag, data, dtype, checksum); });
    return remote_->isendBorrowed(dst, tag, data, dtype, checksum);
  }

  TransportCapabilities capabilities() const noexcept override {
    // Each inner transport falls back to copying where it lacks a feature, so
    // offering what either has is safe; a caller's checksum is used by
    // whichever takes one at its size.
    const auto l = local_->capabilities();
    const auto r = remote_->capabilities();
    TransportCapabilities c;
    c.borrowedSends = l.borrowedSends || r.borrowedSends;
    c.receiveViews = l.receiveViews || r.receiveViews;
    c.singleCopy = l.singleCopy || r.singleCopy;
    c.checksumReuseMinBytes = std::min(l.checksumReuseMinBytes, r.checksumReuseMinBytes);
    return c;
  }

  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    GOSSAMER_ENFORCE(!sources.empty(), "receive from an empty list of ranks");
    std::vector<int> locals;
    std::vector<int> remotes;
    for (int s : sources) {
      checkRank(s, "source");
      if (isLocal(s))
        locals.push_back(localIndex(s));
      else
        remotes.push_back(s);
    }
    // Behind a waiting receive from both sides that shares a source, even a
    // receive from one side goes through the engine: that receive may hold
    // an older message from the source, kept for this one if it loses.
    if (engine_->overlapsPending(sources, tag)) return mixed(sources, locals, remotes, tag, buffer);
    if (auto kept = engine_->takeKept(sources, tag, buffer)) return Request(std::move(kept));
    if (remotes.empty()) return onLocal([&] { return local_->irecv(locals, tag, buffer); });
    if (locals.empty()) return remote_->irecv(remotes, tag, buffer);
    return mixed(sources, locals, remotes, tag, buffer);
  }

  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    checkRank(source, "source");
    const std::span<const int> one(&source, 1);
    if (engine_->overlapsPending(one, tag)) {
      const std::vector<int> side{isLocal(source) ? localIndex(source) : source};
      return isLocal(source) ? mixed(one, side, {}, tag, buffer) : mixed(one, {}, side, tag, buffer);
    }
    if (auto kept = engine_->takeKept(one, tag, buffer)) return Request(std::move(kept));
    if (isLocal(source)) return onLocal([&] { return local_->irecvView(localIndex(source), tag, buffer); });
    return remote_->irecvView(source, tag, buffer);
  }

  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return local_->discardArrived(stale) + remote_->discardArrived(stale) + engine_->discardKept(stale);
  }

  // The side that carries `rank` knows; the local side's verdict names its
  // own index, so it is named again by the job rank (as its receives are).
  std::exception_ptr peerFailure(int rank) const override {
    if (rank < 0 || rank >= worldSize_ || rank == rank_) return nullptr;
    if (!isLocal(rank)) return remote_->peerFailure(rank);
    auto why = local_->peerFailure(localIndex(rank));
    if (!why) return nullptr;
    try {
      std::rethrow_exception(why);
    } catch (const std::exception& e) {
      return std::make_exception_ptr(PeerFailure(
          rank, "as rank " + std::to_string(localIndex(rank)) + " of the local transport: " + e.what()));
    }
  }

  // Both inner transports are closed (aborted) whatever fails first; the
  // first error is rethrown.
  void close() override {
    everyStep({[this] { engine_->cancelAll(); }, [this] { local_->close(); }, [this] { remote_->close(); }});
  }

  void abort() override {
    everyStep({[this] { engine_->cancelAll(); }, [this] { local_->abort(); }, [this] { remote_->abort(); }});
  }

  TransportStats stats() const override {
    const auto l = local_->stats();
    TransportStats s = remote_->stats();
    s.bytesSent += l.bytesSent;
    s.bytesReceived += l.bytesReceived;
    s.messagesSent += l.messagesSent;
    s.messagesReceived += l.messagesReceived;
    s.messagesPulled += l.messagesPulled;
    s.refusedConnections += l.refusedConnections;
    for (std::size_t i = 0; i < s.rejectedFrames.size(); ++i) s.rejectedFrames[i] += l.rejectedFrames[i];
    return s;
  }

 private:
  void checkRank(int r, const char* role) const {
    GOSSAMER_ENFORCE(r >= 0 && r < worldSize_, role << " rank " << r << " outside world size " << worldSize_);
  }
  bool isLocal(int r) const { return localIndex_[static_cast<std::size_t>(r)] >= 0; }
  int localIndex(int r) const { return localIndex_[static_cast<std::size_t>(r)]; }

  // A receive driven by the engine: one receive on each side that has
  // sources in `locals` (local ranks) or `remotes` (job ranks), the remote one
  // into a scratch buffer.
  Request mixed(std::span<const int> sources, const std::vector<int>& locals, const std::vector<int>& remotes,
                const Tag& tag, std::span<std::byte> buffer) {
    auto m = std::make_shared<Mixed>();
    m->outer = std::make_shared<RequestState>();
    m->outer->what = "recv from " + listOf(sources) + " " + toString(tag);
    m->outer->engine = engine_;
    m->buffer = buffer;
    m->sources.assign(sources.begin(), sources.end());
    m->tag = tag;
    if (!remotes.empty()) m->scratch.reset(new std::byte[std::max<std::size_t>(buffer.size(), 1)]);
    m->localAlive = !locals.empty();
    m->remoteAlive = !remotes.empty();
    // (Called only while m is pending: the destructor finishes every pending
    // receive before the inner transports go.)
    m->localGone = [inner = local_.get(), locals] { return allFailed(*inner, locals); };
    m->remoteGone = [inner = remote_.get(), remotes] { return allFailed(*inner, remotes); };
    std::lock_guard<std::mutex> lk(m->mu);  // no progress on it before its sides are posted
    engine_->add(m);
    try {
      if (m->localAlive) m->local = onLocal([&] { return local_->irecv(locals, tag, buffer); });
      if (m->remoteAlive)
        m->remote = remote_->irecv(remotes, tag, std::span<std::byte>(m->scratch.get(), buffer.size()));
    } catch (...) {
      engine_->forget(*m);
      throw;
    }
    return Request(m->outer);
  }

  // Whether every rank of `ranks` (the inner transport's) has a failure verdict there.
  static bool allFailed(const Transport& inner, const std::vector<int>& ranks) {
    return std::all_of(ranks.begin(), ranks.end(), [&](int r) { return inner.peerFailure(r) != nullptr; });
  }

  // Runs a call on the local transport: its request reports job ranks, and a
  // failure it throws at once names the job rank. (Its timeout message keeps
  // the local transport's ranks; Request::wait adds the job ranks.)
  template <typename Call>
  Request onLocal(Call call) {
    Request r;
    try {
      r = call();
    } catch (const PeerFailure& e) {
      throw PeerFailure(names_->at(static_cast<std::size_t>(e.peer())),
                        "as rank " + std::to_string(e.peer()) + " of the local transport: " + e.what());
    }
    if (auto s = r.watch().lock()) {
      std::lock_guard<std::mutex> lk(s->mu);
      s->peerNames = names_;
    }
    return r;
  }

  int rank_;
  int worldSize_;
  double timeoutSeconds_;
  std::shared_ptr<const std::vector<int>> names_;  // local rank -> job rank
  std::vector<int> localIndex_;                    // job rank -> local rank, -1 if remote
  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> remote_;
  std::shared_ptr<MixEngine> engine_;
};

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::unique_ptr<Transport> makeTransport(const Options& o, Store& store, const InnerFactory& makeLocal,
                                         const InnerFactory& makeRemote) {
  GOSSAMER_ENFORCE(o.worldSize >= 1, "world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.rank >= 0 && o.rank < o.worldSize,
                   "rank " << o.rank << " outside world size " << o.worldSize);
  GOSSAMER_ENFORCE(o.timeoutSeconds > 0, "timeout " << o.timeoutSeconds << " s");
  const auto& g = o.localGroup;
  GOSSAMER_ENFORCE(!g.empty(), "the local group is empty");
  GOSSAMER_ENFORCE(std::is_sorted(g.begin(), g.end()) && std::adjacent_find(g.begin(), g.end()) == g.end(),
                   "the local group " << listOf(g) << " is not in increasing order without repeats");
  GOSSAMER_ENFORCE(g.front() >= 0 && g.back() < o.worldSize,
                   "the local group " << listOf(g) << " has ranks outside world size " << o.worldSize);
  const auto self = std::find(g.begin(), g.end(), o.rank);
  GOSSAMER_ENFORCE(self != g.end(), "rank " << o.rank << " is not in its local group " << listOf(g));
  // Every rank builds its local transport first: that rendezvous waits only
  // on the group, which does the same, so neither can wait on the other.
  PrefixedStore localStore(store, "composite/local/" + std::to_string(g.front()) + "/");
  auto local = makeLocal(static_cast<int>(self - g.begin()), static_cast<int>(g.size()), localStore);
  GOSSAMER_CHECK(local != nullptr, "the local transport factory returned no transport");
  PrefixedStore remoteStore(store, "composite/remote/");
  auto remote = makeRemote(o.rank, o.worldSize, remoteStore);
  GOSSAMER_CHECK(remote != nullptr, "the remote transport factory returned no transport");
  GOSSAMER_CHECK(local->worldSize() == static_cast<int>(g.size()) && remote->worldSize() == o.worldSize,
                 "inner transports of world sizes " << local->worldSize() << " and " << remote->worldSize());
  return std::make_unique<CompositeTransport>(o, std::move(local), std::move(remote));
}

std::string hostIdentity() {
  struct stat ns {};
  const auto netns = ::stat("/proc/self/ns/net", &ns) == 0 ? std::to_string(ns.st_ino) : std::string("?");
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return readFirstLine("/proc/sys/kernel/random/boot_id") + "/" + netns + "/" + host.data();
}

std::vector<int> sameHostRanks(int rank, int worldSize, Store& store, const std::string& prefix,
                               double timeoutSeconds) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize, "rank " << rank << " outside world size " << worldSize);
  const std::string me = hostIdentity();
  store.set(prefix + "host/" + std::to_string(rank), me);
  std::vector<std::string> keys;
  for (int r = 0; r < worldSize; ++r) keys.push_back(prefix + "host/" + std::to_string(r));
  store.wait(keys, timeoutSeconds);
  std::vector<int> group;
  for (int r = 0; r < worldSize; ++r)
    if (store.get(keys[static_cast<std::size_t>(r)], timeoutSeconds) == me) group.push_back(r);
  return group;
}

namespace {

/// transport.local and transport.remote name registered transports that
/// link processes and are not built of other transports.
std::optional<ConfigIssue> checkInner(const TransportCatalog& catalog, const Config& c) {
  const std::string usable =
      catalog.namesWhere([](const TransportTraits& t) { return t.spansProcesses && t.innerKeys.empty(); });
  for (const char* key : {"transport.local", "transport.remote"}) {
    const std::string& name = c.get<std::string>(key);
    const TransportTraits* t = catalog.find(name);
    std::string why;
    if (t == nullptr)
      why = "'" + name + "' is not a registered transport";
    else if (!t->innerKeys.empty())
      why = "'" + name + "' is built of other transports itself";
    else if (!t->spansProcesses)
      why = "'" + name + "' cannot link processes (the composite's ranks are processes; " + name +
            " would leave each to itself)";
    if (!why.empty()) return ConfigIssue{key, why + ": use one of " + usable};
  }
  return std::nullopt;
}

}  // namespace

void registerWith(Registry& registry) {
  const std::shared_ptr<const TransportCatalog> catalog = registry.transportCatalog();
  registry.addTransport(
      "composite",
      [](const TransportContext& ctx) {
        const Config& c = ctx.config;
        if (ctx.registry == nullptr)
          throw ConfigError(
              c.sourceFile, 0, "transport.kind",
              "the composite transport is built by an Agent (it needs the registry of its inner "
              "transports)");
        const Registry& registry = *ctx.registry;
        const auto localKind = c.get<std::string>("transport.local");
        const auto remoteKind = c.get<std::string>("transport.remote");
        if (auto issue = checkInner(*registry.transportCatalog(), c))
          throw ConfigError(c.sourceFile, 0, issue->key, issue->message);
        const auto& localFactory = registry.transport(localKind);
        const auto& remoteFactory = registry.transport(remoteKind);
        Options o;
        o.rank = ctx.rank;
        o.worldSize = c.worldSize();
        o.timeoutSeconds = c.get<double>("transport.timeout_seconds");
        if (c.get<std::string>("transport.local_scope") == "island") {
          const auto layout = NetworkLayout::from(c);
          o.localGroup = layout.islands()[static_cast<std::size_t>(layout.islandOf(ctx.rank))];
        } else {
          o.localGroup = sameHostRanks(ctx.rank, c.worldSize(), ctx.store, "composite/", o.timeoutSeconds);
        }
        const auto inner = [&](const TransportFactory& factory, const std::string& kind,
                               const std::string& protocol) {
          return [&, kind, protocol](int rank, int worldSize, Store& store) {
            Config ic = c;
            // The inner transport's rank is this rank's place in its group;
            // the secret key file is named by the job rank.
            ic.set<std::string>("security.secret_key", secretKeyPath(c, ctx.rank));
            ic.set("world_size", worldSize);
            ic.set<std::string>("transport.kind", kind);
            ic.set<std::string>("transport.protocol", protocol);
            return factory(TransportContext{ic, rank, store, ctx.registry});
          };
        };
        return makeTransport(o, ctx.store,
                             inner(localFactory, localKind, c.get<std::string>("transport.local_protocol")),
                             inner(remoteFactory, remoteKind, c.get<std::string>("transport.protocol")));
      },
      KeySet()
          .text("local", "zmq", {},
                "composite: the transport between ranks of one host (or island), any registered one that "
                "links processes (zmq, socket, libfabric: docs/transports.md compares them)")
          .text("local_protocol", "ipc", {"ipc", "tcp"}, "composite: the local transport's protocol")
          .text("local_scope", "host", {"host", "island"},
                "composite: which ranks use the local transport: those on one host (same kernel and network "
                "namespace), or those of one island of network.islands")
          .text("remote", "zmq", {},
                "composite: the transport to ranks of other hosts (or islands), with transport.protocol")
          .rule([catalog](const Config& c) -> std::optional<ConfigIssue> {
            if (c.get<std::string>("transport.kind") != "composite") return std::nullopt;
            // Without islands every rank is of one island: the local
            // transport (ipc by default) would have to reach every host.
            if (c.get<std::string>("transport.local_scope") == "island" &&
                c.get<std::vector<std::vector<int>>>("network.islands").empty())
              return ConfigIssue{
                  "transport.local_scope",
                  "island needs network.islands (without them all ranks are one island, and the "
                  "local transport would link every rank); or use host"};
            return checkInner(*catalog, c);
          }),
      TransportTraits{
          .spansProcesses = true, .secures = false, .innerKeys = {"transport.local", "transport.remote"}});
}

}  // namespace gossamer::composite
