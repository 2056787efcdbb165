// splitmix64: the seeded hash behind every random draw of the topologies
// (and QSGD's stream), the same on every platform.
#include "gossamer/kit/splitmix.hpp"
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::topologies {

std::uint64_t splitmix64(std::uint64_t x) { return gossamer::splitmix64(x); }

}  // namespace gossamer::topologies
