// Gradient compressors (A2SGD, Top-K, Gaussian-K, QSGD, dense) and CompressedSgd over the
// inproc transport; the `compression:` config section.
#include <catch2/catch.hpp>

#include "build_paths.hpp"
#include "registry.hpp"

#include "threads.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "gossamer/agent.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/compress.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/inproc.hpp"

using namespace gossamer;
using namespace gossamer::optimizers;
using gossamer::testing::onEveryRank;

namespace {

std::vector<std::byte> payloadFor(const Compressor& c) { return std::vector<std::byte>(c.payloadBytes()); }

std::vector<float> floatsOf(std::span<const std::byte> bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
  return f;
}

std::vector<std::byte> bytesOf(const std::vector<float>& f) {
  std::vector<std::byte> b(f.size() * sizeof(float));
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

std::vector<float> normalVector(std::size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

/// Encodes g with a fresh A2SGD compressor; returns the payload's two means.
std::vector<float> a2sgdMeans(const std::vector<float>& g, A2sgdCompressor& c) {
  auto payload = payloadFor(c);
  c.encode(g, payload);
  return floatsOf(payload);
}

/// The paper's rebuild, Algorithm 1 line 6, in double: eps + pos mu+bar - neg mu-bar.
std::vector<double> paperRebuild(const std::vector<float>& g, double mp, double mn, double barP,
                                 double barN) {
  std::vector<double> out(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool pos = g[i] >= 0;
    const double enc = pos ? mp : -mn;
    out[i] = (g[i] - enc) + (pos ? barP : -barN);
  }
  return out;
}

double consensusDistance(const std::vector<std::vector<float>>& xs) {
  std::vector<double> mean(xs[0].size(), 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += x[i] / static_cast<double>(xs.size());
  double d = 0;
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) d += (mean[i] - x[i]) * (mean[i] - x[i]);
  return d / static_cast<double>(xs.size());
}

}  // namespace

// ---- A2SGD equations (the A2SGD paper, Eq. 2, Algorithm 1 lines 3-6) ----------------------

TEST_CASE("A2SGD: the two means and the rebuild on a hand-made vector", "[compress][a2sgd]") {
  const std::vector<float> g = {1.0f, 2.0f, -3.0f, 0.0f, -1.0f};
  A2sgdCompressor c(g.size());
  const auto means = a2sgdMeans(g, c);
  // Non-negative entries {1, 2, 0}: mean 1. Negative entries {-3, -1}: mean |.| 2.
  CHECK(means == std::vector<float>{1.0f, 2.0f});
  CHECK(c.meanPositive() == 1.0f);
  CHECK(c.meanNegative() == 2.0f);
  CHECK(c.countPositive() == 3);
  CHECK(c.countNegative() == 2);
  // eps = g - enc(g) = {0, 1, -1, -1, 1}; with global means (1.5, 1.0):
  // g' = eps + pos 1.5 - neg 1.0 = {1.5, 2.5, -2, 0.5, 0}.
  std::vector<float> out(g.size());
  c.decode(bytesOf({1.5f, 1.0f}), g, out);
  CHECK(out == std::vector<float>{1.5f, 2.5f, -2.0f, 0.5f, 0.0f});
}

TEST_CASE("A2SGD: all-positive, all-negative and all-zero gradients", "[compress][a2sgd]") {
  SECTION("all positive: mu- is 0 (no negative entry)") {
    const std::vector<float> g = {0.5f, 1.5f, 2.5f};
    A2sgdCompressor c(g.size());
    CHECK(a2sgdMeans(g, c) == std::vector<float>{1.5f, 0.0f});
    CHECK(c.countNegative() == 0);
    std::vector<float> out(3);
    c.decode(bytesOf({2.0f, 7.0f}), g, out);  // mu-bar does not touch non-negative entries
    CHECK(out == std::vector<float>{1.0f, 2.0f, 3.0f});
  }
  SECTION("all negative: mu+ is 0 (no non-negative entry)") {
    const std::vector<float> g = {-1.0f, -2.0f, -6.0f};
    A2sgdCompressor c(g.size());
    CHECK(a2sgdMeans(g, c) == std::vector<float>{0.0f, 3.0f});
    CHECK(c.countPositive() == 0);
    std::vector<float> out(3);
    c.decode(bytesOf({5.0f, 1.0f}), g, out);  // eps = {2, 1, -3}; g' = eps - 1
    CHECK(out == std::vector<float>{1.0f, 0.0f, -4.0f});
  }
  SECTION("zeros count as non-negative (v_i >= 0)") {
    const std::vector<float> g(4, 0.0f);
    A2sgdCompressor c(g.size());
    CHECK(a2sgdMeans(g, c) == std::vector<float>{0.0f, 0.0f});
    CHECK(c.countPositive() == 4);
    std::vector<float> out(4);
    c.decode(bytesOf({0.25f, 0.5f}), g, out);
    CHECK(out == std::vector<float>(4, 0.25f));
  }
}

TEST_CASE("A2SGD: NaN and infinite entries are errors naming the index", "[compress][a2sgd]") {
  for (std::size_t n : {std::size_t{5}, std::size_t{10000}}) {  // scalar tail and vectorised blocks
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      auto g = normalVector(n, 3);
      const std::size_t at = n - 2;
      g[at] = bad;
      A2sgdCompressor c(n);
      auto payload = payloadFor(c);
      INFO("n " << n << ", value " << bad);
      try {
        c.encode(g, payload);
        FAIL("expected InvalidArgument");
      } catch (const InvalidArgument& e) {
        CHECK(std::string(e.what()).find("[" + std::to_string(at) + "]") != std::string::npos);
      }
    }
  }
  A2sgdCompressor c(3);
  auto payload = payloadFor(c);
  CHECK_THROWS_AS(c.encode(std::vector<float>(4), payload), InvalidArgument);  // wrong length
  std::vector<float> out(3);
  CHECK_THROWS_AS(c.decode(bytesOf({0, 0}), std::vector<float>(3), out), InvalidArgument);  // before encode
}

TEST_CASE("A2SGD: means of a long vector match a double-precision reference", "[compress][a2sgd]") {
  const std::size_t n = 3 * 4096 + 1234;  // whole blocks and a tail
  auto g = normalVector(n, 11);
  double sp = 0, sn = 0;
  std::size_t np = 0;
  for (float v : g) {
    if (v >= 0) {
      sp += v;
      ++np;
    } else {
      sn -= v;
    }
  }
  A2sgdCompressor c(n);
  const auto means = a2sgdMeans(g, c);
  CHECK(c.countPositive() == np);
  CHECK(means[0] == Approx(sp / static_cast<double>(np)).epsilon(1e-6));
  CHECK(means[1] == Approx(sn / static_cast<double>(n - np)).epsilon(1e-6));
  // The rebuild equals the paper's eps + pos mu+bar - neg mu-bar.
  std::vector<float> out(n);
  c.decode(bytesOf({0.7f, 0.9f}), g, out);
  const auto want = paperRebuild(g, means[0], means[1], 0.7, 0.9);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("A2SGD at world size 1: error + enc(g) is g, and the rebuilt gradient is g exactly",
          "[compress][a2sgd]") {
  const std::size_t n = 2 * 4096 + 77;
  const auto g = normalVector(n, 5, 1e-2f);
  for (bool keep : {true, false}) {
    A2sgdCompressor c(n, A2sgdOptions{keep});
    auto payload = payloadFor(c);
    c.encode(g, payload);
    std::vector<float> out(n, -1.0f);
    c.decode(payload, g, out);  // world size 1: the average of the means is this rank's
    INFO("keepError " << keep);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == g[i]);
    if (!keep) {
      CHECK(c.error().empty());
      continue;
    }
    REQUIRE(c.error().size() == n);
    const float mp = c.meanPositive(), mn = c.meanNegative();
    CHECK(mp > 0.0f);
    CHECK(mn > 0.0f);
    for (std::size_t i = 0; i < n; ++i) {
      const float enc = g[i] >= 0 ? mp : -mn;
      REQUIRE(c.error()[i] == g[i] - enc);                        // eps = g - enc(g), Eq. 2 / line 4
      REQUIRE(c.error()[i] + enc == Approx(g[i]).margin(1e-8f));  // up to float rounding of g - enc
    }
  }
  // Streaming stores (used for large outputs), also into an output that is not
  // 16-byte aligned and with a tail that is not a whole vector.
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    A2sgdOptions streaming;
    streaming.streamingFloats = 1;
    A2sgdCompressor c(n, streaming);
    auto payload = payloadFor(c);
    c.encode(g, payload);
    const std::vector<float> shifted = {c.meanPositive() + 0.5f, c.meanNegative() + 0.25f};
    std::vector<float> buffer(n + offset), plainOut(n);
    std::span<float> out(buffer.data() + offset, n);
    c.decode(bytesOf(shifted), g, out);
    A2sgdCompressor plain(n);
    plain.encode(g, payload);
    plain.decode(bytesOf(shifted), g, plainOut);
    INFO("offset " << offset);
    CHECK(std::equal(out.begin(), out.end(), plainOut.begin()));
    CHECK(plainOut != g);
  }
  // In place (out is the gradient's memory) gives the same.
  A2sgdCompressor c(n);
  auto payload = payloadFor(c);
  auto inPlace = g;
  c.encode(inPlace, payload);
  c.decode(payload, inPlace, inPlace);
  CHECK(inPlace == g);
}

