// Fault injection: drops, duplicates, delays and reorders a rank's sends,
// and partitions the job for a while (see faults.hpp). What it puts on the
// wire: nothing for a dropped message (or one across the partition), the
// message twice (two frames, same tag and payload) for a duplicated one, and
// one frame, later, for a delayed or held one: the wrapper's thread sends a
// copy when it is due (a delayed one after its delay; a held one right after
// the next send to the same rank that is not held itself, or after
// delay_seconds), so messages sent after it, also under the same tag, reach
// the peer first. The draws, in order: drop, duplicate (the copy goes at
// once), delay, hold; a probability of 0 draws nothing, so adding delay: 0
// and reorder: 0 leaves a seed's faults as they were. A link delay (islands
// of network.islands with faults.island_delay) is not drawn: every send to a
// rank of another island waits network.between_delay_ms first, in order, as
// propagation over a long link does; random delays and holds come on top.
#include "gossamer/transports/faults.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/kit/network.hpp"
#include "gossamer/kit/splitmix.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::faults {

namespace {

// Seconds since rank 0's fault injector was made: rank 0 puts its wall
// clock (Unix seconds) in the store, once, and every rank reads it, so that a
// partition's window is the same on every rank (and on a process restarted
// in place of one). Waits up to `timeoutSeconds` for rank 0.
double partitionClockOffset(const TransportContext& ctx, double timeoutSeconds) {
  const std::string key = "faults-partition-clock";
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  if (ctx.rank == 0 && !ctx.store.tryGet(key)) {
    std::ostringstream text;
    text.precision(17);
    text << now();
    ctx.store.set(key, text.str());
  }
  const std::string value = ctx.store.get(key, timeoutSeconds);
  double start = 0;
  std::istringstream in(value);
  if (!(in >> start) || !std::isfinite(start))
    throw Error("faults: the partition clock in the store (" + key + ") is not a time: '" + value + "'");
  return std::max(0.0, now() - start);
}

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, const FaultOptions& o)
      : inner_(std::move(inner)),
        options_(o),
        start_(std::chrono::steady_clock::now() -
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(o.partitionClockOffsetSeconds))),
        group_(static_cast<std::size_t>(inner_->capacity()), -1),
        held_(static_cast<std::size_t>(inner_->capacity())) {
    for (std::size_t g = 0; g < o.partitionGroups.size(); ++g)
      for (int r : o.partitionGroups[g]) group_[static_cast<std::size_t>(r)] = static_cast<int>(g);
    linkDelay_.assign(static_cast<std::size_t>(inner_->capacity()), Clock::duration::zero());
    for (std::size_t d = 0; d < o.linkDelaySeconds.size() && d < linkDelay_.size(); ++d)
      linkDelay_[d] = seconds(o.linkDelaySeconds[d]);
    const bool linkDelays = std::any_of(linkDelay_.begin(), linkDelay_.end(),
                                        [](Clock::duration d) { return d > Clock::duration::zero(); });
    if (o.delayProbability > 0 || o.reorderProbability > 0 || linkDelays)
      worker_ = std::thread([this] { survivePass("faults worker", [this] { run(); }); });
  }
  // Without close() what is still waiting is dropped, as by abort().
  ~FaultyTransport() override {
    halt(false);
    joinWorker();
  }
  FaultyTransport(const FaultyTransport&) = delete;
  FaultyTransport& operator=(const FaultyTransport&) = delete;

  int rank() const override { return inner_->rank(); }
  int worldSize() const override { return inner_->worldSize(); }
  int capacity() const override { return inner_->capacity(); }
  std::string name() const override { return inner_->name() + "+faults"; }
  double timeoutSeconds() const override { return inner_->timeoutSeconds(); }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return send(dst, tag, data, dtype, [&] { return inner_->isend(dst, tag, data, dtype); });
  }
  // The wrapper copies anyway (a duplicate is a second isend, a later send a
  // copy), so borrowed sends become plain ones.
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t>) override {
    return isend(dst, tag, data, dtype);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecv(sources, tag, buffer);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecvView(source, tag, buffer);
  }
  // Sends what is still waiting at once, then closes the inner transport,
  // which delivers it.
  void close() override {
    halt(true);
    joinWorker();
    inner_->close();
    dropExtra();
  }
  // Drops what is still waiting; the inner abort fails a send the worker is
  // making, so the join is short.
  void abort() override {
    halt(false);
    inner_->abort();
    joinWorker();
    dropExtra();
  }
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return inner_->discardArrived(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return inner_->peerFailure(rank); }
  TransportStats stats() const override { return inner_->stats(); }
  FaultStats faults() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  // A message the worker sends later, ordered by (due time, sequence number).
  using Key = std::pair<Clock::time_point, std::uint64_t>;
  struct Later {
    int dst = 0;
    Tag tag;
    std::vector<std::byte> data;
    DType dtype = DType::kBytes;
    bool held = false;  // held for reordering (released by the next send to dst), not delayed
  };

  struct Fate {
    bool drop = false;
    bool duplicate = false;
    std::optional<Clock::time_point> due;  // set: queued for the worker until then
    bool held = false;
  };

  // Whether the partition keeps this rank from `dst` now.
  bool cut(int dst) const {
    if (options_.partitionGroups.empty()) return false;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (t < options_.partitionStartSeconds || t >= options_.partitionStartSeconds + options_.partitionSeconds)
      return false;
    return group_[static_cast<std::size_t>(rank())] != group_[static_cast<std::size_t>(dst)];
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  Fate draw(int dst, const Tag& tag) {
    Fate f;
    if (dst == rank()) return f;
    std::lock_guard<std::mutex> lock(mu_);
    // Counted for every send, also one the partition cuts: fates after it
    // do not depend on when the window closed.
    const std::uint64_t nth = sent_[{dst, static_cast<int>(tag.op)}]++;
    if (cut(dst)) {
      ++stats_.partitioned;
      f.drop = true;
      return f;
    }
    const Clock::duration link = linkDelay_[static_cast<std::size_t>(dst)];
    const bool linked = link > Clock::duration::zero();
    const bool drawn = !options_.gossipOnly || tag.op == Op::kGossip;
    if (!linked && !drawn) return f;
    if (linked) {
      ++stats_.linkDelayed;
      f.due = Clock::now() + link;
    }
    if (!drawn) return f;
    // The draws of this send: a SplitMix64 stream started from (seed, this
    // rank, dst, the tag's op, how many sends to dst under that op came
    // before), so that its fate does not depend on what other threads sent
    // meanwhile (the membership service's heartbeats, a communication
    // thread's collectives).
    std::uint64_t state =
        splitmix64(options_.seed ^
                   splitmix64(static_cast<std::uint64_t>(rank()) ^
                              splitmix64(static_cast<std::uint64_t>(dst) ^
                                         splitmix64(static_cast<std::uint64_t>(tag.op) ^ splitmix64(nth)))));
    const auto u = [&state] { return splitmixUniform(state); };
    if (u() < options_.dropProbability) {
      ++stats_.dropped;
      f.drop = true;
      return f;
    }
    if (u() < options_.duplicateProbability) {
      ++stats_.duplicated;
      f.duplicate = true;
    }
    if (options_.delayProbability > 0 && u() < options_.delayProbability) {
      ++stats_.delayed;
      f.due = Clock::now() + link + seconds(u() * options_.delaySeconds);
    } else if (options_.reorderProbability > 0 && u() < options_.reorderProbability) {
      ++stats_.reordered;
      f.due = Clock::now() + link + seconds(options_.delaySeconds);
      f.held = true;
    }
    return f;
  }

  template <typename SendFn>
  Request send(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype, SendFn sendOnce) {
    GOSSAMER_ENFORCE(dst >= 0 && dst < capacity(), "destination " << dst << " outside " << capacity());
    const Fate fate = draw(dst, tag);
    if (fate.drop) return Request(detail::completedRequest(dst, data.size()));
    if (fate.duplicate) {
      keep(sendOnce());
      release(dst);
    }
    if (fate.due && later(dst, tag, data, dtype, *fate.due, fate.held))
      return Request(detail::completedRequest(dst, data.size()));
    Request r = sendOnce();
    release(dst);
    return r;
  }

  // Queues a copy of the message for the worker; false once the wrapper is
  // closing (the caller then sends it now, and the inner transport decides).
  bool later(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype, Clock::time_point due,
             bool held) {
    GOSSAMER_ENFORCE(data.size() % dtypeSize(dtype) == 0,
                     "payload of " << data.size() << " bytes is not a whole number of " << dtypeName(dtype));
    Later m{dst, tag, std::vector<std::byte>(data.begin(), data.end()), dtype, held};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return false;
      const Key key{due, nextSeq_++};
      queue_.emplace(key, std::move(m));
      if (held) held_[static_cast<std::size_t>(dst)].push_back(key);
    }
    wake_.notify_one();
    return true;
  }

  // A message to `dst` went out: the ones held for it go next.
  void release(int dst) {
    if (options_.reorderProbability <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    releaseLocked(dst);
  }
  void releaseLocked(int dst) {
    auto& held = held_[static_cast<std::size_t>(dst)];
    if (held.empty()) return;
    const auto now = Clock::now() + linkDelay_[static_cast<std::size_t>(dst)];  // still crosses its link
    for (const Key& key : held) {
      auto node = queue_.extract(key);
      node.key().first = now;
      queue_.insert(std::move(node));
    }
    held.clear();
    wake_.notify_one();
  }

  // Keeps the request of a send the wrapper made itself until it settles:
  // dropping a pending send's handle would cancel it.
  void keep(Request r) {
    if (!r.valid()) return;
    std::lock_guard<std::mutex> lock(mu_);
    while (!extra_.empty() && settled(extra_.front())) extra_.pop_front();
    extra_.push_back(std::move(r));
  }
  static bool settled(Request& r) {
    try {
      return r.test();
    } catch (const std::exception&) {
      return true;  // failed: nothing more to keep it for
    }
  }
  void dropExtra() {
    std::deque<Request> gone;
    std::lock_guard<std::mutex> lock(mu_);
    gone.swap(extra_);
  }

  // The worker: sends each queued message when it is due, all of them at once
  // once the wrapper is closing, and returns when the queue is empty then.
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (queue_.empty()) {
        if (stopping_) return;
        wake_.wait(lock);
        continue;
      }
      auto first = queue_.begin();
      if (!stopping_ && first->first.first > Clock::now()) {
        wake_.wait_until(lock, first->first.first);
        continue;
      }
      Later m = std::move(first->second);
      if (m.held) std::erase(held_[static_cast<std::size_t>(m.dst)], first->first);
      queue_.erase(first);
      lock.unlock();
      Request r;
      try {
        r = inner_->isend(m.dst, m.tag, m.data, m.dtype);
      } catch (const std::exception&) {
        // The peer left or the transport closed: the message is lost (its
        // sender saw a completed send long ago).
      }
      keep(std::move(r));
      lock.lock();
      if (!m.held) releaseLocked(m.dst);
    }
  }

  // Stops taking messages for later; `deliver`: the worker sends what is
  // queued at once, else it is dropped.
  void halt(bool deliver) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (!deliver) {
        queue_.clear();
        for (auto& h : held_) h.clear();
      }
    }
    wake_.notify_all();
  }
  void joinWorker() {
    std::lock_guard<std::mutex> lock(joinMu_);
    if (worker_.joinable()) worker_.join();
  }

  std::unique_ptr<Transport> inner_;
  FaultOptions options_;
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, std::uint64_t> sent_;  // (dst, op) -> sends so far, under mu_
  FaultStats stats_;
  std::deque<Request> extra_;  // the wrapper's own sends (duplicates, later ones) still in flight
  std::chrono::steady_clock::time_point start_;
  std::vector<int> group_;                  // each rank's partition group (-1: in none)
  std::map<Key, Later> queue_;              // messages for the worker, by due time
  std::vector<std::vector<Key>> held_;      // per destination: its held messages' keys in queue_
  std::vector<Clock::duration> linkDelay_;  // per destination: its link's propagation delay
  std::uint64_t nextSeq_ = 0;
  bool stopping_ = false;         // close() or abort() began: nothing more is queued
  std::condition_variable wake_;  // queue_ or stopping_ changed
  std::mutex joinMu_;
  std::thread worker_;  // sends queue_ (only with delays or reordering on)
};

}  // namespace

