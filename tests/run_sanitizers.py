"""The plugin under AddressSanitizer + UndefinedBehaviorSanitizer, on the paths a caller can
make hostile (CI runs this after the README's tests; `python tests/run_sanitizers.py`).

1. Builds an instrumented copy of the plugin (WORKSHOP_SANITIZE=address,undefined, -O1)
   into a scratch directory; the plugin in the tree is not touched.
2. The C API conformance harness, itself instrumented, drives it with no Python in front
   (every case, twice).
3. The hostile suite (tests/hostile: the misuse corpus, overflowing shapes, fuzzed
   serialized executables, memory limits) and the extensions JAX reaches only through this
   plugin (FFI handlers, the profiler, host callbacks, the LAPACK kernels behind eigh, svd,
   lu... with NaN, Inf and empty inputs) and the generated loops that call kernels on
   buffers the compiler placed (tests/ops/test_codegen_memory_loops.py), fusions over
   slices and concatenates, and in-place updates beside shared constants run in a Python
   that preloads the
   sanitizer runtimes; WORKSHOP_PLUGIN_LIBRARY points jax_plugins.workshop at the
   instrumented copy. libstdc++ is preloaded too so that ASan's interceptors see jaxlib's
   C++ allocations.

Any sanitizer report fails the run: UBSan halts on its first error (halt_on_error=1) and
ASan on every error; leaks are not checked (CPython and jaxlib keep allocations until
exit on purpose). Exit status 0 when everything passed.

Usage: python tests/run_sanitizers.py [--workdir DIR] [--keep]
Time: the build is about 16 CPU-minutes (8 min on 2 idle cores); the runs under a minute.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KINDS = "address,undefined"
# Python-level suites run against the instrumented plugin.
PYTEST_SUITES = [
  "tests/hostile",
  "tests/ops/test_ffi.py",
  "tests/runtime/test_profiler.py",
  "tests/ops/test_callback.py",
  "tests/ops/test_lapack.py",
  # Generated loops calling kernels on buffers the compiler placed (scratch, in place).
  "tests/ops/test_codegen_memory_loops.py",
  # Fusions reading slices and concatenates of whole operands (strided walks, runs per
  # operand), and constants shared by every call of an executable.
  "tests/ops/test_fusion.py::test_slices_in_every_position_match_cpu",
  "tests/ops/test_fusion.py::test_concatenates_in_a_fusion_match_cpu",
  "tests/ops/test_fusion.py::test_associative_scan_matches_cpu_and_float64",
  "tests/ops/test_fusion.py::test_slice_outside_its_operand_fails_the_compile",
  "tests/runtime/test_inplace.py",
]
REPORT_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehavior")


def runtime_preload() -> str:
  libs = []
  for name in ("libasan.so", "libubsan.so", "libstdc++.so.6"):
    path = subprocess.run(
      ["g++", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path):
      raise FileNotFoundError(f"g++ does not ship {name}: install the sanitizer runtimes")
    libs.append(path)
  return " ".join(libs)


def openblas_library_path() -> str:
  """LD_LIBRARY_PATH for an instrumented copy of the plugin: it lives outside site-packages,
  where its $ORIGIN-relative RUNPATH to OpenBLAS (setup.py) does not reach."""
  import scipy_openblas32

  return os.pathsep.join(
    [scipy_openblas32.get_lib_dir()] + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]
  )


def sanitizer_env() -> dict[str, str]:
  library_path = openblas_library_path()
  return {
    "ASAN_OPTIONS": "detect_leaks=0:detect_odr_violation=0:abort_on_error=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "LD_LIBRARY_PATH": library_path,
  }


def step(title: str):
  print(f"\n=== {title} ({time.strftime('%H:%M:%S')})", flush=True)


def build_plugin(workdir: str) -> str:
  step(f"build the plugin with -fsanitize={KINDS}")
  start = time.time()
  proc = subprocess.run(
    [
      sys.executable,
      "setup.py",
      "build_ext",
      "--build-lib",
      os.path.join(workdir, "lib"),
      "--build-temp",
      os.path.join(workdir, "tmp"),
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    env=dict(os.environ, WORKSHOP_SANITIZE=KINDS),
  )
  if proc.returncode != 0:
    print(proc.stdout[-3000:], proc.stderr[-5000:], sep="\n")
    raise SystemExit("the instrumented build failed")
  for root, _, files in os.walk(os.path.join(workdir, "lib")):
    for name in files:
      if name.startswith("_plugin") and name.endswith(".so"):
        print(f"built in {time.time() - start:.0f} s", flush=True)
        return os.path.join(root, name)
  raise SystemExit("the build produced no _plugin*.so")


def run_conformance(workdir: str, plugin: str) -> bool:
  sys.path.insert(0, REPO)
  from jax_plugins.workshop.teach.conformance import build_harness, case_names, write_inputs

  step("conformance harness (instrumented) on the instrumented plugin, every case twice")
  harness = build_harness(os.path.join(workdir, "harness"), sanitize=KINDS)
  inputs = write_inputs(os.path.join(workdir, "inputs"))
  cmd = [
    harness,
    plugin,
    "--inputs",
    inputs,
    "--platform",
    "workshop",
    "--python",
    REPO,
    "--repeat",
    "2",
  ]
  env = dict(os.environ, **sanitizer_env(), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
  passed = sum(line.startswith("PASS ") for line in proc.stdout.splitlines())
  failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
  reports = [line for line in proc.stderr.splitlines() if line.startswith(REPORT_MARKERS)]
  print(
    f"{passed} case runs passed, {len(failed)} failed, {len(reports)} sanitizer reports "
    f"({len(case_names())} cases)"
  )
  ok = proc.returncode == 0 and not failed and not reports and passed > 0
  if not ok:
    print("\n".join(failed[:20]), proc.stderr[-8000:], sep="\n")
  return ok


def run_pytest(plugin: str) -> bool:
  step(f"pytest {' '.join(PYTEST_SUITES)} on the instrumented plugin")
  env = dict(
    os.environ,
    **sanitizer_env(),
    LD_PRELOAD=runtime_preload(),
    WORKSHOP_PLUGIN_LIBRARY=plugin,
    WORKSHOP_HOSTILE_PLUGIN=plugin,
    PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
  )
  proc = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PYTEST_SUITES],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=2400,
  )
  reports = [
    line
    for line in (proc.stdout + proc.stderr).splitlines()
    if any(marker in line for marker in REPORT_MARKERS)
  ]
  tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
  print(tail[0], f"; {len(reports)} sanitizer reports", flush=True)
  ok = proc.returncode == 0 and not reports
  if not ok:
    print(proc.stdout[-8000:], proc.stderr[-8000:], sep="\n")
  return ok


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", help="where to build (default: a temporary directory)")
  parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
  args = parser.parse_args()
  workdir = args.workdir or tempfile.mkdtemp(prefix="workshop-sanitizers-")
  try:
    plugin = build_plugin(workdir)
    results = {"conformance": run_conformance(workdir, plugin), "pytest": run_pytest(plugin)}
  finally:
    if not (args.workdir or args.keep):
      shutil.rmtree(workdir, ignore_errors=True)
  print("\n" + ", ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in results.items()))
  return 0 if all(results.values()) else 1


if __name__ == "__main__":
  raise SystemExit(main())