// ---- Top-K ----------------------------------------------------------------------------

TEST_CASE("Top-K sends the k largest entries and keeps the rest as the residual", "[compress][topk]") {
  const std::size_t n = 100;
  auto g = normalVector(n, 21);
  TopKCompressor c(n, 0.1);
  REQUIRE(c.k() == 10);
  CHECK(c.payloadBytes() == 80);
  auto payload = payloadFor(c);
  c.encode(g, payload);
  std::vector<float> out(n);
  c.decode(payload, g, out);
  // The 10 largest magnitudes, exactly.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return std::fabs(g[a]) > std::fabs(g[b]); });
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = order[j];
    if (j < 10) {
      CHECK(out[i] == g[i]);
      CHECK(c.error()[i] == 0.0f);
    } else {
      CHECK(out[i] == 0.0f);
      CHECK(c.error()[i] == g[i]);
    }
  }
  // Error feedback: the next step selects from g2 + residual.
  const auto g2 = normalVector(n, 22, 0.1f);
  const std::vector<float> residual(c.error().begin(), c.error().end());
  c.encode(g2, payload);
  c.decode(payload, g2, out);
  std::size_t sent = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = g2[i] + residual[i];
    REQUIRE(out[i] + c.error()[i] == a);  // nothing is lost: sent + kept = g + e
    sent += out[i] != 0.0f ? 1 : 0;
  }
  CHECK(sent == 10);
  // A finite gradient whose sum with the residual overflows float32 is
  // refused, the residual untouched; nothing infinite is sent.
  TopKCompressor big(4, 0.25);
  const std::vector<float> huge{3e38f, 3e38f, 0.0f, 0.0f};
  auto p4 = payloadFor(big);
  big.encode(huge, p4);  // sends one 3e38, keeps the other
  const std::vector<float> kept(big.error().begin(), big.error().end());
  CHECK_THROWS_WITH(big.encode(huge, p4), Catch::Contains("gradient + residual overflows float32"));
  CHECK(std::equal(kept.begin(), kept.end(), big.error().begin()));
}

TEST_CASE("Top-K breaks ties by index, averages gathered payloads and rejects bad indices",
          "[compress][topk]") {
  TopKCompressor c(6, 0.5);  // k = 3
  auto payload = payloadFor(c);
  c.encode(std::vector<float>{1, -1, 1, 1, -1, 1}, payload);
  std::vector<float> out(6);
  c.decode(payload, {}, out);
  CHECK(out == std::vector<float>{1, -1, 1, 0, 0, 0});
  c.encode(std::vector<float>(6, 0.0f), payload);  // residual {0,0,0,1,-1,1}: sends indices 3, 4, 5
  auto second = payloadFor(c);
  TopKCompressor other(6, 0.5);
  other.encode(std::vector<float>{0, 0, 0, 0, 0, 4}, second);  // sends 5 and two zero ties
  std::vector<std::byte> both(payload);
  both.insert(both.end(), second.begin(), second.end());
  c.decode(both, {}, out);  // (payload + second) / 2
  CHECK(out == std::vector<float>{0, 0, 0, 0.5f, -0.5f, 2.5f});
  std::uint32_t badIndex = 6;
  std::memcpy(both.data() + payload.size(), &badIndex, 4);  // rank 1's first index
  try {
    c.decode(both, {}, out);
    FAIL("expected ProtocolError");
  } catch (const ProtocolError& e) {
    CHECK(e.peer() == 1);
  }
  CHECK_THROWS_AS(c.decode(std::span<const std::byte>(both).first(10), {}, out), InvalidArgument);
  // Indices ascend and values are finite, as the encoder sends them.
  auto repeated = payload;  // indices 3, 4, 5
  const std::uint32_t three = 3;
  std::memcpy(repeated.data() + 4, &three, 4);
  try {
    c.decode(repeated, {}, out);
    FAIL("expected ProtocolError");
  } catch (const ProtocolError& e) {
    CHECK(e.offset() == 4);
  }
  auto notFinite = payload;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(notFinite.data() + 4 * 3, &nan, 4);  // the first value
  try {
    c.decode(notFinite, {}, out);
    FAIL("expected ProtocolError");
  } catch (const ProtocolError& e) {
    CHECK(e.offset() == 12);
  }
  CHECK_THROWS_AS(TopKCompressor(6, 0.0), InvalidArgument);
  CHECK_THROWS_AS(TopKCompressor(6, 1.5), InvalidArgument);
  auto g = std::vector<float>(6, 1.0f);
  g[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(c.encode(g, payload), InvalidArgument);
}

// ---- Gaussian-K -----------------------------------------------------------------------

namespace {

/// The payload's k indices and k values.
std::pair<std::vector<std::uint32_t>, std::vector<float>> sparseOf(std::span<const std::byte> p,
                                                                   std::size_t k) {
  std::vector<std::uint32_t> idx(k);
  std::vector<float> val(k);
  std::memcpy(idx.data(), p.data(), 4 * k);
  std::memcpy(val.data(), p.data() + 4 * k, 4 * k);
  return {idx, val};
}

/// |mean| + z sigma (population sigma) of g, in double: Gaussian-K's first threshold.
double gaussianThreshold(const std::vector<float>& g, double z) {
  double sum = 0, squares = 0;
  for (float v : g) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const auto n = static_cast<double>(g.size());
  const double mean = sum / n;
  return std::fabs(mean) + z * std::sqrt(squares / n - mean * mean);
}

}  // namespace

TEST_CASE("Gaussian-K on a hand-made vector: threshold from mean and sigma", "[compress][gaussk]") {
  // n = 8, ratio 0.25: k = 2, z = Phi^-1(1 - 0.125) = 1.15035 (normal table).
  // g = {0, 3, 0, 0, -5, 0, 0, 0}: mean -2/8 = -0.25, E[a^2] = 34/8 = 4.25,
  // sigma = sqrt(4.25 - 0.0625) = 2.04634, tau = 0.25 + 1.15035 * 2.04634 =
  // 2.6040. |3| and |-5| pass: c = 2, inside [2k/3, 4k/3] = [1.33, 2.67], so no
  // correction; both are sent (indices 1, 4), nothing is padding.
  GaussianKCompressor c(8, {0.25, 3});
  REQUIRE(c.k() == 2);
  CHECK(c.payloadBytes() == 16);
  CHECK(c.zScore() == Approx(1.150349).epsilon(1e-6));
  const std::vector<float> g{0, 3, 0, 0, -5, 0, 0, 0};
  auto payload = payloadFor(c);
  c.encode(g, payload);
  CHECK(c.threshold() == Approx(0.25 + 1.150349 * std::sqrt(4.1875)).epsilon(1e-5));
  CHECK(c.candidates() == 2);
  CHECK(c.selected() == 2);
  CHECK(c.adjustmentsMade() == 0);
  const auto [idx, val] = sparseOf(payload, 2);
  CHECK(idx == std::vector<std::uint32_t>{1, 4});
  CHECK(val == std::vector<float>{3, -5});
  CHECK(std::vector<float>(c.error().begin(), c.error().end()) == std::vector<float>(8, 0.0f));
  // ratio 1: z = Phi^-1(0.5) = 0.
  CHECK(GaussianKCompressor(8, {1.0, 3}).zScore() == Approx(0.0).margin(1e-12));
  // ratio 0.05: z = 1.959964 (the familiar 95% two-sided value).
  CHECK(GaussianKCompressor(8, {0.05, 3}).zScore() == Approx(1.959964).epsilon(1e-6));
}

TEST_CASE("Gaussian-K selects about k entries of Gaussian data without a correction", "[compress][gaussk]") {
  // n = 100000, ratio 0.01: k = 1000. For N(0, 1) data the count above
  // tau = |mu| + 2.5758 sigma is Binomial(n, 0.01): mean 1000, sd 31.5; the
  // first threshold lands inside [667, 1333] and no correction is made.
  const std::size_t n = 100000;
  const auto g = normalVector(n, 31);
  GaussianKCompressor c(n, {0.01, 3});
  REQUIRE(c.k() == 1000);
  auto payload = payloadFor(c);
  c.encode(g, payload);
  CHECK(c.threshold() == Approx(gaussianThreshold(g, c.zScore())).epsilon(1e-5));
  CHECK(c.adjustmentsMade() == 0);
  const auto above = static_cast<std::size_t>(
      std::count_if(g.begin(), g.end(), [&](float v) { return std::fabs(v) > c.threshold(); }));
  CHECK(c.candidates() == above);
  CHECK(above > 850);  // 1000 +- 150: about 5 sd
  CHECK(above < 1150);
  CHECK(c.selected() == std::min<std::size_t>(above, 1000));
  // Sent: entries above the threshold, and (when more than k passed) the k largest of them.
  std::vector<float> out(n);
  c.decode(payload, g, out);
  std::size_t sent = 0;
  float smallestSent = INFINITY, largestKept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(out[i] + c.error()[i] == g[i]);  // sent + kept = g
    if (out[i] != 0.0f) {
      ++sent;
      CHECK(c.error()[i] == 0.0f);
      smallestSent = std::min(smallestSent, std::fabs(out[i]));
    } else {
      largestKept = std::max(largestKept, std::fabs(c.error()[i]));
    }
  }
  CHECK(sent == c.selected());
  CHECK(smallestSent > c.threshold());
  CHECK(smallestSent >= largestKept);  // what is sent is the top of |g|
}

