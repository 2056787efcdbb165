// Fault injection: drops and duplicates a rank's sends, and partitions the
// job for a while (see faults.hpp). What it puts on the wire: nothing for a
// dropped message (or one across the partition), the message twice (two
// frames, same tag and payload) for a duplicated one.
#include "gossamer/transports/faults.hpp"

#include <chrono>
#include <climits>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>

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
        rng_(o.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(inner_->rank())),
        start_(std::chrono::steady_clock::now()),
        group_(static_cast<std::size_t>(inner_->worldSize()), -1) {
    for (std::size_t g = 0; g < o.partitionGroups.size(); ++g)
      for (int r : o.partitionGroups[g]) group_[static_cast<std::size_t>(r)] = static_cast<int>(g);
  }

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

  // Whether the partition keeps this rank from `dst` now.
  bool cut(int dst) const {
    if (options_.partitionGroups.empty()) return false;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (t < options_.partitionStartSeconds || t >= options_.partitionStartSeconds + options_.partitionSeconds)
      return false;
    return group_[static_cast<std::size_t>(rank())] != group_[static_cast<std::size_t>(dst)];
  }

  Fate draw(int dst, const Tag& tag) {
    if (dst == rank()) return Fate::kSend;
    if (cut(dst)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.partitioned;
      return Fate::kDrop;
    }
    if (options_.gossipOnly && tag.op != Op::kGossip) return Fate::kSend;
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
  std::chrono::steady_clock::time_point start_;
  std::vector<int> group_;  // each rank's partition group (-1: in none)
};

}  // namespace

std::vector<std::vector<int>> parsePartition(const std::string& text, int worldSize) {
  std::vector<std::vector<int>> groups;
  if (text.empty()) return groups;
  std::vector<bool> seen(static_cast<std::size_t>(worldSize), false);
  std::stringstream all(text);
  std::string group;
  while (std::getline(all, group, '|')) {
    std::vector<int> g;
    std::stringstream ranks(group);
    std::string r;
    while (std::getline(ranks, r, ',')) {
      int v = -1;
      try {
        std::size_t used = 0;
        v = std::stoi(r, &used);
        GOSSAMER_ENFORCE(used == r.size(), "partition '" << text << "': '" << r << "' is not a rank");
      } catch (const std::logic_error&) {
        throw InvalidArgument("partition '" + text + "': '" + r + "' is not a rank");
      }
      GOSSAMER_ENFORCE(v >= 0 && v < worldSize, "partition '" << text << "': rank " << v
                                                              << " is outside the job of " << worldSize
                                                              << " ranks");
      GOSSAMER_ENFORCE(!seen[static_cast<std::size_t>(v)],
                       "partition '" << text << "': rank " << v << " is in two groups");
      seen[static_cast<std::size_t>(v)] = true;
      g.push_back(v);
    }
    GOSSAMER_ENFORCE(!g.empty(), "partition '" << text << "': an empty group");
    groups.push_back(std::move(g));
  }
  GOSSAMER_ENFORCE(groups.size() >= 2,
                   "partition '" << text << "': needs at least two groups separated by '|'");
  return groups;
}

std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const FaultOptions& o) {
  GOSSAMER_ENFORCE(inner != nullptr, "no transport to wrap");
  GOSSAMER_ENFORCE(o.dropProbability >= 0 && o.dropProbability < 1,
                   "drop probability " << o.dropProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(o.duplicateProbability >= 0 && o.duplicateProbability < 1,
                   "duplicate probability " << o.duplicateProbability << " outside [0, 1)");
  GOSSAMER_ENFORCE(
      o.partitionStartSeconds >= 0 && o.partitionSeconds >= 0,
      "partition start " << o.partitionStartSeconds << " s, length " << o.partitionSeconds << " s");
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
                "reliable transport)")
          .text("partition", "", {},
                "groups cut off from each other for a while, e.g. \"0,1,2,3|4,5,6,7\" (empty: none); every "
                "send between groups is dropped")
          .real("partition_start_seconds", 0.0, {0.0, true, 1e9, true},
                "when the partition starts, seconds after the transport is made")
          .real("partition_seconds", 0.0, {0.0, true, 1e9, true}, "how long the partition lasts, seconds"),
      [](const TransportContext& ctx, std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
        const Config& c = ctx.config;
        if (!c.get<bool>("faults.enabled")) return inner;
        FaultOptions o;
        o.dropProbability = c.get<double>("faults.drop");
        o.duplicateProbability = c.get<double>("faults.duplicate");
        const int seed = c.get<int>("faults.seed");
        o.seed = seed < 0 ? c.seed : static_cast<std::uint64_t>(seed);
        o.gossipOnly = c.get<std::string>("faults.messages") == "gossip";
        try {
          o.partitionGroups = parsePartition(c.get<std::string>("faults.partition"), c.worldSize);
        } catch (const InvalidArgument& e) {
          throw ConfigError(c.sourceFile, 0, "faults.partition", e.what());
        }
        o.partitionStartSeconds = c.get<double>("faults.partition_start_seconds");
        o.partitionSeconds = c.get<double>("faults.partition_seconds");
        return wrap(std::move(inner), o);
      });
}

}  // namespace gossamer::faults
