// gossamer-train's live progress: a bar redrawn in place on a terminal, or
// plain periodic lines when the output is a file or a pipe (CI, logs).
// Debian packages no C++ progress-bar library, so this is a small one.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>

namespace gossamer::train {

/// How progress is shown: kAuto is kBar on a terminal (and TERM is not
/// "dumb"), kLines otherwise; kOff shows no step progress (epoch lines and
/// the final line are still printed).
enum class ProgressMode { kAuto, kBar, kLines, kOff };

/// "auto", "bar", "lines" or "off". @throws InvalidArgument for anything else.
ProgressMode parseProgressMode(const std::string& text);

/// Draws progress on `out`. Not thread-safe: one thread calls it (the
/// progress rank's training thread; epoch lines from the same process).
class Progress {
 public:
  /// `lineSeconds` (in (0, 86400]): seconds between plain lines (kLines). kAuto is
  /// resolved here from isatty(out) and $TERM.
  /// @throws InvalidArgument if lineSeconds is outside (0, 86400].
  Progress(ProgressMode mode, double lineSeconds, std::FILE* out = stdout);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// The mode in force (never kAuto).
  ProgressMode mode() const { return mode_; }
  /// The run's length: `epochs` epochs of `stepsPerEpoch` steps.
  void start(int epochs, std::uint64_t stepsPerEpoch);
  /// After each step: `step` steps done in all, in 1-based `epoch`, `loss`
  /// the epoch's mean training loss so far. Cheap: a clock read, and it
  /// returns unless 0.1 s (bar) or lineSeconds (lines) passed since it last
  /// drew.
  void update(std::uint64_t step, int epoch, double loss);
  /// Prints one line of text (an epoch's results) above the bar, which is
  /// redrawn under it; a plain line in the other modes.
  void line(const std::string& text);
  /// Clears the bar, prints `text` as the last line.
  void finish(const std::string& text);

  /// The bar as drawn for `columns` terminal columns (for tests and line()):
  /// "epoch 2/3 [#####.....] 812/1407 steps  41.3 steps/s  loss 0.4321  ETA 0:23".
  std::string barText(int columns) const;
  /// The plain line: "progress: step 812/1407 (epoch 2 of 3)  41.3 steps/s  loss 0.4321  ETA 23 s"
  /// (not "epoch 2/3 ...", the start of an epoch's results line).
  std::string lineText() const;

 private:
  using Clock = std::chrono::steady_clock;
  void draw();
  void clearBar();
  double rate() const;                   // steps/s over the last few seconds, 0 before two samples
  std::uint64_t totalSteps() const;      // of the whole run
  double etaSeconds(double rate) const;  // at `rate` steps/s; -1 when the rate is unknown (0)

  ProgressMode mode_;
  Clock::duration lineEvery_;
  std::FILE* out_;
  int epochs_ = 0;
  std::uint64_t stepsPerEpoch_ = 0;
  std::uint64_t step_ = 0;
  int epoch_ = 0;
  double loss_ = 0;
  Clock::time_point lastDraw_{};
  bool barShown_ = false;
  std::deque<std::pair<Clock::time_point, std::uint64_t>> samples_;  // (when, steps) of recent draws
};

}  // namespace gossamer::train