TEST_CASE("Gaussian-K bounds the count on non-Gaussian data", "[compress][gaussk]") {
  SECTION("uniform: the corrections overshoot, more than k candidates, the k largest are sent") {
    // Uniform on [-1, 1]: sigma = 1/sqrt(3) = 0.577. ratio 0.01, z = 2.576:
    // tau = 1.487 > 1, 0 candidates -> halve to 0.744: 25.6% of n pass (> 4k/3)
    // -> x1.5 = 1.115, 0 pass -> halve to 0.558: 44% pass, no corrections
    // left (3). 44% of n > k: the k largest |a| are sent, which is Top-K's
    // selection; so the decoded vectors agree with Top-K's exactly.
    const std::size_t n = 20000;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> g(n);
    for (auto& v : g) v = uniform(rng);
    GaussianKCompressor c(n, {0.01, 3});
    TopKCompressor t(n, 0.01);
    auto pc = payloadFor(c), pt = payloadFor(t);
    c.encode(g, pc);
    t.encode(g, pt);
    CHECK(c.adjustmentsMade() == 3);
    CHECK(c.threshold() == Approx(gaussianThreshold(g, c.zScore()) * 0.5 * 1.5 * 0.5).epsilon(1e-5));
    CHECK(c.candidates() > 8000);
    CHECK(c.candidates() < 9600);
    CHECK(c.selected() == c.k());
    std::vector<float> oc(n), ot(n);
    c.decode(pc, g, oc);
    t.decode(pt, g, ot);
    CHECK(oc == ot);
    CHECK(std::equal(c.error().begin(), c.error().end(), t.error().begin()));
  }
  SECTION("one magnitude: corrections that end with no candidate take the last threshold that had some") {
    // Every entry 1: sigma 0, tau = 1 passes none (|a| > tau) -> 0.5 passes
    // all (> 4k/3) -> 0.75 all -> 1.125 none. Sending nothing would repeat
    // every step while the residual grows; 0.75 is taken again, and k are sent.
    const std::size_t n = 64;
    const std::vector<float> g(n, 1.0f);
    GaussianKCompressor c(n, {0.1, 3});
    auto payload = payloadFor(c);
    std::vector<float> out(n);
    for (int step = 1; step <= 3; ++step) {
      INFO("step " << step);
      c.encode(g, payload);
      CHECK(c.candidates() >= c.k());
      CHECK(c.selected() == c.k());
      c.decode(payload, g, out);
      CHECK(std::count(out.begin(), out.end(), 0.0f) == static_cast<std::ptrdiff_t>(n - c.k()));
      CHECK(*std::max_element(c.error().begin(), c.error().end()) <= static_cast<float>(step));
    }
  }
  SECTION("spikes: fewer than 2k/3 candidates after every correction, the rest of the slots are padding") {
    // n = 10000, k = 100; 50 entries of 10 at indices 7, 207, ..., the rest 0.
    // mean 0.05, sigma = sqrt(50 * 100 / 10000 - 0.0025) = 0.7053, tau = 0.05 +
    // 2.576 * 0.7053 = 1.867: 50 pass (< 66.7) -> 0.93, 0.47, 0.23: still 50.
    // All 3 corrections are made; the 50 spikes are sent, and the other 50
    // slots carry 0 at the lowest indices that are not spikes: 0..6, 8..50.
    const std::size_t n = 10000;
    std::vector<float> g(n, 0.0f);
    for (std::size_t s = 0; s < 50; ++s) g[7 + 200 * s] = 10.0f;
    GaussianKCompressor c(n, {0.01, 3});
    auto payload = payloadFor(c);
    c.encode(g, payload);
    CHECK(c.adjustmentsMade() == 3);
    CHECK(c.candidates() == 50);
    CHECK(c.selected() == 50);
    const auto [idx, val] = sparseOf(payload, 100);
    std::vector<std::uint32_t> want;
    for (std::uint32_t i = 0; i <= 50; ++i) want.push_back(i);  // 50 padding slots and the spike at 7
    for (std::uint32_t s = 1; s < 50; ++s) want.push_back(7 + 200 * s);
    CHECK(idx == want);
    for (std::size_t j = 0; j < 100; ++j) CHECK(val[j] == (idx[j] % 200 == 7 ? 10.0f : 0.0f));
    std::vector<float> out(n);
    c.decode(payload, g, out);
    CHECK(out == g);
    CHECK(std::all_of(c.error().begin(), c.error().end(), [](float v) { return v == 0.0f; }));
  }
  SECTION("all zeros: nothing to send, k padding slots") {
    GaussianKCompressor c(50, {0.1, 3});
    auto payload = payloadFor(c);
    c.encode(std::vector<float>(50, 0.0f), payload);
    CHECK(c.candidates() == 0);
    CHECK(c.selected() == 0);
    CHECK(c.threshold() == 0.0f);
    const auto [idx, val] = sparseOf(payload, 5);
    CHECK(idx == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
    CHECK(val == std::vector<float>(5, 0.0f));
  }
  SECTION("no corrections allowed: the Gaussian estimate as it is, still at most k") {
    std::mt19937 rng(9);
    std::exponential_distribution<float> expo(1.0f);  // |a| heavy on one side
    std::vector<float> g(5000);
    for (auto& v : g) v = expo(rng);
    for (int adjustments : {0, 1, 3, 16}) {
      GaussianKCompressor c(g.size(), {0.02, adjustments});
      auto payload = payloadFor(c);
      c.encode(g, payload);
      INFO(adjustments);
      CHECK(c.adjustmentsMade() <= adjustments);
      CHECK(c.selected() <= c.k());
      CHECK(c.selected() == std::min(c.candidates(), c.k()));
      const auto [idx, val] = sparseOf(payload, c.k());
      CHECK(std::is_sorted(idx.begin(), idx.end()));
      CHECK(std::adjacent_find(idx.begin(), idx.end()) == idx.end());
      CHECK(static_cast<std::size_t>(std::count_if(val.begin(), val.end(), [](float v) { return v != 0; })) ==
            c.selected());
    }
  }
}

TEST_CASE("Gaussian-K keeps what it does not send as the residual", "[compress][gaussk]") {
  const std::size_t n = 2000;
  GaussianKCompressor c(n, {0.02, 3});
  auto payload = payloadFor(c);
  std::vector<float> out(n), residual(n, 0.0f);
  double sentTotal = 0;
  for (unsigned step = 0; step < 5; ++step) {
    const auto g = normalVector(n, 40 + step, 0.1f);
    c.encode(g, payload);
    c.decode(payload, g, out);
    for (std::size_t i = 0; i < n; ++i) {
      const float a = g[i] + residual[i];
      REQUIRE(out[i] + c.error()[i] == a);  // nothing lost: sent + kept = g + e
      REQUIRE((out[i] == 0.0f || c.error()[i] == 0.0f));
      sentTotal += out[i] != 0.0f ? 1 : 0;
    }
    residual.assign(c.error().begin(), c.error().end());
  }
  CHECK(sentTotal > 0);
  // A small entry that is never selected accumulates in the residual until it is.
  GaussianKCompressor d(100, {0.01, 3});  // k = 1
  auto p = payloadFor(d);
  std::vector<float> g(100, 0.0f);
  g[3] = 1.0f;
  g[60] = 0.25f;
  d.encode(g, p);  // sends index 3 (the only candidate above tau)
  CHECK(d.error()[60] == 0.25f);
  g[3] = 0.0f;
  g[60] = 0.0f;
  g[61] = 0.1f;
  d.encode(g, p);  // a = e + g: 0.25 at 60 and 0.1 at 61
  const auto [idx, val] = sparseOf(p, 1);
  CHECK(idx[0] == 60);
  CHECK(val[0] == 0.25f);
  CHECK(d.error()[61] == 0.1f);
}

TEST_CASE("Gaussian-K decodes gathered payloads as Top-K does and rejects bad input", "[compress][gaussk]") {
  const std::size_t n = 300;
  GaussianKCompressor a(n), b(n, {0.01, 5});
  REQUIRE(a.k() == 3);
  auto pa = payloadFor(a), pb = payloadFor(b);
  const auto ga = normalVector(n, 50), gb = normalVector(n, 51);
  a.encode(ga, pa);
  b.encode(gb, pb);
  std::vector<std::byte> both(pa);
  both.insert(both.end(), pb.begin(), pb.end());
  std::vector<float> out(n);
  a.decode(both, ga, out);
  // (sparse a + sparse b) / 2, by hand from the payloads.
  std::vector<float> want(n, 0.0f);
  for (const auto* p : {&pa, &pb}) {
    const auto [idx, val] = sparseOf(*p, 3);
    for (std::size_t j = 0; j < 3; ++j) want[idx[j]] += val[j];
  }
  for (auto& v : want) v *= 0.5f;
  CHECK(out == want);
  TopKCompressor t(n, 0.01);  // the same wire format
  std::vector<float> viaTopK(n);
  t.decode(both, ga, viaTopK);
  CHECK(viaTopK == out);
  // Bad payloads.
  std::uint32_t bad = static_cast<std::uint32_t>(n);
  auto corrupt = both;
  std::memcpy(corrupt.data() + pa.size() + 4, &bad, 4);  // rank 1's second index
  try {
    a.decode(corrupt, ga, out);
    FAIL("expected ProtocolError");
  } catch (const ProtocolError& e) {
    CHECK(e.peer() == 1);
    CHECK(e.offset() == 4);
    CHECK(std::string(e.what()).find("Gaussian-K payload") != std::string::npos);
  }
  CHECK_THROWS_AS(a.decode(std::span<const std::byte>(both).first(20), ga, out), InvalidArgument);
  std::vector<float> shortOut(n - 1);
  CHECK_THROWS_AS(a.decode(pa, ga, shortOut), InvalidArgument);
  // Bad options.
  CHECK_THROWS_AS(GaussianKCompressor(n, {0.0, 3}), InvalidArgument);
  CHECK_THROWS_AS(GaussianKCompressor(n, {1.5, 3}), InvalidArgument);
  CHECK_THROWS_AS(GaussianKCompressor(n, {std::nan(""), 3}), InvalidArgument);
  CHECK_THROWS_AS(GaussianKCompressor(n, {0.1, -1}), InvalidArgument);
  CHECK_THROWS_AS(GaussianKCompressor(n, {0.1, 17}), InvalidArgument);
  CHECK_THROWS_AS(GaussianKCompressor(0, {0.1, 3}), InvalidArgument);
  // Bad gradients: named, and the residual is left as it was.
  const std::vector<float> before(a.error().begin(), a.error().end());
  auto g = ga;
  g[17] = std::numeric_limits<float>::infinity();
  try {
    a.encode(g, pa);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("[17]") != std::string::npos);
  }
  CHECK(std::equal(before.begin(), before.end(), a.error().begin()));
  CHECK_THROWS_AS(a.encode(std::vector<float>(n - 1), pa), InvalidArgument);
  std::vector<std::byte> shortPayload(pa.size() - 4);
  CHECK_THROWS_AS(a.encode(ga, shortPayload), InvalidArgument);
}

