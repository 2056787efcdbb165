// A platform library whose load_platform throws (SimGrid loads a platform
// file named *.so as a library and calls its load_platform): for
// conformance/test_simgrid.cpp's check that such an error names no line.
#include <stdexcept>

namespace simgrid::s4u {
class Engine;
}  // namespace simgrid::s4u

extern "C" void load_platform(const simgrid::s4u::Engine& /*engine*/) {
  throw std::runtime_error("the platform library failed on purpose");
}
