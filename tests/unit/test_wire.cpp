// Tests of the wire frame (gossamer/kit/wire.hpp): encoding, decoding and the
// rejection of every malformed header field with the right ProtocolError.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/kit/job_key.hpp"
#include "gossamer/kit/wire.hpp"
#include "gossamer/store.hpp"

namespace {

using gossamer::drawIncarnation;
using gossamer::DType;
using gossamer::Error;
using gossamer::FrameHeader;
using gossamer::FrameKind;
using gossamer::HeaderBytes;
using gossamer::InvalidArgument;
using gossamer::JobKey;
using gossamer::MemoryStore;
using gossamer::Op;
using gossamer::ProtocolError;
using gossamer::Store;
using gossamer::Tag;
using gossamer::TimeoutError;
namespace fo = gossamer::frame_offset;

constexpr int kWorld = 8;
constexpr int kPeer = 5;

const DType kAllDTypes[] = {DType::kBytes, DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};

/// A payload of `elements` elements of `dtype` with a recognisable byte pattern.
std::vector<std::byte> patternPayload(DType dtype, std::size_t elements) {
  std::vector<std::byte> p(elements * gossamer::dtypeSize(dtype));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::byte((i * 131 + 7) & 0xFF);
  return p;
}

/// A valid data frame: header and payload.
struct Frame {
  HeaderBytes header;
  std::vector<std::byte> payload;
};

Frame makeFrame(DType dtype = DType::kFloat32, std::size_t elements = 16,
                Tag tag = Tag::make(Op::kGossip, 1234, 3), std::uint32_t source = 2) {
  Frame f;
  f.payload = patternPayload(dtype, elements);
  f.header = gossamer::encodeFrameHeader(FrameKind::kData, dtype, source, tag, f.payload);
  return f;
}

template <typename T>
void poke(HeaderBytes& h, std::size_t offset, T value) {
  std::memcpy(h.data() + offset, &value, sizeof(T));
}

template <typename T>
T peek(const HeaderBytes& h, std::size_t offset) {
  T v;
  std::memcpy(&v, h.data() + offset, sizeof(T));
  return v;
}

/// The ProtocolError decodeFrameHeader throws for `header`, or nullopt if it
/// accepts it. Any other exception escapes and fails the test.
std::optional<ProtocolError> decodeError(std::span<const std::byte> header, int peer = kPeer,
                                         int world = kWorld) {
  try {
    gossamer::decodeFrameHeader(header, peer, world);
  } catch (const ProtocolError& e) {
    return e;
  }
  return std::nullopt;
}

/// Requires that decoding `header` fails at `offset`, naming kPeer.
void requireDecodeError(const HeaderBytes& header, std::size_t offset) {
  const auto err = decodeError(header);
  REQUIRE(err.has_value());
  INFO(err->what());
  CHECK(err->offset() == offset);
  CHECK(err->peer() == kPeer);
}

/// The ProtocolError verifyFramePayload throws, or nullopt if it accepts.
std::optional<ProtocolError> verifyError(const HeaderBytes& header, std::span<const std::byte> payload,
                                         int peer = kPeer) {
  const FrameHeader d = gossamer::decodeFrameHeader(header, peer, kWorld);
  try {
    gossamer::verifyFramePayload(header, d, payload, peer);
  } catch (const ProtocolError& e) {
    return e;
  }
  return std::nullopt;
}

bool sameHeader(const FrameHeader& a, const FrameHeader& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.source == b.source && a.tag == b.tag &&
         a.count == b.count && a.payloadBytes == b.payloadBytes && a.checksum == b.checksum;
}

}  // namespace

TEST_CASE("wire: every dtype round-trips through encode, decode and verify", "[wire]") {
  for (DType dt : kAllDTypes) {
    for (std::size_t elements : {std::size_t{0}, std::size_t{1}, std::size_t{257}}) {
      INFO("dtype " << gossamer::dtypeName(dt) << ", " << elements << " elements");
      const Tag tag = Tag::make(Op::kAllreduce, Tag::kMaxStep - elements, 0xFFFF);
      const Frame f = makeFrame(dt, elements, tag, 7);
      const FrameHeader d = gossamer::decodeFrameHeader(f.header, kPeer, kWorld);
      CHECK(d.kind == FrameKind::kData);
      CHECK(d.dtype == dt);
      CHECK(d.source == 7u);
      CHECK(d.tag == tag);
      CHECK(d.count == elements);
      CHECK(d.payloadBytes == elements * gossamer::dtypeSize(dt));
      CHECK(d.checksum == peek<std::uint32_t>(f.header, fo::kChecksum));
      CHECK(peek<std::uint32_t>(f.header, fo::kMagic) == gossamer::kFrameMagic);
      CHECK(peek<std::uint16_t>(f.header, fo::kVersion) == gossamer::kProtocolVersion);
      CHECK_NOTHROW(gossamer::verifyFramePayload(f.header, d, f.payload, kPeer));
    }
  }
}

