// The `sim:` section (see sim_config.hpp).
#include "sim_config.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "gossamer/schema.hpp"

namespace gossamer::train {

namespace {

/// sim.slow_ranks: existing, distinct ranks.
std::optional<ConfigIssue> checkSlowRanks(const Config& c) {
  const auto ranks = c.get<std::vector<int>>("sim.slow_ranks");
  std::set<int> seen;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string key = "sim.slow_ranks[" + std::to_string(i) + "]";
    if (ranks[i] >= c.worldSize())
      return ConfigIssue{
          key, "rank " + std::to_string(ranks[i]) + " does not exist (" + rankRangeText(c.worldSize()) + ")"};
    if (!seen.insert(ranks[i]).second)
      return ConfigIssue{key, "rank " + std::to_string(ranks[i]) + " is listed twice"};
  }
  return std::nullopt;
}

/// Largest lognormal sigma: beyond it a draw's factor under- or overflows a double's useful range.
constexpr double kMaxLognormalSigma = 3.0;

/// sim.jitter_scale: > 0 with a jitter, 0 without; at most kMaxLognormalSigma for lognormal.
std::optional<ConfigIssue> checkJitter(const Config& c) {
  const std::string jitter = c.get<std::string>("sim.jitter");
  const double scale = c.get<double>("sim.jitter_scale");
  if (jitter != "none" && scale <= 0)
    return ConfigIssue{"sim.jitter_scale", "must be > 0 when sim.jitter is not none"};
  if (jitter == "none" && scale != 0) return ConfigIssue{"sim.jitter_scale", "is set but sim.jitter is none"};
  if (jitter == "lognormal" && scale > kMaxLognormalSigma)
    return ConfigIssue{"sim.jitter_scale", "a lognormal sigma of at most 3"};
  return std::nullopt;
}

}  // namespace

void registerSimSection(Registry& registry) {
  const SimConfig d;
  registry.addSection(
      "sim",
      "How gossamer-sim models a rank's compute per step, its stragglers, and the platform "
      "(gossamer-train ignores the section).",
      KeySet()
          .real("step_seconds", d.stepSeconds, {0.0, true, 1e6, true},
                "simulated compute per step, seconds (when compute_from is empty)")
          .text("compute_from", d.computeFrom, {},
                "a real run's directory: each rank replays its step records' compute_s + communication_s "
                "(empty: step_seconds)")
          .perRank()
          .text("platform", d.platform, {},
                "a SimGrid platform file with hosts rank-0 .. rank-N-1 (empty: the one network: describes)")
          .perRank()
          .intList("slow_ranks", d.slowRanks, 0, kMaxWorldSize - 1,
                   "stragglers: ranks whose compute is slower")
          .real("slow_factor", d.slowFactor, {1.0, true, 1e6, true},
                "the slow ranks' compute is multiplied by this")
          .text("jitter", d.jitter, {"none", "lognormal", "exponential"},
                "variation of each step's compute: none; lognormal (mean 1, sigma jitter_scale); "
                "exponential (1 + an exponential draw of mean jitter_scale); drawn from the seed")
          .real("jitter_scale", d.jitterScale, {0.0, true, 100.0, true},
                "the jitter's sigma (lognormal, at most 3) or mean (exponential), a fraction of the compute")
          .rule(checkSlowRanks)
          .rule(checkJitter));
}

SimConfig simConfigFrom(const Config& c) {
  SimConfig s;
  s.stepSeconds = c.get<double>("sim.step_seconds");
  s.computeFrom = c.get<std::string>("sim.compute_from");
  s.platform = c.get<std::string>("sim.platform");
  s.slowRanks = c.get<std::vector<int>>("sim.slow_ranks");
  s.slowFactor = c.get<double>("sim.slow_factor");
  s.jitter = c.get<std::string>("sim.jitter");
  s.jitterScale = c.get<double>("sim.jitter_scale");
  return s;
}

std::vector<double> computeFactors(const SimConfig& sim, std::uint64_t seed, int rank, int steps) {
  const bool slow = std::find(sim.slowRanks.begin(), sim.slowRanks.end(), rank) != sim.slowRanks.end();
  std::vector<double> out(static_cast<std::size_t>(std::max(steps, 0)), slow ? sim.slowFactor : 1.0);
  if (sim.jitter == "none") return out;
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(rank), 0x5133u};
  std::mt19937_64 rng(seq);
  const double s = sim.jitterScale;
  std::normal_distribution<double> normal(-s * s / 2, s);
  std::exponential_distribution<double> exponential(1.0 / std::max(s, 1e-300));
  for (auto& f : out) f *= sim.jitter == "lognormal" ? std::exp(normal(rng)) : 1.0 + exponential(rng);
  return out;
}

}  // namespace gossamer::train
