"""Builds the native module of the `tensormorph` package with the project's CMake build (the same
release configuration as the CLI, so a checkout that built the CLI only links the module), and
ships it with the GPU backend modules built beside the CLI."""

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        subprocess.run([str(ROOT / "scripts" / "build.sh"), "release", "--python", sys.executable,
                        "tensormorph_python"], check=True, cwd=ROOT)
        built = ROOT / "build" / "release" / "python" / "tensormorph"
        modules = sorted(built.glob("_tensormorph*.so"))
        if not modules:
            raise RuntimeError(f"the build made no native module in {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(modules[-1], target)
        # Backend modules (CUDA, HIP) load from plugins/ beside the native module: those the release
        # build made (scripts/test.sh builds every one this machine can) go with it.
        plugins = ROOT / "build" / "release" / "plugins"
        if plugins.is_dir():
            shutil.copytree(plugins, target.parent / "plugins", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.a", "CMakeFiles"))


setup(ext_modules=[Extension("tensormorph._tensormorph", sources=[])], cmdclass={"build_ext": CMakeBuild})