// ---- QSGD -----------------------------------------------------------------------------

TEST_CASE("QSGD packs signs and levels and decodes to multiples of norm / s", "[compress][qsgd]") {
  const std::size_t n = 300;
  QsgdCompressor c(n, QsgdOptions{4, 128, 7, 0});
  CHECK(c.bitsPerElement() == 4);  // sign + 3 bits for levels 0..4
  CHECK(c.buckets() == 3);
  CHECK(c.payloadBytes() == 3 * 4 + 152);  // 3 norms + 1200 bits of codes in 38 words
  const auto g = normalVector(n, 8);
  auto payload = payloadFor(c);
  c.encode(g, payload);
  std::vector<float> out(n);
  c.decode(payload, g, out);
  for (std::size_t b = 0; b < 3; ++b) {
    double sq = 0;
    for (std::size_t i = b * 128; i < std::min(n, (b + 1) * 128); ++i) sq += double(g[i]) * g[i];
    const double unit = std::sqrt(sq) / 4;
    for (std::size_t i = b * 128; i < std::min(n, (b + 1) * 128); ++i) {
      const double level = std::fabs(out[i]) / unit;
      REQUIRE(level == Approx(std::round(level)).margin(1e-4));                  // a whole level
      REQUIRE(std::fabs(std::fabs(out[i]) - std::fabs(g[i])) <= unit * 1.0001);  // a neighbour of |g|
      if (out[i] != 0.0f) REQUIRE((out[i] < 0) == (g[i] < 0));                   // the sign survives
    }
  }
  // A bucket of tiny entries (whose float squares vanish) keeps its norm.
  {
    QsgdCompressor tiny(512, QsgdOptions{4, 512, 7, 0});
    const std::vector<float> t(512, 1e-24f);
    auto tp = payloadFor(tiny);
    tiny.encode(t, tp);
    float norm = 0;
    std::memcpy(&norm, tp.data(), 4);
    CHECK(norm == Approx(1e-24 * std::sqrt(512.0)).epsilon(1e-6));
  }
  CHECK(QsgdCompressor(n, QsgdOptions{1, 512, 1, 0}).bitsPerElement() == 2);
  CHECK(QsgdCompressor(n, QsgdOptions{255, 512, 1, 0}).bitsPerElement() == 9);
  CHECK_THROWS_AS(QsgdCompressor(n, QsgdOptions{0, 512, 1, 0}), InvalidArgument);
  CHECK_THROWS_AS(QsgdCompressor(n, QsgdOptions{4, 0, 1, 0}), InvalidArgument);
  // A level above s on the wire is a protocol error; so is a bad norm.
  auto bad = payload;
  bad[c.buckets() * 4] = std::byte{0x07};  // first code: level 7
  CHECK_THROWS_AS(c.decode(bad, g, out), ProtocolError);
  bad = payload;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data(), &nan, 4);
  CHECK_THROWS_AS(c.decode(bad, g, out), ProtocolError);
}

TEST_CASE("QSGD is unbiased: the mean of many encodings is the input", "[compress][qsgd]") {
  const std::size_t n = 300;
  const int s = 4, encodings = 4000;
  QsgdCompressor c(n, QsgdOptions{s, 128, 99, 3});
  const auto g = normalVector(n, 9);
  auto payload = payloadFor(c);
  std::vector<float> out(n);
  std::vector<double> sum(n, 0.0);
  std::size_t exact = 0;
  for (int k = 0; k < encodings; ++k) {
    c.encode(g, payload);
    c.decode(payload, g, out);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] += out[i];
      exact += out[i] == g[i] ? 1 : 0;
    }
  }
  CHECK(exact < n);  // lossy: single encodings are not the input
  for (std::size_t b = 0; b * 128 < n; ++b) {
    double sq = 0;
    for (std::size_t i = b * 128; i < std::min(n, (b + 1) * 128); ++i) sq += double(g[i]) * g[i];
    const double unit = std::sqrt(sq) / s;
    for (std::size_t i = b * 128; i < std::min(n, (b + 1) * 128); ++i) {
      const double r = std::fabs(g[i]) / unit, p = r - std::floor(r);
      const double sigma = unit * std::sqrt(p * (1 - p) / encodings);  // std of the mean
      INFO("element " << i << ": g " << g[i] << ", mean " << sum[i] / encodings << ", sigma " << sigma);
      REQUIRE(std::fabs(sum[i] / encodings - g[i]) <= 5 * sigma + 1e-5 * unit);
    }
  }
}

