// Where the tests find the source tree, the build tree and the programs.
// The paths are compiled into one file (build_paths.cpp), not into every
// test's flags, so that the other test sources compile to the same objects
// in any clone (ccache takes them from its cache).
#pragma once

#include <string>

namespace gossamer::testing {

/// The source tree's root, absolute ("" never: CMake always defines it).
std::string sourceDir();
/// The build tree's root, absolute.
std::string binaryDir();
/// The cmake executable that configured the build.
std::string cmakeCommand();
/// The gossamer-train executable of this build; "" where the suite is built
/// without the programs (the sanitizer build).
std::string trainExe();
/// The gossamer-sim executable of this build; "" where it is not built
/// (no SimGrid, or the sanitizer build).
std::string simExe();

}  // namespace gossamer::testing
