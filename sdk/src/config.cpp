// YAML configuration loader (see gossamer/config.hpp).
//
// The schema is a table of field descriptors (key, accessor into Config, allowed
// range or values) plus a table of cross-field rules (e.g. "edges name ranks
// below world_size"). Parsing and validateConfig both run those same checks, so
// every check is written exactly once; the parser only adds where (the line of
// each key and list element) so that errors point into the file.
#include "gossamer/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <string_view>
#include <system_error>
#include <variant>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr long long kIntMax = INT_MAX;
constexpr long long kMaxWorldSize = 4096;
constexpr long long kMaxRank = kMaxWorldSize - 1;

constexpr std::array<std::string_view, 4> kTransportKinds{"zmq", "socket", "inproc", "libfabric"};
constexpr std::array<std::string_view, 2> kProtocols{"tcp", "ipc"};
constexpr std::array<std::string_view, 4> kTopologyKinds{"fair_roulette", "ring", "directed_exponential",
                                                         "explicit"};
constexpr std::array<std::string_view, 4> kAlgorithmNames{"crossover_sgd", "allreduce_sgd", "sgp",
                                                          "hierarchical"};
constexpr std::array<std::string_view, 3> kModes{"sync", "overlap", "async"};
constexpr std::array<std::string_view, 7> kAllreduceNames{
    "auto", "ring", "recursive_doubling", "torus2d", "hierarchical", "tga2d", "hips"};
constexpr std::array<std::string_view, 2> kInterAlgorithms{"crossover_sgd", "sgp"};
constexpr std::array<std::string_view, 2> kModelKinds{"mlp", "softmax"};
constexpr std::array<std::string_view, 2> kPartitions{"iid", "non_iid"};
constexpr std::array<std::string_view, 4> kCompressionKinds{"none", "a2sgd", "topk", "qsgd"};
constexpr std::array<std::string_view, 3> kMeansExchanges{"auto", "allreduce", "gossip"};
constexpr std::array<std::string_view, 3> kModelSyncs{"auto", "allreduce", "gossip"};

// ---- field descriptors --------------------------------------------------------

/// An `int` key with an inclusive range [min, max].
struct IntField {
  std::string_view key;
  int& (*ref)(Config&);
  long long min;
  long long max;
};

/// A `std::uint64_t` key; every non-negative 64-bit value is allowed.
struct Uint64Field {
  std::string_view key;
  std::uint64_t& (*ref)(Config&);
};

/// Allowed values of a real: finite, bounded below and above (each bound open
/// or closed; an infinite bound means "no bound").
struct RealRange {
  double min;
  bool minInclusive;
  double max;
  bool maxInclusive;
};

/// A `double` key within `range`.
struct RealField {
  std::string_view key;
  double& (*ref)(Config&);
  RealRange range;
};

/// A `bool` key (`true` / `false`).
struct BoolField {
  std::string_view key;
  bool& (*ref)(Config&);
};

/// A string key; when `choices` is non-empty the value must be one of them.
struct TextField {
  std::string_view key;
  std::string& (*ref)(Config&);
  std::span<const std::string_view> choices;
};

/// A list of `int`s, each within the inclusive range [min, max].
struct IntListField {
  std::string_view key;
  std::vector<int>& (*ref)(Config&);
  long long min;
  long long max;
};

/// A list of [a, b] pairs of `int`s (e.g. directed edges [from, to]), each
/// within [min, max]. `distinct`: a != b in every pair (no self-loops);
/// `unique`: no pair appears twice.
struct IntPairListField {
  std::string_view key;
  std::vector<std::pair<int, int>>& (*ref)(Config&);
  long long min;
  long long max;
  bool distinct;
  bool unique;
};

/// A list of rows, each a list of reals within `range`. Rows may differ in
/// length here; shapes that depend on other keys are checked by a Rule.
struct RealMatrixField {
  std::string_view key;
  std::vector<std::vector<double>>& (*ref)(Config&);
  RealRange range;
};

/// A list of lists of `int`s, each within [min, max]; `nonEmpty`: no inner
/// list may be empty.
struct IntListListField {
  std::string_view key;
  std::vector<std::vector<int>>& (*ref)(Config&);
  long long min;
  long long max;
  bool nonEmpty;
};

using Field = std::variant<IntField, Uint64Field, RealField, BoolField, TextField, IntListField,
                           IntPairListField, RealMatrixField, IntListListField>;

/// A map of keys: the top level (empty name) or one `name:` section.
struct Section {
  std::string_view name;
  std::vector<Field> fields;
};

std::string_view fieldKey(const Field& field) {
  return std::visit([](const auto& f) { return f.key; }, field);
}

