// The YAML schema, assembled from what is registered.
//
// No central list of keys: each component (transport, topology, optimizer,
// compressor, collective algorithm, or an application's own section) declares
// its keys in a KeySet next to its factory, and the Registry adds them to a
// ConfigSchema. The loader (gossamer/config.hpp) validates a document against
// that schema: unknown keys (with did-you-mean), types, ranges, duplicates and
// cross-field rules, each error naming the file, line and dotted key.
//
// A section is either plain (`training:` — every key always applies) or
// selected (`transport:`, `topology:`, `algorithm:`, `compression:` — one key,
// the selector such as `kind`, names a registered component, and the keys
// each component declares live beside it).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace gossamer {

struct Config;

/// "No bound" for RealRange.
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

/// Allowed values of a real: finite and within [min, max], each end open or
/// closed; an infinite end means no bound on that side.
struct RealRange {
  double min = -kUnbounded;
  bool minInclusive = true;
  double max = kUnbounded;
  bool maxInclusive = true;
};

/// The value of one key. The alternative's index is its KeyType.
using ConfigValue = std::variant<int, std::uint64_t, double, bool, std::string, std::vector<int>,
                                 std::vector<std::pair<int, int>>, std::vector<std::vector<double>>,
                                 std::vector<std::vector<int>>>;

/// The type of a key, in ConfigValue's order.
enum class KeyType {
  kInt,          ///< int within [min, max]
  kUint64,       ///< any non-negative 64-bit integer
  kReal,         ///< double within `range`
  kBool,         ///< true / false
  kText,         ///< string; one of `choices` when that is non-empty
  kIntList,      ///< [1, 2, 3], each within [min, max]
  kIntPairList,  ///< [[0, 1], [1, 0]], each end within [min, max]
  kRealMatrix,   ///< [[0.5, 1], [2, 0]], each within `range` (rows may differ in length)
  kIntListList,  ///< [[0, 1], [2, 3]], each within [min, max]
};

/// How a key's value names ranks of the job. Over a membership view (some
/// of the job's ranks, renumbered 0..M-1 in ascending order) the Agent
/// renumbers such keys (ConfigSchema::inView) before it builds the view's
/// topology and optimizer, which read them as ranks of the view.
enum class RankKey {
  kNone,       ///< names no ranks
  kPartition,  ///< kIntListList: groups of ranks (network.islands, algorithm.groups)
  kTable,      ///< kRealMatrix: world_size x world_size, row i and column j for ranks i and j
  kEdges,      ///< kIntPairList: [from, to] pairs of ranks
};

/// A failed check: the dotted (possibly indexed) key at fault, e.g.
/// "topology.edges[3]", and what is wrong with it.
struct ConfigIssue {
  std::string key;
  std::string message;
};

/// A check of keys that constrain each other. It sees a Config whose every
/// key already passed its own check, and returns the first problem, if any.
using ConfigRule = std::function<std::optional<ConfigIssue>(const Config&)>;

/// One key a component declares.
struct KeySpec {
  std::string name;  ///< Key within its section, snake_case ("timeout_seconds").
  KeyType type = KeyType::kInt;
  ConfigValue defaultValue;  ///< Used when the YAML does not set the key.
  std::string doc;           ///< One line for the reference (units included).
  long long min = 0;         ///< kInt, kIntList, kIntPairList, kIntListList: inclusive bounds.
  long long max = 0;
  RealRange range;                   ///< kReal, kRealMatrix.
  std::vector<std::string> choices;  ///< kText: the allowed values (empty: any string).
  bool distinct = false;             ///< kIntPairList: a != b in every pair.
  bool unique = false;               ///< kIntPairList: no pair twice.
  bool nonEmpty = false;             ///< kIntListList: no empty inner list.
  /// May differ between the ranks of one job (a path, an address to bind):
  /// left out of sharedSettings, which every rank must agree on.
  bool perRank = false;
  /// Whether and how the value names ranks of the job (renumbered over a view).
  RankKey ranks = RankKey::kNone;
};