TEST_CASE("wire: dtype sizes and the C++ type mapping agree", "[wire]") {
  CHECK(gossamer::dtypeSize(DType::kBytes) == 1);
  CHECK(gossamer::dtypeSize(DType::kFloat32) == sizeof(float));
  CHECK(gossamer::dtypeSize(DType::kFloat64) == sizeof(double));
  CHECK(gossamer::dtypeSize(DType::kInt32) == 4);
  CHECK(gossamer::dtypeSize(DType::kInt64) == 8);
  CHECK(gossamer::DTypeOf<float>::value == DType::kFloat32);
  CHECK(gossamer::DTypeOf<double>::value == DType::kFloat64);
  CHECK(gossamer::DTypeOf<std::int32_t>::value == DType::kInt32);
  CHECK(gossamer::DTypeOf<std::int64_t>::value == DType::kInt64);
  CHECK(gossamer::DTypeOf<std::byte>::value == DType::kBytes);
  CHECK(gossamer::dtypeSize(DType::kFloat16) == 2);
  CHECK(gossamer::dtypeSize(DType::kBfloat16) == 2);
  CHECK(gossamer::DTypeOf<gossamer::float16>::value == DType::kFloat16);
  CHECK(gossamer::DTypeOf<gossamer::bfloat16>::value == DType::kBfloat16);
  CHECK(std::string(gossamer::dtypeName(DType::kBfloat16)) == "bfloat16");
  CHECK_THROWS_AS(gossamer::dtypeSize(DType(7)), InvalidArgument);
}

TEST_CASE("wire: different payloads of the same length get different checksums", "[wire]") {
  Frame a = makeFrame(DType::kInt32, 8);
  std::vector<std::byte> other = a.payload;
  other[5] ^= std::byte{0x01};
  const HeaderBytes b =
      gossamer::encodeFrameHeader(FrameKind::kData, DType::kInt32, 2, Tag::make(Op::kGossip, 1234, 3), other);
  CHECK(peek<std::uint32_t>(a.header, fo::kChecksum) != peek<std::uint32_t>(b, fo::kChecksum));
  // Everything but the checksum is identical.
  HeaderBytes ha = a.header, hb = b;
  poke<std::uint32_t>(ha, fo::kChecksum, 0);
  poke<std::uint32_t>(hb, fo::kChecksum, 0);
  CHECK(ha == hb);
}

TEST_CASE("wire: a bye frame without payload round-trips", "[wire]") {
  const HeaderBytes h =
      gossamer::encodeFrameHeader(FrameKind::kBye, DType::kBytes, 3, Tag::make(Op::kControl, 0), {});
  const FrameHeader d = gossamer::decodeFrameHeader(h, kPeer, kWorld);
  CHECK(d.kind == FrameKind::kBye);
  CHECK(d.payloadBytes == 0);
  CHECK(d.count == 0);
  CHECK_NOTHROW(gossamer::verifyFramePayload(h, d, {}, kPeer));
}

TEST_CASE("wire: encodeFrameHeader rejects a payload that is not whole elements", "[wire]") {
  const std::vector<std::byte> seven(7);
  const Tag tag = Tag::make(Op::kUser, 1);
  CHECK_THROWS_AS(gossamer::encodeFrameHeader(FrameKind::kData, DType::kFloat32, 0, tag, seven),
                  InvalidArgument);
  CHECK_THROWS_AS(
      gossamer::encodeFrameHeader(FrameKind::kData, DType::kFloat64, 0, tag, std::span(seven).first(4)),
      InvalidArgument);
  CHECK_THROWS_AS(gossamer::encodeFrameHeader(FrameKind::kData, DType::kInt64, 0, tag, seven),
                  InvalidArgument);
  CHECK_NOTHROW(gossamer::encodeFrameHeader(FrameKind::kData, DType::kBytes, 0, tag, seven));
  CHECK_THROWS_AS(gossamer::encodeFrameHeader(FrameKind::kData, DType(9), 0, tag, std::span(seven).first(0)),
                  InvalidArgument);
}

TEST_CASE("wire: Tag::make accepts the full step and segment range and rejects beyond", "[wire]") {
  const Tag top = Tag::make(Op::kControl, Tag::kMaxStep, Tag::kMaxSegment);
  CHECK(top.step == Tag::kMaxStep);
  CHECK(top.segment == Tag::kMaxSegment);
  CHECK(top.op == Op::kControl);
  CHECK(Tag::kMaxStep == (std::uint64_t{1} << 40) - 1);
  CHECK_THROWS_AS(Tag::make(Op::kUser, Tag::kMaxStep + 1), InvalidArgument);
  CHECK_THROWS_AS(Tag::make(Op::kUser, std::numeric_limits<std::uint64_t>::max()), InvalidArgument);
  CHECK_THROWS_AS(Tag::make(Op::kUser, 0, Tag::kMaxSegment + 1), InvalidArgument);
  CHECK_THROWS_AS(Tag::make(Op::kUser, 0, std::numeric_limits<std::uint32_t>::max()), InvalidArgument);
  const Tag zero = Tag::make(Op::kUser, 0);
  CHECK(zero.packed() == 0);
}

