// Run configuration loaded from YAML.
//
// A Config is the values of the keys a Registry declared, by dotted name
// ("world_size", "transport.timeout_seconds", "algorithm.segments"). Every
// key, the SDK's own included, is declared once with its type, range and
// default in a KeySet next to the code that reads it (gossamer/schema.hpp)
// and read with Config::get. The SDK's own sections: the top level
// (world_size, seed), `transport:` (the keys every network transport shares
// and the selector `kind`), the selectors `topology.kind`, `algorithm.name`
// and `compression.kind`, `collectives:` (collectiveOptionsFrom), `run:`,
// `network:`, `security:` and `checkpoint:`. The reference of all keys is
// generated from what is registered: `gossamer-config --schema --markdown`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/schema.hpp"

namespace gossamer {

/// Largest world size a config may ask for; ranks are 0..kMaxWorldSize-1.
inline constexpr int kMaxWorldSize = 4096;

/// A whole run: what every peer of one job agrees on.
struct Config {
  std::string sourceFile;  ///< File the config was read from ("" when built in code).
  /// Every key's value by dotted name ("world_size", "transport.kind",
  /// "training.epochs"). Filled with every declared key's default by
  /// parseConfig and ConfigSchema::complete.
  std::map<std::string, ConfigValue> values;
  /// The keys that a KEY=VALUE override (parseConfig's `overrides`, the
  /// programs' --set) set last, by dotted name, each with the override as
  /// errors name it: "override 'training.lr=0.1'". Empty for a Config built
  /// in code.
  std::map<std::string, std::string> overriddenBy;

  /// `world_size`, the number of peers (>= 1): get<int>("world_size").
  /// @throws InvalidArgument if the Config was not completed by a schema.
  int worldSize() const { return get<int>("world_size"); }
  /// `seed`, the shared seed of the initial model, shards and topology:
  /// get<std::uint64_t>("seed"). @throws InvalidArgument as worldSize().
  std::uint64_t seed() const { return get<std::uint64_t>("seed"); }

  /// The value of a component's key, e.g. get<int>("algorithm.segments").
  /// T is the key's type: int, std::uint64_t, double, bool, std::string,
  /// std::vector<int>, std::vector<std::pair<int, int>>,
  /// std::vector<std::vector<double>> or std::vector<std::vector<int>>.
  /// @throws InvalidArgument if the key is not set (a Config built in code
  ///         and not completed by Registry::complete) or has another type.
  template <typename T>
  const T& get(const std::string& dottedKey) const {
    auto it = values.find(dottedKey);
    GOSSAMER_ENFORCE(it != values.end(), "config key '"
                                             << dottedKey
                                             << "' is not set (is it registered? Configs built in code "
                                                "are completed by Registry::complete)");
    const T* v = std::get_if<T>(&it->second);
    GOSSAMER_ENFORCE(v != nullptr, "config key '" << dottedKey << "' holds another type");
    return *v;
  }

  /// get<T>(dottedKey) when the key is set, else `fallback` (for a key that
  /// another, optional component declares).
  /// @throws InvalidArgument if the key is set with another type.
  template <typename T>
  T getOr(const std::string& dottedKey, T fallback) const {
    return values.count(dottedKey) != 0 ? get<T>(dottedKey) : fallback;
  }

  /// Sets a component's key (checked when the Config is validated).
  template <typename T>
  void set(const std::string& dottedKey, T value) {
    values[dottedKey] = ConfigValue(std::move(value));
  }
  /// A text key: set("transport.kind", "zmq") stores a std::string.
  void set(const std::string& dottedKey, const char* value) { values[dottedKey] = std::string(value); }
};

/// Largest config file loadConfig reads, bytes.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;

/// Reads and validates a YAML config file against `schema` (a Registry's
/// schema()). The file must be a regular file of at most kMaxConfigBytes
/// (a FIFO or device is refused, never waited on or read without end).
///
/// Every key is checked: unknown keys (with a did-you-mean), duplicates, wrong
/// types, out-of-range values and broken cross-field rules throw ConfigError
/// naming the file, the 1-based line and the dotted key. Missing keys keep
/// their declared defaults; a missing selector takes its default choice.
/// `overrides` ("training.epochs=1", "model.hidden=[64, 32]": a dotted key,
/// '=', a YAML value) are applied after the file, in order, with the same
/// checks; their errors name the override. A key set by two overrides takes
/// the later value (as a script's defaults followed by its user's own).
/// @throws ConfigError on any problem, including an unreadable file or bad YAML.
Config loadConfig(const std::string& path, const ConfigSchema& schema,
                  const std::vector<std::string>& overrides = {});

/// Same as loadConfig, from YAML text; `name` is used as the file in errors.
/// @throws ConfigError
Config parseConfig(const std::string& yamlText, const ConfigSchema& schema,
                   const std::string& name = "<string>", const std::vector<std::string>& overrides = {});

/// Checks an in-code Config against `schema`: every key's type and range,
/// selectors naming registered components, and the cross-field rules. Keys
/// the Config lacks are taken at their defaults.
/// @throws ConfigError (line 0) naming the key.
void validateConfig(const Config& config, const ConfigSchema& schema);

}  // namespace gossamer