TEST_CASE("QSGD stays unbiased on a bucket whose norm is below s / FLT_MAX", "[compress][qsgd]") {
  // s / norm is infinite in float32 there: every nonzero entry used to come
  // back as +-norm, and a zero entry took the level of NaN.
  const int s = 65535, encodings = 2000;
  QsgdCompressor c(3, QsgdOptions{s, 128, 7, 3});
  const std::vector<float> g = {1e-35f, 2e-36f, 0.0f};
  auto payload = payloadFor(c);
  std::vector<float> out(3);
  std::vector<double> sum(3, 0.0);
  for (int k = 0; k < encodings; ++k) {
    c.encode(g, payload);
    c.decode(payload, g, out);
    for (std::size_t i = 0; i < 3; ++i) sum[i] += out[i];
  }
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("element " << i << ": g " << g[i] << ", mean " << sum[i] / encodings);
    CHECK(sum[i] / encodings == Approx(g[i]).epsilon(0.02).margin(1e-40));
  }
  CHECK(sum[2] == 0.0);
}

TEST_CASE("decoded averages of values near float32's largest stay finite", "[compress]") {
  // Two ranks each sending 3e38: the average fits float32, their sum does not.
  const float big = 3e38f;
  SECTION("Top-K") {
    TopKCompressor c(2, 0.5);  // k = 1
    auto one = payloadFor(c);
    c.encode(std::vector<float>{big, 0.0f}, one);
    std::vector<std::byte> both(one);
    both.insert(both.end(), one.begin(), one.end());
    std::vector<float> out(2);
    c.decode(both, {}, out);
    CHECK(out == std::vector<float>{big, 0.0f});
  }
  SECTION("QSGD") {
    QsgdCompressor c(1, QsgdOptions{4, 512, 1, 0});
    auto one = payloadFor(c);
    c.encode(std::vector<float>{big}, one);  // |v_i| = norm: level s, exactly
    std::vector<std::byte> both(one);
    both.insert(both.end(), one.begin(), one.end());
    std::vector<float> out(1);
    c.decode(both, {}, out);
    CHECK(std::isfinite(out[0]));
    CHECK(out[0] == Approx(big).epsilon(1e-6));
  }
  SECTION("Gaussian-K: a threshold above float32's largest is clamped, not infinite") {
    GaussianKCompressor c(4, {0.25, 3});  // k = 1
    auto payload = payloadFor(c);
    c.encode(std::vector<float>{big, -big, big, -big}, payload);
    INFO("threshold " << c.threshold());
    CHECK(std::isfinite(c.threshold()));
    std::vector<float> out(4);
    c.decode(payload, {}, out);
    CHECK(std::count(out.begin(), out.end(), 0.0f) == 3);  // one entry of magnitude 3e38 went out
    CHECK(std::abs(*std::max_element(out.begin(), out.end(),
                                     [](float a, float b) { return std::abs(a) < std::abs(b); })) == big);
  }
}

TEST_CASE("QSGD with a bucket larger than any vector has one bucket", "[compress][qsgd]") {
  QsgdCompressor c(4, QsgdOptions{4, std::numeric_limits<std::size_t>::max(), 1, 0});
  CHECK(c.payloadBytes() == 4 + 4);  // one norm, four 4-bit codes in one word
  auto payload = payloadFor(c);
  const std::vector<float> g{1, -2, 0, 4};
  c.encode(g, payload);
  std::vector<float> out(4);
  c.decode(payload, g, out);
  // One norm over the whole vector, sqrt(21): 4 = 3.49 norm / s comes back
  // at level 3 or 4 (a wrapped bucket count sent nothing: all zero).
  const double unit = std::sqrt(21.0) / 4;
  CHECK((out[3] == Approx(3 * unit) || out[3] == Approx(4 * unit)));
}

TEST_CASE("A2SGD refuses averaged means that are not finite and >= 0", "[compress][a2sgd]") {
  A2sgdCompressor c(3);
  const std::vector<float> g{1, -1, 2};
  auto payload = payloadFor(c);
  c.encode(g, payload);
  std::vector<float> out(3);
  for (const auto& means :
       {std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 1.0f},
        std::vector<float>{1.0f, std::numeric_limits<float>::infinity()}, std::vector<float>{-0.5f, 1.0f}}) {
    INFO("means " << means[0] << ", " << means[1]);
    const auto combined = bytesOf(means);
    try {
      c.decode(combined, g, out);
      FAIL("expected ProtocolError");
    } catch (const ProtocolError& e) {
      CHECK(e.offset() == (std::isfinite(means[0]) && means[0] >= 0 ? 4u : 0u));
    }
  }
}

TEST_CASE("Top-K sends ceil(ratio * n) entries of the decimal ratio (Gaussian-K's k is the same count)",
          "[compress][topk]") {
  // 0.07 * 100 is 7.000000000000001 in double: 7 entries, not 8.
  CHECK(TopKCompressor(100, 0.07).k() == 7);
  CHECK(TopKCompressor(100, 0.14).k() == 14);
  CHECK(TopKCompressor(100, 0.071).k() == 8);
  CHECK(TopKCompressor(1000, 0.0015).k() == 2);
  CHECK(TopKCompressor(3, 1.0).k() == 3);
  CHECK(TopKCompressor(1000, 1e-9).k() == 1);
}

TEST_CASE("the dense compressor and the factory", "[compress]") {
  const auto g = normalVector(10, 1);
  auto d = makeCompressor({}, 10);
  CHECK(d->name() == "none");
  CHECK(d->payloadBytes() == 40);
  auto payload = payloadFor(*d);
  d->encode(g, payload);
  std::vector<float> out(10);
  d->decode(payload, g, out);
  CHECK(out == g);
  CompressionOptions o;
  for (const std::string kind : {"a2sgd", "topk", "gaussk", "qsgd"}) {
    o.kind = kind;
    CHECK(makeCompressor(o, 10)->name() == kind);
  }
  o.kind = "gzip";
  CHECK_THROWS_AS(makeCompressor(o, 10), InvalidArgument);
  o.kind = "a2sgd";
  CHECK_THROWS_AS(makeCompressor(o, 0), InvalidArgument);
}

// ---- CompressedSgd over inproc ----------------------------------------------------------

TEST_CASE("A2SGD sends at most 64 payload bytes per worker per step, whatever the model size",
          "[compress][a2sgd][optimizer]") {
  // Measured with the transport's counters (payload bytes, frame headers excluded).
  for (bool gossip : {false, true}) {
    std::vector<std::uint64_t> perStep;
    for (std::size_t modelSize : {std::size_t{1000}, std::size_t{1} << 20}) {
      const int n = 8, steps = 5;
      auto fabric = inproc::makeFabric(n);
      topologies::FairRoulette topo(n, 3);
      std::vector<std::uint64_t> sent(n), counted(n);
      onEveryRank(n, [&](int r) {
        auto t = inproc::makeTransport(fabric, r, 10.0);
        Communicator comm(*t, 10.0);
        CompressedSgdOptions o;
        o.sgd = {0.01, 0.0, 0.0};
        o.means = gossip ? MeansExchange::kGossip : MeansExchange::kAllreduce;
        o.finalSync = false;
        CompressedSgd opt(comm, &topo, std::make_unique<A2sgdCompressor>(modelSize), nullptr, o);
        std::vector<float> x(modelSize, 0.0f);
        const auto g = normalVector(modelSize, static_cast<unsigned>(r));
        const auto before = t->stats().bytesSent;
        for (int s = 0; s < steps; ++s) opt.step(x, g);
        sent[static_cast<std::size_t>(r)] = t->stats().bytesSent - before;
        counted[static_cast<std::size_t>(r)] = opt.stats().exchangeBytes;
        t->close();
      });
      const auto most = *std::max_element(sent.begin(), sent.end());
      INFO((gossip ? "gossip" : "allreduce")
           << ", model of " << modelSize << " floats: " << most / steps << " bytes per step");
      CHECK(most > 0);
      CHECK(most <= 64 * steps);
      CHECK(sent == counted);  // the optimizer's own accounting agrees
      perStep.push_back(most);
    }
    CHECK(perStep[0] == perStep[1]);  // independent of the model size
  }
}

