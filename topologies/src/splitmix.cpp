// splitmix64: the seeded hash behind every random draw of the topologies
// (and QSGD's stream), the same on every platform.
#include "gossamer/topologies/topologies.hpp"

namespace gossamer::topologies {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace gossamer::topologies