/// The whole schema. Element 0 is the top level; the rest are its sections.
const std::vector<Section>& schema() {
  static const std::vector<Section> kSchema{
      {"",
       {
           IntField{"world_size", [](Config& c) -> int& { return c.worldSize; }, 1, kMaxWorldSize},
           Uint64Field{"seed", [](Config& c) -> std::uint64_t& { return c.seed; }},
       }},
      {"transport",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.transport.kind; }, kTransportKinds},
           TextField{"host", [](Config& c) -> std::string& { return c.transport.host; }, {}},
           TextField{"protocol", [](Config& c) -> std::string& { return c.transport.protocol; }, kProtocols},
           TextField{"provider", [](Config& c) -> std::string& { return c.transport.provider; }, {}},
           RealField{"timeout_seconds",
                     [](Config& c) -> double& { return c.transport.timeoutSeconds; },
                     {0.0, false, 86400.0, true}},
           RealField{"linger_seconds",
                     [](Config& c) -> double& { return c.transport.lingerSeconds; },
                     {0.0, true, kInf, false}},
       }},
      {"topology",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.topology.kind; }, kTopologyKinds},
           RealMatrixField{
               "probabilities",
               [](Config& c) -> std::vector<std::vector<double>>& { return c.topology.probabilities; },
               {0.0, true, kInf, false}},
           IntField{"peers_per_step", [](Config& c) -> int& { return c.topology.peersPerStep; }, 1, 2},
           IntPairListField{"edges",
                            [](Config& c) -> std::vector<std::pair<int, int>>& { return c.topology.edges; },
                            0, kMaxRank, true, true},
       }},
      {"algorithm",
       {
           TextField{"name", [](Config& c) -> std::string& { return c.algorithm.name; }, kAlgorithmNames},
           IntField{"segments", [](Config& c) -> int& { return c.algorithm.segments; }, 1, 4096},
           IntField{"interval", [](Config& c) -> int& { return c.algorithm.interval; }, 1, kIntMax},
           TextField{"mode", [](Config& c) -> std::string& { return c.algorithm.mode; }, kModes},
           IntListListField{"groups",
                            [](Config& c) -> std::vector<std::vector<int>>& { return c.algorithm.groups; }, 0,
                            kMaxRank, true},
           IntField{"group_size", [](Config& c) -> int& { return c.algorithm.groupSize; }, 1, kMaxWorldSize},
           TextField{"inter_algorithm", [](Config& c) -> std::string& { return c.algorithm.interAlgorithm; },
                     kInterAlgorithms},
       }},
      {"model",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.model.kind; }, kModelKinds},
           IntListField{"hidden", [](Config& c) -> std::vector<int>& { return c.model.hidden; }, 1, 1 << 20},
       }},
      {"data",
       {
           TextField{"path", [](Config& c) -> std::string& { return c.data.path; }, {}},
           TextField{"partition", [](Config& c) -> std::string& { return c.data.partition; }, kPartitions},
           RealField{"dirichlet_alpha",
                     [](Config& c) -> double& { return c.data.dirichletAlpha; },
                     {0.0, false, kInf, false}},
           BoolField{"standardize", [](Config& c) -> bool& { return c.data.standardize; }},
           IntField{"train_limit", [](Config& c) -> int& { return c.data.trainLimit; }, 0, kIntMax},
           IntField{"test_limit", [](Config& c) -> int& { return c.data.testLimit; }, 0, kIntMax},
       }},
      {"training",
       {
           IntField{"epochs", [](Config& c) -> int& { return c.training.epochs; }, 1, kIntMax},
           IntField{"batch_size", [](Config& c) -> int& { return c.training.batchSize; }, 1, kIntMax},
           RealField{"learning_rate",
                     [](Config& c) -> double& { return c.training.learningRate; },
                     {0.0, true, kInf, false}},
           RealField{
               "momentum", [](Config& c) -> double& { return c.training.momentum; }, {0.0, true, 1.0, false}},
           RealField{"weight_decay",
                     [](Config& c) -> double& { return c.training.weightDecay; },
                     {0.0, true, kInf, false}},
           IntField{"straggler_rank", [](Config& c) -> int& { return c.training.stragglerRank; }, -1,
                    kMaxRank},
           RealField{"straggler_delay_seconds",
                     [](Config& c) -> double& { return c.training.stragglerDelaySeconds; },
                     {0.0, true, kInf, false}},
       }},
      {"collectives",
       {
           TextField{"allreduce", [](Config& c) -> std::string& { return c.collectives.allreduce; },
                     kAllreduceNames},
           IntField{"chunk_bytes", [](Config& c) -> int& { return c.collectives.chunkBytes; }, 1, kIntMax},
           IntField{"small_message_bytes", [](Config& c) -> int& { return c.collectives.smallMessageBytes; },
                    0, kIntMax},
           IntField{"group_size", [](Config& c) -> int& { return c.collectives.groupSize; }, 0, kMaxRank + 1},
           IntField{"torus_rows", [](Config& c) -> int& { return c.collectives.torusRows; }, 0, kMaxRank + 1},
           BoolField{"cost_model", [](Config& c) -> bool& { return c.collectives.costModel; }},
           RealField{"alpha_seconds",
                     [](Config& c) -> double& { return c.collectives.alphaSeconds; },
                     {0.0, true, 1.0, true}},
           RealField{"beta_seconds_per_byte",
                     [](Config& c) -> double& { return c.collectives.betaSecondsPerByte; },
                     {0.0, true, 1.0, true}},
           RealField{"gamma_seconds_per_byte",
                     [](Config& c) -> double& { return c.collectives.gammaSecondsPerByte; },
                     {0.0, true, 1.0, true}},
           RealField{"contention",
                     [](Config& c) -> double& { return c.collectives.contention; },
                     {0.0, true, kInf, false}},
           BoolField{"calibrate", [](Config& c) -> bool& { return c.collectives.calibrate; }},
       }},
      {"compression",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.compression.kind; }, kCompressionKinds},
           RealField{"topk_ratio",
                     [](Config& c) -> double& { return c.compression.topkRatio; },
                     {0.0, false, 1.0, true}},
           IntField{"qsgd_levels", [](Config& c) -> int& { return c.compression.qsgdLevels; }, 1, 65535},
           IntField{"qsgd_bucket_size", [](Config& c) -> int& { return c.compression.qsgdBucketSize; }, 1,
                    kIntMax},
           TextField{"means", [](Config& c) -> std::string& { return c.compression.means; }, kMeansExchanges},
           IntField{"gossip_rounds", [](Config& c) -> int& { return c.compression.gossipRounds; }, 1, 64},
           TextField{"sync", [](Config& c) -> std::string& { return c.compression.sync; }, kModelSyncs},
           IntField{"sync_period", [](Config& c) -> int& { return c.compression.syncPeriod; }, 0, kIntMax},
           BoolField{"final_sync", [](Config& c) -> bool& { return c.compression.finalSync; }},
           BoolField{"keep_error", [](Config& c) -> bool& { return c.compression.keepError; }},
       }},
  };
  return kSchema;
}

