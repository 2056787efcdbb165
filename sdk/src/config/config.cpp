// YAML configuration loader (see gossamer/config.hpp).
//
// The schema is whatever the Registry assembled (gossamer/schema.hpp): each
// section's keys with their types, ranges and defaults, and the components'
// cross-field rules. Parsing and validateConfig run the same per-key checks,
// so every check is written once; the parser only adds where (the line of
// each key and list element) so that errors point into the file. Nothing
// here knows a component by name.
#include "gossamer/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
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
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <variant>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr long long kIntMax = INT_MAX;
/// The most list elements any document reads: what a config file of the
/// largest size could hold written out.
constexpr std::size_t kMaxListElements = kMaxConfigBytes / 2;
/// List elements (rows counted) any document may read, however short its
/// text: aliases that repeat a table's rows (up to 361 x 361) read this
/// many in well under a second.
constexpr std::size_t kAliasedListElements = std::size_t{1} << 17;

using Section = ConfigSchema::Section;
using Entry = ConfigSchema::Entry;

/// Where the first node of a YAML document starts (the events of its nodes
/// are otherwise ignored): the mark YAML::LoadAll gives its root.
class FirstNodeMark final : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> mark;
  void OnDocumentStart(const YAML::Mark&) override { mark.reset(); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    note(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& m) {
    if (!mark) mark = m;
  }
};

/// The mark of the root of the second YAML document in `text`, if there is
/// one. Reads at most two documents: yaml-cpp 0.7's LoadAll never returns on
/// some malformed flow text (`{a: b}, c` is an endless stream of documents).
/// @throws YAML::Exception for invalid YAML in the first two documents.
std::optional<YAML::Mark> secondDocument(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  FirstNodeMark first;
  if (!parser.HandleNextDocument(first)) return std::nullopt;
  FirstNodeMark second;
  if (!parser.HandleNextDocument(second)) return std::nullopt;
  return second.mark.value_or(YAML::Mark());
}

// ---- the checks (each written once) -------------------------------------------

std::string formatReal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

/// `v` as an error message shows it: at most 80 characters, a longer value
/// cut there with its length in bytes.
std::string shownValue(const std::string& v) {
  constexpr std::size_t kShown = 80;
  if (v.size() <= kShown) return v;
  return v.substr(0, kShown) + "... (" + std::to_string(v.size()) + " bytes)";
}

std::string joinChoices(const std::vector<std::string>& choices) {
  std::string out;
  for (const std::string& c : choices) {
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
  const std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, word.size() / 3));
  const std::string normalized = normalizedKey(word);
  for (std::string_view c : candidates) {
    // The distance is at least the lengths' difference: a word far longer
    // than every candidate (a pasted blob) costs no table of its size.
    const std::size_t gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    std::size_t d = normalized == normalizedKey(c) ? 0 : gap > limit ? gap : editDistance(word, c);
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
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

std::optional<std::string> checkText(const std::string& v, const std::vector<std::string>& choices) {
  if (choices.empty()) return std::nullopt;
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return std::nullopt;
  std::string msg = "unknown value '" + shownValue(v) + "'";
  std::vector<std::string_view> candidates(choices.begin(), choices.end());
  if (auto guess = closest(v, candidates)) msg += " (did you mean '" + std::string(*guess) + "'?)";
  return msg + "; allowed values: " + joinChoices(choices);
}

std::string dotted(std::string_view section, std::string_view key) {
  if (section.empty()) return std::string(key);
  return std::string(section) + "." + std::string(key);
}

std::string indexed(const std::string& key, std::size_t i) { return key + "[" + std::to_string(i) + "]"; }

using Issue = ConfigIssue;

// ---- per-key checks: the value of one key, alone ------------------------------

std::string pairText(const std::pair<int, int>& p) {
  return "[" + std::to_string(p.first) + ", " + std::to_string(p.second) + "]";
}

std::optional<Issue> checkIntList(const std::vector<int>& values, const KeySpec& k, const std::string& key) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (auto err = checkInt(values[i], k.min, k.max)) return Issue{indexed(key, i), *err};
  }
  return std::nullopt;
}

