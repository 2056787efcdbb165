"""Builds gossamer._core with the project's CMake (the whole SDK is linked
statically into the extension). Used by
    pip install --no-build-isolation ./bindings/python
in a virtual environment made with --system-site-packages (numpy, torch and
pybind11 come from Debian). CMAKE_ARGS adds options to the configure step."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parents[2]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(self.build_temp).resolve() / "cmake"
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DGOSSAMER_BUILD_TESTS=OFF", "-DGOSSAMER_BUILD_EXAMPLES=OFF", "-DGOSSAMER_BUILD_BENCH=OFF",
        ] + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "gossamer_python_core",
                        "-j", str(os.cpu_count() or 1)], check=True)
        built = next((build / "python" / "gossamer").glob("_core*.so"))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target))


setup(ext_modules=[Extension("gossamer._core", sources=[])], cmdclass={"build_ext": CMakeBuild})
