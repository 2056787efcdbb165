// Run metrics (metrics.hpp): JSON-lines records per rank, built with
// nlohmann::json, and the per-peer traffic counters behind them.
#include "gossamer/metrics.hpp"
#include "gossamer/kit/clock.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gossamer/errors.hpp"
#include "gossamer/kit/context_local.hpp"
#include "gossamer/log.hpp"

namespace gossamer {

namespace {

using Json = nlohmann::ordered_json;

std::int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

Json toJson(const std::string& name, const MetricValue& v) {
  if (const auto* t = std::get_if<JsonText>(&v)) {
    // Nesting is bounded: writing (and freeing) a value recurses once per
    // level, and 100,000 levels overflowed the stack.
    bool tooDeep = false;
    Json j = Json::parse(
        t->text,
        [&](int depth, nlohmann::json::parse_event_t, Json&) {
          if (depth > kMaxMetricJsonDepth) tooDeep = true;
          return !tooDeep;
        },
        false);
    GOSSAMER_ENFORCE(!tooDeep,
                     "metrics field '" << name << "' nests deeper than " << kMaxMetricJsonDepth << " levels");
    GOSSAMER_ENFORCE(!j.is_discarded(), "metrics field '" << name << "' is not JSON: " << t->text);
    return j;
  }
  return std::visit(
      [](const auto& x) -> Json {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, JsonText>)
          return Json();
        else
          return Json(x);
      },
      v);
}

// {"1": 5120, "3": 5120}: the peers with a non-zero count.
Json perPeer(const std::vector<std::uint64_t>& now, std::vector<std::uint64_t>& atLast) {
  Json out = Json::object();
  for (std::size_t p = 0; p < now.size(); ++p) {
    const std::uint64_t d = now[p] - atLast[p];
    if (d != 0) out[std::to_string(p)] = d;
    atLast[p] = now[p];
  }
  return out;
}

}  // namespace

namespace detail {
void addThreadWait(std::int64_t nanos) noexcept { contextLocal().waitNanos += nanos; }
}  // namespace detail

double threadWaitSeconds() noexcept { return static_cast<double>(contextLocal().waitNanos) * 1e-9; }

LinkMeter::LinkMeter(int worldSize)
    : sent_(static_cast<std::size_t>(std::max(worldSize, 0))),
      received_(sent_.size()),
      lastTag_(sent_.size()),
      lastNanos_(sent_.size()) {
  GOSSAMER_ENFORCE(worldSize >= 1, "link meter for world size " << worldSize);
}

void LinkMeter::sent(int peer, std::size_t bytes) noexcept {
  if (peer < 0 || peer >= worldSize()) return;
  sent_[static_cast<std::size_t>(peer)].fetch_add(bytes, std::memory_order_relaxed);
}

void LinkMeter::received(int peer, std::size_t bytes, std::uint64_t tagPacked) noexcept {
  if (peer < 0 || peer >= worldSize()) return;
  const auto p = static_cast<std::size_t>(peer);
  received_[p].fetch_add(bytes, std::memory_order_relaxed);
  lastTag_[p].store(tagPacked, std::memory_order_relaxed);
  lastNanos_[p].store(steadyNanos(), std::memory_order_relaxed);
}

std::vector<std::uint64_t> LinkMeter::sentBytes() const {
  std::vector<std::uint64_t> out(sent_.size());
  for (std::size_t p = 0; p < out.size(); ++p) out[p] = sent_[p].load(std::memory_order_relaxed);
  return out;
}

std::vector<std::uint64_t> LinkMeter::receivedBytes() const {
  std::vector<std::uint64_t> out(received_.size());
  for (std::size_t p = 0; p < out.size(); ++p) out[p] = received_[p].load(std::memory_order_relaxed);
  return out;
}

LinkMeter::Last LinkMeter::lastFrom(int peer) const {
  GOSSAMER_ENFORCE(peer >= 0 && peer < worldSize(), "peer " << peer << " outside world size " << worldSize());
  const auto p = static_cast<std::size_t>(peer);
  Last out;
  const std::int64_t at = lastNanos_[p].load(std::memory_order_relaxed);
  if (at == 0) return out;
  out.any = true;
  out.secondsAgo = static_cast<double>(steadyNanos() - at) * 1e-9;
  const std::uint64_t packed = lastTag_[p].load(std::memory_order_relaxed);
  out.tag.op = static_cast<Op>(packed >> 56);
  out.tag.segment = static_cast<std::uint32_t>((packed >> 40) & Tag::kMaxSegment);
  out.tag.step = packed & Tag::kMaxStep;
  return out;
}

