#include "gossamer/membership.hpp"

#include <algorithm>

namespace gossamer {

int View::localRank(int global) const {
  const auto it = std::find(members.begin(), members.end(), global);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

}  // namespace gossamer
