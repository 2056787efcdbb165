// The registry the tests load configs with: gossamer-train's (every built-in
// component and the trainer's sections; the schema examples/configs are
// written against).
#pragma once

#include "components.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::test {

/// Built once per process. Its inproc transport makes its fabric on first
/// use, so tests that run Agents register their own inproc fabric instead.
inline const Registry& trainRegistry() {
  static const Registry r = train::makeTrainRegistry();
  return r;
}

/// A config with every registered key at its default.
inline Config defaultConfig() { return trainRegistry().complete(Config{}); }

}  // namespace gossamer::test
