// Checkpoint files: named binary sections (model, optimizer state, step,
// view, RNG state, ...) written atomically, read back with every field
// checked.
//
// Writing: the bytes go to "<path>.tmp.<pid>", which is fsynced, renamed over
// <path> and the directory fsynced, so a process killed at any moment leaves
// either the previous checkpoint or the new one, never a torn file.
//
// File layout (little-endian):
//   0   8  magic "GSMRCKPT"
//   8   4  version (1)
//  12   4  number of sections S
//  16      S x { u32 name length n, n bytes name, u64 payload length m, m bytes payload }
//   end-4  u32 CRC-32C of every byte before it
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace gossamer {

/// A checkpoint in memory: section name -> bytes.
class Checkpoint {
 public:
  /// Adds or replaces section `name` (1..255 bytes) with `bytes`.
  /// @throws InvalidArgument for an empty or too long name.
  void put(const std::string& name, std::span<const std::byte> bytes);
  /// Section `name` as raw bytes. @throws InvalidArgument if it is missing.
  const std::vector<std::byte>& get(const std::string& name) const;
  bool has(const std::string& name) const { return sections_.count(name) != 0; }

  /// Typed helpers: a vector of trivially copyable T, or one value.
  template <typename T>
  void putArray(const std::string& name, std::span<const T> values) {
    put(name, std::as_bytes(values));
  }
  template <typename T>
  void putValue(const std::string& name, const T& value) {
    put(name, std::as_bytes(std::span<const T>(&value, 1)));
  }
  /// @throws InvalidArgument if the section is missing or its length is not
  ///         a whole number of T (getValue: not exactly one T); for a
  ///         floating-point T, if a value is NaN or infinite (no state this
  ///         library saves holds one: a file whose checksum was recomputed
  ///         over such a value would otherwise poison the resumed run).
  template <typename T>
  std::vector<T> getArray(const std::string& name) const;
  template <typename T>
  T getValue(const std::string& name) const;

  /// Writes the checkpoint to `path` atomically (see the file comment).
  /// @throws Error naming the path and the system error when a write,
  ///         fsync or rename fails (the previous file is then untouched).
  void save(const std::string& path) const;
  /// Reads and checks `path`: magic, version, section lengths against the
  /// file size before any allocation, and the CRC-32C.
  /// @throws Error if it cannot be read; ProtocolError (peer -1, the byte
  ///         offset of the bad field) if it is malformed or corrupt.
  static Checkpoint load(const std::string& path);
  /// The file image save() writes, and its parser (for tests and transfers).
  std::vector<std::byte> serialize() const;
  static Checkpoint parse(std::span<const std::byte> file, const std::string& what = "checkpoint");

 private:
  [[noreturn]] static void throwBadSize(const std::string& name, std::size_t bytes, std::size_t element);
  [[noreturn]] static void throwNotFinite(const std::string& name, std::size_t index, double value);
  template <typename T>
  static void checkFinite(const std::string& name, std::span<const T> values) {
    if constexpr (std::is_floating_point_v<T>)
      for (std::size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i])) throwNotFinite(name, i, static_cast<double>(values[i]));
  }
  std::map<std::string, std::vector<std::byte>> sections_;
};

template <typename T>
std::vector<T> Checkpoint::getArray(const std::string& name) const {
  const auto& b = get(name);
  if (b.size() % sizeof(T) != 0) throwBadSize(name, b.size(), sizeof(T));
  std::vector<T> out(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
  checkFinite<T>(name, out);
  return out;
}

template <typename T>
T Checkpoint::getValue(const std::string& name) const {
  const auto& b = get(name);
  if (b.size() != sizeof(T)) throwBadSize(name, b.size(), sizeof(T));
  T v;
  std::memcpy(&v, b.data(), sizeof(T));
  checkFinite<T>(name, std::span<const T>(&v, 1));
  return v;
}

}  // namespace gossamer
