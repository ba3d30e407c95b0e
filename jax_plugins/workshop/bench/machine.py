"""What machine and software a benchmark ran on, and its measured roofline references.

`describe()` collects the facts a reader needs to compare two result files: CPU model and
core count, load average, library versions, which OpenBLAS kernels were selected at run
time, and the environment variables that change them. `measure_references()` times the
two roofline ceilings on this machine: memory bandwidth (numpy copying into a preallocated
array) and peak float32 GEMM throughput (the best of the plugin's OpenBLAS, numpy's
OpenBLAS and JAX's CPU backend on a large matmul).
"""

from __future__ import annotations

import ctypes
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import jax
import numpy as np

# Environment variables that change the BLAS or XLA code paths, recorded with the results.
_RELEVANT_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                 "OMP_NUM_THREADS", "XLA_FLAGS", "JAX_PLATFORMS",
                 "JAX_PJRT_CLIENT_CREATE_OPTIONS")


def _cpu_model() -> str:
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
  try:
    return importlib.metadata.version(dist)
  except importlib.metadata.PackageNotFoundError:
    return None


def _openblas_info(lib: ctypes.CDLL, suffix: str) -> dict:
  """Config string, the kernel set chosen at run time (corename) and the thread count."""
  info = {}
  for key, sym, restype in [("config", "scipy_openblas_get_config", ctypes.c_char_p),
                            ("corename", "scipy_openblas_get_corename", ctypes.c_char_p),
                            ("threads", "scipy_openblas_get_num_threads", ctypes.c_int)]:
    fn = getattr(lib, sym + suffix, None)
    if fn is not None:
      fn.restype = restype
      value = fn()
      info[key] = value.decode() if isinstance(value, bytes) else value
  return info


def _loaded_openblas() -> dict:
  """The OpenBLAS builds loaded in this process: the plugin's and numpy's own.

  The plugin links scipy-openblas32 (symbols scipy_*); numpy wheels bundle a 64-bit-index
  build with the suffix 64_. They are separate libraries with separate thread pools.
  """
  found = {}
  try:
    import scipy_openblas32

    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
    found["plugin (scipy-openblas32)"] = _openblas_info(lib, "")
  except (ImportError, OSError):
    pass
  try:
    paths = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
             if "openblas64" in line and line.split()[-1].startswith("/")}
    for path in sorted(paths):
      found[f"numpy ({Path(path).name})"] = _openblas_info(ctypes.CDLL(path), "64_")
  except OSError:
    pass
  return found


def _git_commit() -> str | None:
  try:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=Path(__file__).parent, timeout=5)
    return out.stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    return None


def describe(unset_env: dict[str, str] | None = None) -> dict:
  """Facts about this machine and process that bear on the timings (JSON-serializable)."""
  import jaxlib

  from .. import library_path

  return {
      "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
      "cpu_model": _cpu_model(),
      "cpu_count": os.cpu_count(),
      "cpus_usable": len(os.sched_getaffinity(0)),
      "loadavg_at_start": os.getloadavg(),
      "platform": platform.platform(),
      "python": platform.python_version(),
      "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                   "numpy": np.__version__, "scipy-openblas32": _version("scipy-openblas32"),
                   "xla-cpu-pjrt": _version("xla-cpu-pjrt")},
      "openblas": _loaded_openblas(),
      "env": {k: os.environ[k] for k in _RELEVANT_ENV if k in os.environ},
      "env_unset_for_benchmark": unset_env or {},
      "plugin": library_path(),
      "git_commit": _git_commit(),
      "backends": {p: str(jax.devices(p)[0]) for p in ("workshop", "cpu")},
  }


def _plugin_sgemm(a: np.ndarray, out: np.ndarray):
  """out = a @ a through the plugin's OpenBLAS (scipy_cblas_sgemm, as kernels/dot.cc
  calls it), or None if that library cannot be loaded."""
  try:
    import scipy_openblas32

    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
  except (ImportError, OSError):
    return None
  ptr = ctypes.POINTER(ctypes.c_float)
  sgemm = lib.scipy_cblas_sgemm
  sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ptr, ctypes.c_int, ptr, ctypes.c_int,
                                         ctypes.c_float, ptr, ctypes.c_int]
  sgemm.restype = None
  n = a.shape[0]
  row_major, no_trans = 101, 111  # CBLAS enum values
  pa, pc = a.ctypes.data_as(ptr), out.ctypes.data_as(ptr)
  return lambda: sgemm(row_major, no_trans, no_trans, n, n, n, 1.0, pa, n, pa, n, 0.0, pc, n)


def _median_time(fn, reps: int) -> float:
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def measure_references(quick: bool = False) -> dict:
  """Roofline ceilings measured on this machine (medians; noisy if the machine is loaded).

  copy_gbps: numpy copying 64 MB into a preallocated array, bytes read + written per
    second (the same convention as the cases' byte models).
  fresh_copy_ms / prealloc_copy_ms: the same copy into a new array (first-touch page
    faults included) and into a reused one.
  plugin_gemm_gflops / numpy_gemm_gflops / cpu_gemm_gflops: float32 n x n matmul through
    the plugin's OpenBLAS (scipy-openblas32, called directly), numpy's own OpenBLAS and
    JAX's CPU backend; peak_gflops is the best of them.
  """
  reps = 5 if quick else 15
  x = np.random.default_rng(0).standard_normal(16 * 2**20, dtype=np.float32)
  dst = np.empty_like(x)
  prealloc = _median_time(lambda: np.copyto(dst, x), reps)
  fresh = _median_time(lambda: x.copy(), reps)
  n = 1024 if quick else 2048
  a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
  gemm_reps = max(3, reps // 3)
  times = {"numpy": _median_time(lambda: a @ a, gemm_reps)}
  plugin_sgemm = _plugin_sgemm(a, np.empty_like(a))
  if plugin_sgemm is not None:
    times["plugin"] = _median_time(plugin_sgemm, gemm_reps)
  a_cpu = jax.device_put(a, jax.devices("cpu")[0])
  mm = jax.jit(lambda a: a @ a).lower(a_cpu).compile()
  times["cpu"] = _median_time(lambda: mm(a_cpu).block_until_ready(), gemm_reps)
  flops = 2 * n**3
  return {
      "copy_gbps": 2 * x.nbytes / prealloc / 1e9,
      "prealloc_copy_ms": prealloc * 1e3,
      "fresh_copy_ms": fresh * 1e3,
      "gemm_size": n,
      **{f"{k}_gemm_gflops": flops / t / 1e9 for k, t in times.items()},
      "peak_gflops": flops / min(times.values()) / 1e9,
  }
