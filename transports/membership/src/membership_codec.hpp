// The membership service's control messages on the wire (membership.cpp),
// apart from the service so that they can be tested and fuzzed on bytes alone
// (tests/fuzz/fuzz_membership.cpp).
//
//  offset size field
//   0      4   magic 0x524D4247 ("GBMR")
//   4      1   kind (Kind)
//   5      3   incarnation of the sender's process (little-endian): the wall
//              clock's tenths of a second when its membership service
//              started, modulo 2^24, so that a process started in place of a
//              failed rank is newer than its predecessor (serial-number
//              arithmetic)
//   8      8   sender's view number
//  16      4   sender's view coordinator (-1: the first view)
//  20      4   arg: suspected rank (kSuspect), lowest survivor at resumeStep (kView, -1: none)
//  24      8   value: completed steps (kState), resume step (kView)
//  32      4   count: ranks that follow (kView: the members; kState: the
//              peers outside the view that asked the sender to join it), else 0
//  36      4   flags (kState, kView; else 0): bit 0 = evaluating (kState:
//              the sender recovers from a collective of its own between
//              steps; kView: a survivor at the resume step did); bit 1 =
//              side (kState: the sender joins from a side of a partition
//              that trained on its own; kView: such joiners are merged)
//  40      8   fewest completed steps among the survivors (kView)
//  48      4   coordinator of the view it was decided from (kView; -1: the
//              first view), else -1
//  52      4   view numbers skipped (kView): the view it was decided from is
//              numbered 1 + skipped less (a side of a partition numbers its
//              next view above a smaller side's so that this one joins it),
//              else 0
//  56   4 x count  ranks, ascending global ranks (kView, kState)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gossamer::membership::codec {

inline constexpr std::uint32_t kMagic = 0x524D4247u;
/// Bytes of a message before its members.
inline constexpr std::size_t kHeaderBytes = 56;
/// View numbers at or above this are refused (decode): 2^62.
inline constexpr std::uint64_t kMaxViewNumber = std::uint64_t{1} << 62;
/// Incarnations are below this (24 bits, bytes 5-7).
inline constexpr std::uint32_t kIncarnationLimit = std::uint32_t{1} << 24;

enum class Kind : std::uint8_t { kHeartbeat = 1, kSuspect = 2, kState = 3, kView = 4, kLeave = 5, kJoin = 6 };

/// One control message (see the layout above).
struct Message {
  Kind kind = Kind::kHeartbeat;
  std::uint32_t incarnation = 0;  // the sender process's (< kIncarnationLimit)
  std::uint64_t viewNumber = 0;
  int viewCoordinator = -1;
  int arg = -1;
  std::uint64_t value = 0;
  std::uint64_t fewest = 0;   // kView
  std::uint32_t flags = 0;    // bit 0: evaluating, bit 1: side (kState) / merged (kView)
  int fromCoordinator = -1;   // kView: coordinator of the view it was decided from
  std::uint32_t skipped = 0;  // kView: numbers skipped since the view it was decided from
  std::vector<int> members;   // kView
};

/// The bytes of `m`: kHeaderBytes + 4 per member (of m.incarnation, its
/// low 24 bits).
std::vector<std::byte> encode(const Message& m);

/// Reads a message from rank `peer` of a job of `worldSize` ranks, checking
/// every field before use: the length (kHeaderBytes + 4 * count), magic,
/// kind, coordinator, arg and the previous view's coordinator in
/// [-1, worldSize), coordinator -1 exactly for view number 0 (the first view), flags <= 3
/// (kState, kView) or 0, fewest <= value, skipped < view number (kView) or 0,
/// count <= worldSize and > 0 exactly for kView, members ascending in
/// [0, worldSize). The members are read (and stored) only once count is
/// within worldSize and matches the length: a message allocates at most
/// worldSize of them, whatever count it claims.
/// @throws ProtocolError naming `peer` and the byte offset of the bad field.
Message decode(std::span<const std::byte> b, int peer, int worldSize);

}  // namespace gossamer::membership::codec
