# yaml-cpp for the aarch64 cross build. Debian's libyaml-cpp-dev cannot be
# installed for two architectures at once (installing libyaml-cpp-dev:arm64
# removes the host's), so the cross build takes the host package's headers,
# which are the same for every architecture, and links the arm64 runtime
# library (libyaml-cpp0.7:arm64, which installs beside the host's).
find_library(GOSSAMER_YAML_CPP_LIBRARY NAMES libyaml-cpp.so.0.7
             PATHS "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}" NO_DEFAULT_PATH)
find_path(GOSSAMER_YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h)
if(NOT GOSSAMER_YAML_CPP_LIBRARY OR NOT GOSSAMER_YAML_CPP_INCLUDE_DIR)
  set(yaml-cpp_FOUND FALSE)
  set(yaml-cpp_NOT_FOUND_MESSAGE
      "needs libyaml-cpp0.7:${CMAKE_LIBRARY_ARCHITECTURE} and the host's libyaml-cpp-dev (scripts/deps.sh)")
  return()
endif()
if(NOT TARGET yaml-cpp)
  add_library(yaml-cpp SHARED IMPORTED)
  set_target_properties(yaml-cpp PROPERTIES IMPORTED_LOCATION "${GOSSAMER_YAML_CPP_LIBRARY}"
                                            INTERFACE_INCLUDE_DIRECTORIES "${GOSSAMER_YAML_CPP_INCLUDE_DIR}")
endif()
set(yaml-cpp_VERSION 0.7.0)
