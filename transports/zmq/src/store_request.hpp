// The rendezvous server's reading of a request (zmq_store.cpp), apart from
// its socket so that it can be tested and fuzzed on bytes alone
// (tests/fuzz/fuzz_store.cpp). A request arrives on the ROUTER socket as
// frames: the envelope (client id, REQ's request id, ...) up to an empty
// delimiter frame, then [op "set"|"claim"|"get"][key][value (set, claim)].
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "gossamer/store.hpp"

namespace gossamer::zmq::store_wire {

/// Largest value the store keeps, bytes: every store's (1 MiB).
inline constexpr std::size_t kMaxStoreValueBytes = gossamer::kMaxStoreValueBytes;
/// Most bytes the rendezvous server keeps in all: 256 MiB, far above a
/// job's needs (a few small keys per rank). Each entry counts its key, its
/// value and kStoreEntryOverheadBytes for the map's node and the strings'
/// headers, so that many tiny keys are bounded too.
inline constexpr std::size_t kMaxStoreBytes = std::size_t{256} << 20;
/// What one entry costs the server besides its key's and value's bytes.
inline constexpr std::size_t kStoreEntryOverheadBytes = 128;

/// A request's body, checked.
struct StoreRequest {
  enum class Op { kSet, kGet, kClaim };
  Op op = Op::kGet;
  std::string key;    ///< A valid store key (checkStoreKey).
  std::string value;  ///< kSet, kClaim: at most kMaxStoreValueBytes bytes.
};

/// The number of envelope frames of a request, the empty delimiter included:
/// the index of the first empty frame + 1. 0 when the request has no
/// envelope (its first frame is empty, or none is): nobody can be answered,
/// and the server drops it.
/// @param frames the request's frames, in order.
std::size_t storeEnvelopeFrames(std::span<const std::string_view> frames) noexcept;

/// Reads the body of a request (the frames after the envelope).
/// @throws InvalidArgument for fewer than two frames ("malformed request"), a
///         key checkStoreKey refuses, a set or claim value above
///         kMaxStoreValueBytes, or an operation other than set or claim with
///         three frames or get with two
///         ("unknown operation"); the server answers ["error"][message].
StoreRequest parseStoreRequest(std::span<const std::string_view> body);

}  // namespace gossamer::zmq::store_wire
