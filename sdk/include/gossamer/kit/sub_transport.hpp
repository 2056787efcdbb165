// A view of a subset of a Transport's ranks as a Transport of its own, like
// MPI_Comm_split: used for leader groups and other sub-communicators.
#pragma once

#include <cstdint>
#include <vector>

#include "gossamer/transport.hpp"

namespace gossamer {

/// Ranks `members` (global ranks of `parent`, in the order that defines the
/// local ranks 0..size-1) as their own Transport. Messages are kept apart from
/// the parent's and from other views by `context` (1..255), which is folded
/// into the upper 8 bits of the tag's 40-bit step; steps used through a view
/// must therefore stay below 2^32. Contexts 0x10-0x7F are Communicator::split's,
/// 0x01-0x02 and 0x81-0xFF the library's own (hierarchical optimizer, grid
/// algorithms, HiPS); pick others. The view does not own the parent: close()
/// and abort() do nothing (close the parent), and stats() are the parent's.
/// Only members may use a view (rank() of a non-member throws). The
/// requests it returns are the parent's: Request::peer() and the rank a
/// PeerFailure or ProtocolError names are the parent's ranks (job ranks,
/// which errors and the membership service speak of), not local ones; map
/// with globalRank() to compare.
class SubTransport final : public Transport {
 public:
  /// @throws InvalidArgument if members is empty, has duplicates or ranks
  ///         outside the parent (below its capacity(): joined ranks count), if the parent's rank is not a
  ///         member, or if context is 0.
  SubTransport(Transport& parent, std::vector<int> members, std::uint8_t context);

  int rank() const override { return rank_; }
  int worldSize() const override { return static_cast<int>(members_.size()); }
  std::string name() const override { return parent_.name() + "/sub"; }
  double timeoutSeconds() const override { return parent_.timeoutSeconds(); }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data,
                DType dtype = DType::kBytes) override;
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype = DType::kBytes,
                        std::optional<std::uint32_t> checksum = {}) override;
  /// The parent's.
  TransportCapabilities capabilities() const noexcept override { return parent_.capabilities(); }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override;
  /// The parent's irecvView (its hand-over, if any), on the translated rank and tag.
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override;
  void close() override {}
  TransportStats stats() const override { return parent_.stats(); }
  /// The parent's verdict on the member at local rank `rank` (naming its
  /// parent rank, as this view's errors do); null for a rank outside the view.
  std::exception_ptr peerFailure(int rank) const override {
    if (rank < 0 || rank >= worldSize()) return nullptr;
    return parent_.peerFailure(members_[static_cast<std::size_t>(rank)]);
  }

  /// Global rank of local rank `local`.
  int globalRank(int local) const;
  const std::vector<int>& members() const { return members_; }
  /// The transport this is a view of.
  Transport& parent() const { return parent_; }
  /// The context that keeps this view's messages apart (1..255).
  std::uint8_t context() const { return context_; }

 private:
  Tag translate(const Tag& tag) const;
  Transport& parent_;
  std::vector<int> members_;
  std::uint8_t context_;
  int rank_ = -1;
};

}  // namespace gossamer
