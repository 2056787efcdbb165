#include "gossamer/kit/single_copy.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"

namespace gossamer::single_copy {

namespace {

// Read by peers at set-up: can they read this process's memory?
const std::uint64_t kProbeValue = 0x5052424553534f47ull;  // "GOSSEBRP"

}  // namespace

std::array<std::byte, kPullDescriptorBytes> encode(const PullDescriptor& d) noexcept {
  std::array<std::byte, kPullDescriptorBytes> out{};
  std::memcpy(out.data(), &d.address, 8);
  std::memcpy(out.data() + 8, &d.bytes, 8);
  std::memcpy(out.data() + 16, &d.crc, 4);
  std::memcpy(out.data() + 20, &d.pid, 4);
  std::memcpy(out.data() + 24, &d.ticket, 8);
  return out;
}

PullDescriptor decode(std::span<const std::byte> payload, int peer) {
  if (payload.size() != kPullDescriptorBytes)
    throw ProtocolError(peer, kFrameHeaderBytes,
                        "pull frame payload is " + std::to_string(payload.size()) + " bytes, expected " +
                            std::to_string(kPullDescriptorBytes));
  PullDescriptor d;
  std::memcpy(&d.address, payload.data(), 8);
  std::memcpy(&d.bytes, payload.data() + 8, 8);
  std::memcpy(&d.crc, payload.data() + 16, 4);
  std::memcpy(&d.pid, payload.data() + 20, 4);
  std::memcpy(&d.ticket, payload.data() + 24, 8);
  if (d.bytes > kMaxPayloadBytes)
    throw ProtocolError(peer, kFrameHeaderBytes + 8,
                        "pull of " + std::to_string(d.bytes) + " bytes exceeds the limit");
  if (d.ticket > Tag::kMaxStep)
    throw ProtocolError(peer, kFrameHeaderBytes + 24,
                        "pull ticket " + std::to_string(d.ticket) + " out of range");
  return d;
}

int pull(const PullDescriptor& d, std::span<std::byte> dst) noexcept {
  if (dst.size() < d.bytes) return EINVAL;
  std::size_t got = 0;
  while (got < d.bytes) {
    iovec local{dst.data() + got, d.bytes - got};
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(d.address + got)), d.bytes - got};
    const ssize_t r = ::process_vm_readv(static_cast<pid_t>(d.pid), &local, 1, &remote, 1, 0);
    if (r < 0) return errno;
    if (r == 0) return EFAULT;
    got += static_cast<std::size_t>(r);
  }
  return 0;
}

Peers probe(int rank, int worldSize, Store& store, const std::string& keyPrefix, double timeoutSeconds) {
  using Clock = std::chrono::steady_clock;
  Peers peers;
  peers.pids.assign(static_cast<std::size_t>(worldSize), 0);
  peers.pullTo.assign(static_cast<std::size_t>(worldSize), false);
  peers.pids[static_cast<std::size_t>(rank)] = static_cast<std::uint32_t>(::getpid());
  store.set(
      keyPrefix + std::to_string(rank) + "/probe",
      std::to_string(::getpid()) + ":" + std::to_string(reinterpret_cast<std::uintptr_t>(&kProbeValue)));
  const auto deadline = deadlineAfter<Clock>(timeoutSeconds);
  auto left = [&] { return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()); };
  std::string canRead(static_cast<std::size_t>(worldSize), '0');
  for (int p = 0; p < worldSize; ++p) {
    if (p == rank) continue;
    const std::string v = store.get(keyPrefix + std::to_string(p) + "/probe", left());
    const auto colon = v.find(':');
    std::uint64_t pid = 0, address = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument(v);
      pid = std::stoull(v.substr(0, colon));
      address = std::stoull(v.substr(colon + 1));
    } catch (const std::exception&) {
      throw ProtocolError(p, 0, "bad single-copy probe in the store: '" + v + "'");
    }
    peers.pids[static_cast<std::size_t>(p)] = static_cast<std::uint32_t>(pid);
    std::uint64_t value = 0;
    PullDescriptor d;
    d.address = address;
    d.bytes = sizeof value;
    d.pid = static_cast<std::uint32_t>(pid);
    if (pull(d, std::as_writable_bytes(std::span<std::uint64_t>(&value, 1))) == 0 && value == kProbeValue)
      canRead[static_cast<std::size_t>(p)] = '1';
  }
  store.set(keyPrefix + std::to_string(rank) + "/pull", canRead);
  for (int p = 0; p < worldSize; ++p) {
    if (p == rank) continue;
    const std::string v = store.get(keyPrefix + std::to_string(p) + "/pull", left());
    peers.pullTo[static_cast<std::size_t>(p)] =
        v.size() == static_cast<std::size_t>(worldSize) && v[static_cast<std::size_t>(rank)] == '1';
  }
  return peers;
}

std::uint64_t Ledger::add(int dst, std::shared_ptr<detail::RequestState> state, std::size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) throw Cancelled("isend on a closed transport");
  const std::uint64_t ticket = next_++ & Tag::kMaxStep;
  entries_[ticket] = Entry{dst, std::move(state), bytes};
  return ticket;
}

void Ledger::forget(std::uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    entries_.erase(ticket);
  }
  cv_.notify_all();
}

bool Ledger::done(int peer, std::uint64_t ticket, bool failed) {
  Entry e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const auto it = entries_.find(ticket);
    if (it == entries_.end() || it->second.dst != peer) return false;
    e = std::move(it->second);
    entries_.erase(it);
  }
  if (failed)
    e.state->fail(std::make_exception_ptr(
        PeerFailure(peer, "it could not take the message from this process's memory (see its log)")));
  else
    e.state->complete(peer, e.bytes);
  cv_.notify_all();
  return true;
}

template <typename Pick>
void Ledger::failWhere(Pick pick, const std::exception_ptr& error, bool closing) {
  std::vector<Entry> failed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closing) closed_ = true;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (pick(it->second)) {
        failed.push_back(std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& e : failed) e.state->fail(error);
  cv_.notify_all();
}

void Ledger::failOwedBy(int peer, const std::exception_ptr& error) {
  failWhere([peer](const Entry& e) { return e.dst == peer; }, error, false);
}

void Ledger::close(const std::exception_ptr& error) {
  failWhere([](const Entry&) { return true; }, error, true);
}

std::optional<std::uint64_t> Ledger::ticketOf(const detail::RequestState& state) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [ticket, e] : entries_)
    if (e.state.get() == &state) return ticket;
  return std::nullopt;
}

int Ledger::destinationOf(std::uint64_t ticket) const {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = entries_.find(ticket);
  return it == entries_.end() ? -1 : it->second.dst;
}

bool Ledger::waitSettled(std::uint64_t ticket, double seconds) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_until(lk, deadlineAfter<std::chrono::steady_clock>(seconds),
                        [&] { return entries_.count(ticket) == 0; });
}

}  // namespace gossamer::single_copy
