// PeerLifecycle: the peer table, goodbye bookkeeping, failure verdicts, grace
// timers, argument checks and statistics of the network transports
// (gossamer/kit/peer_lifecycle.hpp).
#include "gossamer/kit/peer_lifecycle.hpp"
#include "gossamer/kit/clock.hpp"

#include <utility>

#include "gossamer/errors.hpp"

namespace gossamer {

PeerLifecycle::PeerLifecycle(std::string transport, int rank, int worldSize, Mailbox& box)
    : transport_(std::move(transport)), rank_(rank), worldSize_(worldSize), box_(box) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize, "rank " << rank << " outside world size " << worldSize);
  peers_.resize(static_cast<std::size_t>(worldSize));
}

void PeerLifecycle::checkRank(int peer) const {
  GOSSAMER_CHECK(peer >= 0 && peer < worldSize_,
                 "peer rank " << peer << " outside world size " << worldSize_);
}

void PeerLifecycle::checkSend(int dst) const {
  GOSSAMER_ENFORCE(dst >= 0 && dst < worldSize_,
                   "destination rank " << dst << " outside world size " << worldSize_);
  checkOpen("isend");
}

void PeerLifecycle::checkOpen(const char* operation) const {
  if (closed_)
    throw Cancelled(std::string(operation) + " on a closed transport (rank " + std::to_string(rank_) + ")");
}

bool PeerLifecycle::setGoneLocked(int peer, State state, std::exception_ptr why) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.state != State::kHere) return false;
  p.state = state;
  p.why = std::move(why);
  return true;
}

void PeerLifecycle::onBye(int peer, std::uint32_t segment) {
  checkRank(peer);
  auto why = std::make_exception_ptr(
      PeerFailure(peer, segment == kByeAfterError ? kStoppedAfterError : "peer closed its transport"));
  bool first;
  std::lock_guard<std::mutex> verdict(verdictMu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    // A bye after an error is a failure (failedVerdict); a clean one is not.
    first = setGoneLocked(peer, segment == kByeAfterError ? State::kFailed : State::kLeft, why);
  }
  // Outside mu_ (a leaf lock): the Mailbox completes requests under its own.
  if (first) box_.peerGone(peer, std::move(why));
  cv_.notify_all();
}

void PeerLifecycle::onByeAck(int peer) {
  checkRank(peer);
  {
    std::lock_guard<std::mutex> lk(mu_);
    peers_[static_cast<std::size_t>(peer)].acked = true;
  }
  cv_.notify_all();
}

bool PeerLifecycle::settled(int peer) const {
  checkRank(peer);
  if (peer == rank_) return true;
  std::lock_guard<std::mutex> lk(mu_);
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  return p.acked || p.state != State::kHere;
}

bool PeerLifecycle::leaving(int peer) const {
  checkRank(peer);
  if (peer == rank_) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return peers_[static_cast<std::size_t>(peer)].state != State::kHere;
}

bool PeerLifecycle::acked(int peer) const {
  checkRank(peer);
  std::lock_guard<std::mutex> lk(mu_);
  return peers_[static_cast<std::size_t>(peer)].acked;
}

bool PeerLifecycle::waitSettled(double seconds, const std::function<bool(int)>& alsoSettled) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_until(lk, deadlineAfter<std::chrono::steady_clock>(seconds), [&] {
    for (int p = 0; p < worldSize_; ++p) {
      if (p == rank_) continue;
      const auto& peer = peers_[static_cast<std::size_t>(p)];
      if (peer.acked || peer.state != State::kHere) continue;
      if (alsoSettled && alsoSettled(p)) continue;
      return false;
    }
    return true;
  });
}

void PeerLifecycle::notify() {
  { std::lock_guard<std::mutex> lk(mu_); }  // a waiter between its check and its sleep sees the change
  cv_.notify_all();
}

bool PeerLifecycle::declareFailed(int peer, std::exception_ptr error) {
  checkRank(peer);
  GOSSAMER_CHECK(error, "declareFailed without an error");
  std::lock_guard<std::mutex> verdict(verdictMu_);
  return declareFailedVerdictLocked(peer, std::move(error));
}

bool PeerLifecycle::declareFailedVerdictLocked(int peer, std::exception_ptr error) {
  bool first;
  {
    std::lock_guard<std::mutex> lk(mu_);
    first = setGoneLocked(peer, State::kFailed, error);
  }
  if (first) box_.peerGone(peer, std::move(error));
  cv_.notify_all();
  return first;
}

bool PeerLifecycle::declareFailed(int peer, const std::string& why) {
  return declareFailed(peer, std::make_exception_ptr(PeerFailure(peer, why)));
}

std::exception_ptr PeerLifecycle::failure(int peer) const {
  checkRank(peer);
  std::lock_guard<std::mutex> lk(mu_);
  return peers_[static_cast<std::size_t>(peer)].why;
}

std::exception_ptr PeerLifecycle::failedVerdict(int peer) const {
  if (peer < 0 || peer >= worldSize_) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  return p.state == State::kFailed ? p.why : nullptr;
}

void PeerLifecycle::throwGone(int peer, const std::string& fallback) const {
  if (auto why = failure(peer)) std::rethrow_exception(why);
  throw PeerFailure(peer, fallback);
}

void PeerLifecycle::revive(int peer) {
  checkRank(peer);
  std::lock_guard<std::mutex> verdict(verdictMu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    peers_[static_cast<std::size_t>(peer)] = Peer{};
  }
  box_.revive(peer);
  cv_.notify_all();
}

void PeerLifecycle::noteLost(int peer) {
  checkRank(peer);
  std::lock_guard<std::mutex> lk(mu_);
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.state == State::kHere && !p.lostAt) p.lostAt = Clock::now();
}

std::vector<int> PeerLifecycle::expireLost(double graceSeconds) {
  std::vector<int> expired;
  const auto now = Clock::now();
  // Chosen and declared under one verdict: a revive cannot come between.
  std::lock_guard<std::mutex> verdict(verdictMu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int p = 0; p < worldSize_; ++p) {
      const auto& peer = peers_[static_cast<std::size_t>(p)];
      if (peer.state != State::kHere || !peer.lostAt) continue;
      if (std::chrono::duration<double>(now - *peer.lostAt).count() >= graceSeconds) expired.push_back(p);
    }
  }
  for (int p : expired)
    declareFailedVerdictLocked(p, std::make_exception_ptr(PeerFailure(p, kLostWithoutBye)));
  return expired;
}

TransportStats PeerLifecycle::stats() const noexcept {
  TransportStats s;
  s.bytesSent = bytesSent_.load(std::memory_order_relaxed);
  s.messagesSent = messagesSent_.load(std::memory_order_relaxed);
  s.bytesReceived = bytesReceived_.load(std::memory_order_relaxed);
  s.messagesReceived = messagesReceived_.load(std::memory_order_relaxed);
  s.messagesPulled = messagesPulled_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace gossamer