/// The keys and rules one component declares, built fluently:
///
///     KeySet().integer("segments", 4, 1, 4096, "segments S per model")
///             .real("ratio", 0.01, {0.0, false, 1.0, true}, "fraction sent")
///             .rule(myCrossCheck);
///
/// Each builder throws InvalidArgument when a key name is empty or repeated,
/// or when the default is outside the declared range.
class KeySet {
 public:
  /// An int key with inclusive bounds [min, max].
  KeySet& integer(std::string name, int defaultValue, long long min, long long max, std::string doc);
  /// A non-negative 64-bit integer key (every value allowed).
  KeySet& uint64(std::string name, std::uint64_t defaultValue, std::string doc);
  /// A double key within `range`.
  KeySet& real(std::string name, double defaultValue, RealRange range, std::string doc);
  /// A bool key.
  KeySet& boolean(std::string name, bool defaultValue, std::string doc);
  /// A string key; `choices` empty allows any string.
  KeySet& text(std::string name, std::string defaultValue, std::vector<std::string> choices, std::string doc);
  /// A list of ints, each in [min, max].
  KeySet& intList(std::string name, std::vector<int> defaultValue, long long min, long long max,
                  std::string doc);
  /// A list of [a, b] int pairs (default empty), each end in [min, max].
  KeySet& intPairList(std::string name, long long min, long long max, bool distinct, bool unique,
                      std::string doc);
  /// A table of reals (default empty), each in `range`.
  KeySet& realMatrix(std::string name, RealRange range, std::string doc);
  /// A list of int lists (default empty), each int in [min, max].
  KeySet& intListList(std::string name, long long min, long long max, bool nonEmpty, std::string doc);
  /// A fully specified key.
  KeySet& add(KeySpec key);
  /// A cross-field rule, run after every key passed its own check.
  KeySet& rule(ConfigRule check);
  /// In a selected section: these keys apply only while their component is
  /// the selected one; setting one to a non-default value under another
  /// selection is an error naming the selector.
  KeySet& onlyWhenSelected();
  /// Marks the key declared last as one that may differ between the ranks
  /// of a job (KeySpec::perRank).
  /// @throws InvalidArgument if no key is declared yet.
  KeySet& perRank();
  /// Marks the key declared last as one whose value names ranks of the job
  /// (KeySpec::ranks), of a type that fits `how`.
  /// @throws InvalidArgument if no key is declared yet, or `how` does not
  ///         fit its type.
  KeySet& namesRanks(RankKey how);

  const std::vector<KeySpec>& keys() const noexcept { return keys_; }
  const std::vector<ConfigRule>& rules() const noexcept { return rules_; }
  bool exclusive() const noexcept { return exclusive_; }

 private:
  std::vector<KeySpec> keys_;
  std::vector<ConfigRule> rules_;
  bool exclusive_ = false;
};

/// Every section and key a Registry knows, in registration order. The
/// loader, validateConfig and the generated reference read it.
class ConfigSchema {
 public:
  /// One declared key with the components that declared it (empty: the
  /// section's own key, always in force).
  struct Entry {
    KeySpec spec;
    std::vector<std::string> owners;
    bool exclusive = false;  ///< Applies only while one of `owners` is selected.
  };
  /// A section ("" is the top level).
  struct Section {
    std::string name;
    std::string doc;
    std::string selector;              ///< Key naming the component ("kind"); empty for a plain section.
    std::vector<std::string> choices;  ///< Registered component names, in order.
    std::vector<Entry> entries;
  };

  /// Adds the top-level section ("").
  ConfigSchema();

  /// Adds a plain section (or documents one that exists). Idempotent.
  void addSection(const std::string& section, const std::string& doc);

  /// Makes `section` a selected section whose key `selector` names one of
  /// the components registered with addChoice. Idempotent for the same key.
  /// @throws InvalidArgument if the section already has another selector.
  void addSelector(const std::string& section, const std::string& selector, const std::string& doc);

