// p2p: point-to-point latency and bandwidth between two processes on this
// machine, for several transports side by side (scripts/bench-p2p.sh runs it
// over a few rounds and reports medians and ratios; docs/libfabric.md).
//
//   p2p [--transports libfabric-tcp,libfabric-shm,zmq-tcp,zmq-ipc]
//       [--sizes 8,1024,4194304 | default 8 B, 16 B, 64 B, ... (x4) ... 64 MiB]
//       [--budget 0.2] [--json PATH] [--quiet]
//       launcher (default): starts the two ranks as processes, waits (bounded),
//       prints the table and writes the JSON list;
//   p2p --rank R --rendezvous DIR --result-file F ...
//       one rank (what the launcher starts).
//
// Both ranks open every transport at the start, then for each size run the
// transports one after the other (interleaved, so a change in machine load
// hits all alike). Per (transport, size):
//   latency:   ping-pong. Rank 0 posts its receive, sends `size` bytes to rank
//              1, which sends them back. The first exchange is checked byte by
//              byte on both sides (a wrong byte fails the run). After warm-ups,
//              repetitions for about --budget seconds; latency_us = median
//              round trip / 2 (one way, as osu_latency reports), rtt_us = the
//              median round trip.
//   bandwidth: streaming. Rank 1 posts `window` receives and says it is ready;
//              rank 0 then sends `window` messages of `size` bytes back to back
//              and stops the clock when rank 1's acknowledgement (8 bytes)
//              arrives. bandwidth_gbps = window * size / time, median over
//              repetitions, in GB/s (1e9 bytes per second). The window is
//              128 MiB / size, clamped to [2, 64] messages.
// isend copies its bytes (the Transport contract), so that copy is part of
// what is measured, for every transport alike.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "transports.hpp"

namespace {

using gossamer::Request;
using gossamer::Tag;
using gossamer::Transport;
using gossamer::bench::Clock;
using gossamer::bench::median;
using gossamer::bench::seconds;
using nlohmann::json;

/// libfabric tcp and shm (when built), zmq tcp and ipc.
std::vector<std::string> defaultTransports() {
  std::vector<std::string> out;
  for (const char* t : {"libfabric-tcp", "libfabric-shm", "zmq-tcp", "zmq-ipc"}) {
    const auto names = gossamer::bench::benchTransportNames();
    if (std::find(names.begin(), names.end(), t) != names.end()) out.push_back(t);
  }
  return out;
}

struct Args {
  std::vector<std::string> transports = defaultTransports();
  std::vector<std::size_t> sizes;  // bytes; empty: defaultSizes()
  double budget = 0.2;             // seconds of timed repetitions per (transport, size, test), roughly
  int minReps = 3;
  int maxReps = 20000;
  std::string jsonPath = "results/p2p.json";
  bool quiet = false;
  double timeout = 60;           // bound on every wait inside a rank
  double deadline = 900;         // launcher: bound on the whole run
  std::string binding = "core";  // launcher: --bind (CpuBinding)
  // Rank mode.
  int rank = -1;
  std::string rendezvous;
  std::string resultFile;
};

/// 8 B, then 16 B .. 64 MiB by factors of 4 (4 MiB and 64 MiB included).
std::vector<std::size_t> defaultSizes() {
  std::vector<std::size_t> s{8};
  for (std::size_t b = 16; b <= (std::size_t{64} << 20); b *= 4) s.push_back(b);
  return s;
}

constexpr std::size_t kWindowBytes = std::size_t{128} << 20;

std::size_t windowFor(std::size_t bytes) { return std::clamp<std::size_t>(kWindowBytes / bytes, 2, 64); }

/// The checked pattern: byte i of a message of `n` bytes.
std::byte patternByte(std::size_t i, std::size_t n) {
  return static_cast<std::byte>((i * 131 + n * 7 + 1) & 0xFF);
}

/// One rank's side of the measurements on one transport. Both ranks make the
/// same calls in the same order; every message has a fresh tag step.
class Pair {
 public:
  Pair(const Args& a, Transport& t) : a_(a), t_(t), peer_(1 - t.rank()) {}

  json measure(const std::string& name, std::size_t bytes) {
    std::vector<std::byte> buf(bytes), back(bytes);
    const double rtt = latency(buf, back);
    const std::size_t window = windowFor(bytes);
    const double bw = bandwidth(bytes, window);
    return json{{"transport", name},           {"bytes", bytes},
                {"latency_us", rtt / 2 * 1e6}, {"rtt_us", rtt * 1e6},
                {"bandwidth_gbps", bw / 1e9},  {"window", window},
                {"latency_reps", latReps_},    {"bandwidth_reps", bwReps_}};
  }

