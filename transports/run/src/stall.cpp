// The stall report (stall.hpp): a watcher thread over this rank's pending
// sends and receives, and the per-peer byte counters of the run metrics.
// Nothing goes on the wire; each request costs one clock read and one push
// under a mutex, and the watcher drops settled requests as it goes.
#include "gossamer/transports/stall.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/background.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/log.hpp"

namespace gossamer::stall {

namespace {

using Clock = std::chrono::steady_clock;

struct Watched {
  std::weak_ptr<detail::RequestState> state;
  std::vector<int> peers;
  bool send;
  Tag tag;
};

class StallWatch final : public Transport {
 public:
  StallWatch(std::unique_ptr<Transport> inner, Options o)
      : inner_(std::move(inner)),
        threshold_(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.thresholdSeconds))),
        onStall_(std::move(o.onStall)),
        onPause_(std::move(o.onPause)),
        meter_(std::move(o.meter)) {
    if (o.thresholdSeconds > 0) watcher_ = std::thread([this] { watch(); });
  }

  ~StallWatch() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  int rank() const override { return inner_->rank(); }
  int worldSize() const override { return inner_->worldSize(); }
  int capacity() const override { return inner_->capacity(); }
  std::string name() const override { return inner_->name(); }
  double timeoutSeconds() const override { return inner_->timeoutSeconds(); }
  TransportCapabilities capabilities() const noexcept override { return inner_->capabilities(); }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    auto r = inner_->isend(dst, tag, data, dtype);
    if (meter_) meter_->sent(dst, data.size());
    return track(std::move(r), {dst}, true, tag);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    auto r = inner_->isendBorrowed(dst, tag, data, dtype, checksum);
    if (meter_) meter_->sent(dst, data.size());
    return track(std::move(r), {dst}, true, tag);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return track(metered(inner_->irecv(sources, tag, buffer), tag),
                 std::vector<int>(sources.begin(), sources.end()), false, tag);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    return track(metered(inner_->irecvView(source, tag, buffer), tag), {source}, false, tag);
  }
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return inner_->discardArrived(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return inner_->peerFailure(rank); }
  void close() override { inner_->close(); }
  void abort() override { inner_->abort(); }
  TransportStats stats() const override { return inner_->stats(); }

 private:
  Request metered(Request r, const Tag& tag) {
    if (meter_) {
      if (auto state = r.watch().lock()) state->attachMeter(meter_, tag);
    }
    return r;
  }

  Request track(Request r, std::vector<int> peers, bool send, const Tag& tag) {
    if (!watcher_.joinable()) return r;  // counting only
    // The membership service's own traffic waits for the next event by design.
    if (tag.op == Op::kMembership || tag.op == Op::kControl) return r;
    auto state = r.watch();
    if (state.expired()) return r;
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Most requests settle in the order they were posted: dropping settled
      // ones from the front keeps the list about as long as what is in flight.
      for (int i = 0; i < 2 && !watched_.empty(); ++i) {
        auto front = watched_.front().state.lock();
        if (front && front->pending()) break;
        watched_.pop_front();
      }
      watched_.push_back(Watched{std::move(state), std::move(peers), send, tag});
    }
    return r;
  }

  // Time this process did not run (SIGSTOP, a debugger, CPU starvation)
  // during [from, to): a wait across it is not the peer's fault.
  Clock::duration pausedWithin(Clock::time_point from, Clock::time_point to) const {
    Clock::duration out{};
    for (const auto& [a, b] : pauses_) {
      const auto lo = std::max(a, from), hi = std::min(b, to);
      if (hi > lo) out += hi - lo;
    }
    return out;
  }

  // The watcher's report of a pause of `seconds` that ended at `wallNow`
  // (Unix seconds): onPause_, or a warning.
  void reportPause(double seconds, double wallNow) {
    if (onPause_)
      onPause_(seconds, wallNow - seconds);
    else
      log(LogLevel::kWarning, describePause(inner_->rank(), seconds));
  }

  // The watcher thread. A turn that throws (out of memory for a report's
  // record, say) is lost, not the watching, nor the process, which an
  // exception leaving the thread would terminate.
  void watch() noexcept {
    const auto period = std::max<Clock::duration>(threshold_ / 4, std::chrono::milliseconds(10));
    const auto lateBy = std::max<Clock::duration>(threshold_ / 2, std::chrono::milliseconds(200));
    auto lastWake = Clock::now();
    bool stopping = false;
    // (Each turn begins with its wait: a failed one is not repeated at once.)
    while (!stopping) survivePass("stall watch", [&] { stopping = turn(period, lateBy, lastWake); });
  }

  // One turn of the watcher: waits `period` (or for close), notes a pause
  // (a wake later than `lateBy` after the last one, at `lastWake`) and
  // reports the waits past the threshold. Returns true once closing.
  bool turn(Clock::duration period, Clock::duration lateBy, Clock::time_point& lastWake) {
    std::unique_lock<std::mutex> lk(mu_);
    if (stop_) return true;
    cv_.wait_for(lk, period, [this] { return stop_; });
    const auto now = Clock::now();
    const double wallNow =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::optional<double> pausedSeconds;
    if (now - lastWake > period + lateBy) {
      // This watcher woke far too late: the whole process was not running.
      pauses_.emplace_back(lastWake + period, now);
      if (pauses_.size() > 16) pauses_.pop_front();
      pausedSeconds = std::chrono::duration<double>(now - lastWake - period).count();
    }
    lastWake = now;
    if (stop_) {
      // Closing: a pause that ends just before (a process stopped, then
      // finishing at once when it resumes) is still reported.
      lk.unlock();
      if (pausedSeconds) survivePass("stall watch", [&] { reportPause(*pausedSeconds, wallNow); });
      return true;
    }
    std::vector<StallReport> due;
    std::deque<Watched> keep;
    for (auto& w : watched_) {
      auto s = w.state.lock();
      if (!s || !s->pending()) continue;  // settled (or gone): no longer watched
      // Pending is not stalled: only a wait that has lasted the threshold is.
      const std::int64_t first = s->firstWaitNanos.load(std::memory_order_relaxed);
      const auto began =
          Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(first)));
      const auto waited = first == 0 ? Clock::duration::zero() : now - began - pausedWithin(began, now);
      if (waited < threshold_) {
        keep.push_back(w);  // (a copy: watched_ stays whole until the swap, whatever throws)
        continue;
      }
      StallReport r;
      r.rank = inner_->rank();
      r.peers = w.peers;
      r.send = w.send;
      r.tag = w.tag;
      r.waitedSeconds = std::chrono::duration<double>(waited).count();
      r.sinceUnixSeconds = wallNow - r.waitedSeconds;
      if (meter_)
        for (int p : r.peers)
          r.lastFromPeers.push_back(p >= 0 && p < meter_->worldSize() ? meter_->lastFrom(p)
                                                                      : LinkMeter::Last{});
      due.push_back(std::move(r));  // reported once, then dropped
    }
    watched_.swap(keep);
    lk.unlock();
    if (pausedSeconds) survivePass("stall watch", [&] { reportPause(*pausedSeconds, wallNow); });
    for (const auto& r : due) {
      // (A report that fails, a metrics subscriber out of memory, say, is
      // lost; the others still go out.)
      survivePass("stall watch", [&] {
        if (onStall_)
          onStall_(r);
        else
          log(LogLevel::kWarning, describe(r));
      });
    }
    return false;
  }

  std::unique_ptr<Transport> inner_;
  Clock::duration threshold_;
  std::function<void(const StallReport&)> onStall_;
  std::function<void(double, double)> onPause_;
  std::shared_ptr<LinkMeter> meter_;
  std::deque<std::pair<Clock::time_point, Clock::time_point>> pauses_;  // the watcher's own
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Watched> watched_;
  bool stop_ = false;
  std::thread watcher_;  // started by the constructor when there is a threshold
};

}  // namespace