  /// The selector's value when the YAML sets none ("" until set; then a
  /// YAML without the selector is an error listing the choices).
  /// @throws InvalidArgument unless `choice` is registered under `section`.
  void setDefaultChoice(const std::string& section, const std::string& choice);

  /// Changes the default of key `key` of `section`, for the program that owns
  /// this schema (gossamer-sparse and gossamer-admm, which take no rank back,
  /// set membership.rejoin to false). Configs completed afterwards get it;
  /// markdown() shows it.
  /// @throws InvalidArgument if the key is not declared there or `value` is
  ///         of another type than the key.
  void setKeyDefault(const std::string& section, const std::string& key, const ConfigValue& value);

  /// Registers component `choice` under `section`'s selector with its keys.
  /// @throws InvalidArgument if the section has no selector or the choice exists.
  void addChoice(const std::string& section, const std::string& choice, const KeySet& keys);

  /// Adds keys that always apply to `section` ("" for the top level); the
  /// section is created if needed.
  /// @throws InvalidArgument if a key is already declared there with another
  ///         type, range or default (an identical declaration is merged).
  void addKeys(const std::string& section, const KeySet& keys);

  /// The key's value in `config`: config.values, else its default.
  ConfigValue valueOf(const Config& config, const std::string& section, const Entry& entry) const;
  /// Writes the key's value to config.values.
  void assign(Config& config, const std::string& section, const Entry& entry, const ConfigValue& value) const;

  /// `config` with every key it lacks set to its default and every unset
  /// selector ("") set to its default choice.
  Config complete(const Config& config) const;

  const std::vector<Section>& sections() const noexcept { return sections_; }
  /// Null when there is no such section.
  const Section* findSection(const std::string& name) const;
  /// Cross-field rules, in registration order.
  const std::vector<ConfigRule>& rules() const noexcept { return rules_; }

  /// `config` over a membership view whose members are `members` (ranks of
  /// the job, ascending; member k is rank k of the view): world_size is the
  /// number of members, and every key marked namesRanks names the view's
  /// ranks. A partition keeps each group's members and drops groups left
  /// empty; a table keeps the members' rows and columns; edges keep those
  /// between members. A partition or table that does not cover a member (a
  /// rank that joined beyond world_size) takes its default, empty. `changed` (if given)
  /// receives the dotted keys whose value changed.
  /// @throws InvalidArgument if `members` is empty or not ascending.
  Config inView(const Config& config, const std::vector<int>& members,
                std::vector<std::string>* changed = nullptr) const;

  /// The settings every rank of a job must run with, as text: one
  /// "dotted.key = value" line per declared key, in registration order, but
  /// for the keys marked perRank. Ranks compare it at start (Agent).
  std::string sharedSettings(const Config& config) const;

  /// The reference as Markdown: one table per section (key, type, default,
  /// allowed values, meaning, who declares it). Deterministic.
  std::string markdown() const;

 private:
  Section& sectionFor(const std::string& name);
  void merge(Section& section, const KeySet& keys, const std::string& owner);

  std::vector<Section> sections_;
  std::vector<ConfigRule> rules_;
};

/// "key[i]": the dotted key of a list element, for ConfigIssue::key.
std::string indexedKey(const std::string& key, std::size_t i);

/// "world_size is 4, so ranks are 0..3": the tail of an error about a rank
/// that does not exist.
std::string rankRangeText(int worldSize);

/// What asks for checkpoints in `c`: "checkpoint.every_steps is 10" or
/// "checkpoint.resume is true"; nullopt when neither does (or when the
/// registry declares no `checkpoint:` section). For the rules of components
/// that cannot save their state, so that a config check refuses such a run
/// before it starts instead of its first save.
std::optional<std::string> checkpointsRequested(const Config& c);

/// Text of a value as YAML would write it ("4", "0.5", "true", "zmq",
/// "[128, 64]").
std::string formatConfigValue(const ConfigValue& value);

}  // namespace gossamer