 private:
  Tag next() { return Tag::make(gossamer::Op::kUser, ++step_); }

  void wait(Request& r) { r.wait(a_.timeout); }

  // Rank 0 tells rank 1 how many repetitions follow.
  int agree(int reps) {
    std::int64_t v = reps;
    const Tag tag = next();
    if (t_.rank() == 0) {
      auto s = t_.isendOf<std::int64_t>(peer_, tag, std::span<const std::int64_t>(&v, 1));
      wait(s);
    } else {
      auto r = t_.irecvOf<std::int64_t>(peer_, tag, std::span<std::int64_t>(&v, 1));
      wait(r);
    }
    return static_cast<int>(v);
  }

  // One ping-pong; returns the round trip (rank 0) or 0 (rank 1).
  double pingPong(std::vector<std::byte>& buf, std::vector<std::byte>& back) {
    const Tag ping = next(), pong = next();
    if (t_.rank() == 0) {
      auto r = t_.irecv(peer_, pong, back);
      const auto t0 = Clock::now();
      t_.isend(peer_, ping, buf);
      wait(r);
      return seconds(t0, Clock::now());
    }
    auto r = t_.irecv(peer_, ping, back);
    wait(r);
    t_.isend(peer_, pong, back);
    return 0;
  }

  void checkBytes(const std::vector<std::byte>& v, const char* what) const {
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != patternByte(i, v.size()))
        throw gossamer::Error(std::string("WRONG DATA over ") + t_.name() + ": " + what + ", " +
                              std::to_string(v.size()) + " bytes, first bad byte at " + std::to_string(i));
  }

  double latency(std::vector<std::byte>& buf, std::vector<std::byte>& back) {
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = patternByte(i, buf.size());
    std::fill(back.begin(), back.end(), std::byte{0});
    const double first = pingPong(buf, back);  // checked on both sides
    checkBytes(back, t_.rank() == 0 ? "echo received by rank 0" : "message received by rank 1");
    const int warm = agree(std::clamp(static_cast<int>(a_.budget / 4 / std::max(first, 1e-7)), 2, 100));
    for (int i = 0; i < warm; ++i) pingPong(buf, back);
    const int reps =
        agree(std::clamp(static_cast<int>(a_.budget / std::max(first, 1e-7)), a_.minReps, a_.maxReps));
    std::vector<double> rtts;
    rtts.reserve(static_cast<std::size_t>(reps));
    for (int i = 0; i < reps; ++i) rtts.push_back(pingPong(buf, back));
    latReps_ = reps;
    return t_.rank() == 0 ? median(rtts) : 0;
  }

  // One streaming repetition; returns bytes per second (rank 0) or 0.
  double stream(std::vector<std::vector<std::byte>>& bufs, std::size_t bytes, std::size_t window) {
    const Tag ready = next(), ack = next();
    std::vector<Tag> tags;
    for (std::size_t i = 0; i < window; ++i) tags.push_back(next());
    std::int64_t token = 1;
    if (t_.rank() == 1) {
      std::vector<Request> rs;
      for (std::size_t i = 0; i < window; ++i) rs.push_back(t_.irecv(peer_, tags[i], bufs[i]));
      t_.isendOf<std::int64_t>(peer_, ready, std::span<const std::int64_t>(&token, 1));
      gossamer::waitAll(rs, a_.timeout);
      t_.isendOf<std::int64_t>(peer_, ack, std::span<const std::int64_t>(&token, 1));
      return 0;
    }
    auto r = t_.irecvOf<std::int64_t>(peer_, ready, std::span<std::int64_t>(&token, 1));
    wait(r);
    auto done = t_.irecvOf<std::int64_t>(peer_, ack, std::span<std::int64_t>(&token, 1));
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < window; ++i) t_.isend(peer_, tags[i], bufs[0]);
    wait(done);
    return static_cast<double>(window * bytes) / seconds(t0, Clock::now());
  }

  double bandwidth(std::size_t bytes, std::size_t window) {
    std::vector<std::vector<std::byte>> bufs(t_.rank() == 1 ? window : 1, std::vector<std::byte>(bytes));
    const auto t0 = Clock::now();
    stream(bufs, bytes, window);  // warm-up, also sizes the repetitions
    const double first = seconds(t0, Clock::now());
    const int reps =
        agree(std::clamp(static_cast<int>(a_.budget / std::max(first, 1e-7)), a_.minReps, a_.maxReps / 10));
    std::vector<double> rates;
    rates.reserve(static_cast<std::size_t>(reps));
    for (int i = 0; i < reps; ++i) rates.push_back(stream(bufs, bytes, window));
    bwReps_ = reps;
    return t_.rank() == 0 ? median(rates) : 0;
  }

  const Args& a_;
  Transport& t_;
  int peer_;
  std::uint64_t step_ = 0;
  int latReps_ = 0, bwReps_ = 0;
};

