// One registry of every program's sections, for gossamer-config and its tests.
#pragma once

#include "gossamer/registry.hpp"

namespace gossamer::apps {

/// The built-in components and the sections of gossamer-train (`model:`,
/// `data:`, `training:`), gossamer-admm (`admm:`) and gossamer-sparse
/// (`sparse:`): a config of any of these programs loads against it.
/// @throws InvalidArgument if two programs declare one key differently.
Registry makeProgramsRegistry();

}  // namespace gossamer::apps