TEST_CASE("wire: Tag::packed is injective and keeps op, segment and step apart", "[wire]") {
  const Op ops[] = {Op::kUser,   Op::kAllreduce, Op::kBroadcast, Op::kBarrier,
                    Op::kGossip, Op::kControl,   Op::kMembership};
  const std::uint32_t segments[] = {0, 1, 2, 255, 256, 0x7FFF, 0xFFFE, 0xFFFF};
  const std::uint64_t steps[] = {
      0, 1, 2, 0xFF, 0x100, 1ull << 32, 1ull << 39, Tag::kMaxStep - 1, Tag::kMaxStep};
  std::set<std::uint64_t> seen;
  std::size_t made = 0;
  for (Op op : ops)
    for (std::uint32_t seg : segments)
      for (std::uint64_t step : steps) {
        const Tag t = Tag::make(op, step, seg);
        const std::uint64_t p = t.packed();
        CHECK((p >> 56) == std::uint64_t(op));
        CHECK(((p >> 40) & 0xFFFF) == seg);
        CHECK((p & Tag::kMaxStep) == step);
        seen.insert(p);
        ++made;
      }
  CHECK(seen.size() == made);
}

TEST_CASE("wire: bad magic is rejected at offset 0", "[wire]") {
  Frame f = makeFrame();
  poke<std::uint32_t>(f.header, fo::kMagic, 0x47534D52u);  // byte-swapped magic
  requireDecodeError(f.header, fo::kMagic);
  f.header[fo::kMagic + 3] = std::byte{0};
  requireDecodeError(f.header, fo::kMagic);
}

TEST_CASE("wire: an unsupported protocol version is rejected at its offset", "[wire]") {
  for (std::uint16_t v :
       {std::uint16_t{0}, std::uint16_t(gossamer::kProtocolVersion + 1), std::uint16_t{0xFFFF}}) {
    Frame f = makeFrame();
    poke<std::uint16_t>(f.header, fo::kVersion, v);
    INFO("version " << v);
    requireDecodeError(f.header, fo::kVersion);
  }
}

TEST_CASE("wire: an unknown frame kind is rejected at its offset", "[wire]") {
  for (std::uint8_t k : {std::uint8_t{0}, std::uint8_t{8}, std::uint8_t{0xFF}}) {
    Frame f = makeFrame();
    poke<std::uint8_t>(f.header, fo::kKind, k);
    INFO("kind " << int(k));
    requireDecodeError(f.header, fo::kKind);
  }
}

TEST_CASE("wire: a hello carries its incarnation and endpoint, and a bad one is rejected at its offset",
          "[wire]") {
  gossamer::Hello hello{0x0123456789ABCDEFull, {}, "tcp://127.0.0.1:40000"};
  for (std::size_t i = 0; i < hello.proof.size(); ++i) hello.proof[i] = std::byte(i * 7 + 1);
  const auto payload = gossamer::encodeHello(hello);
  REQUIRE(payload.size() == 8 + gossamer::kHelloProofBytes + hello.endpoint.size());
  const auto header = gossamer::encodeFrameHeader(FrameKind::kHello, DType::kBytes, kPeer,
                                                  gossamer::Tag{Op::kControl, 0, 0}, payload);
  const FrameHeader d = gossamer::decodeFrameHeader(header, kPeer, kWorld);
  CHECK(d.kind == FrameKind::kHello);
  CHECK_FALSE(verifyError(header, payload).has_value());
  const auto back = gossamer::decodeHello(payload, kPeer);
  CHECK(back.incarnation == hello.incarnation);
  CHECK(back.proof == hello.proof);
  CHECK(back.endpoint == hello.endpoint);
  // A hello without a proof or an endpoint, or with one longer than kMaxHelloEndpoint.
  constexpr std::size_t kFixed = 8 + gossamer::kHelloProofBytes;
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{8}, kFixed, kFixed + 1 + gossamer::kMaxHelloEndpoint}) {
    INFO(bytes << " payload bytes");
    auto h = header;
    poke<std::uint64_t>(h, fo::kCount, bytes);
    poke<std::uint64_t>(h, fo::kPayloadBytes, bytes);
    requireDecodeError(h, fo::kPayloadBytes);
    const std::vector<std::byte> p(bytes);
    try {
      (void)gossamer::decodeHello(p, kPeer);
      FAIL("accepted");
    } catch (const ProtocolError& e) {
      CHECK(e.peer() == kPeer);
      CHECK(e.offset() == gossamer::kFrameHeaderBytes);
    }
  }
  CHECK_THROWS_AS(gossamer::encodeHello({1, {}, ""}), InvalidArgument);
  CHECK_THROWS_AS(gossamer::encodeHello({1, {}, std::string(gossamer::kMaxHelloEndpoint + 1, 'x')}),
                  InvalidArgument);
}

