// Feeds a wire frame, [48-byte header][payload][trailer], to the frame
// decoders: decodeFrameHeader (with and without a world size),
// verifyFramePayload, StreamFrameVerifier (the payload in pieces, half of
// them as precomputed CRCs), and the payload decoders decodeHello and
// single_copy::decode on the bytes after the header whatever the kind (a
// fuzzer rarely gets a checksum right). Checks: only ProtocolError escapes;
// a decoded header is within its documented bounds and encodeFrameHeader
// gives back the same bytes (the checksum too when the frame verifies); the
// streamed check agrees with verifyFramePayload; decoded hellos and pull
// descriptors encode back to the same payload.
#include <algorithm>
#include <cstring>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/single_copy.hpp"
#include "gossamer/kit/wire.hpp"

namespace {

using namespace gossamer;

constexpr int kPeer = 3;
constexpr int kWorld = 16;

bool sameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The streamed check of `payload` (and `trailer`): true if it passes.
bool streamed(std::span<const std::byte> header, const FrameHeader& d, std::span<const std::byte> payload,
              std::span<const std::byte> trailer, std::size_t piece) {
  StreamFrameVerifier v;
  try {
    v.begin(header, d, kPeer);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer);
    FUZZ_CHECK(d.kind == FrameKind::kDataTrailing);
    return false;
  }
  bool summed = false;
  for (std::size_t at = 0; at < payload.size(); at += piece) {
    const auto part = payload.subspan(at, std::min(piece, payload.size() - at));
    if (summed)
      v.updateSummed(crc32c(part), part.size());
    else
      v.update(part);
    summed = !summed;
  }
  try {
    v.finish(trailer);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer);
    return false;
  }
  FUZZ_CHECK(d.kind != FrameKind::kDataTrailing || v.payloadChecksum() == crc32c(payload));
  return true;
}

void payloadDecoders(std::span<const std::byte> payload) {
  try {
    const Hello h = decodeHello(payload, kPeer);
    FUZZ_CHECK(!h.endpoint.empty() && h.endpoint.size() <= kMaxHelloEndpoint);
    FUZZ_CHECK(sameBytes(encodeHello(h), payload));
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer);
  }
  try {
    const PullDescriptor d = single_copy::decode(payload, kPeer);
    FUZZ_CHECK(d.bytes <= kMaxPayloadBytes && d.ticket <= Tag::kMaxStep);
    FUZZ_CHECK(sameBytes(single_copy::encode(d), payload));
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = fuzz::bytesOf(data, size);
  const auto header = in.first(std::min(size, kFrameHeaderBytes));
  const auto rest = in.subspan(header.size());
  payloadDecoders(rest);

  FrameHeader d;
  try {
    d = decodeFrameHeader(header, kPeer, 0);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer && e.offset() <= kFrameHeaderBytes);
    return 0;
  }
  // Within the documented bounds, and the same with a world size that admits the source.
  FUZZ_CHECK(d.payloadBytes <= kMaxPayloadBytes && d.count * dtypeSize(d.dtype) == d.payloadBytes);
  FUZZ_CHECK(d.tag.step <= Tag::kMaxStep && d.tag.segment <= Tag::kMaxSegment && d.tag.op <= kLastOp);
  try {
    const FrameHeader w = decodeFrameHeader(header, kPeer, kWorld);
    FUZZ_CHECK(d.source < kWorld && w.source == d.source && w.checksum == d.checksum);
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(d.source >= kWorld && e.offset() == frame_offset::kSource);
  }
  // The encoder writes the same fields (the checksum aside, which needs the payload).
  const HeaderBytes again = encodeFrameHeader(d.kind, d.dtype, d.source, d.tag, d.payloadBytes, 0);
  FUZZ_CHECK(std::equal(again.begin(), again.begin() + frame_offset::kChecksum, header.begin()));
  FUZZ_CHECK(std::equal(again.begin() + frame_offset::kReserved2, again.end(),
                        header.begin() + frame_offset::kReserved2));

  // The payload as a message transport delivers it, and as a stream does.
  const bool trailing = d.kind == FrameKind::kDataTrailing;
  const std::size_t trailerBytes = trailing ? std::min(rest.size(), kFrameTrailerBytes) : 0;
  const auto payload = rest.first(rest.size() - trailerBytes);
  const auto trailer = rest.last(trailerBytes);
  bool verified = false;
  try {
    verifyFramePayload(header, d, rest, kPeer);
    verified = true;
  } catch (const ProtocolError& e) {
    FUZZ_CHECK(e.peer() == kPeer && e.offset() <= kFrameHeaderBytes + rest.size());
  }
  FUZZ_CHECK(!(verified && trailing));
  const std::size_t piece = 1 + (size % 61);
  const bool streamOk = streamed(header, d, payload, trailer, piece);
  if (!trailing) FUZZ_CHECK(streamOk == verified);
  if (verified || streamOk) {
    // A frame that checks out is exactly what the encoder makes of its payload.
    const HeaderBytes exact = encodeFrameHeader(d.kind, d.dtype, d.source, d.tag, payload);
    FUZZ_CHECK(std::equal(exact.begin(), exact.end(), header.begin()));
  }
  return 0;
}
