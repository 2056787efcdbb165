// Checkpoint files (checkpoint.hpp): layout, atomic save, checked load.
#include "gossamer/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/write_fully.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"

namespace gossamer {

namespace {

constexpr char kMagic[8] = {'G', 'S', 'M', 'R', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;

template <typename T>
void append(std::vector<std::byte>& out, T v) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

[[noreturn]] void systemError(const std::string& what, const std::string& path) {
  throw Error("checkpoint: cannot " + what + " '" + path + "': " + std::strerror(errno));
}

// Writes all of `bytes` to `fd`.
void writeAll(int fd, std::span<const std::byte> bytes, const std::string& path) {
  if (const int err = detail::writeFully(fd, bytes.data(), bytes.size()); err != 0) {
    errno = err;
    systemError("write", path);
  }
}

}  // namespace

void Checkpoint::put(const std::string& name, std::span<const std::byte> bytes) {
  GOSSAMER_ENFORCE(!name.empty() && name.size() <= 255, "checkpoint section name '" << name << "'");
  sections_[name].assign(bytes.begin(), bytes.end());
}

const std::vector<std::byte>& Checkpoint::get(const std::string& name) const {
  const auto it = sections_.find(name);
  if (it == sections_.end()) throw InvalidArgument("the checkpoint has no section '" + name + "'");
  return it->second;
}

void Checkpoint::throwNotFinite(const std::string& name, std::size_t index, double value) {
  throw InvalidArgument("checkpoint section '" + name + "': value " + std::to_string(index) + " (" +
                        std::to_string(value) + ") is not finite");
}

void Checkpoint::throwBadSize(const std::string& name, std::size_t bytes, std::size_t element) {
  throw InvalidArgument("checkpoint section '" + name + "' has " + std::to_string(bytes) +
                        " bytes, not a whole number of " + std::to_string(element) + "-byte values");
}

std::vector<std::byte> Checkpoint::serialize() const {
  std::vector<std::byte> out(sizeof(kMagic));
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  append<std::uint32_t>(out, kVersion);
  append<std::uint32_t>(out, static_cast<std::uint32_t>(sections_.size()));
  for (const auto& [name, bytes] : sections_) {
    append<std::uint32_t>(out, static_cast<std::uint32_t>(name.size()));
    const auto* n = reinterpret_cast<const std::byte*>(name.data());
    out.insert(out.end(), n, n + name.size());
    append<std::uint64_t>(out, bytes.size());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  append<std::uint32_t>(out, crc32c(out));
  return out;
}

Checkpoint Checkpoint::parse(std::span<const std::byte> file, const std::string& what) {
  auto bad = [&](std::size_t off, const std::string& msg) {
    return ProtocolError(-1, off, what + ": " + msg + " (byte " + std::to_string(off) + ")");
  };
  if (file.size() < sizeof(kMagic) + 12) throw bad(0, "only " + std::to_string(file.size()) + " bytes");
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0)
    throw bad(0, "not a Gossamer checkpoint (bad magic)");
  auto u32 = [&](std::size_t off) {
    std::uint32_t v;
    std::memcpy(&v, file.data() + off, 4);
    return v;
  };
  auto u64 = [&](std::size_t off) {
    std::uint64_t v;
    std::memcpy(&v, file.data() + off, 8);
    return v;
  };
  const std::size_t body = file.size() - 4;
  if (crc32c(file.first(body)) != u32(body)) throw bad(body, "checksum mismatch (torn or corrupt file)");
  if (u32(8) != kVersion)
    throw bad(8, "version " + std::to_string(u32(8)) + ", expected " + std::to_string(kVersion));
  const std::uint32_t count = u32(12);
  Checkpoint c;
  std::size_t off = 16;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (body - off < 4) throw bad(off, "section " + std::to_string(i) + " runs past the end");
    const std::uint32_t n = u32(off);
    if (n == 0 || n > 255 || body - off - 4 < std::size_t{n} + 8) throw bad(off, "bad section name length");
    std::string name(reinterpret_cast<const char*>(file.data() + off + 4), n);
    if (c.sections_.count(name) != 0) throw bad(off, "section '" + name + "' appears twice");
    off += 4 + n;
    const std::uint64_t m = u64(off);
    if (m > body - off - 8)
      throw bad(off, "section '" + name + "' length " + std::to_string(m) + " runs past the end");
    off += 8;
    c.sections_[name].assign(file.begin() + static_cast<std::ptrdiff_t>(off),
                             file.begin() + static_cast<std::ptrdiff_t>(off + m));
    off += m;
  }
  if (off != body) throw bad(off, "trailing bytes after the last section");
  return c;
}

void Checkpoint::save(const std::string& path) const {
  const auto bytes = serialize();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) systemError("create", tmp);
  try {
    writeAll(fd, bytes, tmp);
    if (::fsync(fd) != 0) systemError("fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    systemError("close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    systemError("rename to", path);
  }
  // The rename itself is durable once the directory is synced.
  const auto dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint Checkpoint::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error("checkpoint: '" + path + "' is not a regular file" + (ec ? " (" + ec.message() + ")" : ""));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("checkpoint: cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) throw Error("checkpoint: cannot read the size of '" + path + "'");
  const auto size = static_cast<std::size_t>(end);
  in.seekg(0);
  std::vector<std::byte> file(size);
  if (size > 0 && !in.read(reinterpret_cast<char*>(file.data()), static_cast<std::streamsize>(size)))
    throw Error("checkpoint: cannot read '" + path + "'");
  return parse(file, "checkpoint '" + path + "'");
}

}  // namespace gossamer