TEST_CASE(
    "wire: a job key proves a hello for its incarnation, rank and endpoint only, and is drawn once per "
    "rendezvous",
    "[wire]") {
  MemoryStore store;
  const JobKey key = JobKey::fromStore(store, "job/key", /*draw=*/true, 1.0, "rank 0");
  const JobKey again = JobKey::fromStore(store, "job/key", /*draw=*/true, 1.0, "rank 0 restarted");
  const JobKey reader = JobKey::fromStore(store, "job/key", /*draw=*/false, 1.0, "rank 1");
  const std::uint64_t incarnation = drawIncarnation();
  CHECK(incarnation % 2 == 1);
  CHECK(drawIncarnation() != incarnation);
  const auto proof = key.proof(incarnation, 3);
  CHECK(again.verify(incarnation, 3, proof));  // a rank 0 started again keeps the job's key
  CHECK(reader.verify(incarnation, 3, proof));
  CHECK_FALSE(reader.verify(incarnation, 4, proof));
  CHECK_FALSE(reader.verify(incarnation + 2, 3, proof));
  auto flipped = proof;
  flipped[31] ^= std::byte{1};
  CHECK_FALSE(reader.verify(incarnation, 3, flipped));
  // The endpoint a hello names is covered: another address (one byte
  // changed, cut short, or added to one that had none) does not verify.
  const auto named = key.proof(incarnation, 3, "tcp://127.0.0.1:5555");
  CHECK(reader.verify(incarnation, 3, named, "tcp://127.0.0.1:5555"));
  CHECK_FALSE(reader.verify(incarnation, 3, named, "tcp://127.0.0.1:5556"));
  CHECK_FALSE(reader.verify(incarnation, 3, named, "tcp://127.0.0.1:555"));
  CHECK_FALSE(reader.verify(incarnation, 3, named));
  CHECK_FALSE(reader.verify(incarnation, 3, proof, "tcp://127.0.0.1:5555"));
  MemoryStore other;
  const JobKey foreign = JobKey::fromStore(other, "job/key", true, 1.0, "elsewhere");
  CHECK_FALSE(foreign.verify(incarnation, 3, proof));
  // A key that is not 64 hex digits, or none in time, is an error.
  other.set("bad/key", "xyz");
  CHECK_THROWS_AS(JobKey::fromStore(other, "bad/key", false, 1.0, "rank 2"), Error);
  CHECK_THROWS_AS(JobKey::fromStore(other, "no/key", false, 0.05, "rank 2"), TimeoutError);
  // A key never read (all zeros) verifies nothing, not even its own proof.
  const JobKey unread;
  std::array<std::byte, gossamer::kHelloProofBytes> zeros{};
  CHECK_FALSE(unread.verify(incarnation, 3, zeros));
  CHECK_THROWS_AS(unread.proof(incarnation, 3), gossamer::InternalError);
}

TEST_CASE("wire: two processes that draw the job key at once read the same key", "[wire]") {
  // Store::claim: the second draw finds the first's key (two rank-0
  // processes, one restarted while the other still runs).
  MemoryStore store;
  std::vector<JobKey> keys(2);
  std::thread a([&] { keys[0] = JobKey::fromStore(store, "job/key", true, 1.0, "rank 0"); });
  std::thread b([&] { keys[1] = JobKey::fromStore(store, "job/key", true, 1.0, "rank 0 again"); });
  a.join();
  b.join();
  const std::uint64_t incarnation = drawIncarnation();
  CHECK(keys[1].verify(incarnation, 0, keys[0].proof(incarnation, 0)));
}

TEST_CASE("wire: a claim of the job key that times out is not followed by a set that could replace it",
          "[wire]") {
  // A store that cannot claim at all gets the key set; one whose claim
  // timed out (and may still be applied by the server) does not: the draw
  // fails with the TimeoutError instead of risking a second key.
  struct Unanswered final : Store {
    MemoryStore in;
    bool timesOut = true;
    int sets = 0;
    void set(const std::string& k, const std::string& v) override {
      ++sets;
      in.set(k, v);
    }
    std::optional<std::string> tryGet(const std::string& k) override { return in.tryGet(k); }
    bool claim(const std::string& key, const std::string& value) override {
      if (timesOut) throw TimeoutError("no answer to the claim of " + key);
      return Store::claim(key, value);  // the default: InvalidArgument, cannot claim
    }
  };
  Unanswered silent;
  CHECK_THROWS_AS(JobKey::fromStore(silent, "job/key", true, 1.0, "rank 0"), TimeoutError);
  CHECK(silent.sets == 0);
  Unanswered plain;
  plain.timesOut = false;
  const JobKey key = JobKey::fromStore(plain, "job/key", true, 1.0, "rank 0");
  CHECK(plain.sets == 1);
  const std::uint64_t incarnation = drawIncarnation();
  CHECK(JobKey::fromStore(plain, "job/key", false, 1.0, "rank 1")
            .verify(incarnation, 0, key.proof(incarnation, 0)));
}

TEST_CASE("wire: an unknown dtype is rejected at its offset", "[wire]") {
  for (std::uint8_t t : {std::uint8_t{7}, std::uint8_t{8}, std::uint8_t{0x80}, std::uint8_t{0xFF}}) {
    Frame f = makeFrame();
    poke<std::uint8_t>(f.header, fo::kDType, t);
    INFO("dtype " << int(t));
    requireDecodeError(f.header, fo::kDType);
  }
}

TEST_CASE("wire: a source rank outside the world is rejected at its offset", "[wire]") {
  Frame f = makeFrame();
  poke<std::uint32_t>(f.header, fo::kSource, kWorld - 1);
  CHECK_FALSE(decodeError(f.header).has_value());
  for (std::uint32_t s : {std::uint32_t{kWorld}, std::uint32_t{kWorld + 1}, 0x80000000u, 0xFFFFFFFFu}) {
    poke<std::uint32_t>(f.header, fo::kSource, s);
    INFO("source " << s);
    requireDecodeError(f.header, fo::kSource);
  }
}

TEST_CASE("wire: an unknown op is rejected at its offset", "[wire]") {
  for (std::uint8_t op : {std::uint8_t(std::uint8_t(gossamer::kLastOp) + 1), std::uint8_t{0xFF}}) {
    Frame f = makeFrame();
    poke<std::uint8_t>(f.header, fo::kOp, op);
    INFO("op " << int(op));
    requireDecodeError(f.header, fo::kOp);
  }
}

