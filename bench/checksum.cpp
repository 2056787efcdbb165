// Throughput of the frame checksum, one thread: gossamer::crc32c (ISA-L's
// crc32_iscsi where the SDK was built with it, the SDK's own code otherwise),
// copyAndCrc32c (the copy and the checksum in 16 KiB blocks), and memcpy for
// scale, at buffer sizes from 4 KiB (in L1) to 64 MiB (from memory). Each
// cell is the median of --rounds rounds of about --seconds each, interleaved
// (one round of every kind and size before the next). Prints a table in GB/s
// (1e9 bytes per second) and writes one JSON row per cell.
#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

#include "common.hpp"
#include "gossamer/kit/wire.hpp"

namespace {

using gossamer::bench::Clock;
using gossamer::bench::json;

// Seconds per call of `f` over at least `budget` seconds. The clock is read
// once per batch of calls, the batch doubled until it takes 20 us or more,
// so that at 4 KiB (under 0.3 us a call) reading it costs under 1%.
template <class F>
double secondsPerCall(F&& f, double budget) {
  long calls = 0;
  long batch = 1;
  const auto t0 = Clock::now();
  auto last = t0;
  double elapsed = 0;
  do {
    for (long i = 0; i < batch; ++i) f();
    calls += batch;
    const auto now = Clock::now();
    if (gossamer::bench::seconds(last, now) < 20e-6 && batch < (1L << 30)) batch *= 2;
    last = now;
    elapsed = gossamer::bench::seconds(t0, now);
  } while (elapsed < budget);
  return elapsed / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checksum: GB/s of the frame checksum (CRC-32C), with and without a copy, next to memcpy"};
  int rounds = 5;
  double budget = 0.2;
  std::string jsonPath = "results/bench-checksum.json";
  app.add_option("--rounds", rounds, "rounds per cell (the median is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--seconds", budget, "seconds per round and cell, roughly")->check(CLI::PositiveNumber);
  app.add_option("--json", jsonPath, "write the results here (empty: do not write)");
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::size_t> sizes{std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20,
                                       std::size_t{16} << 20, std::size_t{64} << 20};
  const std::vector<std::string> kinds{"crc32c", "copy+crc32c", "memcpy"};
  std::vector<std::byte> src(sizes.back()), dst(sizes.back());
  std::mt19937 random(7);
  for (auto& b : src) b = static_cast<std::byte>(random());
  std::memset(dst.data(), 0, dst.size());

  volatile std::uint32_t sink = 0;
  std::map<std::pair<std::string, std::size_t>, std::vector<double>> samples;
  for (int r = 0; r < rounds; ++r)
    for (const auto n : sizes)
      for (const auto& kind : kinds) {
        const std::span<const std::byte> in(src.data(), n);
        double s = 0;
        if (kind == "crc32c")
          s = secondsPerCall([&] { sink = sink + gossamer::crc32c(in); }, budget);
        else if (kind == "copy+crc32c")
          s = secondsPerCall([&] { sink = sink + gossamer::copyAndCrc32c(dst.data(), src.data(), n); },
                             budget);
        else
          s = secondsPerCall(
              [&] {
                std::memcpy(dst.data(), src.data(), n);
                sink = sink + static_cast<std::uint32_t>(dst[n - 1]);
              },
              budget);
        samples[{kind, n}].push_back(s);
      }

  json rows = json::array();
  std::printf("%-12s %10s %12s %8s\n", "kind", "bytes", "median_us", "GB/s");
  for (const auto& kind : kinds)
    for (const auto n : sizes) {
      const double s = gossamer::bench::median(samples[{kind, n}]);
      const double gbps = static_cast<double>(n) / s / 1e9;
      std::printf("%-12s %10zu %12.2f %8.1f\n", kind.c_str(), n, s * 1e6, gbps);
      rows.push_back(
          json{{"kind", kind}, {"bytes", n}, {"seconds", s}, {"gb_per_s", gbps}, {"rounds", rounds}});
    }
#if defined(GOSSAMER_BENCH_ISAL)
  const char* backend = "isa-l";
#else
  const char* backend = "sdk";
#endif
  std::printf("checksum by: %s\n", backend);
  if (!jsonPath.empty())
    gossamer::bench::writeJsonFile(json{{"checksum_by", backend}, {"rows", rows}}, jsonPath);
  return 0;
}
