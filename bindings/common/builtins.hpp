// The registry of every built-in component and the config loader, shared by
// the bindings: the Python extensions gossamer._core and gossamer._c10d and
// the C ABI's libgossamer_c (each shared object holds its own registry). Not
// installed.
#pragma once

#include <string>
#include <vector>

#include "gossamer/config.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/builtins.hpp"

namespace gossamer::bindings {

/// Every built-in component: the registry the Python Agent and process group,
/// and the C ABI's agents, build from. One per shared object (the inproc transport's fabric is made on
/// first use).
inline const Registry& builtins() {
  static const Registry r = [] {
    Registry reg;
    transports::registerBuiltins(reg);
    topologies::registerBuiltins(reg);
    optimizers::registerBuiltins(reg);
    return reg;
  }();
  return r;
}

/// The config from YAML text (`isText`) or a file path, with "key=value"
/// overrides applied after it. @throws ConfigError naming file, line and key.
inline Config loadConfig(const std::string& source, bool isText, const std::vector<std::string>& overrides) {
  if (isText) return builtins().parse(source, "<config>", overrides);
  return builtins().load(source, overrides);
}

}  // namespace gossamer::bindings
