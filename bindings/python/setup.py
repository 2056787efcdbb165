"""Builds gossamer._core, and gossamer._c10d (the torch.distributed backend)
where libtorch's c10d headers are found, with the project's CMake (the whole
SDK is linked statically into each extension). Used by
    pip install --no-build-isolation ./bindings/python
in a virtual environment made with --system-site-packages (numpy, torch and
pybind11 come from Debian). CMAKE_ARGS adds options to the configure step.
GOSSAMER_WHEEL_BUILD_DIR, if set, is the CMake build directory instead of one
under pip's temporary directory: a new one is configured as above and kept,
so the next build is incremental; one configured already (the tree's own
build/, say) is built as it is, without reconfiguring it."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parents[2]
TARGETS = {"gossamer._core": "gossamer_python_core", "gossamer._c10d": "gossamer_python_c10d"}


class CMakeBuild(build_ext):
    def run(self):
        build = Path(os.environ.get("GOSSAMER_WHEEL_BUILD_DIR") or Path(self.build_temp).resolve() / "cmake")
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DGOSSAMER_BUILD_TESTS=OFF", "-DGOSSAMER_BUILD_EXAMPLES=OFF", "-DGOSSAMER_BUILD_BENCH=OFF",
        ] + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(configure, check=True)
        # The c10d backend only where CMake found libtorch's c10d (its cache says).
        cache = (build / "CMakeCache.txt").read_text()
        has_c10d = "GOSSAMER_TORCH_INCLUDE_DIR:PATH=" in cache and "GOSSAMER_TORCH_INCLUDE_DIR:PATH=GOSSAMER_TORCH_INCLUDE_DIR-NOTFOUND" not in cache
        self.extensions = [e for e in self.extensions if e.name != "gossamer._c10d" or has_c10d]
        subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1), "--target",
                        *[TARGETS[e.name] for e in self.extensions]], check=True)
        self._cmake_build = build
        super().run()

    def build_extension(self, ext):
        stem = ext.name.split(".")[-1]
        built = next((self._cmake_build / "python" / "gossamer").glob(f"{stem}*.so"))
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target))


setup(ext_modules=[Extension(name, sources=[]) for name in TARGETS], cmdclass={"build_ext": CMakeBuild})
