// compress: encode+decode throughput of each gradient compressor (A2SGD,
// Top-K, Gaussian-K, QSGD, dense; optimizers/compress.hpp) next to this machine's
// single-thread memcpy bandwidth, measured in the same run.
//
//   compress [--floats 1M,16M,64M] [--compressors none,a2sgd,a2sgd_keep_error,topk,gaussk,qsgd]
//            [--reps 0] [--json results/bench-compress.json]
//
// For every size n: one buffer of n random float32 "gradients" (normal,
// sigma 1e-3), every other buffer touched once before timing. Then
// repetitions, interleaved: memcpy of the n floats into another buffer, then
// for each compressor one encode + decode (world size 1: the combined
// payload is this rank's own, so decode does the work it does in training:
// A2SGD's rebuild pass, Top-K's and Gaussian-K's scatter, QSGD's unpacking). Reported:
// medians over the repetitions. gbps = 4n bytes of input / (encode + decode)
// seconds / 1e9; memcpy_gbps = 4n bytes copied / seconds / 1e9 (both
// directions are not counted, as in a memcpy benchmark's usual "GB/s");
// bytes_per_step = the payload one worker sends into the exchange per step
// (the allreduce or allgather multiplies it by a function of the world size
// only; see CompressedSgd).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/compress.hpp"

namespace {

using gossamer::bench::Clock;
using gossamer::bench::json;
using gossamer::bench::median;
using gossamer::bench::seconds;
namespace opt = gossamer::optimizers;

// "16M" -> 16 * 2^20, "1000" -> 1000.
std::size_t parseCount(const std::string& text) {
  std::size_t pos = 0;
  const unsigned long long v = std::stoull(text, &pos);
  std::size_t scale = 1;
  const std::string suffix = text.substr(pos);
  if (suffix == "K" || suffix == "k") {
    scale = std::size_t{1} << 10;
  } else if (suffix == "M" || suffix == "m") {
    scale = std::size_t{1} << 20;
  } else if (!suffix.empty()) {
    throw gossamer::InvalidArgument("bad element count '" + text + "' (e.g. 1M, 16M, 1000)");
  }
  if (v == 0) throw gossamer::InvalidArgument("element count must be >= 1");
  return static_cast<std::size_t>(v) * scale;
}

std::unique_ptr<opt::Compressor> make(const std::string& name, std::size_t n) {
  opt::CompressionOptions o;
  o.kind = name;
  o.topkRatio = 0.01;
  o.gaussk.ratio = 0.01;
  o.qsgd.levels = 4;
  if (name == "a2sgd_keep_error") {
    o.kind = "a2sgd";
    o.a2sgd.keepError = true;
  }
  return opt::makeCompressor(o, n);
}

// Repetitions for n floats when --reps is 0: about 0.5 GB of input per compressor.
int defaultReps(std::size_t n) {
  const auto r = static_cast<int>((std::size_t{128} << 20) / n);
  return std::clamp(r, 5, 30);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"compress: encode+decode throughput of the gradient compressors vs memcpy"};
  std::vector<std::string> sizes{"1M", "16M", "64M"};
  std::vector<std::string> names{"none", "a2sgd", "a2sgd_keep_error", "topk", "gaussk", "qsgd"};
  int reps = 0;
  std::string jsonPath = "results/bench-compress.json";
  app.add_option("--floats", sizes, "gradient sizes, elements (K = 2^10, M = 2^20)")->delimiter(',');
  app.add_option("--compressors", names, "none, a2sgd, a2sgd_keep_error, topk, gaussk, qsgd")->delimiter(',');
  app.add_option("--reps", reps, "timed repetitions per size (0 = by size, 5..30)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", jsonPath, "where to write the rows");
  CLI11_PARSE(app, argc, argv);
  try {
    json rows = json::array();
    std::printf("%-18s %10s %9s %12s %7s %12s %11s %11s\n", "compressor", "floats", "GB/s", "memcpy GB/s",
                "ratio", "bytes/step", "encode ms", "decode ms");
    for (const auto& sizeText : sizes) {
      const std::size_t n = parseCount(sizeText);
      std::vector<float> grad(n), copy(n), out(n);
      std::mt19937_64 rng(42);
      std::normal_distribution<float> normal(0.0f, 1e-3f);
      for (auto& v : grad) v = normal(rng);
      std::fill(copy.begin(), copy.end(), 1.0f);  // touch every page before timing
      std::fill(out.begin(), out.end(), 1.0f);
      std::vector<std::unique_ptr<opt::Compressor>> compressors;
      std::vector<std::vector<float>> payloads;
      for (const auto& name : names) {
        compressors.push_back(make(name, n));
        payloads.emplace_back(compressors.back()->payloadBytes() / sizeof(float), 1.0f);
      }
      const int r = reps > 0 ? reps : defaultReps(n);
      std::vector<double> memcpyTimes;
      std::vector<std::vector<double>> encodeTimes(names.size()), decodeTimes(names.size()),
          totalTimes(names.size());
      for (int rep = -1; rep < r; ++rep) {  // rep -1: warm-up, not recorded
        auto t0 = Clock::now();
        std::memcpy(copy.data(), grad.data(), n * sizeof(float));
        auto t1 = Clock::now();
        if (rep >= 0) memcpyTimes.push_back(seconds(t0, t1));
        for (std::size_t c = 0; c < names.size(); ++c) {
          auto bytes = std::as_writable_bytes(std::span<float>(payloads[c]));
          const auto a = Clock::now();
          compressors[c]->encode(grad, bytes);
          const auto b = Clock::now();
          compressors[c]->decode(bytes, grad, out);
          const auto e = Clock::now();
          if (rep < 0) continue;
          encodeTimes[c].push_back(seconds(a, b));
          decodeTimes[c].push_back(seconds(b, e));
          totalTimes[c].push_back(seconds(a, e));
        }
      }
      const double inputBytes = static_cast<double>(n) * sizeof(float);
      const double memcpyGbps = inputBytes / median(memcpyTimes) / 1e9;
      for (std::size_t c = 0; c < names.size(); ++c) {
        const double gbps = inputBytes / median(totalTimes[c]) / 1e9;
        const auto payload = compressors[c]->payloadBytes();
        std::printf("%-18s %10zu %9.2f %12.2f %7.2f %12zu %11.2f %11.2f\n", names[c].c_str(), n, gbps,
                    memcpyGbps, gbps / memcpyGbps, payload, 1e3 * median(encodeTimes[c]),
                    1e3 * median(decodeTimes[c]));
        std::fflush(stdout);
        rows.push_back({{"compressor", names[c]},
                        {"floats", n},
                        {"gbps", gbps},
                        {"memcpy_gbps", memcpyGbps},
                        {"ratio", gbps / memcpyGbps},
                        {"bytes_per_step", payload},
                        {"encode_seconds", median(encodeTimes[c])},
                        {"decode_seconds", median(decodeTimes[c])},
                        {"reps", r}});
      }
    }
    gossamer::bench::writeJsonFile(rows, jsonPath);
    std::printf("wrote %s\n", jsonPath.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compress: error: %s\n", e.what());
    return 1;
  }
}