TEST_CASE("wire: nonzero reserved byte 13 is rejected at offset 13", "[wire]") {
  CHECK(fo::kReserved1 == 13);
  for (std::uint8_t v : {std::uint8_t{1}, std::uint8_t{0x80}}) {
    Frame f = makeFrame();
    poke<std::uint8_t>(f.header, fo::kReserved1, v);
    requireDecodeError(f.header, fo::kReserved1);
  }
}

TEST_CASE("wire: nonzero reserved word 44 is rejected at offset 44", "[wire]") {
  CHECK(fo::kReserved2 == 44);
  for (std::uint32_t v : {1u, 0x100u, 0x80000000u}) {
    Frame f = makeFrame();
    poke<std::uint32_t>(f.header, fo::kReserved2, v);
    requireDecodeError(f.header, fo::kReserved2);
  }
}

TEST_CASE("wire: a step beyond 2^40-1 is rejected at its offset", "[wire]") {
  Frame f = makeFrame();
  poke<std::uint64_t>(f.header, fo::kStep, Tag::kMaxStep);
  CHECK_FALSE(decodeError(f.header).has_value());
  for (std::uint64_t s : {Tag::kMaxStep + 1, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    poke<std::uint64_t>(f.header, fo::kStep, s);
    INFO("step " << s);
    requireDecodeError(f.header, fo::kStep);
  }
}

TEST_CASE("wire: a payload length beyond kMaxPayloadBytes is rejected at its offset", "[wire]") {
  using gossamer::kMaxPayloadBytes;
  Frame f = makeFrame(DType::kBytes, 0);
  // Exactly the limit is acceptable (the header alone; nothing is allocated).
  poke<std::uint64_t>(f.header, fo::kPayloadBytes, kMaxPayloadBytes);
  poke<std::uint64_t>(f.header, fo::kCount, kMaxPayloadBytes);
  CHECK_FALSE(decodeError(f.header).has_value());
  // One more byte, with a consistent count, is not.
  poke<std::uint64_t>(f.header, fo::kPayloadBytes, kMaxPayloadBytes + 1);
  poke<std::uint64_t>(f.header, fo::kCount, kMaxPayloadBytes + 1);
  requireDecodeError(f.header, fo::kPayloadBytes);
  poke<std::uint64_t>(f.header, fo::kPayloadBytes, ~std::uint64_t{0});
  requireDecodeError(f.header, fo::kPayloadBytes);
}

TEST_CASE("wire: count times dtype size must equal the payload length", "[wire]") {
  SECTION("count one too large or too small") {
    Frame f = makeFrame(DType::kFloat64, 10);
    poke<std::uint64_t>(f.header, fo::kCount, 11);
    requireDecodeError(f.header, fo::kCount);
    poke<std::uint64_t>(f.header, fo::kCount, 9);
    requireDecodeError(f.header, fo::kCount);
  }
  SECTION("payload length not a multiple of the element size") {
    Frame f = makeFrame(DType::kInt32, 10);
    poke<std::uint64_t>(f.header, fo::kPayloadBytes, 41);
    requireDecodeError(f.header, fo::kCount);
  }
  SECTION("a count whose product with the element size wraps around to the length") {
    // 2^61 * 8 == 2^64 == 0 (mod 2^64): equal to an empty payload after overflow.
    Frame f = makeFrame(DType::kFloat64, 0);
    poke<std::uint64_t>(f.header, fo::kCount, std::uint64_t{1} << 61);
    requireDecodeError(f.header, fo::kCount);
    // 2^62 + 4 elements of 4 bytes: 2^64 + 16 wraps to 16 == 4 floats.
    Frame g = makeFrame(DType::kFloat32, 4);
    poke<std::uint64_t>(g.header, fo::kCount, (std::uint64_t{1} << 62) + 4);
    requireDecodeError(g.header, fo::kCount);
  }
}

TEST_CASE("wire: a pull frame must carry exactly one 32-byte descriptor", "[wire]") {
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, std::size_t{33}}) {
    Frame f = makeFrame(DType::kBytes, n);
    poke<std::uint8_t>(f.header, fo::kKind, std::uint8_t(FrameKind::kPull));
    INFO("payload " << n);
    requireDecodeError(f.header, fo::kPayloadBytes);
  }
  Frame ok = makeFrame(DType::kBytes, gossamer::kPullDescriptorBytes);
  poke<std::uint8_t>(ok.header, fo::kKind, std::uint8_t(FrameKind::kPull));
  CHECK(gossamer::decodeFrameHeader(ok.header, 1, 4).kind == FrameKind::kPull);
}

TEST_CASE("wire: a control frame (bye, bye-ack, pull-done) that announces a payload is rejected", "[wire]") {
  for (FrameKind kind : {FrameKind::kBye, FrameKind::kByeAck, FrameKind::kPullDone}) {
    Frame f = makeFrame(DType::kBytes, 4);
    poke<std::uint8_t>(f.header, fo::kKind, std::uint8_t(kind));
    INFO("kind " << int(kind));
    requireDecodeError(f.header, fo::kPayloadBytes);
    // The encoder refuses to build one, too.
    const std::vector<std::byte> eight(8);
    CHECK_THROWS_AS(gossamer::encodeFrameHeader(kind, DType::kInt64, 1, Tag::make(Op::kControl, 0), eight),
                    gossamer::InvalidArgument);
  }
}

