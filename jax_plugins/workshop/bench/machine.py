"""What machine and software a benchmark ran on, and its measured roofline references.

`describe()` collects the facts a reader needs to compare two result files: CPU model and
core count, load average, library versions, which OpenBLAS kernels were selected at run
time, and the environment variables that change them. `measure_references()` times the
roofline's ceilings on this machine: two memory bandwidths (numpy copying on every usable
core at once, out of DRAM and within each core's L2 cache) and peak float32 GEMM
throughput (the best of the plugin's OpenBLAS, numpy's OpenBLAS and JAX's CPU backend on a
large matmul). `best_references()` keeps the higher ceilings of two such measurements.
"""

from __future__ import annotations

import ctypes
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import threading
import time
from pathlib import Path

import jax
import numpy as np

# Environment variables that change the BLAS or XLA code paths, recorded with the results.
_RELEVANT_ENV = (
  "OPENBLAS_CORETYPE",
  "OPENBLAS_L2_SIZE",
  "OPENBLAS_NUM_THREADS",
  "OMP_NUM_THREADS",
  "XLA_FLAGS",
  "JAX_PLATFORMS",
  "JAX_PJRT_CLIENT_CREATE_OPTIONS",
  "WORKSHOP_NUM_DEVICES",
  "WORKSHOP_CODEGEN",
)


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
  for key, sym, restype in [
    ("config", "scipy_openblas_get_config", ctypes.c_char_p),
    ("corename", "scipy_openblas_get_corename", ctypes.c_char_p),
    ("threads", "scipy_openblas_get_num_threads", ctypes.c_int),
  ]:
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
    paths = {
      line.split()[-1]
      for line in Path("/proc/self/maps").read_text().splitlines()
      if "openblas64" in line and line.split()[-1].startswith("/")
    }
    for path in sorted(paths):
      found[f"numpy ({Path(path).name})"] = _openblas_info(ctypes.CDLL(path), "64_")
  except OSError:
    pass
  return found


def _git_commit() -> str | None:
  try:
    out = subprocess.run(
      ["git", "rev-parse", "--short", "HEAD"],
      capture_output=True,
      text=True,
      cwd=Path(__file__).parent,
      timeout=5,
    )
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
    "versions": {
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "numpy": np.__version__,
      "scipy-openblas32": _version("scipy-openblas32"),
      "xla-cpu-pjrt": _version("xla-cpu-pjrt"),
    },
    "openblas": _loaded_openblas(),
    "env": {k: os.environ[k] for k in _RELEVANT_ENV if k in os.environ},
    "env_unset_for_benchmark": unset_env or {},
    "plugin": library_path(),
    "git_commit": _git_commit(),
    "backends": {p: str(jax.devices(p)[0]) for p in ("workshop", "cpu")},
  }


def _plugin_sgemm(a: np.ndarray, out: np.ndarray):
  """out = a @ a through the plugin's OpenBLAS (scipy_cblas_sgemm, as kernels/dot/dot.cc
  calls it), or None if that library cannot be loaded."""
  try:
    import scipy_openblas32

    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
  except (ImportError, OSError):
    return None
  ptr = ctypes.POINTER(ctypes.c_float)
  sgemm = lib.scipy_cblas_sgemm
  sgemm.argtypes = [ctypes.c_int] * 6 + [
    ctypes.c_float,
    ptr,
    ctypes.c_int,
    ptr,
    ctypes.c_int,
    ctypes.c_float,
    ptr,
    ctypes.c_int,
  ]
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


def _best_time(fn, reps: int) -> float:
  """The fastest of `reps` calls after one warm-up call: a ceiling's estimate, which load
  from other processes can only lower."""
  fn()
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def l2_cache_bytes(default: int = 512 * 2**10) -> int:
  """The size of one core's level-2 data (or unified) cache, from Linux's sysfs."""
  for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
    try:
      if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() in (
        "Data",
        "Unified",
      ):
        size = (index / "size").read_text().strip()
        scale = {"K": 2**10, "M": 2**20}.get(size[-1], 1)
        return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
      continue
  return default


def _parallel_copy(pairs: list[tuple[np.ndarray, np.ndarray]], times: int):
  """A function that copies each (src, dst) pair of equal-sized arrays `times` times with
  libc's memmove, one thread per pair, all started together; it returns when every thread
  is done. ctypes releases the GIL for the call, so the threads copy in parallel."""

  def work(src, dst, barrier):
    source, target, size = src.ctypes.data, dst.ctypes.data, src.nbytes
    barrier.wait()
    for _ in range(times):
      ctypes.memmove(target, source, size)

  def run():
    barrier = threading.Barrier(len(pairs))
    threads = [threading.Thread(target=work, args=(*pair, barrier)) for pair in pairs]
    for t in threads:
      t.start()
    for t in threads:
      t.join()

  return run


