// Pieces shared by the benchmark programs: statistics, the hand-off of rank
// 0's results through the rendezvous directory, and JSON files.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/launcher.hpp"

namespace gossamer::bench {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Quantile q in [0, 1] with linear interpolation between order statistics.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

inline double median(const std::vector<double>& v) { return quantile(v, 0.5); }

/// `x` as a command-line argument that reads back as the same double
/// (std::to_string keeps 6 decimals: 2e-7 would become 0).
inline std::string exactArgument(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.17g", x);
  return s;
}

/// "a,b,c".
inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

/// Rank 0 hands its results to the launcher: written to a temp file, then
/// renamed, so the launcher never reads a partial file.
inline void writeResultFile(const json& results, const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp);
  out << results.dump() << '\n';
  out.close();
  if (!out) throw Error("cannot write '" + tmp + "'");
  std::filesystem::rename(tmp, path);
}

/// Writes `j` (indented) to `path`, creating its folder.
inline void writeJsonFile(const json& j, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p);
  f << j.dump(2) << '\n';
  f.close();
  if (!f) throw Error("cannot write '" + path + "'");
}

/// The `--bind core|none` option of every benchmark (default core): where
/// the launcher lets each rank run (gossamer::CpuBinding). Bound, rank r runs
/// only on the (r mod C)-th of the C CPUs the benchmark may use (on this
/// machine CPU r mod 2; mpirun's `--map-by core --bind-to
/// core:overload-allowed` does the same here), and small-message times no
/// longer depend on which ranks the OS happens to put on one core
/// (docs/collectives.md).
inline void addBindOption(CLI::App& app, std::string& binding) {
  app.add_option(
         "--bind", binding,
         "core (default): rank r only on the (r mod C)-th of the C CPUs allowed; none: wherever the OS "
         "puts it")
      ->check(CLI::IsMember({"core", "none"}));
}

/// Starts `worldSize` ranks of this program, each with the arguments `name
/// --rank R --rendezvous DIR --result-file DIR/result.json` followed by
/// `options` (the benchmark's own, the same for every rank), each bound as
/// `binding` says, waits (bounded by the timeout and deadline), and returns
/// the JSON array rank 0 wrote to the result file.
/// @throws InvalidArgument if `binding` is not "core" or "none"; Error if a
///         rank failed, rank 0 wrote nothing, or (core) the CPU affinity mask
///         cannot be read.
inline json launchAndCollect(const std::string& name, int worldSize, double timeoutSeconds,
                             double deadlineSeconds, const std::vector<std::string>& options,
                             const std::string& binding) {
  LaunchOptions o;
  o.worldSize = worldSize;
  o.binding = parseCpuBinding(binding);
  o.failureGraceSeconds = timeoutSeconds + 10;
  o.deadlineSeconds = deadlineSeconds;
  o.name = name;
  json results;
  const auto result = launchLocalRanks(
      o,
      [&](int r, const std::string& rdv) {
        std::vector<std::string> args{name, "--rank",        std::to_string(r),   "--rendezvous",
                                      rdv,  "--result-file", rdv + "/result.json"};
        args.insert(args.end(), options.begin(), options.end());
        return args;
      },
      [&](const std::string& rdv) {
        std::ifstream in(rdv + "/result.json");
        if (in) results = json::parse(in, nullptr, /*allow_exceptions=*/false);
      });
  if (!result.ok()) throw Error("the benchmark's ranks failed");
  if (!results.is_array()) throw Error("rank 0 wrote no results");
  return results;
}

}  // namespace gossamer::bench
