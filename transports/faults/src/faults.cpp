// Fault injection: drops and duplicates a rank's sends (see faults.hpp).
// What it puts on the wire: nothing for a dropped message, the message twice
// (two frames, same tag and payload) for a duplicated one.
#include "gossamer/transports/faults.hpp"

#include <climits>
#include <deque>
#include <mutex>
#include <random>

#include "gossamer/errors.hpp"
#include "gossamer/mailbox.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::faults {

namespace {

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, const FaultOptions& o)
      : inner_(std::move(inner)),
        options_(o),
        rng_(o.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(inner_->rank())) {}

  int rank() const override { return inner_->rank(); }
  int worldSize() const override { return inner_->worldSize(); }
  std::string name() const override { return inner_->name() + "+faults"; }
  double timeoutSeconds() const override { return inner_->timeoutSeconds(); }

  Request isend(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype) override {
    return send(dst, tag, data, [&] { return inner_->isend(dst, tag, data, dtype); });
  }
  // The wrapper copies anyway (a duplicate is a second isend), so borrowed
  // sends become plain ones.
  Request isendBorrowed(int dst, const Tag& tag, std::span<const std::byte> data, DType dtype,
                        std::optional<std::uint32_t>) override {
    return isend(dst, tag, data, dtype);
  }
  Request irecv(std::span<const int> sources, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecv(sources, tag, buffer);
  }
  Request irecvView(int source, const Tag& tag, std::span<std::byte> buffer) override {
    return inner_->irecvView(source, tag, buffer);
  }
  void close() override {
    extra_.clear();
    inner_->close();
  }
  void abort() override {
    extra_.clear();
    inner_->abort();
  }
  TransportStats stats() const override { return inner_->stats(); }
  const FaultStats& faults() const { return stats_; }

 private:
  enum class Fate { kSend, kDrop, kDuplicate };

  Fate draw(int dst, const Tag& tag) {
    if (dst == rank() || (options_.gossipOnly && tag.op != Op::kGossip)) return Fate::kSend;
    std::lock_guard<std::mutex> lock(mu_);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) < options_.dropProbability) {
      ++stats_.dropped;
      return Fate::kDrop;
    }
    if (u(rng_) < options_.duplicateProbability) {
      ++stats_.duplicated;
      return Fate::kDuplicate;
    }
    return Fate::kSend;
  }

  template <typename SendFn>
  Request send(int dst, const Tag& tag, std::span<const std::byte> data, SendFn sendOnce) {
    GOSSAMER_ENFORCE(dst >= 0 && dst < worldSize(), "destination " << dst << " outside " << worldSize());
    switch (draw(dst, tag)) {
      case Fate::kDrop:
        return Request(detail::completedRequest(dst, data.size()));
      case Fate::kDuplicate: {
        // The copy's request is kept until it completes: dropping a pending
        // send's handle would cancel it.
        std::lock_guard<std::mutex> lock(mu_);
        while (!extra_.empty() && extra_.front().test()) extra_.pop_front();
        extra_.push_back(sendOnce());
        break;
      }
      case Fate::kSend:
        break;
    }
    return sendOnce();
  }

  std::unique_ptr<Transport> inner_;
  FaultOptions options_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  FaultStats stats_;
  std::deque<Request> extra_;  // the duplicates' sends still in flight
};

}  // namespace

std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const FaultOptions& o) {
  GOSSAMER_ENFORCE(inner != nullptr, "no transport to wrap");
  GOSSAMER_ENFORCE(o.dropProbability >= 0 && o.dropProbability < 1,
                   "drop probability " << o.dropProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.duplicateProbability >= 0 && o.duplicateProbability < 1,
                   "duplicate probability " << o.duplicateProbability << " outside [0, 1)");
  return std::make_unique<FaultyTransport>(std::move(inner), o);
}

const FaultStats* faultStats(const Transport& t) {
  const auto* f = dynamic_cast<const FaultyTransport*>(&t);
  return f != nullptr ? &f->faults() : nullptr;
}

void registerWith(Registry& registry) {
  registry.addTransportService(
      "faults", "fault injection on every rank's sends, for tests and demos (off unless enabled)",
      KeySet()
          .boolean("enabled", false, "wrap the transport with the fault injector")
          .real("drop", 0.0, {0.0, true, 1.0, false}, "probability that a send is lost")
          .real("duplicate", 0.0, {0.0, true, 1.0, false}, "probability that a send arrives twice")
          .integer("seed", -1, -1, INT_MAX, "the injector's seed (-1: the run's seed)")
          .text("messages", "all", {"all", "gossip"},
                "which sends are touched: all, or only the gossip algorithms' (the collectives assume a "
                "reliable transport)"),
      [](const TransportContext& ctx, std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
        const Config& c = ctx.config;
        if (!c.get<bool>("faults.enabled")) return inner;
        FaultOptions o;
        o.dropProbability = c.get<double>("faults.drop");
        o.duplicateProbability = c.get<double>("faults.duplicate");
        const int seed = c.get<int>("faults.seed");
        o.seed = seed < 0 ? c.seed : static_cast<std::uint64_t>(seed);
        o.gossipOnly = c.get<std::string>("faults.messages") == "gossip";
        return wrap(std::move(inner), o);
      });
}

}  // namespace gossamer::faults