std::optional<Issue> checkPairs(const std::vector<std::pair<int, int>>& pairs, const KeySpec& k,
                                const std::string& key) {
  std::map<std::pair<int, int>, std::size_t> first;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string at = indexed(key, i);
    for (int v : {pairs[i].first, pairs[i].second}) {
      if (auto err = checkInt(v, k.min, k.max)) return Issue{at, *err};
    }
    if (k.distinct && pairs[i].first == pairs[i].second) {
      return Issue{at, "self-loop " + pairText(pairs[i]) + " (the two ends must differ)"};
    }
    if (k.unique) {
      if (auto [prev, inserted] = first.emplace(pairs[i], i); !inserted) {
        return Issue{at, "duplicate " + pairText(pairs[i]) + " (already listed as " +
                             indexed(key, prev->second) + ")"};
      }
    }
  }
  return std::nullopt;
}

std::optional<Issue> checkMatrix(const std::vector<std::vector<double>>& rows, const KeySpec& k,
                                 const std::string& key) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      if (auto err = checkReal(rows[i][j], k.range)) return Issue{indexed(indexed(key, i), j), *err};
    }
  }
  return std::nullopt;
}

std::optional<Issue> checkLists(const std::vector<std::vector<int>>& lists, const KeySpec& k,
                                const std::string& key) {
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (k.nonEmpty && lists[i].empty()) return Issue{indexed(key, i), "must not be empty"};
    for (std::size_t j = 0; j < lists[i].size(); ++j) {
      if (auto err = checkInt(lists[i][j], k.min, k.max)) return Issue{indexed(indexed(key, i), j), *err};
    }
  }
  return std::nullopt;
}

/// The check of one key's value against its declaration.
std::optional<Issue> checkValue(const KeySpec& k, const ConfigValue& v, const std::string& key) {
  if (v.index() != static_cast<std::size_t>(k.type)) return Issue{key, "holds a value of another type"};
  switch (k.type) {
    case KeyType::kInt:
      if (auto err = checkInt(std::get<int>(v), k.min, k.max)) return Issue{key, *err};
      return std::nullopt;
    case KeyType::kReal:
      if (auto err = checkReal(std::get<double>(v), k.range)) return Issue{key, *err};
      return std::nullopt;
    case KeyType::kText:
      if (auto err = checkText(std::get<std::string>(v), k.choices)) return Issue{key, *err};
      return std::nullopt;
    case KeyType::kIntList:
      return checkIntList(std::get<std::vector<int>>(v), k, key);
    case KeyType::kIntPairList:
      return checkPairs(std::get<std::vector<std::pair<int, int>>>(v), k, key);
    case KeyType::kRealMatrix:
      return checkMatrix(std::get<std::vector<std::vector<double>>>(v), k, key);
    case KeyType::kIntListList:
      return checkLists(std::get<std::vector<std::vector<int>>>(v), k, key);
    case KeyType::kUint64:
    case KeyType::kBool:
      return std::nullopt;  // Every value of the type is valid.
  }
  return std::nullopt;
}

/// A selector with no value and no default choice.
std::optional<Issue> checkSelectorSet(const Section& s, const ConfigValue& v) {
  if (!std::get<std::string>(v).empty()) return std::nullopt;
  if (s.choices.empty()) {
    return Issue{dotted(s.name, s.selector), "no component is registered for this section"};
  }
  return Issue{dotted(s.name, s.selector), "must be set; allowed values: " + joinChoices(s.choices)};
}

/// Keys that apply only while their component is selected keep their
/// defaults under any other selection.
std::optional<Issue> checkExclusiveKeys(const ConfigSchema& schema, const Config& c) {
  for (const Section& s : schema.sections()) {
    if (s.selector.empty()) continue;
    const std::string selected = std::get<std::string>(schema.valueOf(c, s.name, s.entries.front()));
    for (const Entry& e : s.entries) {
      if (!e.exclusive || std::find(e.owners.begin(), e.owners.end(), selected) != e.owners.end()) continue;
      if (schema.valueOf(c, s.name, e) == e.spec.defaultValue) continue;
      std::string owners;
      for (std::size_t i = 0; i < e.owners.size(); ++i) {
        owners += (i == 0 ? "'" : (i + 1 == e.owners.size() ? " or '" : ", '")) + e.owners[i] + "'";
      }
      return Issue{dotted(s.name, e.spec.name), "applies to " + dotted(s.name, s.selector) + " " + owners +
                                                    " only (" + s.selector + " is '" + selected + "')"};
    }
  }
  return std::nullopt;
}

