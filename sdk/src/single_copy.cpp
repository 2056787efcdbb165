#include "gossamer/single_copy.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "gossamer/errors.hpp"

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
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSeconds));
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

}  // namespace gossamer::single_copy
