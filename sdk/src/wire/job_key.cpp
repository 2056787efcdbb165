// The job's key and the hello proof (kit/job_key.hpp).
#include "gossamer/kit/job_key.hpp"

#include <sodium.h>

#include <cstring>
#include <random>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/detail/byte_io.hpp"
#include "gossamer/store.hpp"

namespace gossamer {

JobKey JobKey::fromStore(Store& store, const std::string& key, bool draw, double timeoutSeconds,
                         const std::string& who) {
  static_assert(kBytes == crypto_auth_KEYBYTES && kHelloProofBytes == crypto_auth_BYTES);
  if (sodium_init() < 0) throw Error(who + ": libsodium cannot be initialised");
  if (draw && !store.tryGet(key)) {
    std::array<unsigned char, kBytes> k{};
    crypto_auth_keygen(k.data());
    std::array<char, 2 * kBytes + 1> hex{};
    sodium_bin2hex(hex.data(), hex.size(), k.data(), k.size());
    sodium_memzero(k.data(), k.size());
    // Claimed, so that of two processes that draw at once (a rank 0
    // restarted while the first still runs) one key wins and both read it.
    bool claims = true;
    try {
      store.claim(key, hex.data());
    } catch (const TimeoutError&) {
      // Not a store that cannot claim: one that did not answer, and may
      // still apply the claim. Setting the key now could replace a key
      // another rank 0 claimed, and the ranks would hold two.
      sodium_memzero(hex.data(), hex.size());
      throw;
    } catch (const Error&) {
      // A store that cannot claim (the default), or a directory that takes
      // no hard link (FileStore's claim): set it, the one draw's key.
      claims = false;
    }
    if (!claims) store.set(key, hex.data());
    sodium_memzero(hex.data(), hex.size());
  }
  const std::string hex = store.get(key, timeoutSeconds);
  JobKey out;
  out.loaded_ = true;
  std::size_t got = 0;
  if (hex.size() != 2 * kBytes ||
      sodium_hex2bin(out.key_.data(), out.key_.size(), hex.data(), hex.size(), nullptr, &got, nullptr) != 0 ||
      got != kBytes)
    throw Error(who + ": the rendezvous's " + key + " is not " + std::to_string(2 * kBytes) + " hex digits");
  return out;
}

std::array<std::byte, kHelloProofBytes> JobKey::proof(std::uint64_t incarnation, int rank,
                                                      std::string_view endpoint) const {
  GOSSAMER_CHECK(loaded_, "a hello proof from a job key that was never read (JobKey::fromStore)");
  std::vector<std::byte> m(12 + endpoint.size());
  detail::put(m, 0, incarnation);
  detail::put(m, 8, static_cast<std::uint32_t>(rank));
  // An empty endpoint (the socket transport's hello) may have a null data(): memcpy's source must not be
  // null even for no bytes.
  if (!endpoint.empty()) std::memcpy(m.data() + 12, endpoint.data(), endpoint.size());
  std::array<std::byte, kHelloProofBytes> out{};
  crypto_auth(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(m.data()),
              m.size(), key_.data());
  return out;
}

bool JobKey::verify(std::uint64_t incarnation, int rank, const std::array<std::byte, kHelloProofBytes>& proof,
                    std::string_view endpoint) const {
  if (!loaded_) return false;  // a key never read proves nothing (it is all zeros)
  const auto expected = this->proof(incarnation, rank, endpoint);
  return sodium_memcmp(expected.data(), proof.data(), kHelloProofBytes) == 0;
}

bool joinsRunningJob(Store& store, const std::string& runningKey, int rank, int worldSize) {
  return rank >= worldSize || store.tryGet(runningKey).has_value();
}

void markJobRunning(Store& store, const std::string& runningKey) { store.set(runningKey, "1"); }

std::uint64_t drawIncarnation() {
  std::random_device rd;
  return (std::uint64_t{rd()} | (std::uint64_t{rd()} << 32)) | 1;
}

}  // namespace gossamer