TEST_CASE("A2SGD training over inproc: models drift between syncs and agree after each",
          "[compress][a2sgd]") {
  // Rank r minimises 0.5 ||x - c_r||^2: gradient x - c_r. A2SGD steps with its
  // own gradient shifted by the change of the means, so the models drift;
  // every 5 steps and after the last (step 12) they are averaged.
  const int n = 4, steps = 12;
  const std::size_t p = 64;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::vector<float>> targets;
  for (int r = 0; r < n; ++r) targets.push_back(normalVector(p, 100 + static_cast<unsigned>(r)));
  // snapshots[step][rank]
  std::vector<std::vector<std::vector<float>>> snapshots(steps, std::vector<std::vector<float>>(n));
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    Communicator comm(*t, 10.0);
    CompressedSgdOptions o;
    o.sgd = {0.2, 0.0, 0.0};
    o.syncPeriod = 5;
    CompressedSgd opt(comm, nullptr, std::make_unique<A2sgdCompressor>(p), nullptr, o);
    opt.setTotalSteps(steps);
    std::vector<float> x(p, 0.0f), g(p);
    const auto& c = targets[static_cast<std::size_t>(r)];
    for (int s = 0; s < steps; ++s) {
      for (std::size_t i = 0; i < p; ++i) g[i] = x[i] - c[i];
      opt.step(x, g);
      snapshots[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)] = x;
    }
    RANK_CHECK(opt.stats().syncs == 3);  // after steps 5, 10 and 12
    t->close();
  });
  CHECK(consensusDistance(snapshots[3]) > 1e-4);  // drifted before the first sync
  CHECK(consensusDistance(snapshots[4]) == 0.0);  // step 5: averaged
  CHECK(consensusDistance(snapshots[6]) > 1e-4);
  CHECK(consensusDistance(snapshots[9]) == 0.0);
  CHECK(consensusDistance(snapshots[11]) == 0.0);  // the final synchronisation
  // And it trains: the common model approaches the minimiser of the sum, mean(c_r).
  double before = 0, after = 0;
  for (std::size_t i = 0; i < p; ++i) {
    double m = 0;
    for (const auto& c : targets) m += c[i] / n;
    before += m * m;
    after += (snapshots[11][0][i] - m) * (snapshots[11][0][i] - m);
  }
  CHECK(after < 0.05 * before);
}

TEST_CASE("A2SGD with gossiped means and a Crossover-SGD sync needs no global collective",
          "[compress][a2sgd][crossover]") {
  const int n = 4, steps = 8;
  const std::size_t p = 40;
  auto fabric = inproc::makeFabric(n);
  topologies::FairRoulette topo(n, 5);
  std::vector<std::vector<float>> before(n), after(n);  // around the last sync
  std::vector<CompressionStats> stats(n);
  onEveryRank(n, [&](int r) {
    auto t = inproc::makeTransport(fabric, r, 10.0);
    Communicator comm(*t, 10.0);
    CrossoverOptions co;
    co.segments = 2;
    CrossoverSgd crossover(*t, topo, {30, 10}, co);
    CompressedSgdOptions o;
    o.sgd = {0.05, 0.0, 0.0};
    o.means = MeansExchange::kGossip;
    o.sync = ModelSync::kGossip;
    o.syncPeriod = 4;
    o.finalSync = false;
    const auto i = static_cast<std::size_t>(r);
    CompressedSgd opt(
        comm, &topo, std::make_unique<A2sgdCompressor>(p),
        [&](std::span<float> x, std::uint64_t round) {
          before[i].assign(x.begin(), x.end());
          crossover.exchange(x, round);
          after[i].assign(x.begin(), x.end());
        },
        o);
    std::vector<float> x(p, 0.0f);
    const auto g = normalVector(p, 7 + static_cast<unsigned>(r));
    for (int s = 0; s < steps; ++s) opt.step(x, g);  // steps 4 and 8 end with an exchange
    stats[i] = opt.stats();
    t->close();
  });
  for (const auto& s : stats) {
    CHECK(s.syncs == 2);
    CHECK(s.exchangeBytes == steps * 12u);        // one push-sum message of 3 floats per step (fair roulette)
    CHECK(s.syncBytes == 2 * p * sizeof(float));  // the model once per Crossover-SGD exchange
  }
  // The exchange mixes with a doubly stochastic matrix: the mean model stays,
  // the consensus distance drops.
  const double d0 = consensusDistance(before), d1 = consensusDistance(after);
  INFO("consensus distance " << d0 << " -> " << d1);
  CHECK(d0 > 1e-4);
  CHECK(d1 < 0.9 * d0);
  for (std::size_t j = 0; j < p; ++j) {
    double m0 = 0, m1 = 0;
    for (int r = 0; r < n; ++r) {
      m0 += before[static_cast<std::size_t>(r)][j];
      m1 += after[static_cast<std::size_t>(r)][j];
    }
    REQUIRE(m1 == Approx(m0).margin(1e-5));
  }
}

TEST_CASE("CompressedSgd with Top-K, Gaussian-K and QSGD keeps every rank's model identical",
          "[compress][optimizer]") {
  for (const std::string kind : {"topk", "gaussk", "qsgd", "none"}) {
    const int n = 3, steps = 6;
    const std::size_t p = 500;
    auto fabric = inproc::makeFabric(n);
    std::vector<std::vector<float>> models(n);
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      Communicator comm(*t, 10.0);
      CompressionOptions co;
      co.kind = kind;
      co.qsgd.rank = r;
      CompressedSgdOptions o;
      o.sgd = {0.1, 0.9, 0.0};
      CompressedSgd opt(comm, nullptr, makeCompressor(co, p), nullptr, o);
      opt.setTotalSteps(steps);
      std::vector<float> x(p, 0.5f);
      for (int s = 0; s < steps; ++s) opt.step(x, normalVector(p, static_cast<unsigned>(r * 100 + s)));
      RANK_CHECK(opt.stats().syncs == 0);  // nothing to synchronise
      models[static_cast<std::size_t>(r)] = x;
      t->close();
    });
    INFO(kind);
    CHECK(models[1] == models[0]);
    CHECK(models[2] == models[0]);
    CHECK(models[0] != std::vector<float>(p, 0.5f));  // it did step
  }
}

TEST_CASE("CompressedSgd rejects bad combinations", "[compress][optimizer]") {
  auto fabric = inproc::makeFabric(1);
  auto t = inproc::makeTransport(fabric, 0, 1.0);
  Communicator comm(*t, 1.0);
  CompressedSgdOptions o;
  o.means = MeansExchange::kGossip;
  CHECK_THROWS_AS(CompressedSgd(comm, nullptr, std::make_unique<A2sgdCompressor>(4), nullptr, o),
                  InvalidArgument);  // no topology
  topologies::Ring ring(1);
  CHECK_THROWS_AS(CompressedSgd(comm, &ring, std::make_unique<TopKCompressor>(4, 0.5), nullptr, o),
                  InvalidArgument);  // Top-K payloads are gathered, not averaged
  o.means = MeansExchange::kAllreduce;
  o.sync = ModelSync::kGossip;
  CHECK_THROWS_AS(CompressedSgd(comm, nullptr, std::make_unique<A2sgdCompressor>(4), nullptr, o),
                  InvalidArgument);  // no averager
  o.sync = ModelSync::kAllreduce;
  CompressedSgd opt(comm, nullptr, std::make_unique<A2sgdCompressor>(4), nullptr, o);
  std::vector<float> x(4), g(5);
  CHECK_THROWS_AS(opt.step(x, g), InvalidArgument);
}

// ---- configuration --------------------------------------------------------------------

