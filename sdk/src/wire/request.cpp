// Request handles and the Mailbox that matches messages with receives.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"
#include "gossamer/kit/mailbox.hpp"
#include "gossamer/membership.hpp"
#include "gossamer/metrics.hpp"

namespace gossamer {

namespace detail {

void addThreadWait(std::int64_t nanos) noexcept;  // metrics.cpp

namespace {
int renamed(const RequestState& s, int peer) {
  if (!s.peerNames || peer < 0 || peer >= static_cast<int>(s.peerNames->size())) return peer;
  return (*s.peerNames)[static_cast<std::size_t>(peer)];
}

// Caller holds s.mu and has just completed the receive.
void countLocked(const RequestState& s) {
  if (s.meter) s.meter->received(renamed(s, s.peer), s.bytes, s.meterTag);
}
}  // namespace

void RequestState::complete(int peerRank, std::size_t n, std::optional<std::uint32_t> payloadChecksum) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (status != Status::kPending) return;
    peer = peerRank;
    bytes = n;
    checksum = payloadChecksum;
    status = Status::kDone;
    countLocked(*this);
  }
  cv.notify_all();
}

void RequestState::handOver(int peerRank, std::shared_ptr<const void> owner, std::span<const std::byte> bytes,
                            std::optional<std::uint32_t> payloadChecksum) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (status != Status::kPending) return;
    peer = peerRank;
    this->bytes = bytes.size();
    checksum = payloadChecksum;
    viewOwner = std::move(owner);
    view = bytes;
    status = Status::kDone;
    countLocked(*this);
  }
  cv.notify_all();
}

void RequestState::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (status != Status::kPending) return;
    error = std::move(e);
    status = Status::kFailed;
  }
  cv.notify_all();
}

bool RequestState::pending() {
  std::lock_guard<std::mutex> lk(mu);
  return status == Status::kPending;
}

void RequestState::cancelIfPending() {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (status != Status::kPending) return;
    if (settleError) {
      error = std::move(settleError);
      status = Status::kFailed;
    } else {
      status = Status::kCancelled;
    }
  }
  cv.notify_all();
}

void RequestState::attachMeter(std::shared_ptr<LinkMeter> m, const Tag& tag) {
  std::lock_guard<std::mutex> lk(mu);
  meterTag = tag.packed();
  if (status == Status::kPending) {
    meter = std::move(m);
  } else if (status == Status::kDone && m) {
    m->received(renamed(*this, peer), bytes, meterTag);
  }
}

void checkSendArguments(int dst, int worldSize, std::size_t bytes, DType dtype) {
  GOSSAMER_ENFORCE(dst >= 0 && dst < worldSize,
                   "destination rank " << dst << " outside world size " << worldSize);
  GOSSAMER_ENFORCE(bytes % dtypeSize(dtype) == 0, "payload is not a whole number of " << dtypeName(dtype));
}

std::exception_ptr closedPeerFailure(int rank, bool afterError) {
  return std::make_exception_ptr(
      PeerFailure(rank, afterError ? "it stopped after an error of its own" : "peer closed its transport"));
}

std::shared_ptr<RequestState> completedRequest(int peer, std::size_t bytes) {
  auto s = std::make_shared<RequestState>();
  s->peer = peer;
  s->bytes = bytes;
  s->status = RequestState::Status::kDone;
  return s;
}

namespace {
// Rethrows s.error; a PeerFailure or ProtocolError of an inner transport
// (peerNames set) is thrown again naming the outer rank. The membership
// service's ViewChanged and Expelled go as they are: they name global ranks,
// and the Session tells them from other failures by their type.
[[noreturn]] void rethrowFailure(const RequestState& s) {
  if (!s.peerNames) std::rethrow_exception(s.error);
  try {
    std::rethrow_exception(s.error);
  } catch (const ViewChanged&) {
    throw;
  } catch (const Expelled&) {
    throw;
  } catch (const PeerFailure& e) {
    throw PeerFailure(renamed(s, e.peer()),
                      "as rank " + std::to_string(e.peer()) + " of an inner transport: " + e.what());
  } catch (const ProtocolError& e) {
    throw ProtocolError(renamed(s, e.peer()), e.offset(),
                        "as rank " + std::to_string(e.peer()) + " of an inner transport: " + e.what(),
                        e.fault());
  }
}

// Caller holds s.mu. Returns true when done; throws the failure.
bool settledLocked(RequestState& s) {
  switch (s.status) {
    case RequestState::Status::kPending:
      return false;
    case RequestState::Status::kDone:
      return true;
    case RequestState::Status::kFailed:
      rethrowFailure(s);
    case RequestState::Status::kCancelled:
      throw Cancelled("request was cancelled: " + s.what);
  }
  return false;
}
}  // namespace

}  // namespace detail