// ---- the checks (each written once) -------------------------------------------

std::string formatReal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

std::string joinChoices(std::span<const std::string_view> choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

/// Edit distance (insertions, deletions, substitutions and swaps of adjacent
/// characters, each costing 1) between two short strings.
std::size_t editDistance(std::string_view a, std::string_view b) {
  const std::size_t cols = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * cols);
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * cols + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

/// Lower-cased with '_' and '-' dropped, so "batchSize" and "batch-size" match "batch_size".
std::string normalizedKey(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '_' || ch == '-') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
std::optional<std::string_view> closest(std::string_view word,
                                        const std::vector<std::string_view>& candidates) {
  std::optional<std::string_view> best;
  std::size_t bestDistance = std::numeric_limits<std::size_t>::max();
  for (std::string_view c : candidates) {
    std::size_t d = normalizedKey(word) == normalizedKey(c) ? 0 : editDistance(word, c);
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
  std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, word.size() / 3));
  if (best && bestDistance <= limit) return best;
  return std::nullopt;
}

/// "must be an integer between 1 and 4096" (or ">= 1" when there is no upper bound).
std::string intRangeText(long long min, long long max) {
  if (max == kIntMax) return "must be an integer >= " + std::to_string(min);
  return "must be an integer between " + std::to_string(min) + " and " + std::to_string(max);
}

/// Error message when `v` is outside [min, max], else nullopt.
std::optional<std::string> checkInt(long long v, long long min, long long max) {
  if (v >= min && v <= max) return std::nullopt;
  return intRangeText(min, max) + ", got " + std::to_string(v);
}

std::optional<std::string> checkReal(double v, const RealRange& r) {
  bool ok = std::isfinite(v) && (r.minInclusive ? v >= r.min : v > r.min) &&
            (r.maxInclusive ? v <= r.max : v < r.max);
  if (ok) return std::nullopt;
  std::string range = "must be a finite number";
  if (std::isfinite(r.min)) range += (r.minInclusive ? " >= " : " > ") + formatReal(r.min);
  if (std::isfinite(r.min) && std::isfinite(r.max)) range += " and";
  if (std::isfinite(r.max)) range += (r.maxInclusive ? " <= " : " < ") + formatReal(r.max);
  return range + ", got " + formatReal(v);
}

std::optional<std::string> checkText(const std::string& v, const TextField& f) {
  if (f.choices.empty()) return std::nullopt;
  if (std::find(f.choices.begin(), f.choices.end(), v) != f.choices.end()) return std::nullopt;
  std::string msg = "unknown value '" + v + "'";
  std::vector<std::string_view> candidates(f.choices.begin(), f.choices.end());
  if (auto guess = closest(v, candidates)) msg += " (did you mean '" + std::string(*guess) + "'?)";
  return msg + "; allowed values: " + joinChoices(f.choices);
}

std::string dotted(std::string_view section, std::string_view key) {
  if (section.empty()) return std::string(key);
  return std::string(section) + "." + std::string(key);
}

std::string indexed(const std::string& key, std::size_t i) { return key + "[" + std::to_string(i) + "]"; }

/// A failed check: the dotted (possibly indexed) key at fault and what is wrong.
struct Issue {
  std::string key;
  std::string message;
};

// ---- per-field checks: the value of one key, alone ----------------------------

std::optional<Issue> checkField(const IntField& f, Config& c, const std::string& key) {
  if (auto err = checkInt(f.ref(c), f.min, f.max)) return Issue{key, *err};
  return std::nullopt;
}

std::optional<Issue> checkField(const Uint64Field&, Config&, const std::string&) {
  return std::nullopt;  // Every value of the type is valid.
}

std::optional<Issue> checkField(const RealField& f, Config& c, const std::string& key) {
  if (auto err = checkReal(f.ref(c), f.range)) return Issue{key, *err};
  return std::nullopt;
}

std::optional<Issue> checkField(const BoolField&, Config&, const std::string&) {
  return std::nullopt;  // Every value of the type is valid.
}

std::optional<Issue> checkField(const TextField& f, Config& c, const std::string& key) {
  if (auto err = checkText(f.ref(c), f)) return Issue{key, *err};
  return std::nullopt;
}

std::optional<Issue> checkField(const IntListField& f, Config& c, const std::string& key) {
  const std::vector<int>& values = f.ref(c);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (auto err = checkInt(values[i], f.min, f.max)) return Issue{indexed(key, i), *err};
  }
  return std::nullopt;
}

std::string pairText(const std::pair<int, int>& p) {
  return "[" + std::to_string(p.first) + ", " + std::to_string(p.second) + "]";
}

