// Run metrics: what each rank records while a job runs (docs/metrics.md).
// Every record is one JSON object, appended as a line to
// <run.dir>/rank-<R>.jsonl and handed to the application's callbacks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "gossamer/kit/wire.hpp"

namespace gossamer {

/// One record as the run directory gets it.
struct MetricsRecord {
  std::string kind;  ///< "start", "step", "epoch", "stall", "view", "error", "end", or the application's.
  int rank = -1;     ///< Global rank that wrote it.
  std::uint64_t step = 0;  ///< Optimizer steps this rank had completed.
  double unixSeconds = 0;  ///< When, seconds since the Unix epoch (system clock).
  std::string json;        ///< The whole record as one JSON object (no newline): what the file gets.
};

/// The deepest nesting of a JsonText field's arrays and objects (Metrics::emit).
constexpr int kMaxMetricJsonDepth = 64;
/// A field value that is JSON text already (an object or array built by the
/// caller, at most kMaxMetricJsonDepth levels deep); Metrics::emit parses it
/// and writes it as JSON, not as a string.
struct JsonText {
  std::string text;
};
/// A field of a record: a number, an integer, a flag, a text, a list, or JSON.
using MetricValue =
    std::variant<double, std::int64_t, bool, std::string, std::vector<int>, std::vector<double>, JsonText>;
/// Named fields, in the order they are written.
using MetricFields = std::vector<std::pair<std::string, MetricValue>>;

/// Per-peer traffic counters of one rank: payload bytes sent to and received
/// from each global rank (frame headers excluded), and the tag and time of
/// the last message received from each. Lock-free (relaxed atomics); safe
/// to update from any thread. Filled by the `run` transport service
/// (transports/run/), read by the step records and the stall report.
class LinkMeter {
 public:
  /// @throws InvalidArgument if worldSize < 1.
  explicit LinkMeter(int worldSize);
  int worldSize() const noexcept { return static_cast<int>(sent_.size()); }
  /// Counts `bytes` sent to `peer`; ignores a peer outside [0, worldSize).
  void sent(int peer, std::size_t bytes) noexcept;
  /// Counts `bytes` received from `peer` in a message tagged `tagPacked`
  /// (Tag::packed()); ignores a peer outside [0, worldSize).
  void received(int peer, std::size_t bytes, std::uint64_t tagPacked) noexcept;
  /// Bytes sent to each peer so far (worldSize entries).
  std::vector<std::uint64_t> sentBytes() const;
  /// Bytes received from each peer so far (worldSize entries).
  std::vector<std::uint64_t> receivedBytes() const;
  /// The last message received from `peer`.
  struct Last {
    bool any = false;       ///< False if nothing came from it yet.
    double secondsAgo = 0;  ///< How long ago it arrived, seconds.
    Tag tag;                ///< Its tag (operation, step, segment).
  };
  /// @throws InvalidArgument for a peer outside [0, worldSize).
  Last lastFrom(int peer) const;

 private:
  std::vector<std::atomic<std::uint64_t>> sent_, received_, lastTag_;
  std::vector<std::atomic<std::int64_t>> lastNanos_;  // steady_clock, 0: never
};

/// What a Metrics hub records (the `run:` keys; see docs/metrics.md).
struct MetricsOptions {
  bool enabled = true;      ///< run.metrics: false records nothing (no files, no callbacks, no counters).
  std::string dir;          ///< Run directory (created); empty: no files, callbacks only.
  std::uint64_t every = 1;  ///< run.metrics_every: steps per `step` record (>= 1).
};

/// The metrics of one rank: builds records, appends them to
/// <dir>/rank-<rank>.jsonl (flushed at most once a second for step
/// records, at once for the others), and calls the subscribed callbacks.
/// Thread-safe: records may come from the training thread (steps, epochs),
/// the stall watcher's thread and the application's.
class Metrics {
 public:
  /// Opens <o.dir>/rank-<rank>.jsonl for appending (creating o.dir) when
  /// o.enabled and o.dir is not empty. A last line without its newline (the
  /// file's earlier process was killed while writing it; this one was
  /// restarted in its place) is cut off first, with a warning, so that
  /// every line stays one whole record.
  /// @throws InvalidArgument for rank outside [0, worldSize) or o.every == 0;
  ///         Error if the directory or file cannot be created, or a torn
  ///         line cannot be cut off.
  Metrics(int rank, int worldSize, MetricsOptions o);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  bool enabled() const noexcept { return options_.enabled; }
  /// The run directory, empty when there is none.
  const std::string& dir() const noexcept { return options_.dir; }
  /// Steps per `step` record.
  std::uint64_t every() const noexcept { return options_.every; }
  int rank() const noexcept { return rank_; }
  /// This rank's per-peer traffic counters (null when disabled).
  const std::shared_ptr<LinkMeter>& links() const noexcept { return links_; }