TEST_CASE("config: the compression section", "[compress][config]") {
  const Config c = gossamer::test::trainRegistry().parse(
      "algorithm:\n  name: crossover_sgd\ncompression:\n  kind: a2sgd\n  means: gossip\n  gossip_rounds: 2\n"
      "  sync: gossip\n  sync_period: 50\n  final_sync: false\n  keep_error: true\n",
      "c.yaml");
  CHECK(c.get<std::string>("compression.kind") == "a2sgd");
  CHECK(c.get<std::string>("compression.means") == "gossip");
  CHECK(c.get<int>("compression.gossip_rounds") == 2);
  CHECK(c.get<std::string>("compression.sync") == "gossip");
  CHECK(c.get<int>("compression.sync_period") == 50);
  CHECK_FALSE(c.get<bool>("compression.final_sync"));
  CHECK(c.get<bool>("compression.keep_error"));
  const Config q = gossamer::test::trainRegistry().parse(
      "algorithm:\n  name: allreduce_sgd\ncompression:\n  kind: qsgd\n  qsgd_levels: 16\n"
      "  qsgd_bucket_size: 256\n",
      "q.yaml");
  CHECK(q.get<int>("compression.qsgd_levels") == 16);
  CHECK(q.get<int>("compression.qsgd_bucket_size") == 256);
  const Config gk = gossamer::test::trainRegistry().parse(
      "algorithm:\n  name: allreduce_sgd\ncompression:\n  kind: gaussk\n  gaussk_ratio: 0.05\n"
      "  gaussk_adjustments: 5\n",
      "gk.yaml");
  CHECK(gk.get<double>("compression.gaussk_ratio") == 0.05);
  CHECK(gk.get<int>("compression.gaussk_adjustments") == 5);
  const auto expectError = [](const std::string& yaml, const std::string& key, int line) {
    INFO(yaml);
    try {
      gossamer::test::trainRegistry().parse(yaml, "bad.yaml");
      FAIL("expected ConfigError");
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(e.key() == key);
      CHECK(e.line() == line);
      CHECK(e.file() == "bad.yaml");
    }
  };
  expectError("algorithm:\n  name: crossover_sgd\ncompression:\n  kind: topk\n", "compression.kind", 4);
  expectError("algorithm:\n  name: hierarchical\ncompression:\n  kind: a2sgd\n", "compression.kind", 4);
  expectError("algorithm:\n  name: allreduce_sgd\ncompression:\n  kind: topk\n  sync_period: 10\n",
              "compression.sync_period", 5);
  expectError("algorithm:\n  name: allreduce_sgd\ncompression:\n  kind: a2sgd\n  sync: gossip\n",
              "compression.sync", 5);
  expectError("algorithm:\n  name: sgp\n  mode: async\ncompression:\n  kind: a2sgd\n", "algorithm.mode", 3);
  expectError("compression:\n  kind: a2sdg\n", "compression.kind", 2);
  expectError("compression:\n  topk_ratio: 0\n", "compression.topk_ratio", 2);
  expectError("compression:\n  topk_ratio: 1.5\n", "compression.topk_ratio", 2);
  expectError("compression:\n  qsgd_levels: 0\n", "compression.qsgd_levels", 2);
  expectError("compression:\n  gaussk_ratio: 0\n", "compression.gaussk_ratio", 2);
  expectError("compression:\n  gaussk_ratio: 1.01\n", "compression.gaussk_ratio", 2);
  expectError("compression:\n  gaussk_adjustments: 17\n", "compression.gaussk_adjustments", 2);
  expectError("compression:\n  gaussk_adjustments: -1\n", "compression.gaussk_adjustments", 2);
  expectError("algorithm:\n  name: crossover_sgd\ncompression:\n  kind: gaussk\n", "compression.kind", 4);
  expectError("compression:\n  gossip_rounds: 65\n", "compression.gossip_rounds", 2);
  expectError("compression:\n  sync_period: -1\n", "compression.sync_period", 2);
  expectError("compression:\n  sync: sometimes\n", "compression.sync", 2);
}

TEST_CASE("the registry builds CompressedSgd from the compression section", "[compress][agent]") {
  struct Case {
    std::string algorithm, kind, topology, name;
  };
  for (const Case& k : {Case{"allreduce_sgd", "a2sgd", "ring", "compressed_sgd/a2sgd"},
                        Case{"allreduce_sgd", "topk", "ring", "compressed_sgd/topk"},
                        Case{"allreduce_sgd", "gaussk", "ring", "compressed_sgd/gaussk"},
                        Case{"crossover_sgd", "a2sgd", "fair_roulette", "compressed_sgd/a2sgd"},
                        Case{"sgp", "a2sgd", "directed_exponential", "compressed_sgd/a2sgd"},
                        Case{"allreduce_sgd", "none", "ring", "allreduce_sgd"}}) {
    Config c = gossamer::test::defaultConfig();
    c.set("world_size", 4);
    c.set<std::string>("transport.kind", "inproc");
    c.set<double>("transport.timeout_seconds", 10);
    c.set<std::string>("topology.kind", k.topology);
    c.set<std::string>("algorithm.name", k.algorithm);
    c.set<std::string>("compression.kind", k.kind);
    c.set("compression.sync_period", int(k.kind == "a2sgd" ? 3 : 0));
    gossamer::validateConfig(c, gossamer::test::trainRegistry().schema());
    auto fabric = inproc::makeFabric(4);
    Registry reg;
    inproc::registerWith(reg, fabric);
    topologies::registerBuiltins(reg);
    registerBuiltins(reg);
    MemoryStore store;
    std::vector<std::vector<float>> models(4);
    onEveryRank(4, [&](int r) {
      Agent agent(c, r, store, reg);
      auto& opt = agent.makeOptimizer({20, 4});
      RANK_CHECK(opt.name() == k.name);
      opt.setTotalSteps(6);
      std::vector<float> x(24, 0.0f);
      for (int s = 0; s < 6; ++s) opt.step(x, normalVector(24, static_cast<unsigned>(r * 10 + s)));
      models[static_cast<std::size_t>(r)] = x;
      agent.close();
    });
    INFO(k.algorithm << " + " << k.kind);
    if (k.algorithm == "allreduce_sgd") {  // allreduce: exact agreement at the end
      for (int r = 1; r < 4; ++r) CHECK(models[static_cast<std::size_t>(r)] == models[0]);
    }
    CHECK(models[0] != std::vector<float>(24, 0.0f));
  }
}

TEST_CASE("config: the compression example configs hold what they promise", "[compress][config][examples]") {
  const std::string dir = gossamer::testing::sourceDir() + "/examples/configs/";
  const Config allreduce = gossamer::test::trainRegistry().load(dir + "a2sgd-allreduce.yaml");
  CHECK(allreduce.worldSize() == 8);
  CHECK(allreduce.get<std::string>("algorithm.name") == "allreduce_sgd");
  CHECK(allreduce.get<std::string>("compression.kind") == "a2sgd");
  CHECK(allreduce.get<std::string>("compression.means") == "allreduce");
  CHECK(allreduce.get<std::string>("compression.sync") == "allreduce");
  CHECK(allreduce.get<int>("compression.sync_period") == 25);
  CHECK(allreduce.get<bool>("compression.final_sync"));
  const Config gossip = gossamer::test::trainRegistry().load(dir + "a2sgd-gossip.yaml");
  CHECK(gossip.worldSize() == 8);
  CHECK(gossip.get<std::string>("algorithm.name") == "crossover_sgd");
  CHECK(gossip.get<std::string>("topology.kind") == "fair_roulette");
  CHECK(gossip.get<std::string>("compression.kind") == "a2sgd");
  CHECK(gossip.get<std::string>("compression.means") == "gossip");
  CHECK(gossip.get<std::string>("compression.sync") == "gossip");
  CHECK(gossip.get<int>("compression.sync_period") == 50);
}

TEMPLATE_TEST_CASE(
    "16-bit compression: the rounding error is fed back, so sent plus residual is the gradient",
    "[compress][half]", bfloat16, float16) {
  const std::size_t n = 1001;  // odd: one padding element
  HalfCompressor<TestType> c(n);
  CHECK(c.payloadBytes() == 2004);  // 2 bytes per element, rounded up to 4
  CHECK(c.payloadType() == DTypeOf<TestType>::value);
  std::vector<std::byte> payload(c.payloadBytes());
  std::vector<float> before(n, 0.0f), sentTotal(n, 0.0f), gTotal(n, 0.0f), out(n);
  for (int step = 0; step < 5; ++step) {
    const auto g = normalVector(n, static_cast<unsigned>(step), 1e-3f);
    c.encode(g, payload);
    const auto* h = reinterpret_cast<const TestType*>(payload.data());
    for (std::size_t i = 0; i < n; ++i) {
      INFO("step " << step << " element " << i);
      // a = g + e_old is rounded to h; e_new = a - h exactly.
      REQUIRE(toFloat(h[i]) + c.error()[i] == g[i] + before[i]);
      sentTotal[i] += toFloat(h[i]);
      gTotal[i] += g[i];
    }
    CHECK(h[n].bits == 0);  // the padding
    std::copy(c.error().begin(), c.error().end(), before.begin());
    c.decode(payload, g, out);  // world size 1: the average is this rank's own 16-bit vector
    for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == toFloat(h[i]));
  }
  // What was sent over 5 steps differs from the gradients' sum only by the last residual.
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(gTotal[i]) - sentTotal[i] - c.error()[i]));
  CHECK(worst < 1e-9);
  std::vector<float> bad(n, 0.0f);
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> kept(c.error().begin(), c.error().end());
  CHECK_THROWS_AS(c.encode(bad, payload), InvalidArgument);
  CHECK(std::equal(kept.begin(), kept.end(), c.error().begin()));  // a refused gradient leaves it whole
}