std::optional<Issue> checkField(const IntPairListField& f, Config& c, const std::string& key) {
  const std::vector<std::pair<int, int>>& pairs = f.ref(c);
  std::map<std::pair<int, int>, std::size_t> first;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string at = indexed(key, i);
    for (int v : {pairs[i].first, pairs[i].second}) {
      if (auto err = checkInt(v, f.min, f.max)) return Issue{at, *err};
    }
    if (f.distinct && pairs[i].first == pairs[i].second) {
      return Issue{at, "self-loop " + pairText(pairs[i]) + " (the two ends must differ)"};
    }
    if (f.unique) {
      if (auto [prev, inserted] = first.emplace(pairs[i], i); !inserted) {
        return Issue{at, "duplicate " + pairText(pairs[i]) + " (already listed as " +
                             indexed(key, prev->second) + ")"};
      }
    }
  }
  return std::nullopt;
}

std::optional<Issue> checkField(const RealMatrixField& f, Config& c, const std::string& key) {
  const std::vector<std::vector<double>>& rows = f.ref(c);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      if (auto err = checkReal(rows[i][j], f.range)) return Issue{indexed(indexed(key, i), j), *err};
    }
  }
  return std::nullopt;
}

std::optional<Issue> checkField(const IntListListField& f, Config& c, const std::string& key) {
  const std::vector<std::vector<int>>& lists = f.ref(c);
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (f.nonEmpty && lists[i].empty()) return Issue{indexed(key, i), "must not be empty"};
    for (std::size_t j = 0; j < lists[i].size(); ++j) {
      if (auto err = checkInt(lists[i][j], f.min, f.max)) return Issue{indexed(indexed(key, i), j), *err};
    }
  }
  return std::nullopt;
}

std::optional<Issue> checkAnyField(const Field& field, Config& c, const std::string& key) {
  return std::visit([&](const auto& f) { return checkField(f, c, key); }, field);
}

// ---- cross-field rules: keys that constrain each other ------------------------
//
// Each rule assumes every field already passed its own check (both callers run
// the field checks first), e.g. world_size is in [1, 4096].

std::string rankRangeText(int worldSize) {
  return "world_size is " + std::to_string(worldSize) + ", so ranks are 0.." + std::to_string(worldSize - 1);
}

std::size_t toIndex(int v) { return static_cast<std::size_t>(v); }

/// topology.probabilities: world_size x world_size, every row with some weight
/// on another rank (a single rank has no one to pick: nothing to require).
std::optional<Issue> ruleProbabilities(const Config& c) {
  const std::string key = "topology.probabilities";
  const std::vector<std::vector<double>>& rows = c.topology.probabilities;
  if (rows.empty()) return std::nullopt;  // Uniform.
  const auto n = toIndex(c.worldSize);
  if (rows.size() != n) {
    return Issue{key, "must be a world_size x world_size table (" + std::to_string(n) + " rows), got " +
                          std::to_string(rows.size()) + " rows"};
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i].size() != n) {
      return Issue{indexed(key, i), "row must have world_size (" + std::to_string(n) + ") entries, got " +
                                        std::to_string(rows[i].size())};
    }
  }
  if (n < 2) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i) {
    double offDiagonal = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i) offDiagonal += rows[i][j];
    }
    if (!(offDiagonal > 0.0) || !std::isfinite(offDiagonal)) {
      return Issue{indexed(key, i),
                   "rank " + std::to_string(i) +
                       " needs a positive, finite total weight on the other ranks (the diagonal "
                       "is ignored), got " +
                       formatReal(offDiagonal)};
    }
  }
  return std::nullopt;
}

/// Ranks reachable from rank 0 along `adjacency`.
std::vector<bool> reachableFromZero(const std::vector<std::vector<int>>& adjacency) {
  std::vector<bool> seen(adjacency.size(), false);
  std::vector<int> stack{0};
  seen[0] = true;
  while (!stack.empty()) {
    const int r = stack.back();
    stack.pop_back();
    for (int next : adjacency[toIndex(r)]) {
      if (!seen[toIndex(next)]) {
        seen[toIndex(next)] = true;
        stack.push_back(next);
      }
    }
  }
  return seen;
}

/// topology.edges: ranks below world_size, an out-edge from every rank, and a
/// strongly connected graph (every rank's updates reach every other rank).
std::optional<Issue> ruleEdges(const Config& c) {
  const std::string key = "topology.edges";
  const std::vector<std::pair<int, int>>& edges = c.topology.edges;
  if (edges.empty()) return std::nullopt;
  const auto n = toIndex(c.worldSize);
  std::vector<std::vector<int>> out(n), in(n);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const auto [from, to] = edges[i];
    for (int r : {from, to}) {
      if (toIndex(r) >= n) {
        return Issue{indexed(key, i), "rank " + std::to_string(r) + " in " + pairText(edges[i]) +
                                          " does not exist (" + rankRangeText(c.worldSize) + ")"};
      }
    }
    out[toIndex(from)].push_back(to);
    in[toIndex(to)].push_back(from);
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (out[r].empty()) {
      return Issue{key, "rank " + std::to_string(r) + " has no out-edge (every rank must send to a peer)"};
    }
  }
  const std::vector<bool> forward = reachableFromZero(out);
  const std::vector<bool> backward = reachableFromZero(in);
  for (std::size_t r = 0; r < n; ++r) {
    if (!forward[r]) {
      return Issue{key, "the graph is not strongly connected: rank " + std::to_string(r) +
                            " cannot be reached from rank 0"};
    }
    if (!backward[r]) {
      return Issue{key, "the graph is not strongly connected: rank 0 cannot be reached from rank " +
                            std::to_string(r)};
    }
  }
  return std::nullopt;
}