  /// Calls `f` with the `start` record at once (when there is one), then
  /// with every record from now on, on the thread that made it (keep it
  /// short; it must not call back into this object). Returns an id for
  /// unsubscribe. @throws InvalidArgument for an empty function.
  int subscribe(std::function<void(const MetricsRecord&)> f);
  /// Stops calling the callback `id` returned by subscribe (a no-op for an unknown id).
  void unsubscribe(int id);

  /// Records `kind` at `step` with `fields` (after kind, rank, time, step).
  /// A no-op when disabled. @throws InvalidArgument for an empty kind, a
  /// field without a name or named kind, rank, time or step, or a JsonText
  /// that is not JSON or nests deeper than kMaxMetricJsonDepth. A record the file cannot take (a full disk,
  /// an I/O error) is logged once as a warning; from then on records go only to the callbacks (writeError()
  /// says why).
  void emit(std::string_view kind, std::uint64_t step, const MetricFields& fields = {});
  /// Adds `value` to the named value of the next `step` record, which
  /// carries the mean of the values noted since the last one (e.g.
  /// note("loss", x) every step). Cheap: no allocation after the first use
  /// of a name. A no-op when disabled. @throws InvalidArgument for a name
  /// that a step record has already (checkMetricFieldName).
  void note(const std::string& name, double value);
  /// Why the file stopped taking records ("writing '<path>': No space left
  /// on device"), empty while it takes them (or there is none).
  std::string writeError() const;

  /// Accounts one optimizer step (the metered optimizer calls it): seconds
  /// spent before it (computeSeconds), inside it not waiting, and waiting;
  /// `step` is the steps completed after it. Every `every()` steps this
  /// writes a `step` record with the sums, the bytes sent to and received
  /// from each peer since the last record, `pushSumWeight` and `view`.
  void accountStep(std::uint64_t step, double computeSeconds, double communicationSeconds,
                   double waitingSeconds, double pushSumWeight, std::uint64_t view);
  /// Writes the `end` record (steps, wall time since construction) once and
  /// flushes the file. Later records are still handed to callbacks and written.
  void finish(std::uint64_t steps);

 private:
  void write(MetricsRecord&& r, bool flushNow);
  // Caller holds mu_: logs the file's error once and stops writing to it.
  void fileFailed(int err);

  int rank_;
  MetricsOptions options_;
  std::shared_ptr<LinkMeter> links_;
  double startUnix_;
  mutable std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;        // of file_
  std::string writeError_;  // set once file_ failed (and was closed)
  double lastFlush_ = 0;
  std::vector<std::pair<int, std::function<void(const MetricsRecord&)>>> callbacks_;
  int nextId_ = 0;
  bool finished_ = false;
  std::optional<MetricsRecord> start_;  // replayed to later subscribers
  // The step record being accumulated.
  std::uint64_t pendingSteps_ = 0;
  double compute_ = 0, communication_ = 0, waiting_ = 0;
  std::vector<std::uint64_t> sentAtLast_, receivedAtLast_;
  std::vector<std::pair<std::string, std::pair<double, std::uint64_t>>> noted_;  // name -> (sum, count)
};

/// Checks the name of a field an application adds to a metrics record: not
/// empty, not one every record has (kind, rank, time, step) and, with
/// `stepRecord`, not one every step record has (steps, compute_s,
/// communication_s, waiting_s, sent_bytes, received_bytes, push_sum_weight,
/// view). @throws InvalidArgument naming `what` (the caller) and the field.
void checkMetricFieldName(const std::string& name, bool stepRecord, const char* what);

/// Seconds the calling thread has spent blocked in Request::waitFor and
/// Request::wait so far (a per-thread running total; the metered optimizer
/// reads it before and after a step).
double threadWaitSeconds() noexcept;

}  // namespace gossamer
