// Feeds a rendezvous store request, as the zmq server receives it, to its
// parser (transports/zmq/src/store_request.hpp): the input is up to 8 frames
// separated by NUL bytes (two NULs in a row make the empty delimiter frame),
// which go to storeEnvelopeFrames and, after the envelope,
// parseStoreRequest; the first frame also goes to checkStoreKey alone.
// Checks: only InvalidArgument escapes; the envelope ends at the first empty
// frame; a parsed request has a key checkStoreKey accepts (1..200
// characters of [A-Za-z0-9._/-], no "..") and a set's or claim's value
// within 1 MiB, which a MemoryStore then holds (a claim only once).
#include <algorithm>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "store_request.hpp"

namespace {

bool validKeyText(const std::string& key) {
  if (key.empty() || key.size() > 200 || key.find("..") != std::string::npos) return false;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gossamer::zmq::store_wire;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> frames;
  for (std::size_t at = 0; frames.size() < 8;) {  // the server reads at most 8 frames
    const auto nul = in.find('\0', at);
    frames.push_back(in.substr(at, nul == std::string_view::npos ? std::string_view::npos : nul - at));
    if (nul == std::string_view::npos) break;
    at = nul + 1;
  }

  const std::string first(frames[0]);
  bool accepted = true;
  try {
    gossamer::checkStoreKey(first);
  } catch (const gossamer::InvalidArgument&) {
    accepted = false;
  }
  FUZZ_CHECK(accepted == validKeyText(first));

  const std::size_t envelope = storeEnvelopeFrames(frames);
  if (envelope == 0) {
    FUZZ_CHECK(frames[0].empty() || std::find_if(frames.begin(), frames.end(), [](std::string_view f) {
                                      return f.empty();
                                    }) == frames.end());
    return 0;
  }
  FUZZ_CHECK(envelope >= 2 && envelope <= frames.size() && frames[envelope - 1].empty());
  for (std::size_t i = 0; i + 1 < envelope; ++i) FUZZ_CHECK(!frames[i].empty());
  const auto body = std::span<const std::string_view>(frames).subspan(envelope);
  StoreRequest r;
  try {
    r = parseStoreRequest(body);
  } catch (const gossamer::InvalidArgument&) {
    return 0;
  }
  FUZZ_CHECK(validKeyText(r.key) && r.key == body[1]);
  gossamer::MemoryStore store;
  if (r.op == StoreRequest::Op::kSet) {
    FUZZ_CHECK(body.size() == 3 && body[0] == "set" && r.value == body[2] &&
               r.value.size() <= kMaxStoreValueBytes);
    store.set(r.key, r.value);
    FUZZ_CHECK(store.tryGet(r.key) == r.value);
  } else if (r.op == StoreRequest::Op::kClaim) {
    FUZZ_CHECK(body.size() == 3 && body[0] == "claim" && r.value == body[2] &&
               r.value.size() <= kMaxStoreValueBytes);
    FUZZ_CHECK(store.claim(r.key, r.value));
    FUZZ_CHECK(!store.claim(r.key, r.value + "x"));
    FUZZ_CHECK(store.tryGet(r.key) == r.value);
  } else {
    FUZZ_CHECK(body.size() == 2 && body[0] == "get" && r.value.empty());
    FUZZ_CHECK(!store.tryGet(r.key).has_value());
  }
  return 0;
}