TEST_CASE("wire: a header of the wrong size is rejected", "[wire]") {
  const Frame f = makeFrame();
  SECTION("truncated: the offset is where the bytes ran out") {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{20}, std::size_t{47}}) {
      INFO("size " << n);
      const auto err = decodeError(std::span<const std::byte>(f.header).first(n));
      REQUIRE(err.has_value());
      CHECK(err->offset() == n);
      CHECK(err->peer() == kPeer);
    }
  }
  SECTION("oversize: the offset is the end of a proper header") {
    std::vector<std::byte> big(f.header.begin(), f.header.end());
    big.push_back(std::byte{0});
    const auto err = decodeError(big);
    REQUIRE(err.has_value());
    CHECK(err->offset() == gossamer::kFrameHeaderBytes);
    CHECK(err->peer() == kPeer);
  }
  SECTION("an unknown peer is reported as -1") {
    const auto err = decodeError(std::span<const std::byte>(f.header).first(10), -1);
    REQUIRE(err.has_value());
    CHECK(err->peer() == -1);
  }
}

TEST_CASE("wire: a payload shorter or longer than announced is rejected", "[wire]") {
  // NOTE: wire.hpp documents offset kPayloadBytes for a length mismatch; the
  // implementation reports the frame offset where the shorter of the two ends
  // (kFrameHeaderBytes + min(actual, announced)). This asserts the latter.
  const Frame f = makeFrame(DType::kFloat32, 16);  // 64 bytes
  SECTION("shorter") {
    const auto err = verifyError(f.header, std::span<const std::byte>(f.payload).first(60));
    REQUIRE(err.has_value());
    CHECK(err->offset() == gossamer::kFrameHeaderBytes + 60);
    CHECK(err->peer() == kPeer);
  }
  SECTION("empty") {
    const auto err = verifyError(f.header, {});
    REQUIRE(err.has_value());
    CHECK(err->offset() == gossamer::kFrameHeaderBytes);
  }
  SECTION("longer") {
    std::vector<std::byte> longer = f.payload;
    longer.push_back(std::byte{0});
    const auto err = verifyError(f.header, longer);
    REQUIRE(err.has_value());
    CHECK(err->offset() == gossamer::kFrameHeaderBytes + 64);
    CHECK(err->peer() == kPeer);
  }
}

TEST_CASE("wire: the checksum catches a flipped payload bit and a flipped header bit", "[wire]") {
  const Frame f = makeFrame(DType::kFloat64, 9);
  REQUIRE_FALSE(verifyError(f.header, f.payload).has_value());
  SECTION("every single payload bit") {
    std::vector<std::byte> p = f.payload;
    for (std::size_t bit = 0; bit < p.size() * 8; ++bit) {
      p[bit / 8] ^= std::byte(1u << (bit % 8));
      const auto err = verifyError(f.header, p, 2);
      p[bit / 8] ^= std::byte(1u << (bit % 8));
      INFO("payload bit " << bit);
      REQUIRE(err.has_value());
      CHECK(err->offset() == fo::kChecksum);
      CHECK(err->peer() == 2);
    }
  }
  SECTION("header bits that still decode to a valid header") {
    // Segment, low step bits, the low source bit and the checksum field itself:
    // all of them pass decodeFrameHeader, so only the checksum can notice.
    std::vector<std::size_t> bits;
    for (std::size_t b = fo::kSegment * 8; b < (fo::kSegment + 2) * 8; ++b) bits.push_back(b);
    for (std::size_t b = fo::kStep * 8; b < fo::kStep * 8 + 32; ++b) bits.push_back(b);
    for (std::size_t b = fo::kChecksum * 8; b < (fo::kChecksum + 4) * 8; ++b) bits.push_back(b);
    bits.push_back(fo::kSource * 8);
    for (std::size_t bit : bits) {
      HeaderBytes h = f.header;
      h[bit / 8] ^= std::byte(1u << (bit % 8));
      INFO("header bit " << bit);
      REQUIRE_FALSE(decodeError(h).has_value());
      const auto err = verifyError(h, f.payload);
      REQUIRE(err.has_value());
      CHECK(err->offset() == fo::kChecksum);
      CHECK(err->peer() == kPeer);
    }
  }
}

