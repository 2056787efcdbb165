// KeySet and ConfigSchema (see gossamer/schema.hpp).
#include "gossamer/schema.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <functional>
#include <sstream>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/kit/network.hpp"

namespace gossamer {

namespace {

std::string formatReal(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

bool inRange(double v, const RealRange& r) {
  return std::isfinite(v) && (r.minInclusive ? v >= r.min : v > r.min) &&
         (r.maxInclusive ? v <= r.max : v < r.max);
}

const char* typeName(KeyType t) {
  switch (t) {
    case KeyType::kInt:
      return "integer";
    case KeyType::kUint64:
      return "integer >= 0";
    case KeyType::kReal:
      return "number";
    case KeyType::kBool:
      return "bool";
    case KeyType::kText:
      return "string";
    case KeyType::kIntList:
      return "list of integers";
    case KeyType::kIntPairList:
      return "list of [a, b] pairs";
    case KeyType::kRealMatrix:
      return "table of numbers";
    case KeyType::kIntListList:
      return "list of integer lists";
  }
  return "value";
}

std::string intBounds(long long min, long long max) {
  if (max >= INT_MAX) return ">= " + std::to_string(min);
  return std::to_string(min) + ".." + std::to_string(max);
}

std::string realBounds(const RealRange& r) {
  std::string out;
  if (std::isfinite(r.min)) out += (r.minInclusive ? ">= " : "> ") + formatReal(r.min);
  if (std::isfinite(r.max)) {
    if (!out.empty()) out += ", ";
    out += (r.maxInclusive ? "<= " : "< ") + formatReal(r.max);
  }
  return out.empty() ? "finite" : out;
}

std::string allowedText(const KeySpec& k) {
  switch (k.type) {
    case KeyType::kInt:
    case KeyType::kIntList:
    case KeyType::kIntPairList:
    case KeyType::kIntListList:
      return intBounds(k.min, k.max);
    case KeyType::kReal:
    case KeyType::kRealMatrix:
      return realBounds(k.range);
    case KeyType::kText: {
      std::string out;
      for (const auto& c : k.choices) out += (out.empty() ? "" : ", ") + c;
      return out.empty() ? "any" : out;
    }
    default:
      return "";
  }
}

bool sameSpec(const KeySpec& a, const KeySpec& b) {
  return a.type == b.type && a.defaultValue == b.defaultValue && a.min == b.min && a.max == b.max &&
         a.range.min == b.range.min && a.range.max == b.range.max &&
         a.range.minInclusive == b.range.minInclusive && a.range.maxInclusive == b.range.maxInclusive &&
         a.choices == b.choices && a.distinct == b.distinct && a.unique == b.unique &&
         a.nonEmpty == b.nonEmpty;
}

std::string dottedKey(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

/// Markdown cell text: '|' would end the cell.
std::string cell(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\";
    out += ch;
  }
  return out;
}

}  // namespace

std::string indexedKey(const std::string& key, std::size_t i) { return key + "[" + std::to_string(i) + "]"; }

std::string rankRangeText(int worldSize) {
  return "world_size is " + std::to_string(worldSize) + ", so ranks are 0.." + std::to_string(worldSize - 1);
}

std::optional<std::string> checkpointsRequested(const Config& c) {
  const int every = c.getOr<int>("checkpoint.every_steps", 0);
  if (every > 0) return "checkpoint.every_steps is " + std::to_string(every);
  if (c.getOr<bool>("checkpoint.resume", false)) return std::string("checkpoint.resume is true");
  return std::nullopt;
}

std::string formatConfigValue(const ConfigValue& value) {
  struct Visitor {
    std::string operator()(int v) const { return std::to_string(v); }
    std::string operator()(std::uint64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return formatReal(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v.empty() ? "\"\"" : v; }
    std::string operator()(const std::vector<int>& v) const {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<std::pair<int, int>>& v) const {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) {
        out += (i ? ", [" : "[") + std::to_string(v[i].first) + ", " + std::to_string(v[i].second) + "]";
      }
      return out + "]";
    }
    std::string operator()(const std::vector<std::vector<double>>& v) const {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) {
        out += i ? ", [" : "[";
        for (std::size_t j = 0; j < v[i].size(); ++j) out += (j ? ", " : "") + formatReal(v[i][j]);
        out += "]";
      }
      return out + "]";
    }
    std::string operator()(const std::vector<std::vector<int>>& v) const {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + (*this)(v[i]);
      return out + "]";
    }
  };
  return std::visit(Visitor{}, value);
}

// ---- KeySet -------------------------------------------------------------------

KeySet& KeySet::add(KeySpec key) {
  GOSSAMER_ENFORCE(!key.name.empty(), "a config key needs a name");
  for (const KeySpec& k : keys_)
    GOSSAMER_ENFORCE(k.name != key.name, "key '" << key.name << "' declared twice");
  GOSSAMER_ENFORCE(key.defaultValue.index() == static_cast<std::size_t>(key.type),
                   "key '" << key.name << "': the default's type is not the key's");
  switch (key.type) {
    case KeyType::kInt: {
      const int v = std::get<int>(key.defaultValue);
      GOSSAMER_ENFORCE(
          key.min <= key.max && v >= key.min && v <= key.max,
          "key '" << key.name << "': default " << v << " outside " << key.min << ".." << key.max);
      break;
    }
    case KeyType::kReal: {
      const double v = std::get<double>(key.defaultValue);
      GOSSAMER_ENFORCE(inRange(v, key.range),
                       "key '" << key.name << "': default " << v << " outside its range");
      break;
    }
    case KeyType::kText: {
      const auto& v = std::get<std::string>(key.defaultValue);
      GOSSAMER_ENFORCE(
          key.choices.empty() || std::find(key.choices.begin(), key.choices.end(), v) != key.choices.end(),
          "key '" << key.name << "': default '" << v << "' is not one of its choices");
      break;
    }
    default:
      break;
  }
  keys_.push_back(std::move(key));
  return *this;
}

namespace {

KeySpec specOf(std::string name, KeyType type, ConfigValue defaultValue, std::string doc) {
  KeySpec k;
  k.name = std::move(name);
  k.type = type;
  k.defaultValue = std::move(defaultValue);
  k.doc = std::move(doc);
  return k;
}

}  // namespace

KeySet& KeySet::integer(std::string name, int defaultValue, long long min, long long max, std::string doc) {
  KeySpec k = specOf(std::move(name), KeyType::kInt, defaultValue, std::move(doc));
  k.min = min;
  k.max = max;
  return add(std::move(k));
}

KeySet& KeySet::uint64(std::string name, std::uint64_t defaultValue, std::string doc) {
  return add(specOf(std::move(name), KeyType::kUint64, defaultValue, std::move(doc)));
}

KeySet& KeySet::real(std::string name, double defaultValue, RealRange range, std::string doc) {
  KeySpec k = specOf(std::move(name), KeyType::kReal, defaultValue, std::move(doc));
  k.range = range;
  return add(std::move(k));
}

KeySet& KeySet::boolean(std::string name, bool defaultValue, std::string doc) {
  return add(specOf(std::move(name), KeyType::kBool, defaultValue, std::move(doc)));
}

KeySet& KeySet::text(std::string name, std::string defaultValue, std::vector<std::string> choices,
                     std::string doc) {
  KeySpec k = specOf(std::move(name), KeyType::kText, std::move(defaultValue), std::move(doc));
  k.choices = std::move(choices);
  return add(std::move(k));
}

KeySet& KeySet::intList(std::string name, std::vector<int> defaultValue, long long min, long long max,
                        std::string doc) {
  KeySpec k = specOf(std::move(name), KeyType::kIntList, std::move(defaultValue), std::move(doc));
  k.min = min;
  k.max = max;
  return add(std::move(k));
}

KeySet& KeySet::intPairList(std::string name, long long min, long long max, bool distinct, bool unique,
                            std::string doc) {
  KeySpec k =
      specOf(std::move(name), KeyType::kIntPairList, std::vector<std::pair<int, int>>{}, std::move(doc));
  k.min = min;
  k.max = max;
  k.distinct = distinct;
  k.unique = unique;
  return add(std::move(k));
}

KeySet& KeySet::realMatrix(std::string name, RealRange range, std::string doc) {
  KeySpec k =
      specOf(std::move(name), KeyType::kRealMatrix, std::vector<std::vector<double>>{}, std::move(doc));
  k.range = range;
  return add(std::move(k));
}

KeySet& KeySet::intListList(std::string name, long long min, long long max, bool nonEmpty, std::string doc) {
  KeySpec k = specOf(std::move(name), KeyType::kIntListList, std::vector<std::vector<int>>{}, std::move(doc));
  k.min = min;
  k.max = max;
  k.nonEmpty = nonEmpty;
  return add(std::move(k));
}

KeySet& KeySet::rule(ConfigRule check) {
  GOSSAMER_ENFORCE(static_cast<bool>(check), "null config rule");
  rules_.push_back(std::move(check));
  return *this;
}

KeySet& KeySet::onlyWhenSelected() {
  exclusive_ = true;
  return *this;
}

KeySet& KeySet::perRank() {
  if (keys_.empty()) throw InvalidArgument("perRank() before any key is declared");
  keys_.back().perRank = true;
  return *this;
}

KeySet& KeySet::namesRanks(RankKey how) {
  if (keys_.empty()) throw InvalidArgument("namesRanks() before any key is declared");
  KeySpec& key = keys_.back();
  const bool fits = how == RankKey::kNone ||
                    (how == RankKey::kPartition && key.type == KeyType::kIntListList) ||
                    (how == RankKey::kTable && key.type == KeyType::kRealMatrix) ||
                    (how == RankKey::kEdges && key.type == KeyType::kIntPairList);
  if (!fits)
    throw InvalidArgument("namesRanks(): key '" + key.name + "' is of another type than the ranks it names");
  key.ranks = how;
  return *this;
}

// ---- ConfigSchema -------------------------------------------------------------

ConfigSchema::ConfigSchema() { sections_.push_back(Section{"", "", "", {}, {}}); }

ConfigSchema::Section& ConfigSchema::sectionFor(const std::string& name) {
  for (Section& s : sections_) {
    if (s.name == name) return s;
  }
  sections_.push_back(Section{name, "", "", {}, {}});
  return sections_.back();
}

const ConfigSchema::Section* ConfigSchema::findSection(const std::string& name) const {
  for (const Section& s : sections_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void ConfigSchema::addSection(const std::string& section, const std::string& doc) {
  GOSSAMER_ENFORCE(!section.empty(), "section name is empty");
  Section& s = sectionFor(section);
  if (!doc.empty()) s.doc = doc;
}

void ConfigSchema::addSelector(const std::string& section, const std::string& selector,
                               const std::string& doc) {
  GOSSAMER_ENFORCE(!section.empty() && !selector.empty(), "selector needs a section and a key");
  Section& s = sectionFor(section);
  GOSSAMER_ENFORCE(s.selector.empty() || s.selector == selector,
                   "section '" << section << "' already has selector '" << s.selector << "'");
  if (!s.selector.empty()) return;
  s.selector = selector;
  KeySpec k;
  k.name = selector;
  k.type = KeyType::kText;
  k.defaultValue = std::string();
  k.doc = doc;
  Entry e;
  e.spec = std::move(k);
  s.entries.insert(s.entries.begin(), std::move(e));
}

void ConfigSchema::setDefaultChoice(const std::string& section, const std::string& choice) {
  Section& s = sectionFor(section);
  GOSSAMER_ENFORCE(!s.selector.empty(), "section '" << section << "' has no selector");
  GOSSAMER_ENFORCE(std::find(s.choices.begin(), s.choices.end(), choice) != s.choices.end(),
                   "'" << choice << "' is not registered under " << section << "." << s.selector);
  s.entries.front().spec.defaultValue = choice;
}

void ConfigSchema::setKeyDefault(const std::string& section, const std::string& key,
                                 const ConfigValue& value) {
  GOSSAMER_ENFORCE(findSection(section) != nullptr, "no section '" << section << "'");
  Section& s = sectionFor(section);
  const auto it =
      std::find_if(s.entries.begin(), s.entries.end(), [&](const Entry& e) { return e.spec.name == key; });
  GOSSAMER_ENFORCE(it != s.entries.end(), "key '" << dottedKey(section, key) << "' is not declared");
  GOSSAMER_ENFORCE(it->spec.defaultValue.index() == value.index(),
                   "key '" << dottedKey(section, key) << "' holds another type");
  it->spec.defaultValue = value;
}

void ConfigSchema::merge(Section& section, const KeySet& keys, const std::string& owner) {
  for (const KeySpec& k : keys.keys()) {
    auto it = std::find_if(section.entries.begin(), section.entries.end(),
                           [&](const Entry& e) { return e.spec.name == k.name; });
    if (it == section.entries.end()) {
      Entry e;
      e.spec = k;
      if (!owner.empty()) e.owners.push_back(owner);
      e.exclusive = keys.exclusive() && !owner.empty();
      section.entries.push_back(std::move(e));
      continue;
    }
    GOSSAMER_ENFORCE(sameSpec(it->spec, k), "key '"
                                                << dottedKey(section.name, k.name)
                                                << "' is declared again with another type, range or default");
    GOSSAMER_ENFORCE(!owner.empty() && !it->owners.empty(),
                     "key '" << dottedKey(section.name, k.name) << "' is declared twice");
    it->owners.push_back(owner);
    it->spec.perRank = it->spec.perRank || k.perRank;
    if (it->spec.doc.empty()) it->spec.doc = k.doc;
    it->exclusive = it->exclusive && keys.exclusive();
  }
  for (const ConfigRule& r : keys.rules()) rules_.push_back(r);
}

void ConfigSchema::addChoice(const std::string& section, const std::string& choice, const KeySet& keys) {
  GOSSAMER_ENFORCE(!choice.empty(), "component name is empty");
  Section& s = sectionFor(section);
  GOSSAMER_ENFORCE(!s.selector.empty(), "section '" << section << "' has no selector");
  GOSSAMER_ENFORCE(std::find(s.choices.begin(), s.choices.end(), choice) == s.choices.end(),
                   "'" << choice << "' is already registered");
  s.choices.push_back(choice);
  s.entries.front().spec.choices = s.choices;
  merge(s, keys, choice);
}

void ConfigSchema::addKeys(const std::string& section, const KeySet& keys) {
  Section& s = sectionFor(section);
  for (const KeySpec& k : keys.keys()) {
    GOSSAMER_ENFORCE(k.name != s.selector,
                     "key '" << dottedKey(section, k.name) << "' is the section's selector");
  }
  merge(s, keys, "");
}

ConfigValue ConfigSchema::valueOf(const Config& config, const std::string& section,
                                  const Entry& entry) const {
  auto it = config.values.find(dottedKey(section, entry.spec.name));
  if (it != config.values.end()) return it->second;
  return entry.spec.defaultValue;
}

void ConfigSchema::assign(Config& config, const std::string& section, const Entry& entry,
                          const ConfigValue& value) const {
  config.values[dottedKey(section, entry.spec.name)] = value;
}

Config ConfigSchema::complete(const Config& config) const {
  Config out = config;
  for (const Section& s : sections_) {
    for (const Entry& e : s.entries) {
      ConfigValue v = valueOf(out, s.name, e);
      // An unset selector ("") takes its default choice.
      if (!s.selector.empty() && e.spec.name == s.selector && std::get<std::string>(v).empty()) {
        v = e.spec.defaultValue;
      }
      assign(out, s.name, e, v);
    }
  }
  return out;
}

namespace {

// `value` (a RankKey `how` key's) over the view whose ascending members are
// `members`; `viewRank` maps a rank of the job to its rank in the view (-1:
// not a member).
ConfigValue rankValueInView(RankKey how, const ConfigValue& value, const ConfigValue& defaultValue,
                            const std::vector<int>& members, const std::function<int(int)>& viewRank) {
  switch (how) {
    case RankKey::kPartition: {
      const auto& groups = std::get<std::vector<std::vector<int>>>(value);
      if (groups.empty()) return value;
      auto out = islandsInView(groups, members);
      std::size_t covered = 0;
      for (const auto& g : out) covered += g.size();
      // A member in no group (a rank that joined beyond world_size): the
      // partition does not cover the view, so the key takes its default.
      return covered == members.size() ? ConfigValue(std::move(out)) : defaultValue;
    }
    case RankKey::kTable: {
      const auto& table = std::get<std::vector<std::vector<double>>>(value);
      if (table.empty()) return value;
      std::vector<std::vector<double>> out;
      for (const int i : members) {
        const auto row = static_cast<std::size_t>(i);
        if (row >= table.size()) return defaultValue;  // a rank beyond the table (joined)
        std::vector<double> kept;
        for (const int j : members) {
          const auto col = static_cast<std::size_t>(j);
          if (col >= table[row].size()) return defaultValue;
          kept.push_back(table[row][col]);
        }
        out.push_back(std::move(kept));
      }
      return out;
    }
    case RankKey::kEdges: {
      std::vector<std::pair<int, int>> out;
      for (const auto& [from, to] : std::get<std::vector<std::pair<int, int>>>(value))
        if (viewRank(from) >= 0 && viewRank(to) >= 0) out.emplace_back(viewRank(from), viewRank(to));
      return out;
    }
    case RankKey::kNone:
      break;
  }
  return value;
}

}  // namespace

Config ConfigSchema::inView(const Config& config, const std::vector<int>& members,
                            std::vector<std::string>* changed) const {
  GOSSAMER_ENFORCE(!members.empty() && std::is_sorted(members.begin(), members.end()) &&
                       std::adjacent_find(members.begin(), members.end()) == members.end(),
                   "inView: the members must be distinct ranks in ascending order");
  const auto viewRank = [&members](int r) {
    const auto it = std::lower_bound(members.begin(), members.end(), r);
    return it != members.end() && *it == r ? static_cast<int>(it - members.begin()) : -1;
  };
  Config out = config;
  out.set("world_size", static_cast<int>(members.size()));
  for (const Section& section : sections_)
    for (const Entry& entry : section.entries) {
      if (entry.spec.ranks == RankKey::kNone) continue;
      const ConfigValue value = valueOf(config, section.name, entry);
      ConfigValue renumbered =
          rankValueInView(entry.spec.ranks, value, entry.spec.defaultValue, members, viewRank);
      if (renumbered == value) continue;
      if (changed != nullptr) changed->push_back(dottedKey(section.name, entry.spec.name));
      assign(out, section.name, entry, std::move(renumbered));
    }
  return out;
}

std::string ConfigSchema::sharedSettings(const Config& config) const {
  std::string out;
  for (const Section& section : sections_)
    for (const Entry& entry : section.entries) {
      if (entry.spec.perRank) continue;
      out += dottedKey(section.name, entry.spec.name) + " = " +
             formatConfigValue(valueOf(config, section.name, entry)) + "\n";
    }
  return out;
}

std::string ConfigSchema::markdown() const {
  std::ostringstream os;
  for (const Section& s : sections_) {
    if (s.entries.empty()) continue;
    os << "### " << (s.name.empty() ? "Top level" : "`" + s.name + ":`") << "\n\n";
    if (!s.doc.empty()) os << s.doc << "\n\n";
    if (!s.selector.empty()) {
      os << "`" << s.selector << "` names the component; the keys marked with a component apply to it.\n\n";
    }
    os << "| key | type | default | allowed | meaning | declared by |\n";
    os << "|---|---|---|---|---|---|\n";
    for (const Entry& e : s.entries) {
      std::string owners;
      for (const auto& o : e.owners) owners += (owners.empty() ? "" : ", ") + o;
      if (owners.empty()) owners = s.name.empty() ? "core" : "section";
      if (e.exclusive) owners += " (only when selected)";
      os << "| `" << e.spec.name << "` | " << typeName(e.spec.type) << " | `"
         << cell(formatConfigValue(e.spec.defaultValue)) << "` | " << cell(allowedText(e.spec)) << " | "
         << cell(e.spec.doc + (e.spec.perRank ? " (may differ between ranks)" : "")) << " | " << cell(owners)
         << " |\n";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace gossamer