// A process killed while writing its records (kill -9) may leave a last
// line without its newline; a process restarted in its place appends to the
// same file. Cuts that torn line off first, so that every line of the file
// stays one whole JSON record. Reads the file's tail only.
static void dropTornRecord(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return;  // no file yet, or an empty one
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return;  // opening it for appending reports the error
  std::vector<char> chunk(64 * 1024);
  std::uintmax_t keep = 0;  // the bytes up to and with the last newline
  bool read = true;
  for (std::uintmax_t end = size; end > 0 && keep == 0;) {
    const std::uintmax_t begin = end > chunk.size() ? end - chunk.size() : 0;
    const auto n = static_cast<std::size_t>(end - begin);
    read = std::fseek(f, static_cast<long>(begin), SEEK_SET) == 0 && std::fread(chunk.data(), 1, n, f) == n;
    if (!read) break;
    for (std::size_t i = n; i-- > 0 && keep == 0;)
      if (chunk[i] == '\n') keep = begin + i + 1;
    end = begin;
  }
  std::fclose(f);
  if (!read || keep == size) return;  // unreadable (appending reports it), or nothing torn
  std::filesystem::resize_file(path, keep, ec);
  if (ec) throw Error("run.dir: cannot cut the torn last record of '" + path + "': " + ec.message());
  GOSSAMER_LOG(kWarning, "run.dir: " << path << " ended in a torn record (" << size - keep
                                     << " bytes: its process was killed while writing); cut off before "
                                        "appending");
}

Metrics::Metrics(int rank, int worldSize, MetricsOptions o)
    : rank_(rank), options_(std::move(o)), startUnix_(unixSeconds()) {
  GOSSAMER_ENFORCE(rank >= 0 && rank < worldSize, "rank " << rank << " outside world size " << worldSize);
  GOSSAMER_ENFORCE(options_.every >= 1, "run.metrics_every must be at least 1");
  if (!options_.enabled) return;
  links_ = std::make_shared<LinkMeter>(worldSize);
  sentAtLast_.assign(static_cast<std::size_t>(worldSize), 0);
  receivedAtLast_.assign(static_cast<std::size_t>(worldSize), 0);
  if (options_.dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) throw Error("run.dir: cannot create '" + options_.dir + "': " + ec.message());
  const std::string path = options_.dir + "/rank-" + std::to_string(rank) + ".jsonl";
  dropTornRecord(path);
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) throw Error("run.dir: cannot open '" + path + "': " + std::strerror(errno));
  path_ = path;
}

Metrics::~Metrics() {
  if (file_ != nullptr && std::fclose(file_) != 0)
    GOSSAMER_LOG(kWarning, "run.dir: writing '" << path_ << "' failed: " << std::strerror(errno)
                                                << "; its last records are lost");
}

std::string Metrics::writeError() const {
  std::lock_guard<std::mutex> lk(mu_);
  return writeError_;
}

void Metrics::fileFailed(int err) {
  writeError_ = "writing '" + path_ + "': " + std::strerror(err);
  GOSSAMER_LOG(kWarning,
               "run.dir: " << writeError_ << "; this rank's records from now on reach only the callbacks");
  std::fclose(file_);
  file_ = nullptr;
}

void checkMetricFieldName(const std::string& name, bool stepRecord, const char* what) {
  static constexpr std::array<const char*, 4> kRecordFields = {"kind", "rank", "time", "step"};
  static constexpr std::array<const char*, 8> kStepRecordFields = {
      "steps",      "compute_s",      "communication_s", "waiting_s",
      "sent_bytes", "received_bytes", "push_sum_weight", "view"};
  if (name.empty()) throw InvalidArgument(std::string(what) + ": a field needs a name");
  for (const char* f : kRecordFields)
    if (name == f)
      throw InvalidArgument(std::string(what) + ": field '" + name + "' is one every record has");
  if (stepRecord)
    for (const char* f : kStepRecordFields)
      if (name == f)
        throw InvalidArgument(std::string(what) + ": field '" + name + "' is one every step record has");
}

