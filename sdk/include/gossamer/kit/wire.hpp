// Tags, element types and the wire frame shared by every transport.
//
// Frame layout (little-endian, 48-byte header, then `payloadBytes` of payload):
//
//   off size field
//     0   4  magic            0x524D5347 ("GSMR")
//     4   2  version          kProtocolVersion
//     6   1  kind             FrameKind (data, bye, bye-ack, pull, pull-done)
//     7   1  dtype            DType of the payload elements
//     8   4  source           rank of the sender
//    12   1  op               Tag::op  (which collective / algorithm)
//    13   1  reserved         must be 0
//    14   2  segment          Tag::segment
//    16   8  step             Tag::step (< 2^40)
//    24   8  count            number of elements
//    32   8  payloadBytes     == count * dtypeSize(dtype), <= kMaxPayloadBytes
//    40   4  checksum         CRC-32C of header (this field as 0) + payload
//    44   4  reserved         must be 0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gossamer/half.hpp"

namespace gossamer {

/// Element type of a payload. Transports move bytes; a frame's dtype and
/// count describe its payload, and the receiver checks that they agree with
/// its length. A receive matches a frame by tag and length, not by dtype:
/// the ranks of a collective agree on the element type (as in MPI).
enum class DType : std::uint8_t {
  kBytes = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,   ///< IEEE 754 binary16 (gossamer::float16).
  kBfloat16 = 6,  ///< bfloat16 (gossamer::bfloat16).
};

/// Size of one element of `t`, bytes. @throws InvalidArgument on an unknown value.
std::size_t dtypeSize(DType t);

/// Human-readable name ("float32", ...).
const char* dtypeName(DType t);

/// Maps C++ element types to DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<std::byte> {
  static constexpr DType value = DType::kBytes;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::kInt32;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::kInt64;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<float16> {
  static constexpr DType value = DType::kFloat16;  // NOLINT(readability-identifier-naming): trait
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::kBfloat16;  // NOLINT(readability-identifier-naming): trait
};

/// Which part of the SDK a message belongs to: keeps the traffic of
/// collectives, gossip and user code apart.
enum class Op : std::uint8_t {
  kUser = 0,
  kAllreduce = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kGossip = 4,
  kControl = 5,
  kMembership = 6,  ///< heartbeats and view changes (transports/membership)
};
/// The highest Op value a frame may carry.
constexpr Op kLastOp = Op::kMembership;
/// "allreduce", "broadcast", "barrier", "gossip", "control", "membership", or
/// "user message" for Op::kUser.
const char* opName(Op op) noexcept;

/// Message tag: (op, segment, step) packed into 64 bits (8 + 16 + 40 bits).
/// Receives match on the whole tag.
struct Tag {
  static constexpr std::uint64_t kMaxStep = (std::uint64_t{1} << 40) - 1;
  static constexpr std::uint32_t kMaxSegment = 0xFFFF;

  Op op = Op::kUser;
  std::uint32_t segment = 0;  ///< 0 .. kMaxSegment
  std::uint64_t step = 0;     ///< 0 .. kMaxStep

