// Writes a whole buffer to a file descriptor: the loop that checkpoints, key
// files and the file store share. Internal to the SDK.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace gossamer::detail {

// Writes all `size` bytes at `data` to `fd`, going on after short writes and
// writes cut short by a signal (EINTR).
// @returns 0 once every byte is written; otherwise the errno of the write
//          that failed, or EIO for a write that wrote nothing. Never throws.
inline int writeFully(int fd, const void* data, std::size_t size) noexcept {
  const auto* at = static_cast<const std::byte*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace gossamer::detail
