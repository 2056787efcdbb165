#include "gossamer/kit/sub_transport.hpp"

#include <algorithm>

#include "gossamer/errors.hpp"

namespace gossamer {

SubTransport::SubTransport(Transport& parent, std::vector<int> members, std::uint8_t context)
    : parent_(parent), members_(std::move(members)), context_(context) {
  GOSSAMER_ENFORCE(!members_.empty(), "a sub-transport needs at least one member");
  GOSSAMER_ENFORCE(context != 0, "context 0 is the parent's own");
  auto sorted = members_;
  std::sort(sorted.begin(), sorted.end());
  GOSSAMER_ENFORCE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "duplicate member rank");
  GOSSAMER_ENFORCE(sorted.front() >= 0 && sorted.back() < parent.capacity(),
                   "member ranks must be in [0, " << parent.capacity() << ")");
  const auto it = std::find(members_.begin(), members_.end(), parent.rank());
  GOSSAMER_ENFORCE(it != members_.end(),
                   "rank " << parent.rank() << " is not a member of this sub-transport");
  rank_ = static_cast<int>(it - members_.begin());
}

int SubTransport::globalRank(int local) const {
  GOSSAMER_ENFORCE(local >= 0 && local < worldSize(), "local rank " << local << " outside " << worldSize());
  return members_[static_cast<std::size_t>(local)];
}

Tag SubTransport::translate(const Tag& tag) const {
  GOSSAMER_ENFORCE(tag.step < (std::uint64_t{1} << 32),
                   "step " << tag.step << " too large for a sub-transport");
  return Tag{tag.op, tag.segment, (std::uint64_t{context_} << 32) | tag.step};
}

Request SubTransport::isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) {
  return parent_.isend(globalRank(dst), translate(tag), data, dtype);
}

Request SubTransport::isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                                    std::optional<std::uint32_t> checksum) {
  return parent_.isendBorrowed(globalRank(dst), translate(tag), data, dtype, checksum);
}

Request SubTransport::irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) {
  std::vector<int> global;
  global.reserve(sources.size());
  for (int s : sources) global.push_back(globalRank(s));
  return parent_.irecv(global, translate(tag), buffer);
}

Request SubTransport::irecvView(int source, const Tag& tag, std::span<std::byte> buffer) {
  return parent_.irecvView(globalRank(source), translate(tag), buffer);
}

}  // namespace gossamer
