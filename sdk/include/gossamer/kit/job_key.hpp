// The job's key: a secret drawn once per rendezvous and read from it by every
// process of the job, so that a process can prove in its hello that it read
// the rendezvous. A network transport that takes back restarted ranks and
// lets new ones join (zmq, socket) sends, in each hello, its incarnation (a
// number drawn at random when the transport starts, telling a restarted
// process apart from the one it replaces) and proof() of it; a hello whose
// proof does not verify() comes from outside the job and replaces no peer.
//
// The proof is HMAC-SHA-512-256 (libsodium's crypto_auth) under the 32-byte
// key of incarnation (u64, little-endian) || rank (u32, little-endian) ||
// endpoint (the address the hello asks peers to reach it at, as sent; none
// for a hello that names no address), so that a hello's address cannot be
// changed on the way.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gossamer/kit/wire.hpp"

namespace gossamer {

class Store;

/// The job's 32-byte MAC key; see the file comment.
class JobKey {
 public:
  /// Bytes of the key.
  static constexpr std::size_t kBytes = 32;

  /// Reads the key stored under `key` in `store` (64 hex digits). With
  /// `draw` (one process of the job: rank 0) it first draws a fresh key and
  /// stores it when there is none yet (Store::claim where the store can: of
  /// two processes that draw at once, one key wins); a rank 0 started in
  /// place of a failed one finds the job's key there and keeps it. The others wait for it up to
  /// `timeoutSeconds` (seconds).
  /// @param who the reader, for messages ("zmq rank 3").
  /// @throws TimeoutError if the key does not appear in time; Error if the
  ///         stored value is not 64 hex digits or libsodium cannot start.
  static JobKey fromStore(Store& store, const std::string& key, bool draw, double timeoutSeconds,
                          const std::string& who);

  /// The proof a process of rank `rank` and incarnation `incarnation` sends in
  /// its hello (32 bytes), covering the `endpoint` that hello names (bytes as
  /// sent; empty when it names none). @throws InternalError on a JobKey
  /// that fromStore did not make (default-constructed).
  std::array<std::byte, kHelloProofBytes> proof(std::uint64_t incarnation, int rank,
                                                std::string_view endpoint = {}) const;
  /// True if `proof` is proof(incarnation, rank, endpoint) (compared in
  /// constant time); false on a JobKey that fromStore did not make.
  bool verify(std::uint64_t incarnation, int rank, const std::array<std::byte, kHelloProofBytes>& proof,
              std::string_view endpoint = {}) const;

 private:
  std::array<unsigned char, kBytes> key_{};
  bool loaded_ = false;  ///< Read by fromStore (a default-constructed key verifies nothing).
};

/// A new incarnation: 64 random bits (std::random_device), odd so never 0
/// (0 means "not known yet").
std::uint64_t drawIncarnation();

/// Whether a transport of `rank` starts once its job already runs (a rank
/// that joins, rank >= worldSize, or a process started in place of a failed
/// rank): then it reaches out to every rank published in the store instead
/// of the start-up's fixed pattern. `runningKey` is set by every rank once
/// its set-up is done (markJobRunning). Look before publishing this rank's
/// address: no rank's set-up ends before every rank of the job has
/// published, so no rank of the start-up can see the key.
bool joinsRunningJob(Store& store, const std::string& runningKey, int rank, int worldSize);
/// Sets `runningKey` once this rank's set-up is done (see joinsRunningJob).
void markJobRunning(Store& store, const std::string& runningKey);

}  // namespace gossamer