namespace {
// While it lives, the calling thread counts as waiting (threadWaitSeconds),
// on the SDK's clock (a simulator's time in a simulation).
class CountedWait {
 public:
  CountedWait() = default;
  CountedWait(const CountedWait&) = delete;
  CountedWait& operator=(const CountedWait&) = delete;
  ~CountedWait() {
    detail::addThreadWait(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
  }

 private:
  Clock::time_point start_ = Clock::now();
};
}  // namespace

bool Request::waitFor(double timeoutSeconds) {
  GOSSAMER_ENFORCE(state_, "wait on an empty Request");
  GOSSAMER_ENFORCE(timeoutSeconds >= 0, "negative timeout " << timeoutSeconds);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = deadlineAfter<std::chrono::steady_clock>(timeoutSeconds, start);
  if (state_->firstWaitNanos.load(std::memory_order_relaxed) == 0)
    state_->firstWaitNanos.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
        std::memory_order_relaxed);
  // The time this thread is blocked here counts as waiting.
  const CountedWait waited;
  if (state_->engine && state_->engine->keepsTime()) {
    // A simulator's engine: the timeout is its time; a failure throws here.
    state_->engine->waitFor(*state_, timeoutSeconds);
    std::lock_guard<std::mutex> lk(state_->mu);
    return detail::settledLocked(*state_);
  }
  if (state_->engine) state_->engine->waitUntil(*state_, deadline);
  std::unique_lock<std::mutex> lk(state_->mu);
  while (!detail::settledLocked(*state_)) {
    if (state_->cv.wait_until(lk, deadline) == std::cv_status::timeout) return detail::settledLocked(*state_);
  }
  return true;
}

int Request::waitAny(std::span<Request> requests, double timeoutSeconds) {
  GOSSAMER_ENFORCE(timeoutSeconds >= 0, "negative timeout " << timeoutSeconds);
  std::vector<detail::RequestState*> states;
  std::vector<int> index;  // of each state's request
  states.reserve(requests.size());
  bool oneEngine = true;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto* s = requests[i].state_.get();
    if (s == nullptr) continue;
    if (!states.empty() && s->engine != states.front()->engine) oneEngine = false;
    states.push_back(s);
    index.push_back(static_cast<int>(i));
  }
  const auto settled = [&]() -> int {
    for (std::size_t k = 0; k < states.size(); ++k) {
      std::lock_guard<std::mutex> lk(states[k]->mu);
      if (states[k]->status != detail::RequestState::Status::kPending) return index[k];
    }
    return -1;
  };
  if (states.empty()) return -1;
  const CountedWait waited;
  auto* engine = states.front()->engine.get();
  if (oneEngine && engine != nullptr && engine->keepsTime()) {
    engine->waitForAny(states, timeoutSeconds);
    return settled();
  }
  const auto deadline = deadlineAfter<std::chrono::steady_clock>(timeoutSeconds);
  constexpr auto kSlice = std::chrono::microseconds(200);
  for (;;) {
    for (std::size_t k = 0; k < states.size(); ++k)  // each engine once (a transport's requests share one)
      if (states[k]->engine && (k == 0 || states[k]->engine != states[k - 1]->engine))
        states[k]->engine->poke();
    if (const int k = settled(); k >= 0) return k;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return -1;
    // A slice on the first pending request: it wakes this thread at once if
    // that one settles, any other is seen at the slice's end.
    const auto until = std::min(deadline, now + kSlice);
    const auto pending = std::find_if(states.begin(), states.end(), [](detail::RequestState* s) {
      std::lock_guard<std::mutex> lk(s->mu);
      return s->status == detail::RequestState::Status::kPending;
    });
    if (pending == states.end()) continue;  // one settled meanwhile
    auto* first = *pending;
    if (first->engine) first->engine->waitUntil(*first, until);
    std::unique_lock<std::mutex> lk(first->mu);
    first->cv.wait_until(lk, until, [&] { return first->status != detail::RequestState::Status::kPending; });
  }
}

void Request::wait(double timeoutSeconds) {
  if (!waitFor(timeoutSeconds)) throwTimedOut(timeoutSeconds);
}