TEST_CASE("fp16 compression: an average summed beyond 65504 is an error, not infinity", "[compress][half]") {
  HalfCompressor<float16> c(3);
  std::vector<float16> combined(4);  // as a 16-bit allreduce of 40000 + 40000 leaves element 1
  combined[0].bits = 0x3C00;         // 1.0
  combined[1].bits = 0x7C00;         // +infinity
  std::vector<float> out(3);
  try {
    c.decode(std::as_bytes(std::span<const float16>(combined)), {}, out);
    FAIL("expected Error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("element 1") != std::string::npos);
    CHECK(std::string(e.what()).find("65504") != std::string::npos);
  }
}

TEMPLATE_TEST_CASE("16-bit compression refuses a payload not aligned to 2 bytes", "[compress][half]",
                   bfloat16, float16) {
  // It reads and writes the payload in place as 16-bit values: one at an
  // odd address is an InvalidArgument naming it, not a misaligned access.
  HalfCompressor<TestType> c(4);
  std::vector<std::byte> storage(c.payloadBytes() + 1);
  const std::span<std::byte> odd(storage.data() + 1, c.payloadBytes());
  const std::vector<float> g{1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> out(4);
  CHECK_THROWS_WITH(c.encode(g, odd),
                    Catch::Contains("16-bit encode: payload") && Catch::Contains("aligned"));
  CHECK_THROWS_WITH(c.decode(odd, {}, out), Catch::Contains("16-bit decode") && Catch::Contains("aligned"));
  std::vector<std::byte> even(c.payloadBytes());
  c.encode(g, even);
  c.decode(even, {}, out);
  CHECK(out == g);
}

TEMPLATE_TEST_CASE("16-bit compression sends an entry beyond the largest finite value as that value",
                   "[compress][half]", bfloat16, float16) {
  // binary16's largest finite value is 65504 (bfloat16's about 3.39e38): a
  // larger entry was rounded to infinity, and the residual became -inf.
  const float largest = std::is_same_v<TestType, float16> ? 65504.0f : 3.38953139e38f;
  const float big = std::is_same_v<TestType, float16> ? 70000.0f : 3.4e38f;
  HalfCompressor<TestType> c(4);
  std::vector<std::byte> payload(c.payloadBytes());
  const std::vector<float> g{big, 1.0f, -big, 2.0f}, zero(4, 0.0f);
  c.encode(g, payload);
  const auto* h = reinterpret_cast<const TestType*>(payload.data());
  CHECK(toFloat(h[0]) == largest);
  CHECK(toFloat(h[2]) == -largest);
  CHECK(c.error()[0] == big - largest);  // the excess goes out later
  CHECK(c.error()[2] == largest - big);
  c.encode(zero, payload);
  const float excess = big - largest;
  if constexpr (std::is_same_v<TestType, float16>)
    CHECK(toFloat(h[0]) == toFloat(toFloat16(excess)));
  else
    CHECK(toFloat(h[0]) == toFloat(toBfloat16(excess)));
  for (float e : c.error()) CHECK(std::isfinite(e));
}

TEST_CASE("16-bit compression over inproc: half of dense's bytes, the same model on every rank",
          "[compress][half][optimizer]") {
  const int n = 4, steps = 6;
  const std::size_t p = 4097;
  std::map<std::string, std::vector<std::vector<float>>> models;
  std::map<std::string, std::uint64_t> bytes;
  for (const std::string kind : {"none", "bf16", "fp16"}) {
    auto fabric = inproc::makeFabric(n);
    models[kind].resize(n);
    std::vector<std::uint64_t> sent(n);
    onEveryRank(n, [&](int r) {
      auto t = inproc::makeTransport(fabric, r, 10.0);
      Communicator comm(*t, 10.0);
      CollectiveOptions ring = comm.options();
      ring.algorithm = AllreduceAlgorithm::kRing;
      comm.setOptions(ring);
      CompressedSgdOptions o;
      o.sgd = {0.1, 0.9, 0.0};
      std::unique_ptr<Compressor> c;
      if (kind == "none") c = std::make_unique<DenseCompressor>(p);
      if (kind == "bf16") c = std::make_unique<HalfCompressor<bfloat16>>(p);
      if (kind == "fp16") c = std::make_unique<HalfCompressor<float16>>(p);
      CompressedSgd opt(comm, nullptr, std::move(c), nullptr, o);
      std::vector<float> x(p, 0.5f);
      for (int s = 0; s < steps; ++s) opt.step(x, normalVector(p, static_cast<unsigned>(r * 100 + s)));
      models[kind][static_cast<std::size_t>(r)] = x;
      sent[static_cast<std::size_t>(r)] = opt.stats().exchangeBytes;
      t->close();
    });
    bytes[kind] = sent[0];
    INFO(kind);
    for (int r = 1; r < n; ++r) CHECK(models[kind][static_cast<std::size_t>(r)] == models[kind][0]);
  }
  // Ring allreduce of p floats vs (p + 1) 16-bit elements (one padding).
  const std::uint64_t dense = bytes["none"];
  CHECK(bytes["bf16"] * 2 <= dense + 8 * n);
  CHECK(bytes["bf16"] * 2 >= dense);
  CHECK(bytes["fp16"] == bytes["bf16"]);
  // Close to the float32 run: 6 steps of lr 0.1 on unit-variance gradients.
  double worst = 0;
  for (std::size_t i = 0; i < p; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(models["bf16"][0][i]) - models["none"][0][i]));
  CHECK(worst < 0.05);
}

TEST_CASE("16-bit compression: AllReduce-SGD's gradients or a gossip model in sync mode, allreduced means",
          "[compress][half][config]") {
  CHECK_NOTHROW(gossamer::test::trainRegistry().parse(
      "algorithm:\n  name: allreduce_sgd\ncompression:\n  kind: bf16\n", "ok.yaml"));
  CHECK_NOTHROW(gossamer::test::trainRegistry().parse(
      "algorithm:\n  name: crossover_sgd\ncompression:\n  kind: fp16\n", "gossip.yaml"));
  try {
    gossamer::test::trainRegistry().parse(
        "algorithm:\n  name: crossover_sgd\n  mode: async\ncompression:\n  kind: fp16\n", "bad.yaml");
    FAIL("async gossip with fp16 was accepted");
  } catch (const ConfigError& e) {
    CHECK(e.key() == "algorithm.mode");
  }
  auto fabric = inproc::makeFabric(1);
  auto t = inproc::makeTransport(fabric, 0, 1.0);
  Communicator comm(*t, 1.0);
  topologies::Ring topo(1);
  CompressedSgdOptions o;
  o.means = MeansExchange::kGossip;
  CHECK_THROWS_WITH(CompressedSgd(comm, &topo, std::make_unique<HalfCompressor<bfloat16>>(10), nullptr, o),
                    Catch::Contains("gossiped means average float32 payloads"));
}

TEST_CASE(
    "A2SGD's gossiped means: a dead rank fails every survivor with PeerFailure, well before the timeout",
    "[compress][a2sgd][faults]") {
  // A directed ring 0 -> 1 -> 2 -> 3 -> 0, three push-sum rounds a step; rank
  // 3 dies. Rank 0, its out-peer, fails at once; rank 1 waits on rank 0 and
  // rank 2 on rank 1, live ranks that never send: they must learn of rank
  // 3's failure rather than wait out the 20 s timeout.
  const int n = 4, dead = 3;
  const double timeout = 20.0;
  const std::size_t p = 40;
  auto fabric = inproc::makeFabric(n);
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(inproc::makeTransport(fabric, r, timeout));
  topologies::ExplicitGraph ring(n, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::unique_ptr<CompressedSgd>> opts(n);
  onEveryRank(n, [&](int r) {  // (the constructor agrees on the settings: every rank alive)
    const auto i = static_cast<std::size_t>(r);
    comms[i] = std::make_unique<Communicator>(*ts[i], timeout);
    CompressedSgdOptions o;
    o.sgd = {0.05, 0.0, 0.0};
    o.means = MeansExchange::kGossip;
    o.gossipRounds = 3;
    o.finalSync = false;
    opts[i] =
        std::make_unique<CompressedSgd>(*comms[i], &ring, std::make_unique<A2sgdCompressor>(p), nullptr, o);
  });
  ts[dead]->abort();
  std::vector<int> failed(n, -1);
  std::vector<std::string> errors(n);
  std::vector<double> seconds(n, 0.0);
  onEveryRank(n, [&](int r) {
    if (r == dead) return;
    const auto i = static_cast<std::size_t>(r);
    std::vector<float> x(p, 0.0f);
    const auto g = normalVector(p, 3 + static_cast<unsigned>(r));
    const auto start = std::chrono::steady_clock::now();
    try {
      opts[i]->step(x, g);
    } catch (const PeerFailure& e) {
      failed[i] = e.peer();
      errors[i] = e.what();
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
    seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  for (int r = 0; r < n; ++r) {
    if (r == dead) continue;
    const auto i = static_cast<std::size_t>(r);
    INFO("rank " << r << ": " << seconds[i] << " s: " << errors[i]);
    CHECK(failed[i] == dead);
    CHECK(seconds[i] < timeout / 2);
  }
  opts.clear();
  for (auto& t : ts) t->abort();
}
