// Test support: a transport that forwards every call to the one it wraps,
// for tests' own transport services to derive from and change what they
// watch (a count of sends, a withheld or failed receive).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "gossamer/transport.hpp"

namespace gossamer::testing {

/// A tag no component sends on: a receive posted with it never completes,
/// for a test service that withholds or fails a receive.
inline const Tag kTagNobodySends = Tag::make(Op::kUser, Tag::kMaxStep);

/// Forwards everything to `inner`.
class Forwarding : public Transport {
 public:
  explicit Forwarding(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int worldSize() const override { return inner_->worldSize(); }
  std::string name() const override { return "forwarding(" + inner_->name() + ")"; }
  double timeoutSeconds() const override { return inner_->timeoutSeconds(); }
  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return inner_->isend(dst, tag, data, dtype);
  }
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t> checksum) override {
    return inner_->isendBorrowed(dst, tag, data, dtype, checksum);
  }
  TransportCapabilities capabilities() const noexcept override { return inner_->capabilities(); }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecv(sources, tag, buffer);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecvView(source, tag, buffer);
  }
  std::size_t discardArrived(const std::function<bool(const Tag&)>& stale) override {
    return inner_->discardArrived(stale);
  }
  std::exception_ptr peerFailure(int rank) const override { return inner_->peerFailure(rank); }
  void close() override { inner_->close(); }
  void abort() override { inner_->abort(); }
  TransportStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<Transport> inner_;
};

}  // namespace gossamer::testing
