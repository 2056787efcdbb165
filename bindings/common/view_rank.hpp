// A root named by global rank, placed in a membership view: the bindings'
// broadcasts (the C ABI's gossamer_broadcast, Python's Agent.broadcast) take
// global ranks, and the communicator numbers the view's members. Not
// installed.
#pragma once

#include <string>

#include "gossamer/errors.hpp"
#include "gossamer/membership.hpp"

namespace gossamer::bindings {

/// The position of global rank `root` among `view.members` (its rank in the
/// view's communicator).
/// @throws InvalidArgument "root R is not a member of view N (ranks A, B)"
///         when it is not one (outside the job, or removed from the view).
inline int rootInView(const View& view, int root) {
  const int local = view.localRank(root);
  if (local >= 0) return local;
  std::string members;
  for (int g : view.members) members += (members.empty() ? "" : ", ") + std::to_string(g);
  throw InvalidArgument("root " + std::to_string(root) + " is not a member of view " +
                        std::to_string(view.number) + " (ranks " + members + ")");
}

}  // namespace gossamer::bindings
