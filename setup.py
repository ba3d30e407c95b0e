"""Builds the workshop PJRT plugin: plugin_src/**/*.cc -> jax_plugins/workshop/_plugin*.so.

The shared library exports ``GetPjrtApi`` (the PJRT C API entry point) and is loaded by
jaxlib with dlopen, not imported by Python. Build in place, e.g. from a notebook, with
``python setup.py build_ext --inplace``.
"""

import glob
import hashlib
import os
import site
import sys
import sysconfig

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_namespace_packages, setup

VERSION = "0.1.0"
# The jax/jaxlib releases this plugin supports; jax_plugins/workshop/__init__.py checks the
# installed jaxlib against the same range at initialize() (keep the two in step).
JAX_REQUIREMENT = ">=0.10.2,<0.11"

ROOT = os.path.dirname(os.path.abspath(__file__))


def _load_build_support():
  """jax_plugins/workshop/build_support.py, loaded by path: it imports nothing from the
  package (which is not built yet). The projects `python -m jax_plugins.workshop.new_device`
  writes build with a copy of it, so both find pjrt_c_api.h and rebuild the same way."""
  import importlib.util

  spec = importlib.util.spec_from_file_location(
    "workshop_build_support", os.path.join(ROOT, "jax_plugins", "workshop", "build_support.py")
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


build_support = _load_build_support()
needs_recompile = build_support.needs_recompile_under(ROOT)


# Compile the .cc files in parallel (one job per core; WORKSHOP_BUILD_JOBS overrides), and
# only those whose source or headers changed since their object was built.
ParallelCompile("WORKSHOP_BUILD_JOBS", needs_recompile=needs_recompile).install()


class IncrementalBuildExt(build_ext):
  """build_ext whose objects persist in build/ between builds, one folder per flag set.

  setuptools would compile into a temporary folder under pip, and always into the same
  one by hand, so a changed flag (a sanitizer, another jaxlib's StableHLO version) could
  link stale objects. Naming the folder after the flags makes a rebuild after editing one
  .cc file compile that file only.
  """

  def copy_file(self, src, dst, *args, **kwargs):
    # A process that has the plugin loaded (a notebook's kernel, a test run) keeps the old
    # file's pages mapped: replace the file (a new inode) instead of rewriting it in place.
    if os.path.abspath(dst).endswith(".so") and os.path.exists(dst):
      os.unlink(dst)
    return super().copy_file(src, dst, *args, **kwargs)

  def finalize_options(self):
    explicit = self.build_temp is not None  # --build-temp given: the caller's choice
    super().finalize_options()
    if explicit:
      return
    flags = repr(
      [(ext.define_macros, ext.extra_compile_args, ext.extra_link_args) for ext in self.extensions]
    ).encode()
    self.build_temp = os.path.join(ROOT, "build", "objects-" + hashlib.sha1(flags).hexdigest()[:12])


# Several processes (jax.distributed): the mpich wheel's libmpi.so.12, which the plugin
# dlopens only for a client with num_nodes > 1 (docs/multiprocess.md, "Multi-process"); MPICH 4.x
# keeps the libmpi.so.12 ABI runtime/distributed.cc declares.
DISTRIBUTED_EXTRAS = ["mpich>=4.3,<5"]

# What a workshop user needs beyond the runtime: rebuilding the plugin from notebook 01
# (the build requirements of pyproject.toml), JupyterLab, the tests, the notebooks' plots
# and progress bars, and jupytext (notebooks are paired with text sources, jupytext.toml).
WORKSHOP_EXTRAS = [
  "setuptools>=68",
  "wheel",
  "pybind11>=2.12",
  "xla-cpu-pjrt",
  "mkl-include>=2025,<2027",
  "jupyterlab",
  "ipykernel",
  "pytest",
  "nbval",
  "hypothesis",
  "playwright",  # tests/notebooks/test_jupyterlab_browser.py, with the system's Chromium (no download)
  "matplotlib",
  "tqdm",
  "jupytext",
  "flatbuffers",  # jax.export's serialize/deserialize (tests/sharding/test_partition.py's round trips)
  *DISTRIBUTED_EXTRAS,  # notebook 07 and tests/runtime/test_multiprocess.py
]


# The benchmark's `models` family (jax_plugins/workshop/bench/model_cases.py): flax (NNX and
# linen), optax, equinox, and transformers 4.x for its Flax GPT-2 (5.x drops the Flax
# models). Checked with jax/jaxlib 0.10.2: flax 0.12.8, optax 0.2.8, equinox 0.13.8,
# transformers 4.57.6 install beside it without changing jax.
MODELS_EXTRAS = ["flax>=0.12", "optax>=0.2.5", "equinox>=0.13", "transformers>=4,<5"]


# The include directory of the xla-cpu-pjrt wheel, which ships pjrt_c_api.h.
pjrt_header_dir = build_support.pjrt_header_dir


def ffi_header_dir():
  """jaxlib's include directory (jax.ffi.include_dir()): the XLA FFI C API, xla/ffi/api/c_api.h."""
  import jaxlib

  return os.path.join(os.path.dirname(jaxlib.__file__), "include")


# Intel oneMKL, whose DFTI runs the fft kernel (kernels/fft.cc). The plugin does not link it:
# it dlopens the libmkl_rt of the `mkl` wheel found at compile time (compiler/rules/fft.py)
# in the environment it runs in, so the build needs only mkl-include's mkl_dfti.h.
MKL_REQUIREMENT = ">=2025,<2027"


def mkl_include_dir():
  """The directory of mkl_dfti.h from the mkl-include wheel (installed under the
  environment's include/, not in a package, so found through the wheel's file list).

  Under pip's isolated build this is the temporary build environment's copy: only a
  header, nothing of it is recorded in the plugin.
  """
  from importlib import metadata

  try:
    files = metadata.distribution("mkl-include").files or []
  except metadata.PackageNotFoundError:
    files = []
  for file in files:
    if file.name == "mkl_dfti.h":
      path = os.path.realpath(file.locate())
      if os.path.exists(path):
        return os.path.dirname(path)
  fallback = os.path.join(sys.prefix, "include")
  if os.path.exists(os.path.join(fallback, "mkl_dfti.h")):
    return fallback
  raise RuntimeError(
    f"mkl_dfti.h not found: pip install 'mkl-include{MKL_REQUIREMENT}' "
    "(a build requirement in pyproject.toml)"
  )


# (current, minimum) StableHLO versions of the installed jaxlib, as "1,17,0" strings.
stablehlo_versions = build_support.stablehlo_versions


def openblas_runpath():
  """RUNPATH entries that find libscipy_openblas.so from wherever the plugin ends up.

  The plugin is linked against scipy-openblas32's library. Under pip's default (isolated)
  build, the scipy-openblas32 seen here lives in a temporary build environment that pip
  deletes afterwards, so its directory must never be recorded. The entries are relative to
  the plugin itself (`$ORIGIN`):
    * a wheel or regular install puts the plugin in site-packages/jax_plugins/workshop/,
      two levels below site-packages/scipy_openblas32/lib;
    * an editable or in-place build leaves it in the repository, so also the path from
      there into the site-packages of the environment being installed into (the
      interpreter running this build: pip builds with the target environment's Python)
      and the user site.
  """
  plugin_dir = os.path.abspath(os.path.join("jax_plugins", "workshop"))
  entries = ["$ORIGIN/../../scipy_openblas32/lib"]
  site_dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
  if site.ENABLE_USER_SITE:
    site_dirs.append(site.getusersitepackages())
  for directory in site_dirs:
    relative = os.path.relpath(os.path.join(directory, "scipy_openblas32", "lib"), plugin_dir)
    entry = "$ORIGIN/" + relative
    if entry not in entries:
      entries.append(entry)
  return entries


def sanitizer_flags():
  """-fsanitize flags from WORKSHOP_SANITIZE ("address", "thread", "undefined", comma-separated).

  A sanitized plugin runs inside an uninstrumented Python: preload the runtime, e.g.
  LD_PRELOAD=$(g++ -print-file-name=libtsan.so) python -m pytest ... (see docs/hostile_input.md).
  """
  kinds = [k for k in os.environ.get("WORKSHOP_SANITIZE", "").split(",") if k]
  # -O1, as the sanitizers' documentation recommends: readable reports, and an
  # instrumented build in half the time of -O3 (it comes after -O3, so it wins).
  extra = ["-O1", "-fno-omit-frame-pointer", "-g"] if kinds else []
  # No SIMD clones (kernels/math/simd.h) under ThreadSanitizer or AddressSanitizer: their ifunc
  # resolvers run while the dynamic loader relocates the plugin, before the
  # instrumentation calls they make can be bound (ThreadSanitizer: SEGV at load).
  if {"thread", "address"} & set(kinds):
    extra.append("-DWORKSHOP_NO_SIMD_CLONES")
  return [f"-fsanitize={k}" for k in kinds] + extra


OPTABLE = "jax_plugins/workshop/compiler/optable.py"


def generate_op_table():
  """plugin_src/generated/{op_table,functor_dtypes}.h from the op table, the one source
  of both languages.

  optable.py imports nothing from the package, so it loads without jaxlib.
  """
  import importlib.util

  spec = importlib.util.spec_from_file_location("workshop_optable", OPTABLE)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there
  spec.loader.exec_module(module)
  os.makedirs("plugin_src/generated", exist_ok=True)
  # Written only when they change: their timestamps decide what recompiles.
  for name, text in [
    ("op_table.h", module.cpp_header()),
    ("functor_dtypes.h", module.cpp_functor_header()),
  ]:
    path = f"plugin_src/generated/{name}"
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
    # Headers and the op table they are generated from: setuptools skips the whole
    # build unless a source or one of these is newer than the library.
    depends=[OPTABLE, *glob.glob("plugin_src/**/*.h", recursive=True)],
    include_dirs=[
      "plugin_src",
      pjrt_header_dir(),
      scipy_openblas32.get_include_dir(),
      ffi_header_dir(),
      mkl_include_dir(),
    ],
    library_dirs=[scipy_openblas32.get_lib_dir()],
    # libmvec: glibc's vector math (kernels/math/vector_math.cc).
    libraries=[scipy_openblas32.get_library(), "mvec"],
    # Anything that dlopens the plugin (jaxlib, ctypes, the C++ conformance harness)
    # finds OpenBLAS through these; jax_plugins.workshop also preloads it.
    runtime_library_dirs=openblas_runpath(),
    define_macros=[
      ("WORKSHOP_VERSION", f'"{VERSION}"'),
      ("WORKSHOP_STABLEHLO_CURRENT_VERSION", current),
      ("WORKSHOP_STABLEHLO_MINIMUM_VERSION", minimum),
    ],
    cxx_std=20,
    # -mno-mmx: GCC 12's vectorizer can put 64-bit integer vectors in MMX registers
    # (seen in reduce's 16-bit and/or folds) without an EMMS, leaving the x87 unit in
    # MMX state so later long-double math (FFT twiddles, libm) returns NaN.
    # -MMD: each object's depfile lists the headers it included (needs_recompile).
    extra_compile_args=["-O3", "-Wall", "-Wextra", "-fno-math-errno", "-mno-mmx", "-MMD"]
    + sanitize,
    # -z origin: $ORIGIN in the RUNPATH is expanded at load time.
    extra_link_args=sanitize + ["-Wl,-z,origin"],
  )


