// The `checkpoint:` section, declared and read in checkpoints.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "gossamer/config.hpp"
#include "gossamer/schema.hpp"

namespace gossamer {

/// The `checkpoint:` section's values.
struct CheckpointSettings {
  std::uint64_t everySteps = 0;  ///< Save every that many steps; 0: never.
  std::string dir;               ///< Folder of rank-R-step-S.ckpt.
  bool resume = false;           ///< Start from the newest step every rank has.
};

namespace detail {
/// Declares `checkpoint:` (every_steps, dir, resume) in `schema`.
void addCheckpointKeys(ConfigSchema& schema);
/// The section's values. @throws InvalidArgument if a key is not set.
CheckpointSettings checkpointSettingsFrom(const Config& config);
}  // namespace detail

}  // namespace gossamer
