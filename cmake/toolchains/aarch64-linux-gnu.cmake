# Cross build for 64-bit Arm Linux with Debian's toolchain and multiarch
# packages (g++-aarch64-linux-gnu, and the -dev packages as :arm64, e.g.
# libzmq3-dev:arm64). Programs built here run on an x86-64 host under
# qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR: ctest and catch_discover_tests
# go through it). scripts/cross-test.sh installs all of it and uses this file:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: arm64 libraries and their CMake packages live under
# /usr/lib/aarch64-linux-gnu; headers are shared under /usr/include. Catch2
# (v2, header-only) is the host's package; yaml-cpp's -dev package is the
# host's too, with the arm64 library (aarch64-linux-gnu/yaml-cpp-config.cmake).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(yaml-cpp_DIR "${CMAKE_CURRENT_LIST_DIR}/aarch64-linux-gnu")
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
find_program(GOSSAMER_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(GOSSAMER_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${GOSSAMER_QEMU_AARCH64}")
endif()