/// topology.kind: explicit takes its graph from topology.edges.
std::optional<Issue> ruleExplicitNeedsEdges(const Config& c) {
  if (c.topology.kind != "explicit" || !c.topology.edges.empty()) return std::nullopt;
  return Issue{"topology.kind",
               "'explicit' needs the graph in topology.edges (a non-empty list of [from, to] pairs)"};
}

/// algorithm.groups: when given, a partition of [0, world_size).
std::optional<Issue> ruleGroups(const Config& c) {
  const std::string key = "algorithm.groups";
  const std::vector<std::vector<int>>& groups = c.algorithm.groups;
  if (groups.empty()) return std::nullopt;  // Consecutive groups of group_size.
  const auto n = toIndex(c.worldSize);
  std::vector<std::optional<std::size_t>> owner(n);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t j = 0; j < groups[g].size(); ++j) {
      const int r = groups[g][j];
      const std::string at = indexed(indexed(key, g), j);
      if (toIndex(r) >= n) {
        return Issue{at,
                     "rank " + std::to_string(r) + " does not exist (" + rankRangeText(c.worldSize) + ")"};
      }
      if (owner[toIndex(r)]) {
        return Issue{at, "rank " + std::to_string(r) + " is already in " + indexed(key, *owner[toIndex(r)]) +
                             " (groups must not overlap)"};
      }
      owner[toIndex(r)] = g;
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (!owner[r]) {
      return Issue{key, "the groups must cover every rank exactly once (" + rankRangeText(c.worldSize) +
                            "), but rank " + std::to_string(r) + " is in no group"};
    }
  }
  return std::nullopt;
}

/// training.straggler_rank: -1 (none) or an existing rank.
std::optional<Issue> ruleStraggler(const Config& c) {
  const int r = c.training.stragglerRank;
  if (r < c.worldSize) return std::nullopt;
  return Issue{"training.straggler_rank", "rank " + std::to_string(r) + " does not exist (" +
                                              rankRangeText(c.worldSize) + "; -1 means no straggler)"};
}

std::optional<Issue> ruleTorusRows(const Config& c) {
  const int rows = c.collectives.torusRows;
  if (rows == 0 || c.worldSize % rows == 0) return std::nullopt;
  return Issue{"collectives.torus_rows", std::to_string(rows) + " rows do not divide world_size " +
                                             std::to_string(c.worldSize) + " (0 chooses a divisor)"};
}

/// compression.kind: which algorithms each compressor works with.
std::optional<Issue> ruleCompressionAlgorithm(const Config& c) {
  const std::string& kind = c.compression.kind;
  const std::string& algorithm = c.algorithm.name;
  if (kind == "none") return std::nullopt;
  if ((kind == "topk" || kind == "qsgd") && algorithm != "allreduce_sgd") {
    return Issue{"compression.kind", "'" + kind +
                                         "' compresses AllReduce-SGD's gradients: it needs algorithm.name "
                                         "'allreduce_sgd', got '" +
                                         algorithm + "'"};
  }
  if (kind == "a2sgd" && algorithm == "hierarchical") {
    return Issue{"compression.kind",
                 "'a2sgd' runs under algorithm.name 'allreduce_sgd', 'crossover_sgd' or 'sgp', not "
                 "'hierarchical'"};
  }
  return std::nullopt;
}

/// The A2SGD-only keys keep their defaults for the other compressors.
std::optional<Issue> ruleCompressionA2sgdKeys(const Config& c) {
  const CompressionConfig& z = c.compression;
  if (z.kind == "a2sgd") return std::nullopt;
  const CompressionConfig defaults;
  const std::pair<const char*, bool> changed[] = {
      {"compression.means", z.means != defaults.means},
      {"compression.gossip_rounds", z.gossipRounds != defaults.gossipRounds},
      {"compression.sync", z.sync != defaults.sync},
      {"compression.sync_period", z.syncPeriod != defaults.syncPeriod},
      {"compression.final_sync", z.finalSync != defaults.finalSync},
      {"compression.keep_error", z.keepError != defaults.keepError},
  };
  for (const auto& [key, isChanged] : changed) {
    if (isChanged) {
      return Issue{key, "applies to compression.kind 'a2sgd' only (kind is '" + z.kind + "')"};
    }
  }
  return std::nullopt;
}

/// compression.sync gossip runs the gossip optimizer's exchange.
std::optional<Issue> ruleCompressionSync(const Config& c) {
  if (c.compression.kind != "a2sgd" || c.compression.sync != "gossip") return std::nullopt;
  if (c.algorithm.name == "crossover_sgd" || c.algorithm.name == "sgp") return std::nullopt;
  return Issue{"compression.sync",
               "'gossip' synchronises the models with one exchange of algorithm.name, which must be "
               "'crossover_sgd' or 'sgp', got '" +
                   c.algorithm.name + "'"};
}

/// Compressed exchanges are synchronous.
std::optional<Issue> ruleCompressionMode(const Config& c) {
  if (c.compression.kind == "none" || c.algorithm.mode == "sync") return std::nullopt;
  return Issue{"algorithm.mode", "compressed exchanges (compression.kind '" + c.compression.kind +
                                     "') are synchronous: mode must be 'sync', got '" + c.algorithm.mode +
                                     "'"};
}

