"""Builds the __NAME__ PJRT plugin: src/*.cc -> jax_plugins/__NAME__/_plugin*.so.

    python setup.py build_ext --inplace     # in place, for development (about a minute)
    pip install .                           # or as a package; JAX then finds it itself

The library exports GetPjrtApi (the PJRT C API entry point); jaxlib loads it with dlopen.
pjrt_c_api.h comes from the xla-cpu-pjrt wheel (a build requirement), and build/
generated/pjrt_api_slots.inc lists the slots of its PJRT_Api table (build_support.py).
"""

import glob
import os
import sys

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_namespace_packages, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_support  # noqa: E402

VERSION = "0.1.0"
JAX_REQUIREMENT = ">=0.10.2,<0.11"

ROOT = os.path.dirname(os.path.abspath(__file__))
# One compile job per core (__NAME_UPPER___BUILD_JOBS overrides), and only for the .cc files
# whose source or headers changed since their object was built.
ParallelCompile("__NAME_UPPER___BUILD_JOBS",
                needs_recompile=build_support.needs_recompile_under(ROOT)).install()


class BuildExt(build_ext):
  """build_ext that keeps its objects in build/ (a rebuild after editing one .cc file
  compiles that file only) and replaces the library instead of rewriting it (a process
  that has it loaded keeps the old pages mapped)."""

  def finalize_options(self):
    explicit = self.build_temp is not None
    super().finalize_options()
    if not explicit:
      self.build_temp = os.path.join("build", "objects")

  def copy_file(self, src, dst, *args, **kwargs):
    if dst.endswith(".so") and os.path.exists(dst):
      os.unlink(dst)
    return super().copy_file(src, dst, *args, **kwargs)


def plugin_extension():
  header_dir = build_support.pjrt_header_dir()
  build_support.write_api_slots(header_dir, "build/generated/pjrt_api_slots.inc")
  current, minimum = build_support.stablehlo_versions()
  return Pybind11Extension(
      "jax_plugins.__NAME__._plugin",
      sorted(glob.glob("src/*.cc")),
      depends=glob.glob("src/*.h") + ["build/generated/pjrt_api_slots.inc"],
      include_dirs=["src", "build/generated", header_dir],
      define_macros=[("PLUGIN_VERSION", f'"{VERSION}"'),
                     ("STABLEHLO_CURRENT_VERSION", current),
                     ("STABLEHLO_MINIMUM_VERSION", minimum)],
      cxx_std=20,
      # -MMD: each object's depfile lists the headers it included (needs_recompile).
      extra_compile_args=["-O2", "-Wall", "-Wextra", "-MMD"],
  )


setup(
    name="__NAME__-pjrt-plugin",
    version=VERSION,
    description="The __NAME__ PJRT plugin for JAX",
    packages=find_namespace_packages(include=["jax_plugins.*"]),
    ext_modules=[plugin_extension()],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.11",
    install_requires=[f"jax{JAX_REQUIREMENT}", f"jaxlib{JAX_REQUIREMENT}", "numpy"],
    # How JAX finds the plugin: it imports every `jax_plugins` entry point and calls
    # initialize() (jax._src.xla_bridge.discover_pjrt_plugins).
    entry_points={"jax_plugins": ["__NAME__ = jax_plugins.__NAME__"]},
)
