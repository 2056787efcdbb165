// Run configuration loaded from YAML.
//
// The SDK itself owns only a few keys: the top level (world_size, seed), the
// network settings every transport shares, the selectors that name the
// components (transport.kind, topology.kind, algorithm.name,
// compression.kind) and the collectives' options. Those are typed members
// below. Every other key is declared by the component that reads it (see
// gossamer/schema.hpp and Registry) and lives in Config::values, read with
// Config::get. The reference of all keys is generated from what is
// registered: `gossamer-config --schema --markdown`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gossamer/defaults.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/schema.hpp"

namespace gossamer {

/// Largest world size a config may ask for; ranks are 0..kMaxWorldSize-1.
inline constexpr int kMaxWorldSize = 4096;

/// `transport:` keys every network transport shares. The selected
/// transport's own keys (e.g. libfabric's `provider`) are in Config::values.
struct TransportConfig {
  std::string kind;                            ///< Registered transport name; "" = the registry's default.
  std::string host = defaults::kHost;          ///< Address the transport binds to; ports are ephemeral.
  std::string protocol = defaults::kProtocol;  ///< Endpoint protocol: "tcp" or "ipc".
  double timeoutSeconds = defaults::kTimeoutSeconds;  ///< Bound on every network wait, seconds (> 0).
  double lingerSeconds = defaults::kLingerSeconds;    ///< On close: delivery of queued sends, seconds (>= 0).
};

/// `topology:` selector; the topology's own keys are in Config::values.
struct TopologyConfig {
  std::string kind;  ///< Registered topology name; "" = the registry's default.
};

/// `algorithm:` selector; the optimizer's own keys are in Config::values.
struct AlgorithmConfig {
  std::string name;  ///< Registered optimizer name; "" = the registry's default.
};

/// `compression:` selector; the compressor's own keys are in Config::values.
struct CompressionConfig {
  std::string kind;  ///< Registered compressor name or "none"; "" = the registry's default.
};

/// `collectives:` section: how the synchronous collectives run (the
/// Communicator's options; see gossamer/collectives.hpp).
struct CollectivesConfig {
  /// "auto" or the name of an allreduce algorithm (allreduceAlgorithms()).
  std::string allreduce = "auto";
  int chunkBytes = 1 << 20;              ///< Ring pipelining piece, bytes (>= 1).
  int smallMessageBytes = 64 << 10;      ///< auto without cost model: small-message bound, bytes (>= 0).
  int groupSize = 0;                     ///< Ranks per group of the grouped algorithms (0 = about sqrt(N)).
  int torusRows = 0;                     ///< Grid rows of the 2D torus (0 = about sqrt(N); must divide N).
  bool costModel = false;                ///< auto picks by the alpha-beta-gamma model (CostModel).
  double alphaSeconds = 50e-6;           ///< Model: per-message latency, seconds (>= 0).
  double betaSecondsPerByte = 1e-9;      ///< Model: inverse bandwidth, seconds per byte (>= 0).
  double gammaSecondsPerByte = 0.25e-9;  ///< Model: reduction cost, seconds per byte (>= 0).
  double contention = 0.0;               ///< Model: cost growth per extra concurrent sender (>= 0).
  /// Measure the model when the Agent starts (Communicator::calibrate, about
  /// a second; replaces the four numbers above) and let auto use it.
  bool calibrate = false;
};

/// A whole run: what every peer of one job agrees on.
struct Config {
  std::string sourceFile;   ///< File the config was read from ("" when built in code).
  int worldSize = 4;        ///< Number of peers (>= 1).
  std::uint64_t seed = 42;  ///< Shared seed: initial model, shards, topology.
  TransportConfig transport;
  TopologyConfig topology;
  AlgorithmConfig algorithm;
  CompressionConfig compression;
  CollectivesConfig collectives;
  /// The registered components' keys by dotted name ("topology.edges",
  /// "training.epochs"). Filled with every declared key's default by
  /// parseConfig and ConfigSchema::complete.
  std::map<std::string, ConfigValue> values;

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
};

/// Reads and validates a YAML config file against `schema` (a Registry's
/// schema()).
///
/// Every key is checked: unknown keys (with a did-you-mean), duplicates, wrong
/// types, out-of-range values and broken cross-field rules throw ConfigError
/// naming the file, the 1-based line and the dotted key. Missing keys keep
/// their declared defaults; a missing selector takes its default choice.
/// `overrides` ("training.epochs=1", "model.hidden=[64, 32]": a dotted key,
/// '=', a YAML value) are applied after the file, in order, with the same
/// checks; their errors name the override.
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