void Request::throwTimedOut(double timeoutSeconds) const {
  std::string what = state_->what;
  if (state_->peerNames) {
    // The ranks in `what` are an inner transport's: say which job ranks they are.
    what += " (ranks of an inner transport; its ranks 0..";
    what += std::to_string(state_->peerNames->size() - 1) + " are job ranks";
    for (int r : *state_->peerNames) what += " " + std::to_string(r);
    what += ")";
  }
  std::string message = "timed out after ";
  message += std::to_string(timeoutSeconds);
  message += " s waiting for ";
  message += what;
  throw TimeoutError(message);
}

void Request::wait(double timeoutSeconds, double sliceSeconds, const std::function<void()>& check) {
  GOSSAMER_ENFORCE(state_, "wait on an empty Request");
  GOSSAMER_ENFORCE(sliceSeconds > 0, "slice of " << sliceSeconds << " s");
  if (timeoutSeconds <= sliceSeconds || (state_->engine && state_->engine->keepsTime()) || !check) {
    wait(timeoutSeconds);
    return;
  }
  const auto deadline = deadlineAfter<std::chrono::steady_clock>(timeoutSeconds);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= sliceSeconds) break;
    if (waitFor(sliceSeconds)) return;
    check();
  }
  // The last piece: its timeout's TimeoutError names the whole wait's.
  const double left =
      std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
  if (!waitFor(left)) throwTimedOut(timeoutSeconds);
}

bool Request::test() {
  GOSSAMER_ENFORCE(state_, "test on an empty Request");
  if (state_->engine) state_->engine->poke();
  std::lock_guard<std::mutex> lk(state_->mu);
  return detail::settledLocked(*state_);
}

void Request::settle(std::exception_ptr error) noexcept {
  if (!state_) return;
  // An engine may be writing into this receive's buffer: exclude it first.
  std::unique_lock<std::mutex> engineLock;
  if (state_->engine) {
    {
      std::lock_guard<std::mutex> lk(state_->mu);
      if (state_->status != detail::RequestState::Status::kPending) return;
      state_->settleError = error;  // (an engine that settles the request itself uses it)
    }
    engineLock = std::unique_lock<std::mutex>(state_->engine->exclusive);
    state_->engine->cancelLocked(*state_);
  }
  if (error)
    state_->fail(std::move(error));
  else
    state_->cancelIfPending();
}

void Request::cancel() noexcept { settle(nullptr); }

void Request::fail(std::exception_ptr error) noexcept {
  settle(error ? std::move(error) : std::make_exception_ptr(Cancelled("request failed")));
}

void Request::fail(const std::weak_ptr<detail::RequestState>& watched, std::exception_ptr error) noexcept {
  auto state = watched.lock();
  if (!state) return;
  Request r(std::move(state));
  r.fail(std::move(error));  // settled now: r's destructor cancels nothing
}

int Request::peer() const {
  GOSSAMER_ENFORCE(state_, "peer() on an empty Request");
  std::lock_guard<std::mutex> lk(state_->mu);
  return detail::renamed(*state_, state_->peer);
}

std::size_t Request::bytes() const {
  GOSSAMER_ENFORCE(state_, "bytes() on an empty Request");
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->bytes;
}

std::optional<std::uint32_t> Request::payloadChecksum() const {
  GOSSAMER_ENFORCE(state_, "payloadChecksum() on an empty Request");
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->status == detail::RequestState::Status::kDone ? state_->checksum : std::nullopt;
}

std::span<const std::byte> Request::received(std::span<const std::byte> buffer) const {
  GOSSAMER_ENFORCE(state_, "received() on an empty Request");
  std::lock_guard<std::mutex> lk(state_->mu);
  if (state_->status != detail::RequestState::Status::kDone) return {};
  if (state_->viewOwner) return state_->view;
  GOSSAMER_ENFORCE(state_->bytes <= buffer.size(), "received(): a buffer of " << buffer.size()
                                                                              << " bytes for a receive of "
                                                                              << state_->bytes);
  return buffer.first(state_->bytes);
}

void waitAll(std::span<Request> requests, double timeoutSeconds) {
  GOSSAMER_ENFORCE(timeoutSeconds >= 0, "negative timeout " << timeoutSeconds);
  const auto deadline = deadlineAfter<std::chrono::steady_clock>(timeoutSeconds);
  for (auto& r : requests) {
    const double left =
        std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
    r.wait(left);
  }
}