int runRank(const Args& a) {
  gossamer::FileStore store(a.rendezvous);
  std::vector<std::unique_ptr<Transport>> transports;
  for (const auto& name : a.transports)
    transports.push_back(
        gossamer::bench::makeBenchTransport(name, a.rank, 2, a.timeout, store, "p2p-" + name));
  try {
    json results = json::array();
    const auto sizes = a.sizes.empty() ? defaultSizes() : a.sizes;
    std::vector<std::unique_ptr<Pair>> pairs;
    pairs.reserve(transports.size());
    for (auto& t : transports) pairs.push_back(std::make_unique<Pair>(a, *t));
    for (const auto bytes : sizes)
      for (std::size_t i = 0; i < transports.size(); ++i)
        results.push_back(pairs[i]->measure(a.transports[i], bytes));
    for (auto& t : transports) t->close();
    if (a.rank == 0) gossamer::bench::writeResultFile(results, a.resultFile);
    return 0;
  } catch (...) {
    for (auto& t : transports) t->abort();
    throw;
  }
}

json launch(const Args& a) {
  std::string sizes;
  for (const auto b : a.sizes.empty() ? defaultSizes() : a.sizes)
    sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  auto results = gossamer::bench::launchAndCollect(
      "p2p", 2, a.timeout, a.deadline,
      {"--transports", gossamer::bench::joined(a.transports), "--sizes", sizes, "--budget",
       std::to_string(a.budget), "--min-reps", std::to_string(a.minReps), "--max-reps",
       std::to_string(a.maxReps), "--timeout", std::to_string(a.timeout)},
      a.binding);
  for (auto& row : results) row["binding"] = a.binding;
  return results;
}

void printTable(const json& results) {
  std::printf("%-14s %10s %12s %12s %14s %6s\n", "transport", "bytes", "latency_us", "rtt_us",
              "bandwidth_GB/s", "window");
  for (const auto& r : results)
    std::printf("%-14s %10llu %12.2f %12.2f %14.3f %6d\n", r["transport"].get<std::string>().c_str(),
                static_cast<unsigned long long>(r["bytes"].get<std::uint64_t>()),
                r["latency_us"].get<double>(), r["rtt_us"].get<double>(), r["bandwidth_gbps"].get<double>(),
                r["window"].get<int>());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"p2p: point-to-point latency and bandwidth between two processes, per transport"};
  Args a;
  app.add_option("--transports", a.transports, "transports, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(gossamer::bench::benchTransportNames()));
  app.add_option("--sizes", a.sizes, "message sizes in bytes, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--budget", a.budget, "seconds of timed repetitions per measurement, roughly")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-reps", a.minReps, "timed repetitions per measurement, at least")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-reps", a.maxReps, "timed repetitions per measurement, at most")
      ->check(CLI::Range(10, 1000000));
  app.add_option("--json", a.jsonPath, "write the results here (empty: do not write)");
  app.add_flag("--quiet", a.quiet, "do not print the table");
  app.add_option("--timeout", a.timeout, "bound on every wait, seconds")->check(CLI::PositiveNumber);
  app.add_option("--deadline", a.deadline, "bound on the whole run, seconds")->check(CLI::PositiveNumber);
  gossamer::bench::addBindOption(app, a.binding);
  app.add_option("--rank", a.rank, "internal: run only this rank")->check(CLI::Range(0, 1));
  app.add_option("--rendezvous", a.rendezvous, "internal: rendezvous directory (FileStore)");
  app.add_option("--result-file", a.resultFile, "internal: where rank 0 writes its results");
  CLI11_PARSE(app, argc, argv);
  try {
    if (a.rank >= 0) {
      if (a.rendezvous.empty() || a.resultFile.empty())
        throw gossamer::InvalidArgument("--rank needs --rendezvous and --result-file");
      return runRank(a);
    }
    const json results = launch(a);
    if (!a.quiet) printTable(results);
    if (!a.jsonPath.empty()) gossamer::bench::writeJsonFile(results, a.jsonPath);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "p2p%s: error: %s\n", a.rank >= 0 ? (" rank " + std::to_string(a.rank)).c_str() : "",
                 e.what());
    return 1;
  }
}