std::string describe(const StallReport& r) {
  std::ostringstream os;
  char since[32] = "?";
  const auto whole = static_cast<std::time_t>(r.sinceUnixSeconds);
  std::tm utc{};
  if (gmtime_r(&whole, &utc) != nullptr) {
    char hms[16];
    std::strftime(hms, sizeof hms, "%H:%M:%S", &utc);
    std::snprintf(since, sizeof since, "%s.%03d", hms,
                  static_cast<int>((r.sinceUnixSeconds - static_cast<double>(whole)) * 1000));
  }
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "stall: rank " << r.rank << " has waited " << r.waitedSeconds << " s (since " << since << " UTC) for "
     << (r.send ? "a send to rank "
                : (r.peers.size() == 1 ? "a receive from rank " : "a receive from ranks "));
  for (std::size_t i = 0; i < r.peers.size(); ++i) os << (i ? ", " : "") << r.peers[i];
  os << ": " << opName(r.tag.op) << ", step " << r.tag.step << ", segment " << r.tag.segment;
  for (std::size_t i = 0; i < r.lastFromPeers.size() && i < r.peers.size(); ++i) {
    const auto& last = r.lastFromPeers[i];
    os << "; rank " << r.peers[i];
    if (!last.any) {
      os << " has sent this rank nothing yet";
      continue;
    }
    os << "'s last message came " << last.secondsAgo << " s ago (" << opName(last.tag.op) << ", step "
       << last.tag.step << ", segment " << last.tag.segment << ")";
  }
  return os.str();
}

std::string describePause(int rank, double seconds) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "stall watch: rank " << rank << " itself did not run for " << seconds
     << " s (stopped, or starved of CPU); waits across that time do not count against its peers";
  return os.str();
}

std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, Options options) {
  GOSSAMER_ENFORCE(inner != nullptr, "no transport to watch");
  GOSSAMER_ENFORCE(options.thresholdSeconds >= 0 && options.thresholdSeconds < 1e9,
                   "stall threshold " << options.thresholdSeconds << " s");
  GOSSAMER_ENFORCE(options.thresholdSeconds > 0 || options.meter != nullptr,
                   "stall threshold 0 s and no meter: nothing to do");
  return std::make_unique<StallWatch>(std::move(inner), std::move(options));
}

}  // namespace gossamer::stall