  /// Builds a tag. @throws InvalidArgument when segment or step is out of range.
  static Tag make(Op op, std::uint64_t step, std::uint32_t segment = 0);
  std::uint64_t packed() const noexcept {
    return (std::uint64_t(op) << 56) | (std::uint64_t(segment) << 40) | step;
  }
  friend bool operator==(const Tag&, const Tag&) = default;
};

std::string toString(const Tag& tag);

constexpr std::uint32_t kFrameMagic = 0x524D5347u;
constexpr std::uint16_t kProtocolVersion =
    6;  // 2: kDataTrailing; 3: kHello; 4: Hello::proof; 5: it covers the endpoint; 6: libfabric's
        // announcement carries a checksum of its own
constexpr std::size_t kFrameHeaderBytes = 48;
/// Largest payload a frame may announce: 1 GiB. Protects receivers from
/// allocating from an unchecked length.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 30;

/// Frame kinds.
/// Frame kinds: data; bye (the sender is closing: sent after its last data
/// frame); bye-ack (the receiver of a bye has read everything before it).
/// pull (single-copy on one host: the payload is a PullDescriptor naming the
/// sender's memory, which the receiver reads itself); pull-done (the receiver
/// has read it: Tag::step is the descriptor's ticket, and the sender may reuse
/// its buffer). Only the ipc protocols of the socket and zmq transports send
/// the last two (single_copy.hpp). hello (zmq only): see Hello.
/// data-trailing (stream sockets only): a data frame whose header checksum
/// covers the header alone and whose payload is followed by a 4-byte trailer,
/// the CRC-32C of the payload (little-endian). The sender checksums each
/// window of the payload just before writing it, and the receiver each piece
/// just after reading it, while the bytes are in cache: one pass over memory
/// at each end is saved against a checksum that must precede the payload.
enum class FrameKind : std::uint8_t {
  kData = 1,
  kBye = 2,
  kByeAck = 3,
  kPull = 4,
  kPullDone = 5,
  kDataTrailing = 6,
  kHello = 7
};

/// Payload of a hello frame (zmq: the first frame on every connection):
/// [incarnation: u64][proof: kHelloProofBytes][endpoint: the sender's
/// address, 1 to kMaxHelloEndpoint bytes]. The incarnation is drawn at random
/// when a transport starts, so a process started in place of a failed rank
/// is told apart from the one it replaces, and reached at its own address.
/// The proof is a MAC of (incarnation, rank) under the job's key, which only
/// processes that read the job's rendezvous hold: a hello without it does
/// not replace a live peer (zmq_transport.cpp).
constexpr std::size_t kHelloProofBytes = 32;
struct Hello {
  std::uint64_t incarnation = 0;
  std::array<std::byte, kHelloProofBytes> proof{};
  std::string endpoint;
};
/// Longest endpoint a hello may carry, bytes.
constexpr std::size_t kMaxHelloEndpoint = 1024;
/// The payload of a hello frame. @throws InvalidArgument for an empty or too long endpoint.
std::vector<std::byte> encodeHello(const Hello& hello);
/// Parses a hello frame's payload from `peer`.
/// @throws ProtocolError (peer, byte offset) for a payload too short or too long.
Hello decodeHello(std::span<const std::byte> payload, int peer);

/// Bytes of the checksum trailer after a kDataTrailing frame's payload.
constexpr std::size_t kFrameTrailerBytes = 4;

/// Payload of a pull frame (32 bytes, little-endian): where the message is in
/// the sender's address space, its length and its CRC-32C.
struct PullDescriptor {
  std::uint64_t address = 0;  ///< Sender's virtual address of the first byte.
  std::uint64_t bytes = 0;    ///< Message length, <= kMaxPayloadBytes.
  std::uint32_t crc = 0;      ///< crc32c() of the message, or 0 when the job does not checksum pulls.
  std::uint32_t pid = 0;      ///< Sender's process id.
  std::uint64_t ticket = 0;   ///< Echoed in the pull-done frame's Tag::step (< 2^40).
};
constexpr std::size_t kPullDescriptorBytes = 32;

/// CRC-32C (Castagnoli) of `data`, as in iSCSI/ext4: the frame checksum.
/// Uses the SSE4.2 crc32 instruction on x86-64 CPUs that have it.
std::uint32_t crc32c(std::span<const std::byte> data);

/// crc32c(a ++ b) from crc32c(a), crc32c(b) and the length of b in bytes
/// (GF(2) shift of crc32c(a) over |b| bytes: about 1 us for any length).
std::uint32_t crc32cCombine(std::uint32_t crcA, std::uint32_t crcB, std::uint64_t lengthB) noexcept;

/// Copies n bytes from src to dst (not overlapping) and returns crc32c() of
/// them, in one pass over src: each 16 KiB block is checksummed right after
/// it is copied, from the L1 cache. For senders that copy a payload anyway.
std::uint32_t copyAndCrc32c(std::byte* dst, const std::byte* src, std::size_t n) noexcept;

/// CRC-32C computed over pieces: Crc32c().update(a).update(b).value() equals
/// crc32c(a ++ b) for byte spans a and b of any lengths (empty included).
class Crc32c {
 public:
  /// Adds `data` (any length) to the running checksum.
  Crc32c& update(std::span<const std::byte> data) noexcept;
  /// Adds `n` bytes whose own CRC-32C is `crcOfNext` (crc32cCombine), without
  /// reading them.
  Crc32c& append(std::uint32_t crcOfNext, std::uint64_t n) noexcept;
  /// The CRC-32C of everything added so far (0 for nothing).
  std::uint32_t value() const noexcept { return ~state_; }

 private:
  std::uint32_t state_ = ~0u;
};

namespace detail {
/// The table-driven CRC-32C (same values; for CPUs without SSE4.2, and tests).
std::uint32_t crc32cPortable(std::span<const std::byte> data);
}  // namespace detail

/// Decoded frame header.
struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  DType dtype = DType::kBytes;
  std::uint32_t source = 0;
  Tag tag;
  std::uint64_t count = 0;
  std::uint64_t payloadBytes = 0;
  std::uint32_t checksum = 0;
};

/// Byte offsets of the header fields (used in ProtocolError offsets).
namespace frame_offset {
constexpr std::size_t kMagic = 0, kVersion = 4, kKind = 6, kDType = 7, kSource = 8, kOp = 12, kReserved1 = 13,
                      kSegment = 14, kStep = 16, kCount = 24, kPayloadBytes = 32, kChecksum = 40,
                      kReserved2 = 44;
}  // namespace frame_offset

using HeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

/// Encodes a header for `payload` and fills in its checksum: CRC-32C over the
/// header (checksum field zero) and the payload, or over the header alone for
/// kDataTrailing (whose payload checksum the sender appends as the trailer).
/// @throws InvalidArgument if payload.size() is not a whole number of dtype
///         elements, exceeds kMaxPayloadBytes, or is non-empty for a control
///         frame (bye, bye-ack).
HeaderBytes encodeFrameHeader(FrameKind kind, DType dtype, std::uint32_t source, const Tag& tag,
                              std::span<const std::byte> payload);

/// The same header for a payload of `payloadBytes` bytes whose crc32c() the
/// caller already has (copyAndCrc32c): no pass over the payload. A wrong
/// `payloadCrc` makes the receiver reject the frame (ProtocolError). For
/// kDataTrailing it is not used: that header's checksum covers the header
/// alone (the sender appends the payload's CRC-32C as the trailer).
/// @throws InvalidArgument as the other overload.
HeaderBytes encodeFrameHeader(FrameKind kind, DType dtype, std::uint32_t source, const Tag& tag,
                              std::uint64_t payloadBytes, std::uint32_t payloadCrc);

/// Decodes and validates every header field (magic, version, kind, dtype,
/// reserved bytes, segment/step ranges, count * dtype size == payloadBytes,
/// payloadBytes <= kMaxPayloadBytes, source < worldSize). Does not check the
/// checksum (that needs the payload: see verifyFramePayload).
/// @param peer rank the bytes came from, for the error message (-1 if unknown).
/// @throws ProtocolError naming `peer` and the byte offset of the bad field.
FrameHeader decodeFrameHeader(std::span<const std::byte> header, int peer, int worldSize);

/// Checks that `payload` has the announced length and the header's checksum.
/// @throws ProtocolError: for a length mismatch the offset is where the
///         shorter of the two lengths ends (kFrameHeaderBytes + min(actual,
///         announced)); for a checksum mismatch it is kChecksum; for a header
///         span that is not kFrameHeaderBytes long, its length.
void verifyFramePayload(std::span<const std::byte> header, const FrameHeader& decoded,
                        std::span<const std::byte> payload, int peer);

/// Checks a frame whose payload arrives in pieces on a byte stream, each
/// piece while it is still in cache. Use: begin() once the header is decoded,
/// update() with every payload piece in order, finish() after the last one
/// (with the trailer for kDataTrailing frames). Handles kData, kPull and the
/// control kinds (checksum over header and payload, as verifyFramePayload) and
/// kDataTrailing (header checksum over the header alone, checked by begin();
/// payload checksum in the trailer, checked by finish()).
class StreamFrameVerifier {
 public:
  /// @param header the frame's kFrameHeaderBytes bytes; `decoded` its
  ///        decodeFrameHeader; `peer` the rank they came from (for errors).
  /// @throws ProtocolError(peer, kChecksum) when a kDataTrailing header's
  ///         own checksum fails; for a header span that is not
  ///         kFrameHeaderBytes long, with its length.
  void begin(std::span<const std::byte> header, const FrameHeader& decoded, int peer);
  /// The next payload bytes (in order; the total must end up payloadBytes).
  void update(std::span<const std::byte> piece) noexcept {
    crc_.update(piece);
    seen_ += piece.size();
  }
  /// The next `n` payload bytes (in order), whose CRC-32C `pieceCrc` the
  /// caller already computed, for instance while copying them
  /// (copyAndCrc32c): no second pass over the bytes.
  void updateSummed(std::uint32_t pieceCrc, std::size_t n) noexcept {
    crc_.append(pieceCrc, n);
    seen_ += n;
  }
  /// All payload bytes were passed to update(): checks them.
  /// @param trailer the 4 bytes after the payload (kDataTrailing frames only;
  ///        ignored for the other kinds).
  /// @throws ProtocolError naming the peer: at offset kChecksum for a kData
  ///         (or control, or pull) frame whose checksum fails; at offset
  ///         kFrameHeaderBytes + payloadBytes (the trailer) for a kDataTrailing
  ///         payload whose CRC-32C is not the trailer's; for fewer or more
  ///         bytes than announced, where the shorter length ends; for a
  ///         kDataTrailing trailer span that is not kFrameTrailerBytes long,
  ///         at the trailer.
  void finish(std::span<const std::byte> trailer = {}) const;
  /// CRC-32C of the payload bytes passed to update() (meaningful for
  /// kDataTrailing frames, whose running checksum covers the payload alone).
  std::uint32_t payloadChecksum() const noexcept { return crc_.value(); }

 private:
  Crc32c crc_;
  FrameHeader frame_;
  std::size_t seen_ = 0;
  int peer_ = -1;
};

}  // namespace gossamer