setup(
  name="pjrt-workshop",
  version=VERSION,
  description="A PJRT plugin for JAX built step by step in Jupyter notebooks",
  # jax_plugins/ is a namespace package (no __init__.py): find_namespace_packages finds
  # jax_plugins.workshop and every subpackage (compiler, compiler.rules, bench).
  packages=find_namespace_packages(
    include=["jax_plugins.*"], exclude=["jax_plugins.workshop.new_device.template*"]
  ),
  # The new-device generator's template (python -m jax_plugins.workshop.new_device):
  # sources it copies, not modules of this package.
  package_data={"jax_plugins.workshop.new_device": ["template/**/*"]},
  exclude_package_data={"jax_plugins.workshop.new_device": ["template/**/__pycache__/*"]},
  ext_modules=[plugin_extension()],
  cmdclass={"build_ext": IncrementalBuildExt},
  python_requires=">=3.11",
  install_requires=[
    f"jax{JAX_REQUIREMENT}",
    f"jaxlib{JAX_REQUIREMENT}",
    "numpy",
    "ml_dtypes",
    "scipy-openblas32",
    "llvmlite",  # the code-generation tier (compiler/codegen); optional at run time
    f"mkl{MKL_REQUIREMENT}",  # DFTI for fft (dlopened, kernels/fft.cc)
  ],
  extras_require={
    # Everything the notebooks, the tests and a rebuild from a notebook cell need:
    # the README installs this one. (`test` is the same set, kept for older commands.)
    "workshop": WORKSHOP_EXTRAS,
    "test": WORKSHOP_EXTRAS,
    "distributed": DISTRIBUTED_EXTRAS,
    "models": MODELS_EXTRAS,
  },
  entry_points={"jax_plugins": ["workshop = jax_plugins.workshop"]},
)
