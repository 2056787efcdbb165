// Progress (progress.hpp): the bar and the plain lines.
#include "progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "gossamer/errors.hpp"

namespace gossamer::train {

namespace {

// "1:02:03" or "2:03"; "?" when unknown.
std::string clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(std::llround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

int terminalColumns(std::FILE* out) {
  winsize w{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

}  // namespace

ProgressMode parseProgressMode(const std::string& text) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "bar") return ProgressMode::kBar;
  if (text == "lines") return ProgressMode::kLines;
  if (text == "off") return ProgressMode::kOff;
  throw InvalidArgument("progress mode '" + text + "' (auto, bar, lines or off)");
}

Progress::Progress(ProgressMode mode, double lineSeconds, std::FILE* out) : mode_(mode), out_(out) {
  GOSSAMER_ENFORCE(lineSeconds > 0 && lineSeconds <= 86400.0,
                   "progress line interval " << lineSeconds << " s outside (0, 86400]");
  lineEvery_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(lineSeconds));
  if (mode_ == ProgressMode::kAuto) {
    const char* term = std::getenv("TERM");
    const bool dumb = term != nullptr && std::strcmp(term, "dumb") == 0;
    mode_ = ::isatty(::fileno(out_)) && !dumb ? ProgressMode::kBar : ProgressMode::kLines;
  }
}

Progress::~Progress() { clearBar(); }

void Progress::start(int epochs, std::uint64_t stepsPerEpoch) {
  epochs_ = epochs;
  stepsPerEpoch_ = stepsPerEpoch;
  lastDraw_ = Clock::now();
}

double Progress::rate() const {
  if (samples_.size() < 2) return 0;
  const auto& [t0, s0] = samples_.front();
  const auto& [t1, s1] = samples_.back();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  return dt > 0 ? static_cast<double>(s1 - s0) / dt : 0;
}

std::uint64_t Progress::totalSteps() const {
  return stepsPerEpoch_ * static_cast<std::uint64_t>(std::max(epochs_, 0));
}

double Progress::etaSeconds(double rate) const {
  const std::uint64_t total = totalSteps();
  return rate > 0 ? static_cast<double>(total - std::min(step_, total)) / rate : -1;
}

std::string Progress::lineText() const {
  const std::uint64_t total = totalSteps();
  const double r = rate();
  char buf[256];
  char rateText[32] = "?";
  if (r > 0) std::snprintf(rateText, sizeof rateText, "%.1f", r);
  const std::string eta = r > 0 ? std::to_string(std::llround(etaSeconds(r))) + " s" : "?";
  // Not "epoch N/M": that starts the line of an epoch's results, which logs are searched for.
  std::snprintf(buf, sizeof buf, "progress: step %llu/%llu (epoch %d of %d)  %s steps/s  loss %.4f  ETA %s",
                static_cast<unsigned long long>(step_), static_cast<unsigned long long>(total), epoch_,
                epochs_, rateText, loss_, eta.c_str());
  return buf;
}

std::string Progress::barText(int columns) const {
  const std::uint64_t total = totalSteps();
  const double r = rate();
  const double eta = etaSeconds(r);
  char head[32], tail[160];
  std::snprintf(head, sizeof head, "epoch %d/%d ", epoch_, epochs_);
  std::snprintf(tail, sizeof tail, " %llu/%llu steps  %.1f steps/s  loss %.4f  ETA %s",
                static_cast<unsigned long long>(step_), static_cast<unsigned long long>(total), r, loss_,
                clock(eta).c_str());
  const int room = columns - 1 - static_cast<int>(std::strlen(head) + std::strlen(tail)) - 2;
  const int width = std::clamp(room, 10, 50);
  const double done = total > 0 ? std::min(1.0, static_cast<double>(step_) / static_cast<double>(total)) : 0;
  const int filled = static_cast<int>(done * width);
  return std::string(head) + "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.') + "]" + tail;
}

void Progress::update(std::uint64_t step, int epoch, double loss) {
  step_ = step;
  epoch_ = epoch;
  loss_ = loss;
  if (mode_ == ProgressMode::kOff) return;
  const auto now = Clock::now();
  if (samples_.empty()) {  // the rate needs a first sample: draw from the next one on
    samples_.emplace_back(now, step);
    return;
  }
  const auto every = mode_ == ProgressMode::kBar ? std::chrono::milliseconds(100) : lineEvery_;
  if (now - lastDraw_ < every) return;
  lastDraw_ = now;
  samples_.emplace_back(now, step);
  while (samples_.size() > 2 && now - samples_.front().first > std::chrono::seconds(5)) samples_.pop_front();
  draw();
}

void Progress::draw() {
  if (mode_ == ProgressMode::kBar) {
    const std::string bar = barText(terminalColumns(out_));
    std::fprintf(out_, "\r%s\x1b[K", bar.c_str());
    barShown_ = true;
  } else {
    std::fprintf(out_, "%s\n", lineText().c_str());
  }
  std::fflush(out_);
}

void Progress::clearBar() {
  if (!barShown_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  barShown_ = false;
}

void Progress::line(const std::string& text) {
  const bool redraw = barShown_;
  clearBar();
  std::fprintf(out_, "%s\n", text.c_str());
  if (redraw) draw();
  std::fflush(out_);
}

void Progress::finish(const std::string& text) {
  clearBar();
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace gossamer::train