// ---------------------------------------------------------------------------

namespace {
int checkedWorldSize(int worldSize) {
  if (worldSize < 1)
    throw InvalidArgument("mailbox of world size " + std::to_string(worldSize) + ": at least 1");
  return worldSize;
}
}  // namespace

// NOLINTNEXTLINE(bugprone-throw-keyword-missing): gone_ holds exception_ptrs, none is thrown here
Mailbox::Mailbox(int worldSize)
    : worldSize_(checkedWorldSize(worldSize)), gone_(static_cast<std::size_t>(worldSize_)) {}

namespace {
// The error of a receive whose buffer (`capacity` bytes) is too small for a
// message of `bytes` bytes from `source`.
std::exception_ptr tooLong(int source, std::size_t bytes, const std::string& what, std::size_t capacity) {
  return std::make_exception_ptr(ProtocolError(source, kFrameHeaderBytes + capacity,
                                               "message of " + std::to_string(bytes) + " bytes for " + what +
                                                   " does not fit the receive buffer of " +
                                                   std::to_string(capacity) + " bytes"));
}
}  // namespace

bool Mailbox::Claimed::fits(int source, std::size_t bytes) const {
  if (bytes <= buffer.size()) return true;
  state->fail(tooLong(source, bytes, state->what, buffer.size()));
  return false;
}

bool Mailbox::fill(const Posted& p, int source, const InboundPayload& payload) {
  // Caller holds mu_. Lock the request so cancel() cannot interleave with the copy.
  auto& s = *p.state;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.status != detail::RequestState::Status::kPending) return false;
    if (payload.bytes.size() > p.buffer.size()) {
      s.error = tooLong(source, payload.bytes.size(), s.what, p.buffer.size());
      s.status = detail::RequestState::Status::kFailed;
    } else {
      if (p.handOver && payload.owner && !payload.bytes.empty()) {
        s.viewOwner = payload.owner;
        s.view = payload.bytes;
      } else if (!payload.bytes.empty()) {
        std::memcpy(p.buffer.data(), payload.bytes.data(), payload.bytes.size());
      }
      s.peer = source;
      s.bytes = payload.bytes.size();
      s.checksum = payload.checksum;
      s.status = detail::RequestState::Status::kDone;
      detail::countLocked(s);
    }
  }
  s.cv.notify_all();
  return true;
}

bool Mailbox::deliver(int source, const Tag& tag, InboundPayload payload) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return false;
  auto it = posted_.find(tag.packed());
  if (it != posted_.end()) {
    auto& lst = it->second;
    for (auto p = lst.begin(); p != lst.end();) {
      if (!p->state->pending()) {  // cancelled meanwhile: drop lazily
        p = lst.erase(p);
        continue;
      }
      if (std::find(p->sources.begin(), p->sources.end(), source) != p->sources.end()) {
        // cancel() may have won since isPending(): then the message goes on
        // to the next match, or is queued, never lost.
        if (!fill(*p, source, payload)) {
          p = lst.erase(p);
          continue;
        }
        lst.erase(p);
        if (lst.empty()) posted_.erase(it);
        return true;
      }
      ++p;
    }
    if (lst.empty()) posted_.erase(it);
  }
  arrived_[tag.packed()].push_back(Arrived{source, std::move(payload)});
  ++arrivedCount_;
  return true;
}

Request Mailbox::post(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer,
                      std::shared_ptr<detail::ProgressEngine> engine, bool handOver) {
  GOSSAMER_ENFORCE(!sources.empty(), "irecv needs at least one source rank");
  for (int s : sources)
    GOSSAMER_ENFORCE(s >= 0 && s < worldSize_, "source rank " << s << " outside world size " << worldSize_);
  auto state = std::make_shared<detail::RequestState>();
  state->engine = std::move(engine);
  Posted p{std::vector<int>(sources.begin(), sources.end()), buffer, state, handOver};
  {
    std::ostringstream what;
    what << "receive from rank(s) {";
    for (std::size_t i = 0; i < p.sources.size(); ++i) what << (i ? "," : "") << p.sources[i];
    what << "} " << toString(tag);
    state->what = what.str();
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) {
    state->status = detail::RequestState::Status::kCancelled;
    return Request(state);
  }
  auto it = arrived_.find(tag.packed());
  if (it != arrived_.end()) {
    auto& q = it->second;
    for (auto m = q.begin(); m != q.end(); ++m) {
      if (std::find(p.sources.begin(), p.sources.end(), m->source) != p.sources.end()) {
        (void)fill(p, m->source, m->payload);  // a fresh request: still pending
        q.erase(m);
        --arrivedCount_;
        if (q.empty()) arrived_.erase(it);
        return Request(state);
      }
    }
  }
  if (allGoneLocked(p.sources)) {
    state->error = goneErrorLocked(p.sources);
    state->status = detail::RequestState::Status::kFailed;
    return Request(state);
  }
  posted_[tag.packed()].push_back(std::move(p));
  return Request(state);
}

