// The paths of build_paths.hpp, from the definitions tests/CMakeLists.txt
// sets on this file alone.
#include "build_paths.hpp"

namespace gossamer::testing {

std::string sourceDir() { return GOSSAMER_SOURCE_DIR; }
std::string binaryDir() { return GOSSAMER_BINARY_DIR; }
std::string cmakeCommand() { return GOSSAMER_CMAKE_COMMAND; }
std::string trainExe() {
#ifdef GOSSAMER_TRAIN_EXE
  return GOSSAMER_TRAIN_EXE;
#else
  return {};
#endif
}

std::string simExe() {
#ifdef GOSSAMER_SIM_EXE
  return GOSSAMER_SIM_EXE;
#else
  return {};
#endif
}

}  // namespace gossamer::testing
