// The `sim:` section of a job definition: how gossamer-sim models the time a
// rank computes per step (a fixed time, or a real run's records replayed),
// which ranks are slow and how much each step's compute varies, and a
// SimGrid platform file to use instead of the one `network:` generates.
// gossamer-train accepts the section and ignores it, so one YAML serves both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::train {

/// `sim:` section (read by gossamer-sim).
struct SimConfig {
  /// Simulated compute per step, seconds (>= 0), when computeFrom is empty.
  double stepSeconds = 0.0;
  /// A real run's directory (run.dir): each rank replays the compute_s +
  /// communication_s of its step records, step by step, in a cycle. "" = off.
  std::string computeFrom;
  /// A SimGrid platform file with hosts rank-0 .. rank-N-1. "" = the platform
  /// that `network:` describes.
  std::string platform;
  /// Stragglers: these ranks' compute is multiplied by slowFactor.
  std::vector<int> slowRanks;
  double slowFactor = 1.0;  ///< >= 1.
  /// Variation of each step's compute: "none"; "lognormal" (times
  /// exp(N(-s^2/2, s^2)), mean 1, s = jitterScale); or "exponential" (times
  /// 1 + Exp with mean jitterScale). Drawn per rank and step from the
  /// config's seed, so a run repeats exactly (with the same C++ library).
  std::string jitter = "none";
  double jitterScale = 0.0;  ///< >= 0.
};

/// Declares the `sim:` section and its checks (slow ranks exist and are
/// distinct; a jitter scale is given with a jitter) in `registry`.
/// @throws gossamer::InvalidArgument if the section is already declared.
void registerSimSection(gossamer::Registry& registry);

/// The section's values from a config loaded by a registry that
/// registerSimSection filled.
/// @throws gossamer::InvalidArgument if a key is missing.
SimConfig simConfigFrom(const gossamer::Config& config);

/// Rank `rank`'s compute multipliers for `steps` steps: slowFactor if it is
/// a slow rank, times the jitter's draws (from `seed` and the rank, so the
/// same on every run). Shape: [steps], each > 0.
std::vector<double> computeFactors(const SimConfig& sim, std::uint64_t seed, int rank, int steps);

}  // namespace gossamer::train