TEST_CASE("wire: 20000 random mutations of valid frames only ever raise ProtocolError", "[wire]") {
  std::mt19937_64 rng(0x5EED'F00Dull);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const DType dt = kAllDTypes[below(5)];
    const std::size_t elements = below(4) == 0 ? 0 : 1 + below(24);
    const Tag tag =
        Tag::make(Op(below(6)), rng() & Tag::kMaxStep, static_cast<std::uint32_t>(below(0x10000)));
    const Frame f = makeFrame(dt, elements, tag, static_cast<std::uint32_t>(below(kWorld)));
    const FrameHeader original = gossamer::decodeFrameHeader(f.header, kPeer, kWorld);

    std::vector<std::byte> bytes(gossamer::kFrameHeaderBytes + f.payload.size());
    std::copy(f.header.begin(), f.header.end(), bytes.begin());
    std::copy(f.payload.begin(), f.payload.end(), bytes.begin() + gossamer::kFrameHeaderBytes);
    const std::vector<std::byte> pristine = bytes;
    std::size_t headerSize = gossamer::kFrameHeaderBytes;
    const int mutations = 1 + static_cast<int>(below(3));
    for (int m = 0; m < mutations && !bytes.empty(); ++m) {
      switch (below(5)) {
        case 0:
        case 1:  // flip one bit
        {
          const std::size_t bit = below(bytes.size() * 8);
          bytes[bit / 8] ^= std::byte(1u << (bit % 8));
          break;
        }
        case 2:  // overwrite one byte with a random value (maybe the same)
          bytes[below(bytes.size())] = std::byte(rng() & 0xFF);
          break;
        case 3:  // truncate the frame
          bytes.resize(below(bytes.size()));
          break;
        case 4:  // move the header/payload split
          headerSize = below(gossamer::kFrameHeaderBytes + 8);
          break;
      }
    }
    const std::size_t split = std::min(headerSize, bytes.size());
    const std::span<const std::byte> all(bytes);
    const auto header = all.first(split);
    const auto payload = all.subspan(split);
    bool ok = false;
    try {
      const FrameHeader d = gossamer::decodeFrameHeader(header, kPeer, kWorld);
      gossamer::verifyFramePayload(header, d, payload, kPeer);
      ok = true;
      INFO("trial " << trial << ": a mutated frame was accepted");
      REQUIRE(sameHeader(d, original));
      REQUIRE(split == gossamer::kFrameHeaderBytes);
      REQUIRE(bytes == pristine);
    } catch (const ProtocolError& e) {
      REQUIRE(e.peer() == kPeer);
      REQUIRE(e.offset() <= gossamer::kFrameHeaderBytes + payload.size());
    }
    (ok ? accepted : rejected) += 1;
  }
  // The mix must exercise both outcomes; most mutations change something.
  CHECK(accepted > 0);
  CHECK(rejected > 19000);
}

