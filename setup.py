"""Builds the workshop PJRT plugin: plugin_src/**/*.cc -> jax_plugins/workshop/_plugin*.so.

The shared library exports ``GetPjrtApi`` (the PJRT C API entry point) and is loaded by
jaxlib with dlopen, not imported by Python. Build in place, e.g. from a notebook, with
``python setup.py build_ext --inplace``.
"""

import glob
import os
import sys

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

VERSION = "0.1.0"

# Compile the .cc files in parallel (one job per core; WORKSHOP_BUILD_JOBS overrides).
ParallelCompile("WORKSHOP_BUILD_JOBS").install()


def pjrt_header_dir():
    """The include directory of the xla-cpu-pjrt wheel, which ships pjrt_c_api.h."""
    import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

    return os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "include")


def stablehlo_versions():
    """(current, minimum) StableHLO versions of the installed jaxlib, as "1,17,0" strings."""
    from jaxlib.mlir.dialects import stablehlo

    def as_macro(version):
        return ",".join(version.split("."))

    return as_macro(stablehlo.get_current_version()), as_macro(stablehlo.get_minimum_version())


def sanitizer_flags():
    """-fsanitize flags from WORKSHOP_SANITIZE ("address", "thread", "undefined", comma-separated).

    A sanitized plugin runs inside an uninstrumented Python: preload the runtime, e.g.
    LD_PRELOAD=$(g++ -print-file-name=libtsan.so) python -m pytest ... (see docs/design.md).
    """
    kinds = [k for k in os.environ.get("WORKSHOP_SANITIZE", "").split(",") if k]
    extra = ["-fno-omit-frame-pointer", "-g"] if kinds else []
    # No SIMD clones (kernels/simd.h) under ThreadSanitizer or AddressSanitizer: their ifunc
    # resolvers run while the dynamic loader relocates the plugin, before the
    # instrumentation calls they make can be bound (ThreadSanitizer: SEGV at load).
    if {"thread", "address"} & set(kinds):
        extra.append("-DWORKSHOP_NO_SIMD_CLONES")
    return [f"-fsanitize={k}" for k in kinds] + extra


OPTABLE = "jax_plugins/workshop/compiler/optable.py"


def generate_op_table():
    """plugin_src/generated/op_table.h from the op table, the one source of both languages.

    optable.py imports nothing from the package, so it loads without jaxlib.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("workshop_optable", OPTABLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    os.makedirs("plugin_src/generated", exist_ok=True)
    path = "plugin_src/generated/op_table.h"
    text = module.cpp_header()
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


def plugin_extension():
    import scipy_openblas32

    generate_op_table()

    current, minimum = stablehlo_versions()
    sanitize = sanitizer_flags()
    return Pybind11Extension(
        "jax_plugins.workshop._plugin",
        sorted(glob.glob("plugin_src/**/*.cc", recursive=True)),
        # A changed table rebuilds the plugin.
        depends=[OPTABLE, *glob.glob("plugin_src/**/*.h", recursive=True)],
        include_dirs=["plugin_src", pjrt_header_dir(), scipy_openblas32.get_include_dir()],
        library_dirs=[scipy_openblas32.get_lib_dir()],
        # libmvec: glibc's vector math (kernels/vector_math.cc).
        libraries=[scipy_openblas32.get_library(), "mvec"],
        # jax_plugins.workshop preloads OpenBLAS from the installed scipy-openblas32 before
        # jaxlib dlopens the plugin; the rpath covers in-place builds used directly.
        runtime_library_dirs=[scipy_openblas32.get_lib_dir()],
        define_macros=[
            ("WORKSHOP_VERSION", f'"{VERSION}"'),
            ("WORKSHOP_STABLEHLO_CURRENT_VERSION", current),
            ("WORKSHOP_STABLEHLO_MINIMUM_VERSION", minimum),
        ],
        cxx_std=20,
        # -mno-mmx: GCC 12's vectorizer can put 64-bit integer vectors in MMX registers
        # (seen in reduce's 16-bit and/or folds) without an EMMS, leaving the x87 unit in
        # MMX state so later long-double math (FFT twiddles, libm) returns NaN.
        extra_compile_args=["-O3", "-Wall", "-Wextra", "-fno-math-errno", "-mno-mmx"] + sanitize,
        extra_link_args=sanitize,
    )


setup(
    name="pjrt-workshop",
    version=VERSION,
    description="A PJRT plugin for JAX built step by step in Jupyter notebooks",
    packages=["jax_plugins.workshop", "jax_plugins.workshop.compiler"],
    ext_modules=[plugin_extension()],
    cmdclass={"build_ext": build_ext},
    python_requires=">=3.11",
    install_requires=[
        "jax==0.10.2",
        "jaxlib==0.10.2",
        "numpy",
        "ml_dtypes",
        "scipy-openblas32",
    ],
    extras_require={
        "test": ["pytest", "nbval", "hypothesis", "xla-cpu-pjrt", "ipykernel", "matplotlib", "tqdm"],
    },
    entry_points={"jax_plugins": ["workshop = jax_plugins.workshop"]},
)
