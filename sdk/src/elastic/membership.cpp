#include "gossamer/membership.hpp"

#include <algorithm>

#include "gossamer/config.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"

namespace gossamer {

int View::localRank(int global) const {
  const auto it = std::find(members.begin(), members.end(), global);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

int maxWorldSize(const Config& config) {
  if (!config.getOr("membership.enabled", false)) return config.worldSize();
  return std::max(config.worldSize(), config.getOr("membership.max_world_size", 0));
}

int claimJoinRank(Store& store, int worldSize, int maxWorldSize, const std::string& who,
                  const std::string& prefix) {
  GOSSAMER_ENFORCE(worldSize >= 1, "world size " << worldSize);
  for (int r = worldSize; r < maxWorldSize; ++r)
    if (store.claim(prefix + "/join/" + std::to_string(r), who)) return r;
  throw Error("the job is full: ranks " + std::to_string(worldSize) + ".." +
              std::to_string(maxWorldSize - 1) + " have joined it already (membership.max_world_size " +
              std::to_string(maxWorldSize) + ")");
}

}  // namespace gossamer