/// Cross-key checks: selectors set, exclusive keys, then the components' rules.
std::optional<Issue> checkRules(const ConfigSchema& schema, const Config& c) {
  for (const Section& s : schema.sections()) {
    if (s.selector.empty()) continue;
    if (auto issue = checkSelectorSet(s, schema.valueOf(c, s.name, s.entries.front()))) return issue;
  }
  for (const ConfigRule& rule : schema.rules()) {
    if (auto issue = rule(c)) return issue;
  }
  return checkExclusiveKeys(schema, c);
}

// ---- YAML -> values -----------------------------------------------------------

/// Reads one YAML document into a Config, reporting errors against `file_`.
class Parser {
 public:
  Parser(const ConfigSchema& schema, std::string file) : schema_(schema), file_(std::move(file)) {}

  Config parse(const std::string& text, const std::vector<std::string>& overrides) {
    // Written out, a list element takes at least one byte ('[', ',' or '-'
    // before it): the text and its overrides hold at most as many elements
    // as they have bytes, and only aliases repeating a list read more
    // (kAliasedListElements of them, whatever the text's size).
    std::size_t bytes = text.size();
    for (const std::string& o : overrides) bytes += o.size();
    elementBudget_ = std::min(std::max(bytes, kAliasedListElements), kMaxListElements);
    YAML::Node root;
    std::optional<YAML::Mark> second;
    try {
      root = YAML::Load(text);
      second = secondDocument(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(file_, lineOf(e.mark), "", "invalid YAML: " + e.msg);
    }
    if (second) {
      throw ConfigError(file_, lineOf(*second), "", "more than one YAML document (a config is a single map)");
    }
    if (root.IsNull()) {
      throw ConfigError(file_, 0, "", "config is empty (expected a map of settings)");
    }
    if (!root.IsMap()) {
      throw ConfigError(file_, lineOf(root.Mark()), "",
                        "the top level must be a map of settings, got " + describe(root));
    }
    // Every declared key at its default first; selectors at their default choice.
    Config config = schema_.complete(Config{});
    config.sourceFile = file_;
    readSection(root, schema_.sections().front(), config);
    const std::string file = file_;
    for (const std::string& o : overrides) applyOverride(o, config);
    file_ = file;
    config.overriddenBy = overridden_;
    // Keys that constrain each other: only now is every key known.
    if (auto issue = checkRules(schema_, config)) fail(*issue);
    return config;
  }

  /// "section.key=value" (or "key=value" at the top level): the value is read
  /// as YAML (a scalar or a flow list such as [64, 32]) and checked like a key
  /// of the file; errors name the override instead of a file and line.
  void applyOverride(const std::string& text, Config& config) {
    file_ = "override '" + text + "'";
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(file_, 0, "", "expected KEY=VALUE with a dotted key, e.g. training.epochs=1");
    }
    const std::string key = text.substr(0, eq);
    YAML::Node value;
    std::optional<YAML::Mark> second;
    try {
      value = YAML::Load(text.substr(eq + 1));
      second = secondDocument(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(file_, 0, key, "invalid YAML value: " + e.msg);
    }
    if (second) throw ConfigError(file_, 0, key, "more than one YAML document in the value");
    // The same path a file takes: a map of one key, nested per dot.
    YAML::Node doc = value;
    std::string rest = key;
    for (auto dot = rest.rfind('.'); dot != std::string::npos; dot = rest.rfind('.')) {
      YAML::Node outer(YAML::NodeType::Map);
      outer[rest.substr(dot + 1)] = doc;
      doc = outer;
      rest.resize(dot);
    }
    YAML::Node root(YAML::NodeType::Map);
    root[rest] = doc;
    applying_ = true;  // the keys it sets are recorded as its own (readSection)
    readSection(root, schema_.sections().front(), config);
    applying_ = false;
  }

 private:
  /// The 1-based line of `mark`; 0 when unknown, and in an override (whose
  /// value is text of its own, not a line of the file).
  int lineOf(const YAML::Mark& mark) const { return !applying_ && mark.line >= 0 ? mark.line + 1 : 0; }

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

  /// The override that set `key` last (`key` itself, or the key whose list
  /// holds the element `key` names: "a.b[2][0]" is "a.b"'s), if one did:
  /// the cross-key rules run once the overrides are applied, and a rule
  /// broken by an override names it, not the file.
  std::optional<std::string> overrideOf(std::string key) const {
    for (;;) {
      if (auto it = overridden_.find(key); it != overridden_.end()) return it->second;
      if (key.empty() || key.back() != ']') return std::nullopt;
      key.resize(key.rfind('['));
    }
  }

  [[noreturn]] void fail(const Issue& issue) const {
    // While an override is read, its own errors are its (file_ names it).
    if (!applying_)
      if (auto o = overrideOf(issue.key)) throw ConfigError(*o, 0, issue.key, issue.message);
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
  int valueLine(const YAML::Node& key, const YAML::Node& value) const {
    if (value.IsNull() || value.Mark().line < 0) return lineOf(key.Mark());
    return lineOf(value.Mark());
  }

  /// Processes a map: section names (top level only) and the section's keys.
  void readSection(const YAML::Node& map, const Section& section, Config& config) {
    const bool topLevel = section.name.empty();
    std::map<std::string, int> seen;
    for (const auto& entry : map) {
      // Copies: yaml-cpp's iterators hand out proxies, so references would dangle.
      const YAML::Node keyNode = entry.first;
      const YAML::Node value = entry.second;
      const int keyLine = lineOf(keyNode.Mark());
      if (!keyNode.IsScalar()) {
        throw ConfigError(file_, keyLine, section.name, "keys must be plain names, got " + describe(keyNode));
      }
      const std::string name = keyNode.Scalar();
      const std::string key = dotted(section.name, name);
      if (auto [prev, inserted] = seen.emplace(name, keyLine); !inserted) {
        throw ConfigError(file_, keyLine, key,
                          "duplicate key (first set on line " + std::to_string(prev->second) + ")");
      }
      if (const Entry* field = findEntry(section, name)) {
        lines_[key] = keyLine;
        if (applying_) overridden_[key] = file_;
        const ConfigValue v = readValue(field->spec, key, keyNode, value);
        // The same check validateConfig runs (readValue has already checked
        // what it could report more precisely, e.g. each scalar's range).
        if (auto issue = checkValue(field->spec, v, key)) fail(*issue);
        schema_.assign(config, section.name, *field, v);
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

  ConfigValue readValue(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                        const YAML::Node& value) {
    switch (f.type) {
      case KeyType::kInt:
        return readInt(f, key, keyNode, value);
      case KeyType::kUint64:
        return readUint64(key, keyNode, value);
      case KeyType::kReal:
        return readRealValue(f, key, keyNode, value);
      case KeyType::kBool:
        return readBool(key, keyNode, value);
      case KeyType::kText:
        return readText(f, key, keyNode, value);
      case KeyType::kIntList:
        return readIntList(f, key, keyNode, value);
      case KeyType::kIntPairList:
        return readPairs(f, key, keyNode, value);
      case KeyType::kRealMatrix:
        return readMatrix(f, key, keyNode, value);
      case KeyType::kIntListList:
        return readLists(f, key, keyNode, value);
    }
    throw ConfigError(file_, valueLine(keyNode, value), key, "key of an unknown type");
  }

  void readSubsection(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                      const Section& section, Config& config) {
    if (value.IsNull()) return;  // A section with everything commented out: defaults.
    if (!value.IsMap()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a section (a map of settings), got " + describe(value));
    }
    readSection(value, section, config);
  }

  static const Entry* findEntry(const Section& section, std::string_view name) {
    for (const Entry& e : section.entries) {
      if (e.spec.name == name) return &e;
    }
    return nullptr;
  }

  const Section* findSection(std::string_view name) const {
    const auto& all = schema_.sections();
    for (std::size_t i = 1; i < all.size(); ++i) {
      if (all[i].name == name) return &all[i];
    }
    return nullptr;
  }

  std::string unknownKeyMessage(const Section& section, std::string_view name) const {
    if (name.empty()) return "an empty key name";
    const auto& all = schema_.sections();
    std::vector<std::string_view> known;
    for (const Entry& e : section.entries) known.push_back(e.spec.name);
    if (section.name.empty()) {
      for (std::size_t i = 1; i < all.size(); ++i) known.push_back(all[i].name);
    }
    if (auto guess = closest(name, known)) {
      return "unknown key (did you mean '" + std::string(*guess) + "'?)";
    }
    // The right key in the wrong place, e.g. `batch_size` at the top level.
    if (!section.name.empty() && (findSection(name) || findEntry(all.front(), name))) {
      return "unknown key here ('" + std::string(name) + "' belongs at the top level)";
    }
    std::vector<std::string_view> homes;
    for (std::size_t i = 1; i < all.size(); ++i) {
      if (&all[i] != &section && findEntry(all[i], name)) homes.push_back(all[i].name);
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

  /// Whether `text` is a decimal integer literal: digits after an optional
  /// '+' (or '-' when `sign`).
  static bool isInteger(std::string_view text, bool sign) {
    if (!text.empty() && (text[0] == '+' || (sign && text[0] == '-'))) text.remove_prefix(1);
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  }

  /// Whether `text` (its sign taken off) is a YAML 1.2 core-schema decimal:
  /// (.D+ | D+(.D*)?)([eE][-+]?D+)?.
  static bool isDecimal(std::string_view text) {
    const auto digits = [&text] {
      std::size_t n = 0;
      while (n < text.size() && text[n] >= '0' && text[n] <= '9') ++n;
      text.remove_prefix(n);
      return n;
    };
    const std::size_t whole = digits();
    if (!text.empty() && text[0] == '.') {
      text.remove_prefix(1);
      if (digits() == 0 && whole == 0) return false;
    } else if (whole == 0) {
      return false;
    }
    if (!text.empty() && (text[0] == 'e' || text[0] == 'E')) {
      text.remove_prefix(1);
      if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
      if (digits() == 0) return false;
    }
    return text.empty();
  }

  /// Counts one more list element read from the document (aliases repeat
  /// elements without repeating their text): at most elementBudget_, one per
  /// byte of the text and overrides or kAliasedListElements, whichever is
  /// more (and kMaxListElements), so that a few kilobytes of aliases cannot
  /// make the reading take millions of steps.
  void countElement(const std::string& key, int line) {
    if (++elements_ > elementBudget_)
      throw ConfigError(file_, line, key,
                        "more than " + std::to_string(elementBudget_) +
                            " list elements in the config, at most one per byte of its text or " +
                            std::to_string(kAliasedListElements) + " (YAML aliases repeating a list?)");
  }

  /// Records the line of list element `key` when it is not its parent's
  /// (lineFor falls back to the parent): one entry per line, not per element.
  void noteElementLine(const std::string& key, const std::string& parent, int line) {
    if (lineFor(parent) != line) lines_[key] = line;
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
    overflow = false;
    if (!isInteger(text, true)) return std::nullopt;
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

  ConfigValue readInt(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                      const YAML::Node& value) const {
    return static_cast<int>(readInteger(key, keyNode, value, f.min, f.max));
  }

  ConfigValue readUint64(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value) const {
    const std::string& text = plainScalar(key, keyNode, value, "a non-negative integer");
    const int line = valueLine(keyNode, value);
    if (!isInteger(text, false)) {
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
    return v;
  }

  double readReal(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
                  const RealRange& range) const {
    // YAML 1.2 core-schema floats (and integers), plus .inf / .nan.
    const std::string& text = plainScalar(key, keyNode, value, "a number");
    const int line = valueLine(keyNode, value);
    const std::string_view unsigned_ =
        std::string_view(text).substr(!text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0);
    double v = 0.0;
    if (unsigned_ == ".inf" || unsigned_ == ".Inf" || unsigned_ == ".INF") {
      v = text.front() == '-' ? -kInf : kInf;
    } else if (text == ".nan" || text == ".NaN" || text == ".NAN") {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (isDecimal(unsigned_)) {
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

  ConfigValue readRealValue(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                            const YAML::Node& value) const {
    return readReal(key, keyNode, value, f.range);
  }

  ConfigValue readBool(const std::string& key, const YAML::Node& keyNode, const YAML::Node& value) const {
    const std::string& text = plainScalar(key, keyNode, value, "true or false");
    if (text == "true") {
      return true;
    } else if (text == "false") {
      return false;
    } else {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected true or false, got " + describe(value));
    }
  }

  ConfigValue readText(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                       const YAML::Node& value) const {
    const int line = valueLine(keyNode, value);
    if (!value.IsScalar()) {
      throw ConfigError(file_, line, key, "expected a string, got " + describe(value));
    }
    // A plain true, false or null is YAML's bool or null, not the text: `dir:
    // false` would name a folder "false". Quoted, it is the text.
    static const std::set<std::string> kNotText{"true",  "True", "TRUE", "false", "False",
                                                "FALSE", "null", "Null", "NULL",  "~"};
    if (value.Tag() != "!" && value.Tag() != "tag:yaml.org,2002:str" && kNotText.count(value.Scalar()) != 0)
      throw ConfigError(file_, line, key,
                        "expected a string, got the plain YAML " + value.Scalar() + " (quote it: \"" +
                            value.Scalar() + "\")");
    if (auto err = checkText(value.Scalar(), f.choices)) throw ConfigError(file_, line, key, *err);
    return value.Scalar();
  }

  ConfigValue readIntList(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                          const YAML::Node& value) {
    if (!value.IsSequence()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a list of integers (e.g. [128, 64]), got " + describe(value));
    }
    std::vector<int> out;
    for (const YAML::Node& element : value) {
      const std::string elementKey = indexed(key, out.size());
      const int line = valueLine(keyNode, element);
      countElement(elementKey, line);
      noteElementLine(elementKey, key, line);
      out.push_back(static_cast<int>(readInteger(elementKey, keyNode, element, f.min, f.max)));
    }
    return out;
  }

  /// `value` must be a list; "a list of N items" otherwise names what it is.
  static std::string describeSized(const YAML::Node& node) {
    if (!node.IsSequence()) return describe(node);
    return node.size() == 1 ? "a list of 1 item" : "a list of " + std::to_string(node.size()) + " items";
  }

  ConfigValue readPairs(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                        const YAML::Node& value) {
    if (!value.IsSequence()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a list of [a, b] pairs (e.g. [[0, 1], [1, 0]]), got " + describe(value));
    }
    std::vector<std::pair<int, int>> out;
    for (const YAML::Node& element : value) {
      const std::string elementKey = indexed(key, out.size());
      const int line = valueLine(keyNode, element);
      countElement(elementKey, line);
      noteElementLine(elementKey, key, line);
      if (!element.IsSequence() || element.size() != 2) {
        throw ConfigError(file_, line, elementKey, "expected a pair [a, b], got " + describeSized(element));
      }
      const auto a = static_cast<int>(readInteger(elementKey, element, element[0], f.min, f.max));
      const auto b = static_cast<int>(readInteger(elementKey, element, element[1], f.min, f.max));
      out.emplace_back(a, b);
    }
    return out;
  }

  ConfigValue readMatrix(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                         const YAML::Node& value) {
    if (!value.IsSequence()) {
      throw ConfigError(
          file_, valueLine(keyNode, value), key,
          "expected a table: a list of rows of numbers (e.g. [[0, 1], [1, 0]]), got " + describe(value));
    }
    std::vector<std::vector<double>> out;
    for (const YAML::Node& row : value) {
      const std::string rowKey = indexed(key, out.size());
      countElement(rowKey, valueLine(keyNode, row));
      noteElementLine(rowKey, key, valueLine(keyNode, row));
      if (!row.IsSequence()) {
        throw ConfigError(file_, valueLine(keyNode, row), rowKey,
                          "expected a row (a list of numbers), got " + describe(row));
      }
      std::vector<double> values;
      for (const YAML::Node& element : row) {
        const std::string elementKey = indexed(rowKey, values.size());
        const int line = valueLine(row, element);
        countElement(elementKey, line);
        noteElementLine(elementKey, rowKey, line);
        values.push_back(readReal(elementKey, row, element, f.range));
      }
      out.push_back(std::move(values));
    }
    return out;
  }

  ConfigValue readLists(const KeySpec& f, const std::string& key, const YAML::Node& keyNode,
                        const YAML::Node& value) {
    if (!value.IsSequence()) {
      throw ConfigError(
          file_, valueLine(keyNode, value), key,
          "expected a list of lists of integers (e.g. [[0, 1], [2, 3]]), got " + describe(value));
    }
    std::vector<std::vector<int>> out;
    for (const YAML::Node& list : value) {
      const std::string listKey = indexed(key, out.size());
      countElement(listKey, valueLine(keyNode, list));
      noteElementLine(listKey, key, valueLine(keyNode, list));
      if (!list.IsSequence()) {
        throw ConfigError(file_, valueLine(keyNode, list), listKey,
                          "expected a list of integers, got " + describe(list));
      }
      std::vector<int> values;
      for (const YAML::Node& element : list) {
        const std::string elementKey = indexed(listKey, values.size());
        const int line = valueLine(list, element);
        countElement(elementKey, line);
        noteElementLine(elementKey, listKey, line);
        values.push_back(static_cast<int>(readInteger(elementKey, list, element, f.min, f.max)));
      }
      out.push_back(std::move(values));
    }
    return out;
  }

  const ConfigSchema& schema_;
  std::string file_;
  std::map<std::string, int> lines_;  ///< Line of every key, and of list elements not on their parent's line.
  std::size_t elements_ = 0;          ///< List elements read so far (countElement).
  std::size_t elementBudget_ = 0;     ///< The most list elements the text may read (parse sets it).
  std::map<std::string, std::string> overridden_;  ///< Dotted key -> "override '...'" that set it last.
  bool applying_ = false;                          ///< An override is being read.
};

}  // namespace

Config parseConfig(const std::string& yamlText, const ConfigSchema& schema, const std::string& name,
                   const std::vector<std::string>& overrides) {
  return Parser(schema, name).parse(yamlText, overrides);
}

Config loadConfig(const std::string& path, const ConfigSchema& schema,
                  const std::vector<std::string>& overrides) {
  // A NUL would end the name open() sees: "job.yaml\0.bak" would load job.yaml.
  if (path.find('\0') != std::string::npos) {
    std::string shown;  // (what() is a C string: the NUL would end the message)
    for (char ch : path) shown += ch == '\0' ? std::string("\\0") : std::string(1, ch);
    throw ConfigError(shown, 0, "", "the config file's path contains a NUL character");
  }
  // Non-blocking, so that opening a FIFO returns at once (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw ConfigError(path, 0, "", std::string("cannot open config file: ") + std::strerror(errno));
  std::string text;
  int err = 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ConfigError(path, 0, "",
                      S_ISDIR(st.st_mode)
                          ? "cannot read config: is a directory"
                          : "cannot read config: not a regular file (a device, FIFO or socket)");
  } else if (const int flags = ::fcntl(fd, F_GETFL);
             flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    err = errno;  // a regular file is read blocking (a network file system may say EAGAIN)
  } else {
    // Read up to one byte past the limit (a file's size in st_size can be 0
    // or wrong, as in /proc), then refuse what is past it.
    std::array<char, 65536> buf{};
    while (text.size() <= kMaxConfigBytes) {
      const ssize_t n = ::read(fd, buf.data(), std::min(buf.size(), kMaxConfigBytes + 1 - text.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) err = errno;
      if (n <= 0) break;
      text.append(buf.data(), static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (err != 0)
    throw ConfigError(path, 0, "", std::string("error while reading config file: ") + std::strerror(err));
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(
        path, 0, "",
        "config file larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB (not a config)");
  return parseConfig(text, schema, path, overrides);
}

void validateConfig(const Config& config, const ConfigSchema& schema) {
  const std::string& file = config.sourceFile;
  for (const Section& section : schema.sections()) {
    for (const Entry& entry : section.entries) {
      const ConfigValue v = schema.valueOf(config, section.name, entry);
      if (auto issue = checkValue(entry.spec, v, dotted(section.name, entry.spec.name))) {
        throw ConfigError(file, 0, issue->key, issue->message);
      }
    }
  }
  if (auto issue = checkRules(schema, config)) throw ConfigError(file, 0, issue->key, issue->message);
}

}  // namespace gossamer
