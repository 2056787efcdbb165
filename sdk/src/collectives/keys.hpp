// The `collectives:` section's declaration (keys.cpp), for the Registry's
// core sections.
#pragma once

#include "gossamer/schema.hpp"

namespace gossamer::detail {

/// Declares `collectives:` (allreduce, chunk_bytes, small_message_bytes,
/// group_size, torus_rows, cost_model and the model's four numbers,
/// calibrate) in `schema`, each default taken from CollectiveOptions.
void addCollectiveKeys(ConfigSchema& schema);

}  // namespace gossamer::detail