std::vector<std::vector<int>> parsePartition(const std::string& text, int worldSize) {
  std::vector<std::vector<int>> groups;
  if (text.empty()) return groups;
  const auto bad = [&](const std::string& why) { throw InvalidArgument("partition '" + text + "': " + why); };
  std::vector<bool> seen(static_cast<std::size_t>(worldSize), false);
  std::stringstream all(text);
  std::string group;
  while (std::getline(all, group, '|')) {
    std::vector<int> g;
    std::stringstream ranks(group);
    std::string r;
    while (std::getline(ranks, r, ',')) {
      int v = -1;
      std::size_t used = 0;
      try {
        v = std::stoi(r, &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      if (used == 0 || used != r.size()) bad("'" + r + "' is not a rank");
      if (v < 0 || v >= worldSize)
        bad("rank " + std::to_string(v) + " is not in the job (" + rankRangeText(worldSize) + ")");
      if (seen[static_cast<std::size_t>(v)]) bad("rank " + std::to_string(v) + " is in two groups");
      seen[static_cast<std::size_t>(v)] = true;
      g.push_back(v);
    }
    if (g.empty()) bad("an empty group");
    groups.push_back(std::move(g));
  }
  if (groups.size() < 2) bad("needs at least two groups separated by '|'");
  return groups;
}

std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const FaultOptions& o) {
  GOSSAMER_ENFORCE(inner != nullptr, "no transport to wrap");
  GOSSAMER_ENFORCE(o.dropProbability >= 0 && o.dropProbability < 1,
                   "drop probability " << o.dropProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.duplicateProbability >= 0 && o.duplicateProbability < 1,
                   "duplicate probability " << o.duplicateProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(
      o.partitionStartSeconds >= 0 && o.partitionSeconds >= 0,
      "partition start " << o.partitionStartSeconds << " s, length " << o.partitionSeconds << " s");
  GOSSAMER_ENFORCE(o.delayProbability >= 0 && o.delayProbability <= 1,
                   "delay probability " << o.delayProbability << " outside [0, 1]");
  GOSSAMER_ENFORCE(o.reorderProbability >= 0 && o.reorderProbability < 1,
                   "reorder probability " << o.reorderProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.delaySeconds > 0 && o.delaySeconds <= 3600,
                   "delay_seconds " << o.delaySeconds << " outside (0, 3600]");
  // (At most 1e9 s, some 30 years: a steady_clock duration holds it.)
  GOSSAMER_ENFORCE(o.partitionClockOffsetSeconds >= 0 && o.partitionClockOffsetSeconds <= 1e9,
                   "partition clock offset " << o.partitionClockOffsetSeconds << " s must be in [0, 1e9]");
  std::vector<int> grouped(static_cast<std::size_t>(inner->capacity()), 0);
  for (const auto& g : o.partitionGroups)
    for (int r : g) {
      GOSSAMER_ENFORCE(r >= 0 && r < inner->capacity(),
                       "partition rank " << r << " outside " << rankRangeText(inner->capacity()));
      GOSSAMER_ENFORCE(grouped[static_cast<std::size_t>(r)]++ == 0,
                       "partition rank " << r << " in two groups");
    }
  GOSSAMER_ENFORCE(
      o.linkDelaySeconds.empty() || o.linkDelaySeconds.size() == static_cast<std::size_t>(inner->worldSize()),
      o.linkDelaySeconds.size() << " link delays for a world of " << inner->worldSize() << " ranks");
  for (double d : o.linkDelaySeconds)
    GOSSAMER_ENFORCE(d >= 0 && d <= 3600 && std::isfinite(d), "link delay " << d << " s outside [0, 3600]");
  return std::make_unique<FaultyTransport>(std::move(inner), o);
}

std::optional<FaultStats> faultStats(const Transport& t) {
  const auto* f = dynamic_cast<const FaultyTransport*>(&t);
  if (f == nullptr) return std::nullopt;
  return f->faults();
}

namespace {
/// faults.partition, when the injector is on: groups of this job's ranks.
std::optional<ConfigIssue> checkPartition(const Config& c) {
  if (!c.get<bool>("faults.enabled")) return std::nullopt;
  try {
    if (!parsePartition(c.get<std::string>("faults.partition"), c.worldSize()).empty() &&
        c.get<double>("faults.partition_seconds") == 0)
      return ConfigIssue{"faults.partition_seconds",
                         "is 0 while faults.partition names groups: the partition would never be in force"};
  } catch (const InvalidArgument& e) {
    return ConfigIssue{"faults.partition", e.what()};
  }
  return std::nullopt;
}
}  // namespace

void registerWith(Registry& registry) {
  registry.addTransportService(
      "faults", "fault injection on every rank's sends, for tests and demos (off unless enabled)",
      KeySet()
          .boolean("enabled", false, "wrap the transport with the fault injector")
          .real("drop", 0.0, {0.0, true, 1.0, false}, "probability that a send is lost")
          .real("duplicate", 0.0, {0.0, true, 1.0, false}, "probability that a send arrives twice")
          .integer("seed", -1, -1, INT_MAX, "the injector's seed (-1: the run's seed)")
          .text("messages", "all", {"all", "gossip"},
                "which sends are touched: all, or only the gossip algorithms' (the collectives assume a "
                "reliable transport)")
          .text("partition", "", {},
                "groups cut off from each other for a while, e.g. \"0,1,2,3|4,5,6,7\" (empty: none); every "
                "send between groups is dropped")
          .real("partition_start_seconds", 0.0, {0.0, true, 1e9, true},
                "when the partition starts, seconds after rank 0's transport was made (the same moment on "
                "every rank: rank 0 shares its clock through the rendezvous)")
          .real("partition_seconds", 0.0, {0.0, true, 1e9, true}, "how long the partition lasts, seconds")
          .rule(checkPartition)
          .real("delay", 0.0, {0.0, true, 1.0, true},
                "probability that a send goes out late, after a time drawn uniformly from [0, delay_seconds]")
          .real("delay_seconds", 0.1, {0.0, false, 3600.0, true},
                "the longest delay, and the longest a reordered send is held, seconds")
          .real("reorder", 0.0, {0.0, true, 1.0, false},
                "probability that a send (not delayed) is held back until a later send to the same rank that "
                "is "
                "not held has gone out (at most delay_seconds), so that it arrives after it")
          .boolean(
              "island_delay", false,
              "every send to a rank of another island (network.islands) waits network.between_delay_ms "
              "first, in order: the propagation delay of a long link, which tc cannot add without netem"),
      [](const TransportContext& ctx, std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
        const Config& c = ctx.config;
        if (!c.get<bool>("faults.enabled")) return inner;
        FaultOptions o;
        o.dropProbability = c.get<double>("faults.drop");
        o.duplicateProbability = c.get<double>("faults.duplicate");
        const int seed = c.get<int>("faults.seed");
        o.seed = seed < 0 ? c.seed() : static_cast<std::uint64_t>(seed);
        o.gossipOnly = c.get<std::string>("faults.messages") == "gossip";
        try {
          o.partitionGroups = parsePartition(c.get<std::string>("faults.partition"), c.worldSize());
        } catch (const InvalidArgument& e) {
          throw ConfigError(c.sourceFile, 0, "faults.partition", e.what());
        }
        o.partitionStartSeconds = c.get<double>("faults.partition_start_seconds");
        o.partitionSeconds = c.get<double>("faults.partition_seconds");
        if (!o.partitionGroups.empty())
          o.partitionClockOffsetSeconds =
              partitionClockOffset(ctx, c.get<double>("transport.timeout_seconds"));
        o.delayProbability = c.get<double>("faults.delay");
        o.delaySeconds = c.get<double>("faults.delay_seconds");
        o.reorderProbability = c.get<double>("faults.reorder");
        if (c.get<bool>("faults.island_delay")) {
          const NetworkLayout net = NetworkLayout::from(c);
          for (int d = 0; d < c.worldSize(); ++d) o.linkDelaySeconds.push_back(net.delaySeconds(ctx.rank, d));
        }
        return wrap(std::move(inner), o);
      });
}

}  // namespace gossamer::faults
