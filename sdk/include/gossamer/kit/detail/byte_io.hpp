// Little-endian reads and writes of fixed-size values at byte offsets, for
// the codecs of the wire formats (wire.cpp, the membership service's
// membership_codec.cpp). Internal: not installed (sdk/CMakeLists.txt).
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>
#include <span>

namespace gossamer::detail {

// Little-endian on the wire; every supported host is little-endian.
static_assert(std::endian::native == std::endian::little, "big-endian hosts are not supported");

/// Writes `v` at byte `off` of `b`, which holds at least off + sizeof(T) bytes.
template <typename T>
void put(std::span<std::byte> b, std::size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}

/// The value at byte `off` of `b`, which holds at least off + sizeof(T) bytes.
template <typename T>
T get(std::span<const std::byte> b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

}  // namespace gossamer::detail