int Metrics::subscribe(std::function<void(const MetricsRecord&)> f) {
  GOSSAMER_ENFORCE(f, "null metrics callback");
  std::lock_guard<std::mutex> lk(mu_);
  if (start_) f(*start_);
  callbacks_.emplace_back(nextId_, std::move(f));
  return nextId_++;
}

void Metrics::unsubscribe(int id) {
  std::lock_guard<std::mutex> lk(mu_);
  std::erase_if(callbacks_, [id](const auto& c) { return c.first == id; });
}

void Metrics::write(MetricsRecord&& r, bool flushNow) {
  // Caller holds mu_.
  if (r.kind == "start" && !start_) start_ = r;
  if (file_ != nullptr) {
    errno = 0;
    bool ok = std::fwrite(r.json.data(), 1, r.json.size(), file_) == r.json.size() &&
              std::fputc('\n', file_) != EOF;
    if (ok && (flushNow || r.unixSeconds - lastFlush_ >= 1.0)) {
      ok = std::fflush(file_) == 0;
      lastFlush_ = r.unixSeconds;
    }
    if (!ok) fileFailed(errno != 0 ? errno : EIO);
  }
  for (const auto& c : callbacks_) c.second(r);
}

// The fields every record starts with, also set on `r`.
static Json begin(MetricsRecord& r, std::string_view kind, int rank, std::uint64_t step) {
  r.kind = std::string(kind);
  r.rank = rank;
  r.step = step;
  r.unixSeconds = unixSeconds();
  Json j;
  j["kind"] = r.kind;
  j["rank"] = rank;
  j["time"] = r.unixSeconds;
  j["step"] = step;
  return j;
}

void Metrics::emit(std::string_view kind, std::uint64_t step, const MetricFields& fields) {
  if (!options_.enabled) return;
  GOSSAMER_ENFORCE(!kind.empty(), "metrics record without a kind");
  MetricsRecord r;
  Json j = begin(r, kind, rank_, step);
  for (const auto& [name, value] : fields) {
    checkMetricFieldName(name, false, "metrics record");
    j[name] = toJson(name, value);
  }
  r.json = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::lock_guard<std::mutex> lk(mu_);
  write(std::move(r), true);
}

void Metrics::note(const std::string& name, double value) {
  if (!options_.enabled) return;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& n : noted_)
    if (n.first == name) {
      n.second.first += value;
      ++n.second.second;
      return;
    }
  checkMetricFieldName(name, true, "Metrics::note");  // once per name
  noted_.emplace_back(name, std::make_pair(value, std::uint64_t{1}));
}

void Metrics::accountStep(std::uint64_t step, double computeSeconds, double communicationSeconds,
                          double waitingSeconds, double pushSumWeight, std::uint64_t view) {
  if (!options_.enabled) return;
  std::lock_guard<std::mutex> lk(mu_);
  ++pendingSteps_;
  compute_ += computeSeconds;
  communication_ += communicationSeconds;
  waiting_ += waitingSeconds;
  if (pendingSteps_ < options_.every) return;
  MetricsRecord r;
  Json j = begin(r, "step", rank_, step);
  j["steps"] = pendingSteps_;
  j["compute_s"] = compute_;
  j["communication_s"] = communication_;
  j["waiting_s"] = waiting_;
  j["sent_bytes"] = perPeer(links_->sentBytes(), sentAtLast_);
  j["received_bytes"] = perPeer(links_->receivedBytes(), receivedAtLast_);
  j["push_sum_weight"] = pushSumWeight;
  j["view"] = view;
  for (auto& n : noted_) {
    if (n.second.second == 0) continue;
    j[n.first] = n.second.first / static_cast<double>(n.second.second);
    n.second = {0.0, 0};
  }
  r.json = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  pendingSteps_ = 0;
  compute_ = communication_ = waiting_ = 0;
  write(std::move(r), false);
}

void Metrics::finish(std::uint64_t steps) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_ || !options_.enabled) return;
    finished_ = true;
  }
  emit("end", steps, {{"steps", static_cast<std::int64_t>(steps)}, {"wall_s", unixSeconds() - startUnix_}});
}

}  // namespace gossamer
