// Feeds a membership control message (transports/membership/src/
// membership_codec.hpp) to its decoder: the first byte is the world size
// (1..256), the rest the message from rank 0. Checks: only ProtocolError
// escapes; a decoded message has its fields in range (coordinator and arg in
// [-1, world), flags <= 3 and only on a state or view, fewest <= value, views skipped only
// by a view and fewer than its number, members only for a view,
// ascending in [0, world)); encode gives back the input.
#include <algorithm>
#include <vector>

#include "fuzz_support.hpp"
#include "gossamer/errors.hpp"
#include "membership_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gossamer::membership::codec;
  if (size == 0) return 0;
  const int world = 1 + data[0];
  const auto in = gossamer::fuzz::bytesOf(data + 1, size - 1);
  Message m;
  try {
    m = decode(in, 0, world);
  } catch (const gossamer::ProtocolError& e) {
    FUZZ_CHECK(e.peer() == 0 && e.offset() <= std::max(in.size(), kHeaderBytes));
    return 0;
  }
  FUZZ_CHECK(m.viewCoordinator >= -1 && m.viewCoordinator < world && m.arg >= -1 && m.arg < world);
  FUZZ_CHECK(m.viewCoordinator != -1 || m.viewNumber == 0);  // only the first view has no coordinator
  FUZZ_CHECK(m.flags <= 3 && m.fewest <= m.value && m.incarnation < kIncarnationLimit);
  FUZZ_CHECK(m.flags == 0 || m.kind == Kind::kState || m.kind == Kind::kView);
  FUZZ_CHECK(m.skipped == 0 || (m.kind == Kind::kView && m.skipped < m.viewNumber));
  FUZZ_CHECK(m.kind != Kind::kView || !m.members.empty());
  FUZZ_CHECK(m.members.empty() || m.kind == Kind::kView || m.kind == Kind::kState);
  FUZZ_CHECK(std::is_sorted(m.members.begin(), m.members.end()) &&
             std::adjacent_find(m.members.begin(), m.members.end()) == m.members.end());
  for (int r : m.members) FUZZ_CHECK(r >= 0 && r < world);
  FUZZ_CHECK(encode(m) == std::vector<std::byte>(in.begin(), in.end()));
  return 0;
}