TEST_CASE("wire: CRC-32C matches the standard check value and the portable table on any data", "[wire]") {
  const std::string check = "123456789";
  std::vector<std::byte> v(check.size());
  std::memcpy(v.data(), check.data(), check.size());
  CHECK(gossamer::crc32c(v) == 0xE3069283u);
  CHECK(gossamer::detail::crc32cPortable(v) == 0xE3069283u);
  CHECK(gossamer::crc32c({}) == 0u);
  std::mt19937 rng(17);
  std::vector<std::byte> data(100'000);
  for (auto& b : data) b = std::byte(rng() & 0xFF);
  // Lengths around the three-stream block sizes (3 x 256, 3 x 4096) and beyond.
  for (std::size_t off : {0, 1, 3, 7}) {
    for (std::size_t len :
         {0, 1, 7, 8, 9, 63, 767, 768, 769, 1000, 4000, 12287, 12288, 12289, 13057, 99'000}) {
      const std::span<const std::byte> s(data.data() + off, len);
      REQUIRE(gossamer::crc32c(s) == gossamer::detail::crc32cPortable(s));
    }
  }
}

TEST_CASE("wire: Crc32c over pieces equals crc32c of the whole, for any cut", "[wire]") {
  std::mt19937 rng(23);
  std::vector<std::byte> data(50'000);
  for (auto& b : data) b = std::byte(rng() & 0xFF);
  CHECK(gossamer::Crc32c().value() == 0u);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t len = rng() % data.size();
    const std::span<const std::byte> whole(data.data(), len);
    gossamer::Crc32c c;
    std::size_t at = 0;
    while (at < len) {
      const std::size_t k = std::min<std::size_t>(len - at, rng() % 5000);
      c.update(whole.subspan(at, k));
      at += k;
    }
    INFO("length " << len);
    REQUIRE(c.value() == gossamer::crc32c(whole));
  }
}

namespace {

/// A kDataTrailing frame: header, payload and the trailer a sender appends.
struct TrailingFrame {
  HeaderBytes header;
  std::vector<std::byte> payload;
  std::vector<std::byte> trailer;
};

TrailingFrame makeTrailingFrame(std::size_t elements) {
  TrailingFrame f;
  f.payload = patternPayload(DType::kFloat32, elements);
  f.header = gossamer::encodeFrameHeader(FrameKind::kDataTrailing, DType::kFloat32, 2,
                                         Tag::make(Op::kAllreduce, 9, 1), f.payload);
  const std::uint32_t v = gossamer::crc32c(f.payload);
  for (int b = 0; b < 4; ++b) f.trailer.push_back(std::byte((v >> (8 * b)) & 0xFF));
  return f;
}

/// Runs StreamFrameVerifier over header, payload (in pieces of `piece` bytes)
/// and trailer; the ProtocolError it throws, or nullopt.
std::optional<ProtocolError> streamError(const HeaderBytes& header, std::span<const std::byte> payload,
                                         std::span<const std::byte> trailer, std::size_t piece = 1000) {
  try {
    const FrameHeader d = gossamer::decodeFrameHeader(header, kPeer, kWorld);
    gossamer::StreamFrameVerifier v;
    v.begin(header, d, kPeer);
    for (std::size_t at = 0; at < payload.size(); at += piece)
      v.update(payload.subspan(at, std::min(piece, payload.size() - at)));
    v.finish(trailer);
  } catch (const ProtocolError& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("wire: a stream-verified data frame passes whole and fails at the checksum when corrupted",
          "[wire]") {
  const Frame f = makeFrame(DType::kFloat32, 3000);
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20})
    REQUIRE_FALSE(streamError(f.header, f.payload, {}, piece).has_value());
  std::vector<std::byte> p = f.payload;
  p[5555] ^= std::byte{0x10};
  const auto err = streamError(f.header, p, {});
  REQUIRE(err.has_value());
  CHECK(err->offset() == fo::kChecksum);
  CHECK(err->peer() == kPeer);
  // One byte short: the length error points where the payload ended.
  const auto shorter =
      streamError(f.header, std::span<const std::byte>(f.payload).first(f.payload.size() - 1), {});
  REQUIRE(shorter.has_value());
  CHECK(shorter->offset() == gossamer::kFrameHeaderBytes + f.payload.size() - 1);
}

TEST_CASE("wire: a trailing-checksum frame checks its header at once and its payload against the trailer",
          "[wire]") {
  const TrailingFrame f = makeTrailingFrame(40'000);
  const std::size_t trailerAt = gossamer::kFrameHeaderBytes + f.payload.size();
  REQUIRE_FALSE(streamError(f.header, f.payload, f.trailer).has_value());
  REQUIRE_FALSE(streamError(f.header, f.payload, f.trailer, 65536).has_value());
  SECTION("a payload bit") {
    for (std::size_t byte : {std::size_t{0}, std::size_t{77'777}, f.payload.size() - 1}) {
      std::vector<std::byte> p = f.payload;
      p[byte] ^= std::byte{0x01};
      const auto err = streamError(f.header, p, f.trailer);
      INFO("payload byte " << byte);
      REQUIRE(err.has_value());
      CHECK(err->offset() == trailerAt);
      CHECK(err->peer() == kPeer);
    }
  }
  SECTION("a trailer bit") {
    std::vector<std::byte> t = f.trailer;
    t[3] ^= std::byte{0x80};
    const auto err = streamError(f.header, f.payload, t);
    REQUIRE(err.has_value());
    CHECK(err->offset() == trailerAt);
  }
  SECTION("a header bit that still decodes: caught before any payload is read") {
    HeaderBytes h = f.header;
    h[fo::kStep] ^= std::byte{0x04};
    REQUIRE_FALSE(decodeError(h).has_value());
    const FrameHeader d = gossamer::decodeFrameHeader(h, kPeer, kWorld);
    gossamer::StreamFrameVerifier v;
    try {
      v.begin(h, d, kPeer);
      FAIL("begin accepted a corrupted header");
    } catch (const ProtocolError& e) {
      CHECK(e.offset() == fo::kChecksum);
      CHECK(e.peer() == kPeer);
    }
  }
  SECTION("a missing trailer") {
    const auto err = streamError(f.header, f.payload, {});
    REQUIRE(err.has_value());
    CHECK(err->offset() == trailerAt);
  }
  SECTION("on a message transport it is refused at the kind") {
    const auto err = verifyError(f.header, f.payload);
    REQUIRE(err.has_value());
    CHECK(err->offset() == fo::kKind);
  }
}

TEST_CASE("wire: crc32cCombine and copyAndCrc32c agree with crc32c of the whole", "[wire]") {
  std::mt19937 rng(31);
  std::vector<std::byte> data(200'000);
  for (auto& b : data) b = std::byte(rng() & 0xFF);
  const std::span<const std::byte> all(data);
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{48}, std::size_t{16'385},
                          std::size_t{199'999}, data.size()}) {
    INFO("cut at " << cut);
    const auto a = all.first(cut), b = all.subspan(cut);
    REQUIRE(gossamer::crc32cCombine(gossamer::crc32c(a), gossamer::crc32c(b), b.size()) ==
            gossamer::crc32c(all));
  }
  for (std::size_t n :
       {std::size_t{0}, std::size_t{5}, std::size_t{16'384}, std::size_t{16'385}, data.size()}) {
    std::vector<std::byte> out(n, std::byte{0});
    const std::uint32_t c = gossamer::copyAndCrc32c(out.data(), data.data(), n);
    INFO(n << " bytes");
    REQUIRE(std::equal(out.begin(), out.end(), data.begin()));
    REQUIRE(c == gossamer::crc32c(all.first(n)));
  }
}

TEST_CASE("wire: a header encoded from the payload's CRC equals one encoded from the payload", "[wire]") {
  for (FrameKind kind : {FrameKind::kData, FrameKind::kDataTrailing}) {
    for (std::size_t elements : {std::size_t{0}, std::size_t{1}, std::size_t{70'000}}) {
      const auto payload = patternPayload(DType::kFloat64, elements);
      const Tag tag = Tag::make(Op::kAllreduce, 123456, 42);
      const auto direct = gossamer::encodeFrameHeader(kind, DType::kFloat64, 3, tag, payload);
      const auto fromCrc = gossamer::encodeFrameHeader(kind, DType::kFloat64, 3, tag, payload.size(),
                                                       gossamer::crc32c(payload));
      INFO("kind " << int(kind) << ", " << elements << " elements");
      REQUIRE(direct == fromCrc);
    }
  }
  CHECK_THROWS_AS(gossamer::encodeFrameHeader(FrameKind::kData, DType::kFloat32, 0, Tag{}, 6, 0u),
                  InvalidArgument);
}
