// Feeds a checkpoint file image to Checkpoint::parse, twice: as it is, and
// with its last 4 bytes replaced by the CRC-32C of the rest (so that the
// section parser behind the checksum is reached). Checks: only ProtocolError
// (peer -1, an offset within the file) escapes; a parsed checkpoint holds
// no more bytes than the file, and serialize() of it parses back to the
// same sections.
#include <vector>

#include "fuzz_support.hpp"
#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/wire.hpp"

namespace {

void parseOne(std::span<const std::byte> file) {
  gossamer::Checkpoint c;
  try {
    c = gossamer::Checkpoint::parse(file, "fuzz.ckpt");
  } catch (const gossamer::ProtocolError& e) {
    FUZZ_CHECK(e.peer() == -1 && e.offset() <= file.size());
    return;
  }
  const std::vector<std::byte> again = c.serialize();
  FUZZ_CHECK(again.size() <= file.size());
  const gossamer::Checkpoint back = gossamer::Checkpoint::parse(again, "again");
  FUZZ_CHECK(back.serialize() == again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = gossamer::fuzz::bytesOf(data, size);
  parseOne(file);
  if (size < 4) return 0;
  std::vector<std::byte> fixed(file.begin(), file.end());
  const std::uint32_t crc = gossamer::crc32c(file.first(size - 4));
  for (int i = 0; i < 4; ++i)
    fixed[size - 4 + static_cast<std::size_t>(i)] = std::byte((crc >> (8 * i)) & 0xFF);
  parseOne(fixed);
  return 0;
}