Mailbox::Claimed Mailbox::claim(int source, const Tag& tag, bool singleSourceOnly) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return {};
  auto it = posted_.find(tag.packed());
  if (it == posted_.end()) return {};
  auto& lst = it->second;
  Claimed out;
  for (auto p = lst.begin(); p != lst.end();) {
    if (!p->state->pending()) {
      p = lst.erase(p);
      continue;
    }
    if (std::find(p->sources.begin(), p->sources.end(), source) != p->sources.end()) {
      if (singleSourceOnly && p->sources.size() != 1) break;  // it stays first in line
      out = Claimed{std::move(p->state), p->buffer, p->handOver};
      lst.erase(p);
      break;
    }
    ++p;
  }
  if (lst.empty()) posted_.erase(it);
  return out;
}

bool Mailbox::allGoneLocked(const std::vector<int>& sources) const {
  return std::all_of(sources.begin(), sources.end(),
                     [&](int s) { return static_cast<bool>(gone_[static_cast<std::size_t>(s)]); });
}

std::exception_ptr Mailbox::goneErrorLocked(const std::vector<int>& sources) const {
  return gone_[static_cast<std::size_t>(sources.front())];
}

void Mailbox::peerGone(int rank, std::exception_ptr why) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize_, "rank " << rank);
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = gone_[static_cast<std::size_t>(rank)];
  if (slot) return;
  slot = std::move(why);
  for (auto it = posted_.begin(); it != posted_.end();) {
    auto& lst = it->second;
    for (auto p = lst.begin(); p != lst.end();) {
      if (std::find(p->sources.begin(), p->sources.end(), rank) != p->sources.end() &&
          allGoneLocked(p->sources)) {
        p->state->fail(goneErrorLocked(p->sources));
        p = lst.erase(p);
      } else {
        ++p;
      }
    }
    it = lst.empty() ? posted_.erase(it) : std::next(it);
  }
}

void Mailbox::revive(int rank) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize_, "rank " << rank);
  std::lock_guard<std::mutex> lk(mu_);
  gone_[static_cast<std::size_t>(rank)] = nullptr;
  for (auto it = arrived_.begin(); it != arrived_.end();) {
    auto& q = it->second;
    const auto before = q.size();
    std::erase_if(q, [&](const Arrived& a) { return a.source == rank; });
    arrivedCount_ -= before - q.size();
    it = q.empty() ? arrived_.erase(it) : std::next(it);
  }
}

std::size_t Mailbox::discard(const std::function<bool(const Tag&)>& stale) {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t dropped = 0;
  for (auto it = arrived_.begin(); it != arrived_.end();) {
    // The queue's key is the packed tag (Tag::packed).
    const std::uint64_t k = it->first;
    const Tag tag{static_cast<Op>(k >> 56), static_cast<std::uint32_t>((k >> 40) & Tag::kMaxSegment),
                  k & Tag::kMaxStep};
    if (stale(tag)) {
      dropped += it->second.size();
      it = arrived_.erase(it);
    } else {
      ++it;
    }
  }
  arrivedCount_ -= dropped;
  return dropped;
}

bool Mailbox::isGone(int rank) const {
  std::lock_guard<std::mutex> lk(mu_);
  return rank >= 0 && rank < worldSize_ && gone_[static_cast<std::size_t>(rank)];
}

void Mailbox::close() {
  std::lock_guard<std::mutex> lk(mu_);
  closed_ = true;
  for (auto& [tag, lst] : posted_) {
    for (auto& p : lst) p.state->cancelIfPending();
  }
  posted_.clear();
  arrived_.clear();
  arrivedCount_ = 0;
}

std::size_t Mailbox::unexpectedCount() const {
  std::lock_guard<std::mutex> lk(mu_);
  return arrivedCount_;
}

}  // namespace gossamer