def measure_references(quick: bool = False) -> dict:
  """Roofline ceilings measured on this machine (noisy if the machine is loaded).

  copy_gbps: the DRAM ceiling: copying 64 MB into a preallocated array (memmove), the
    better of one thread alone and one slice per usable core, every core at once (which
    another process's load on one core slows down); bytes read + written per second (the
    same convention as the cases' byte models), fastest repetition.
  cache_copy_gbps: the cache ceiling: the usable core count times what one core reaches
    copying an array of a quarter of its L2 cache (`cache_copy_bytes`; source and
    destination stay in L2) again and again (memmove), fastest repetition. Each core has
    an L2 of its own, so the cores' rates add up; timing them at once would measure
    instead whichever core another process happens to be using.
  fresh_copy_ms / prealloc_copy_ms: one thread copying the 64 MB into a new array
    (first-touch page faults included) and into a reused one (medians).
  plugin_gemm_gflops / numpy_gemm_gflops / cpu_gemm_gflops: float32 n x n matmul through
    the plugin's OpenBLAS (scipy-openblas32, called directly), numpy's own OpenBLAS and
    JAX's CPU backend, each its fastest repetition at n = 512 or 1024; peak_gflops is
    the best of them, gemm_size its n.
  """
  reps = 5 if quick else 15
  cores = len(os.sched_getaffinity(0))
  x = np.random.default_rng(0).standard_normal(16 * 2**20, dtype=np.float32)
  dst = np.empty_like(x)
  prealloc = _median_time(lambda: np.copyto(dst, x), reps)
  fresh = _median_time(lambda: x.copy(), reps)
  dram = min(
    _best_time(_parallel_copy([(x, dst)], 1), reps),
    _best_time(
      _parallel_copy(list(zip(np.array_split(x, cores), np.array_split(dst, cores))), 1), reps
    ),
  )
  cache_bytes = l2_cache_bytes() // 4
  pair = (np.ones(cache_bytes // 4, np.float32), np.empty(cache_bytes // 4, np.float32))
  copies = max(1, (32 * 2**20) // cache_bytes)  # 32 MB per repetition
  cache = _best_time(_parallel_copy([pair], copies), 3 * reps)
  # Two sizes, each the best of several calls: 1024^3 reaches OpenBLAS's peak on a quiet
  # machine, 512^3 (about 2 ms) fits between the preemptions of a loaded one.
  rates: dict[str, tuple[float, int]] = {}  # library -> (best GFLOP/s, at size n)
  for n, gemm_reps in ((512, 20), (1024, 8)):
    a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a_cpu = jax.device_put(a, jax.devices("cpu")[0])
    mm = jax.jit(lambda a: a @ a).lower(a_cpu).compile()
    calls = {
      "numpy": lambda: a @ a,
      "plugin": _plugin_sgemm(a, np.empty_like(a)),
      "cpu": lambda: mm(a_cpu).block_until_ready(),
    }
    for name, call in calls.items():
      if call is not None:
        rate = 2 * n**3 / _best_time(call, gemm_reps) / 1e9
        if rate > rates.get(name, (0.0, 0))[0]:
          rates[name] = (rate, n)
  best = max(rates.values())
  return {
    "copy_gbps": 2 * x.nbytes / dram / 1e9,
    "cache_copy_gbps": cores * 2 * cache_bytes * copies / cache / 1e9,
    "cache_copy_bytes": cache_bytes,
    "copy_threads": cores,
    "prealloc_copy_ms": prealloc * 1e3,
    "fresh_copy_ms": fresh * 1e3,
    "gemm_size": best[1],
    **{f"{k}_gemm_gflops": rate for k, (rate, _) in rates.items()},
    "peak_gflops": best[0],
  }


# The ceilings among measure_references()'s values: higher is the better estimate.
_CEILINGS = (
  "copy_gbps",
  "cache_copy_gbps",
  "plugin_gemm_gflops",
  "numpy_gemm_gflops",
  "cpu_gemm_gflops",
  "peak_gflops",
)


def best_references(*measured: dict) -> dict:
  """The higher of each ceiling over several measure_references() results (the first's
  other values): load from other processes lowers a ceiling's estimate, never raises it,
  so measurements before and after a suite bracket the quiet moments better than one."""
  best = dict(measured[0])
  for refs in measured[1:]:
    if refs.get("peak_gflops", 0.0) > best.get("peak_gflops", 0.0):
      best["gemm_size"] = refs["gemm_size"]
    for key in _CEILINGS:
      if key in refs:
        best[key] = max(best.get(key, 0.0), refs[key])
  best["measurements"] = len(measured)
  return best
