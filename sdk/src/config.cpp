// YAML configuration loader (see gossamer/config.hpp).
//
// The schema is a table of field descriptors (key, accessor into Config, allowed
// range or values). Parsing and validateConfig both walk that table, so every
// range check is written exactly once, in the descriptor.
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
#include <type_traits>
#include <variant>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr long long kIntMax = INT_MAX;

constexpr std::array<std::string_view, 2> kTransportKinds{"zmq", "inproc"};
constexpr std::array<std::string_view, 2> kProtocols{"tcp", "ipc"};
constexpr std::array<std::string_view, 2> kTopologyKinds{"fair_roulette", "ring"};
constexpr std::array<std::string_view, 2> kAlgorithmNames{"crossover_sgd", "allreduce_sgd"};
constexpr std::array<std::string_view, 2> kModelKinds{"mlp", "softmax"};
constexpr std::array<std::string_view, 2> kPartitions{"iid", "non_iid"};

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

/// A finite `double` key bounded below and above (each bound open or closed;
/// an infinite bound means "no bound").
struct RealField {
  std::string_view key;
  double& (*ref)(Config&);
  double min;
  bool minInclusive;
  double max;
  bool maxInclusive;
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

using Field = std::variant<IntField, Uint64Field, RealField, BoolField, TextField, IntListField>;

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
           IntField{"world_size", [](Config& c) -> int& { return c.worldSize; }, 1, 4096},
           Uint64Field{"seed", [](Config& c) -> std::uint64_t& { return c.seed; }},
       }},
      {"transport",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.transport.kind; }, kTransportKinds},
           TextField{"host", [](Config& c) -> std::string& { return c.transport.host; }, {}},
           TextField{"protocol", [](Config& c) -> std::string& { return c.transport.protocol; }, kProtocols},
           RealField{"timeout_seconds", [](Config& c) -> double& { return c.transport.timeoutSeconds; }, 0.0,
                     false, 86400.0, true},
           RealField{"linger_seconds", [](Config& c) -> double& { return c.transport.lingerSeconds; }, 0.0,
                     true, kInf, false},
       }},
      {"topology",
       {
           TextField{"kind", [](Config& c) -> std::string& { return c.topology.kind; }, kTopologyKinds},
       }},
      {"algorithm",
       {
           TextField{"name", [](Config& c) -> std::string& { return c.algorithm.name; }, kAlgorithmNames},
           IntField{"segments", [](Config& c) -> int& { return c.algorithm.segments; }, 1, 4096},
           IntField{"interval", [](Config& c) -> int& { return c.algorithm.interval; }, 1, kIntMax},
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
           RealField{"dirichlet_alpha", [](Config& c) -> double& { return c.data.dirichletAlpha; }, 0.0,
                     false, kInf, false},
           BoolField{"standardize", [](Config& c) -> bool& { return c.data.standardize; }},
           IntField{"train_limit", [](Config& c) -> int& { return c.data.trainLimit; }, 0, kIntMax},
           IntField{"test_limit", [](Config& c) -> int& { return c.data.testLimit; }, 0, kIntMax},
       }},
      {"training",
       {
           IntField{"epochs", [](Config& c) -> int& { return c.training.epochs; }, 1, kIntMax},
           IntField{"batch_size", [](Config& c) -> int& { return c.training.batchSize; }, 1, kIntMax},
           RealField{"learning_rate", [](Config& c) -> double& { return c.training.learningRate; }, 0.0, true,
                     kInf, false},
           RealField{"momentum", [](Config& c) -> double& { return c.training.momentum; }, 0.0, true, 1.0,
                     false},
           RealField{"weight_decay", [](Config& c) -> double& { return c.training.weightDecay; }, 0.0, true,
                     kInf, false},
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

std::optional<std::string> checkReal(double v, const RealField& f) {
  bool ok = std::isfinite(v) && (f.minInclusive ? v >= f.min : v > f.min) &&
            (f.maxInclusive ? v <= f.max : v < f.max);
  if (ok) return std::nullopt;
  std::string range = "must be a finite number";
  if (std::isfinite(f.min)) range += (f.minInclusive ? " >= " : " > ") + formatReal(f.min);
  if (std::isfinite(f.min) && std::isfinite(f.max)) range += " and";
  if (std::isfinite(f.max)) range += (f.maxInclusive ? " <= " : " < ") + formatReal(f.max);
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
    return config;
  }

 private:
  static int lineOf(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

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
        std::visit([&](const auto& f) { read(f, key, keyNode, value, config); }, *field);
        continue;
      }
      if (topLevel) {
        if (const Section* sub = findSection(name)) {
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

  void read(const RealField& f, const std::string& key, const YAML::Node& keyNode, const YAML::Node& value,
            Config& config) const {
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
    if (auto err = checkReal(v, f)) throw ConfigError(file_, line, key, *err);
    f.ref(config) = v;
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
            Config& config) const {
    if (!value.IsSequence()) {
      throw ConfigError(file_, valueLine(keyNode, value), key,
                        "expected a list of integers (e.g. [128, 64]), got " + describe(value));
    }
    std::vector<int> out;
    for (const YAML::Node& element : value) {
      const std::string elementKey = indexed(key, out.size());
      out.push_back(static_cast<int>(readInteger(elementKey, keyNode, element, f.min, f.max)));
    }
    f.ref(config) = std::move(out);
  }

  std::string file_;
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
      const std::string key = dotted(section.name, fieldKey(field));
      std::visit(
          [&](const auto& f) {
            using F = std::decay_t<decltype(f)>;
            if constexpr (std::is_same_v<F, IntField>) {
              if (auto err = checkInt(f.ref(copy), f.min, f.max)) {
                throw ConfigError(file, 0, key, *err);
              }
            } else if constexpr (std::is_same_v<F, RealField>) {
              if (auto err = checkReal(f.ref(copy), f)) throw ConfigError(file, 0, key, *err);
            } else if constexpr (std::is_same_v<F, TextField>) {
              if (auto err = checkText(f.ref(copy), f)) throw ConfigError(file, 0, key, *err);
            } else if constexpr (std::is_same_v<F, IntListField>) {
              const std::vector<int>& values = f.ref(copy);
              for (std::size_t i = 0; i < values.size(); ++i) {
                if (auto err = checkInt(values[i], f.min, f.max)) {
                  throw ConfigError(file, 0, indexed(key, i), *err);
                }
              }
            }
            // Uint64Field and BoolField: every value of the type is valid.
          },
          field);
    }
  }
}

}  // namespace gossamer
