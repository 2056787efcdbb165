// The membership service's control messages (membership_codec.hpp).
#include "membership_codec.hpp"

#include <algorithm>
#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/kit/detail/byte_io.hpp"

namespace gossamer::membership::codec {

namespace {

using gossamer::detail::get;
using gossamer::detail::put;

}  // namespace

std::vector<std::byte> encode(const Message& m) {
  std::vector<std::byte> b(kHeaderBytes + 4 * m.members.size(), std::byte{0});
  put<std::uint32_t>(b, 0, kMagic);
  put<std::uint8_t>(b, 4, static_cast<std::uint8_t>(m.kind));
  for (std::size_t i = 0; i < 3; ++i)
    put<std::uint8_t>(b, 5 + i, static_cast<std::uint8_t>(m.incarnation >> (8 * i)));
  put<std::uint64_t>(b, 8, m.viewNumber);
  put<std::int32_t>(b, 16, m.viewCoordinator);
  put<std::int32_t>(b, 20, m.arg);
  put<std::uint64_t>(b, 24, m.value);
  put<std::uint32_t>(b, 32, static_cast<std::uint32_t>(m.members.size()));
  put<std::uint32_t>(b, 36, m.flags);
  put<std::uint64_t>(b, 40, m.fewest);
  put<std::int32_t>(b, 48, m.fromCoordinator);
  put<std::uint32_t>(b, 52, m.skipped);
  for (std::size_t i = 0; i < m.members.size(); ++i) put<std::int32_t>(b, kHeaderBytes + 4 * i, m.members[i]);
  return b;
}

Message decode(std::span<const std::byte> b, int peer, int worldSize) {
  auto bad = [&](std::size_t off, const std::string& what) {
    return ProtocolError(peer, off, "membership message from rank " + std::to_string(peer) + ": " + what);
  };
  if (b.size() < kHeaderBytes) throw bad(0, "only " + std::to_string(b.size()) + " bytes");
  if (get<std::uint32_t>(b, 0) != kMagic) throw bad(0, "bad magic");
  Message m;
  const auto kind = get<std::uint8_t>(b, 4);
  if (kind < 1 || kind > 6) throw bad(4, "unknown kind " + std::to_string(kind));
  m.kind = static_cast<Kind>(kind);
  for (std::size_t i = 0; i < 3; ++i) m.incarnation |= std::uint32_t{get<std::uint8_t>(b, 5 + i)} << (8 * i);
  m.viewNumber = get<std::uint64_t>(b, 8);
  // Far beyond any job's view changes; a number near 2^64 would wrap the
  // next coordinator's "newest + 1" to 0, and no later view would count.
  if (m.viewNumber >= kMaxViewNumber) throw bad(8, "view number " + std::to_string(m.viewNumber));
  m.viewCoordinator = get<std::int32_t>(b, 16);
  if (m.viewCoordinator < -1 || m.viewCoordinator >= worldSize)
    throw bad(16, "view coordinator " + std::to_string(m.viewCoordinator));
  m.arg = get<std::int32_t>(b, 20);
  if (m.arg < -1 || m.arg >= worldSize) throw bad(20, "rank " + std::to_string(m.arg) + " outside the job");
  m.value = get<std::uint64_t>(b, 24);
  const auto count = get<std::uint32_t>(b, 32);
  m.flags = get<std::uint32_t>(b, 36);
  if (m.flags > 3 || (m.flags != 0 && m.kind != Kind::kState && m.kind != Kind::kView))
    throw bad(36, "unknown flags " + std::to_string(m.flags));
  m.fewest = get<std::uint64_t>(b, 40);
  if (m.fewest > m.value) throw bad(40, "fewest steps above the resume step");
  m.fromCoordinator = get<std::int32_t>(b, 48);
  if (m.fromCoordinator < -1 || m.fromCoordinator >= worldSize)
    throw bad(48, "coordinator " + std::to_string(m.fromCoordinator) + " of the previous view");
  m.skipped = get<std::uint32_t>(b, 52);
  // (View 0 is the job's start, which every rank installs by itself: no
  // coordinator announces it, and one that claimed to would count as newer
  // than it is: its predecessor's number would wrap.)
  if (m.kind == Kind::kView && m.viewNumber == 0) throw bad(8, "a view numbered 0 is never announced");
  // A rank holds the job's first view (number 0, coordinator -1) or one a
  // coordinator announced (number above 0, coordinator one of its members):
  // any other pair names no view a rank can hold, and what a peer says in it
  // would be kept for a view that never comes (membership.cpp, Early).
  if ((m.viewNumber == 0) != (m.viewCoordinator == -1))
    throw bad(16, "view " + std::to_string(m.viewNumber) + " with coordinator " +
                      std::to_string(m.viewCoordinator));
  if (m.skipped != 0 && (m.kind != Kind::kView || m.skipped >= m.viewNumber))
    throw bad(52,
              std::to_string(m.skipped) + " view numbers skipped from view " + std::to_string(m.viewNumber));
  if (count > static_cast<std::uint32_t>(worldSize)) throw bad(32, "count " + std::to_string(count));
  if (b.size() != kHeaderBytes + 4 * std::size_t{count})
    throw bad(32,
              "count " + std::to_string(count) + " does not match " + std::to_string(b.size()) + " bytes");
  if ((m.kind == Kind::kView && count == 0) || (count > 0 && m.kind != Kind::kView && m.kind != Kind::kState))
    throw bad(32, "count " + std::to_string(count) + " for this kind");
  for (std::uint32_t i = 0; i < count; ++i) {
    const int r = get<std::int32_t>(b, kHeaderBytes + 4 * i);
    if (r < 0 || r >= worldSize || (!m.members.empty() && r <= m.members.back()))
      throw bad(kHeaderBytes + 4 * i, "member " + std::to_string(r) + " out of range or order");
    m.members.push_back(r);
  }
  // A view's coordinator is one of its members (it decided the view as
  // its lowest survivor); its model source too (every rank broadcasts from it).
  if (m.kind == Kind::kView && !std::binary_search(m.members.begin(), m.members.end(), m.viewCoordinator))
    throw bad(16, "view coordinator " + std::to_string(m.viewCoordinator) + " is not a member of the view");
  // A view's model source is one of its members (every rank broadcasts from it).
  if (m.kind == Kind::kView && m.arg >= 0 && !std::binary_search(m.members.begin(), m.members.end(), m.arg))
    throw bad(20, "model source " + std::to_string(m.arg) + " is not a member of the view");
  return m;
}

}  // namespace gossamer::membership::codec
