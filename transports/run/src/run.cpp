// The `run` transport service (run.hpp): wraps every Agent's transport with
// the stall report and the run metrics' per-peer byte counters.
#include "gossamer/transports/run.hpp"

#include <nlohmann/json.hpp>

#include "gossamer/log.hpp"
#include "gossamer/metrics.hpp"
#include "gossamer/transports/stall.hpp"

namespace gossamer::run {

namespace {

// The `stall` record of docs/metrics.md.
void record(Metrics& metrics, const stall::StallReport& r, const std::string& message) {
  nlohmann::ordered_json last = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.lastFromPeers.size() && i < r.peers.size(); ++i) {
    const auto& l = r.lastFromPeers[i];
    nlohmann::ordered_json e;
    e["rank"] = r.peers[i];
    e["seconds_ago"] = l.any ? nlohmann::ordered_json(l.secondsAgo) : nlohmann::ordered_json();
    e["operation"] = l.any ? nlohmann::ordered_json(std::string(opName(l.tag.op))) : nlohmann::ordered_json();
    e["tag_step"] = l.any ? nlohmann::ordered_json(l.tag.step) : nlohmann::ordered_json();
    last.push_back(std::move(e));
  }
  metrics.emit("stall", r.tag.step,
               {{"peers", r.peers},
                {"operation", std::string(opName(r.tag.op))},
                {"send", r.send},
                {"tag_step", static_cast<std::int64_t>(r.tag.step)},
                {"segment", static_cast<std::int64_t>(r.tag.segment)},
                {"waited_s", r.waitedSeconds},
                {"since", r.sinceUnixSeconds},
                {"last_from_peer", JsonText{last.dump()}},
                {"message", message}});
}

}  // namespace

void registerWith(Registry& registry) {
  // Its keys (run.stall_seconds, run.metrics) are the SDK's `run:` section.
  registry.addTransportService(
      "run", "", KeySet(),
      [](const TransportContext& ctx, std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
        const double seconds = ctx.config.get<double>("run.stall_seconds");
        Metrics* metrics = ctx.metrics != nullptr && ctx.metrics->enabled() ? ctx.metrics : nullptr;
        if (seconds <= 0 && metrics == nullptr) return inner;
        stall::Options o;
        o.thresholdSeconds = seconds;
        if (metrics != nullptr) {
          o.meter = metrics->links();
          o.onStall = [metrics](const stall::StallReport& r) {
            const std::string text = stall::describe(r);
            log(LogLevel::kWarning, text);
            record(*metrics, r, text);
          };
          const int rank = ctx.rank;
          o.onPause = [metrics, rank](double seconds, double since) {
            const std::string text = stall::describePause(rank, seconds);
            log(LogLevel::kWarning, text);
            metrics->emit("pause", 0, {{"paused_s", seconds}, {"since", since}, {"message", text}});
          };
        }
        return stall::wrap(std::move(inner), std::move(o));
      });
}

}  // namespace gossamer::run