std::optional<Issue> ruleProvider(const Config& c) {
  if (c.transport.kind != "libfabric" || !c.transport.provider.empty()) return std::nullopt;
  return Issue{"transport.provider",
               "the libfabric transport needs a provider (e.g. tcp, shm, verbs, or a name fi_info lists)"};
}

using Rule = std::optional<Issue> (*)(const Config&);

constexpr std::array<Rule, 11> kRules{ruleExplicitNeedsEdges,
                                      ruleProbabilities,
                                      ruleEdges,
                                      ruleGroups,
                                      ruleStraggler,
                                      ruleTorusRows,
                                      ruleProvider,
                                      ruleCompressionAlgorithm,
                                      ruleCompressionA2sgdKeys,
                                      ruleCompressionSync,
                                      ruleCompressionMode};

/// The first broken rule, if any.
std::optional<Issue> checkRules(const Config& c) {
  for (Rule rule : kRules) {
    if (auto issue = rule(c)) return issue;
  }
  return std::nullopt;
}

// ---- YAML -> values -----------------------------------------------------------

/// Reads one YAML document into a Config, reporting errors against `file_`.
class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  Config parse(const std::string& text) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(file_, lineOf(e.mark), "", "invalid YAML: " + e.msg);
    }
    if (docs.empty() || docs[0].IsNull()) {
      throw ConfigError(file_, 0, "", "config is empty (expected a map of settings)");
    }
    if (docs.size() > 1) {
      throw ConfigError(file_, lineOf(docs[1].Mark()), "",
                        "more than one YAML document (a config is a single map)");
    }
    const YAML::Node& root = docs[0];
    if (!root.IsMap()) {
      throw ConfigError(file_, lineOf(root.Mark()), "",
                        "the top level must be a map of settings, got " + describe(root));
    }
    Config config;
    config.sourceFile = file_;
    readSection(root, schema()[0], config);
    // Keys that constrain each other: only now is every key known.
    if (auto issue = checkRules(config)) fail(*issue);
    return config;
  }

 private:
  static int lineOf(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

  /// The line of `key` (or of its closest recorded parent: `a.b[2][0]`, then
  /// `a.b[2]`, `a.b`, `a`); 0 when none was read from the file.
  int lineFor(std::string key) const {
    while (!key.empty()) {
      if (auto it = lines_.find(key); it != lines_.end()) return it->second;
      const std::size_t cut = key.back() == ']' ? key.rfind('[') : key.rfind('.');
      if (cut == std::string::npos || cut == 0) break;
      key.resize(cut);
    }
    return 0;
  }

  [[noreturn]] void fail(const Issue& issue) const {
    throw ConfigError(file_, lineFor(issue.key), issue.key, issue.message);
  }

  static std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Null:
        return "no value";
      case YAML::NodeType::Scalar:
        return "'" + node.Scalar() + "'";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a map";
      default:
        return "an undefined node";
    }
  }

  /// Where a value lives. yaml-cpp places a missing (null) value on the next
  /// token, possibly lines later, so fall back to the key's line for those.
  static int valueLine(const YAML::Node& key, const YAML::Node& value) {
    if (value.IsNull() || value.Mark().line < 0) return lineOf(key.Mark());
    return lineOf(value.Mark());
  }

  /// Processes a map: section names (top level only) and the section's fields.
  void readSection(const YAML::Node& map, const Section& section, Config& config) {
    const bool topLevel = section.name.empty();
    std::map<std::string, int> seen;
    for (const auto& entry : map) {
      // Copies: yaml-cpp's iterators hand out proxies, so references would dangle.
      const YAML::Node keyNode = entry.first;
      const YAML::Node value = entry.second;
      const int keyLine = lineOf(keyNode.Mark());
      if (!keyNode.IsScalar()) {
        throw ConfigError(file_, keyLine, std::string(section.name),
                          "keys must be plain names, got " + describe(keyNode));
      }
      const std::string name = keyNode.Scalar();
      const std::string key = dotted(section.name, name);
      if (auto [prev, inserted] = seen.emplace(name, keyLine); !inserted) {
        throw ConfigError(file_, keyLine, key,
                          "duplicate key (first set on line " + std::to_string(prev->second) + ")");
      }
      if (const Field* field = findField(section, name)) {
        lines_[key] = keyLine;
        std::visit([&](const auto& f) { read(f, key, keyNode, value, config); }, *field);
        // The same check validateConfig runs (read() has already checked what
        // it could report more precisely, e.g. each scalar's range).
        if (auto issue = checkAnyField(*field, config, key)) fail(*issue);
        continue;
      }
      if (topLevel) {
        if (const Section* sub = findSection(name)) {
          lines_[key] = keyLine;
          readSubsection(key, keyNode, value, *sub, config);
          continue;
        }
      }
      throw ConfigError(file_, keyLine, key, unknownKeyMessage(section, name));
    }
  }

  void readSubsection(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                      const Section& section, Config& config) {
    if (value.IsNull()) return;  // `training:` with everything commented out: defaults.
    if (!value.IsMap()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a section (a map of settings), got " + describe(value));
    }
    readSection(value, section, config);
  }

  static const Field* findField(const Section& section, std::string_view name) {
    for (const Field& f : section.fields) {
      if (fieldKey(f) == name) return &f;
    }
    return nullptr;
  }

  static const Section* findSection(std::string_view name) {
    const auto& all = schema();
    for (std::size_t i = 1; i < all.size(); ++i) {
      if (all[i].name == name) return &all[i];
    }
    return nullptr;
  }

  static std::string unknownKeyMessage(const Section& section, std::string_view name) {
    std::vector<std::string_view> known;
    for (const Field& f : section.fields) known.push_back(fieldKey(f));
    if (section.name.empty()) {
      for (std::size_t i = 1; i < schema().size(); ++i) known.push_back(schema()[i].name);
    }
    if (auto guess = closest(name, known)) {
      return "unknown key (did you mean '" + std::string(*guess) + "'?)";
    }
    // The right key in the wrong place, e.g. `batch_size` at the top level.
    if (!section.name.empty() && (findSection(name) || findField(schema()[0], name))) {
      return "unknown key here ('" + std::string(name) + "' belongs at the top level)";
    }
    std::vector<std::string_view> homes;
    for (std::size_t i = 1; i < schema().size(); ++i) {
      if (&schema()[i] != &section && findField(schema()[i], name)) {
        homes.push_back(schema()[i].name);
      }
    }
    if (!homes.empty()) {
      std::string where = "'" + std::string(homes[0]) + "'";
      for (std::size_t i = 1; i < homes.size(); ++i) {
        where += (i + 1 == homes.size() ? " or '" : ", '") + std::string(homes[i]) + "'";
      }
      return "unknown key here ('" + std::string(name) + "' belongs under " + where + ")";
    }
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return "unknown key (known keys: " + list + ")";
  }

  /// The scalar text of a value that must be a plain (unquoted) number or bool.
  const std::string& plainScalar(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                                 const char* expected) const {
    if (!value.IsScalar()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        std::string("expected ") + expected + ", got " + describe(value));
    }
    if (value.Tag() == "!" || value.Tag() == "tag:yaml.org,2002:str") {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        std::string("expected ") + expected + ", got the quoted string " + describe(value));
    }
    return value.Scalar();
  }

  /// Parses a decimal integer literal; nullopt when the text is not one;
  /// `overflow` is set when it is one but does not fit in a long long.
  static std::optional<long long> parseInteger(const std::string& text, bool& overflow) {
    static const std::regex kInteger("[-+]?[0-9]+");
    overflow = false;
    if (!std::regex_match(text, kInteger)) return std::nullopt;
    std::string_view digits = text;
    if (digits.front() == '+') digits.remove_prefix(1);
    long long v = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec == std::errc::result_out_of_range) {
      overflow = true;
      return std::nullopt;
    }
    if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
    return v;
  }

  long long readInteger(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                        long long min, long long max) const {
    const std::string& text = plainScalar(key, keyNode, value, "an integer");
    bool overflow = false;
    std::optional<long long> v = parseInteger(text, overflow);
    const int line = valueLine(keyNode, value);
    if (overflow) {
      // Far outside any range the schema allows.
      throw ConfigError(file_, line, key, intRangeText(min, max) + ", got " + text);
    }
    if (!v) throw ConfigError(file_, line, key, "expected an integer, got " + describe(value));
    if (auto err = checkInt(*v, min, max)) throw ConfigError(file_, line, key, *err);
    return *v;
  }

  void read(const IntField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
    f.ref(config) = static_cast<int>(readInteger(key, keyNode, value, f.min, f.max));
  }

  void read(const Uint64Field& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
    static const std::regex kUnsigned("\\+?[0-9]+");
    const std::string& text = plainScalar(key, keyNode, value, "a non-negative integer");
    const int line = valueLine(keyNode, value);
    if (!std::regex_match(text, kUnsigned)) {
      throw ConfigError(file_, line, key, "expected a non-negative integer, got " + describe(value));
    }
    std::string_view digits = text;
    if (digits.front() == '+') digits.remove_prefix(1);
    std::uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      throw ConfigError(file_, line, key,
                        "must be an integer between 0 and " +
                            std::to_string(std::numeric_limits<std::uint64_t>::max()) + ", got " + text);
    }
    f.ref(config) = v;
  }

  double readReal(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                  const RealRange& range) const {
    // YAML 1.2 core-schema floats (and integers), plus .inf / .nan.
    static const std::regex kReal("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
    static const std::regex kInfinity("[-+]?\\.(inf|Inf|INF)");
    static const std::regex kNan("\\.(nan|NaN|NAN)");
    const std::string& text = plainScalar(key, keyNode, value, "a number");
    const int line = valueLine(keyNode, value);
    double v = 0.0;
    if (std::regex_match(text, kInfinity)) {
      v = text.front() == '-' ? -kInf : kInf;
    } else if (std::regex_match(text, kNan)) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (std::regex_match(text, kReal)) {
      std::string_view digits = text;
      if (digits.front() == '+') digits.remove_prefix(1);
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec == std::errc::result_out_of_range) {
        // Overflow to infinity or underflow to zero: either way not what was written.
        throw ConfigError(file_, line, key, "number " + text + " is out of the range of a double");
      }
      if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        throw ConfigError(file_, line, key, "expected a number, got " + describe(value));
      }
    } else {
      throw ConfigError(file_, line, key, "expected a number, got " + describe(value));
    }
    if (auto err = checkReal(v, range)) throw ConfigError(file_, line, key, *err);
    return v;
  }

  void read(const RealField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
    f.ref(config) = readReal(key, keyNode, value, f.range);
  }

  void read(const BoolField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
    const std::string& text = plainScalar(key, keyNode, value, "true or false");
    if (text == "true") {
      f.ref(config) = true;
    } else if (text == "false") {
      f.ref(config) = false;
    } else {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected true or false, got " + describe(value));
    }
  }

  void read(const TextField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
    const int line = valueLine(keyNode, value);
    if (!value.IsScalar()) {
      throw ConfigError(file_, line, key, "expected a string, got " + describe(value));
    }
    if (auto err = checkText(value.Scalar(), f)) throw ConfigError(file_, line, key, *err);
    f.ref(config) = value.Scalar();
  }

  void read(const IntListField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) {
    if (!value.IsSequence()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a list of integers (e.g. [128, 64]), got " + describe(value));
    }
    std::vector<int> out;
    for (const YAML::Node& element : value) {
      const std::string elementKey = indexed(key, out.size());
      lines_[elementKey] = valueLine(keyNode, element);
      out.push_back(static_cast<int>(readInteger(elementKey, keyNode, element, f.min, f.max)));
    }
    f.ref(config) = std::move(out);
  }

  /// `value` must be a list; "a list of N items" otherwise names what it is.
  static std::string describeSized(const YAML::Node& node) {
    if (!node.IsSequence()) return describe(node);
    return node.size() == 1 ? "a list of 1 item" : "a list of " + std::to_string(node.size()) + " items";
  }

  void read(const IntPairListField& f, const std::string& key, const YAML::Node& keyNode,
            const YAML::Node& value, Config& config) {
    if (!value.IsSequence()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a list of [a, b] pairs (e.g. [[0, 1], [1, 0]]), got " + describe(value));
    }
    std::vector<std::pair<int, int>> out;
    for (const YAML::Node& element : value) {
      const std::string elementKey = indexed(key, out.size());
      const int line = valueLine(keyNode, element);
      lines_[elementKey] = line;
      if (!element.IsSequence() || element.size() != 2) {
        throw ConfigError(file_, line, elementKey, "expected a pair [a, b], got " + describeSized(element));
      }
      const auto a = static_cast<int>(readInteger(elementKey, element, element[0], f.min, f.max));
      const auto b = static_cast<int>(readInteger(elementKey, element, element[1], f.min, f.max));
      out.emplace_back(a, b);
    }
    f.ref(config) = std::move(out);
  }

  void read(const RealMatrixField& f, const std::string& key, const YAML::Node& keyNode,
            const YAML::Node& value, Config& config) {
    if (!value.IsSequence()) {
      throw ConfigError(
          file_, valueLine(keyNode, value), key,
          "expected a table: a list of rows of numbers (e.g. [[0, 1], [1, 0]]), got " + describe(value));
    }
    std::vector<std::vector<double>> out;
    for (const YAML::Node& row : value) {
      const std::string rowKey = indexed(key, out.size());
      lines_[rowKey] = valueLine(keyNode, row);
      if (!row.IsSequence()) {
        throw ConfigError(file_, valueLine(keyNode, row), rowKey,
                          "expected a row (a list of numbers), got " + describe(row));
      }
      std::vector<double> values;
      for (const YAML::Node& element : row) {
        const std::string elementKey = indexed(rowKey, values.size());
        lines_[elementKey] = valueLine(row, element);
        values.push_back(readReal(elementKey, row, element, f.range));
      }
      out.push_back(std::move(values));
    }
    f.ref(config) = std::move(out);
  }

  void read(const IntListListField& f, const std::string& key, const YAML::Node& keyNode,
            const YAML::Node& value, Config& config) {
    if (!value.IsSequence()) {
      throw ConfigError(
          file_, valueLine(keyNode, value), key,
          "expected a list of lists of integers (e.g. [[0, 1], [2, 3]]), got " + describe(value));
    }
    std::vector<std::vector<int>> out;
    for (const YAML::Node& list : value) {
      const std::string listKey = indexed(key, out.size());
      lines_[listKey] = valueLine(keyNode, list);
      if (!list.IsSequence()) {
        throw ConfigError(file_, valueLine(keyNode, list), listKey,
                          "expected a list of integers, got " + describe(list));
      }
      std::vector<int> values;
      for (const YAML::Node& element : list) {
        const std::string elementKey = indexed(listKey, values.size());
        lines_[elementKey] = valueLine(list, element);
        values.push_back(static_cast<int>(readInteger(elementKey, list, element, f.min, f.max)));
      }
      out.push_back(std::move(values));
    }
    f.ref(config) = std::move(out);
  }

  std::string file_;
  std::map<std::string, int> lines_;  ///< Line of every key and list element read so far.
};

}  // namespace

Config parseConfig(const std::string& yamlText, const std::string& name) {
  return Parser(name).parse(yamlText);
}

Config loadConfig(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path, 0, "", "cannot read config: is a directory");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw ConfigError(
        path, 0, "",
        std::string("cannot open config file: ") + (err != 0 ? std::strerror(err) : "unknown error"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError(path, 0, "", "error while reading config file");
  return parseConfig(text, path);
}

void validateConfig(const Config& config) {
  Config copy = config;  // The accessors take a mutable Config; nothing is modified.
  const std::string& file = config.sourceFile;
  for (const Section& section : schema()) {
    for (const Field& field : section.fields) {
      if (auto issue = checkAnyField(field, copy, dotted(section.name, fieldKey(field)))) {
        throw ConfigError(file, 0, issue->key, issue->message);
      }
    }
  }
  if (auto issue = checkRules(config)) throw ConfigError(file, 0, issue->key, issue->message);
}

}  // namespace gossamer
