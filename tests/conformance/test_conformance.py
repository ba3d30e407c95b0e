"""PJRT C API conformance: one harness, two plugins (ours and XLA's CPU plugin).

The harness, its inputs and the list of XLA_CPU_DIFFERENCES (each with its reason) are in
jax_plugins/workshop/teach/conformance.py, which notebook 01 also runs. Every case must PASS on
the workshop plugin, and on XLA's CPU plugin too except for those differences.

Sanitizers: WORKSHOP_CONFORMANCE_SANITIZE=thread (or address) also builds the plugin and
the harness with -fsanitize and runs the workshop cases under it (slow: a full plugin
build). Sanitizer runtimes cannot be preloaded into a python that imports jaxlib; a
standalone harness links them itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jax_plugins.workshop.teach.conformance import (
  REPO,
  XLA_CPU_DIFFERENCES,
  build_harness,
  case_names,
  run_harness,
  write_inputs,
  xla_cpu_plugin,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  root = tmp_path_factory.mktemp("conformance")
  return build_harness(str(root / "harness")), write_inputs(str(root / "inputs"))


@pytest.fixture(scope="module")
def workshop_results(built):
  import jax_plugins.workshop as workshop

  harness, inputs = built
  return run_harness(harness, workshop.library_path(), inputs, "workshop", python=True)


@pytest.fixture(scope="module")
def xla_results(built):
  harness, inputs = built
  return run_harness(harness, xla_cpu_plugin(), inputs, "cpu", python=False)


@pytest.mark.parametrize("case", case_names())
def test_workshop(workshop_results, case):
  outcome, why = workshop_results.get(case, ("MISSING", "the harness did not report it"))
  assert outcome == "PASS", why


@pytest.mark.parametrize("case", case_names())
def test_xla_cpu(xla_results, case):
  outcome, why = xla_results.get(case, ("MISSING", "the harness did not report it"))
  expected, reason = XLA_CPU_DIFFERENCES.get(case, ("PASS", ""))
  assert outcome == expected, f"{why} (expected {expected}: {reason or 'passes'})"


def test_differences_are_real_cases():
  assert set(XLA_CPU_DIFFERENCES) <= set(case_names())


@pytest.mark.skipif(
  not os.environ.get("WORKSHOP_CONFORMANCE_SANITIZE"),
  reason="set WORKSHOP_CONFORMANCE_SANITIZE=thread or address",
)
def test_workshop_under_sanitizer(tmp_path, built):
  """Builds the plugin and harness with -fsanitize and runs the workshop cases 3 times."""
  kind = os.environ["WORKSHOP_CONFORMANCE_SANITIZE"]
  _, inputs = built
  build = subprocess.run(
    [
      sys.executable,
      "setup.py",
      "build_ext",
      "--build-lib",
      str(tmp_path / "lib"),
      "--build-temp",
      str(tmp_path / "tmp"),
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    env=dict(os.environ, WORKSHOP_SANITIZE=kind),
  )
  assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
  plugin = next(str(p) for p in (tmp_path / "lib").rglob("_plugin*.so"))
  harness = build_harness(str(tmp_path / "harness"), sanitize=kind)
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from run_sanitizers import openblas_library_path

  env = {
    "TSAN_OPTIONS": "halt_on_error=0 report_signal_unsafe=0",
    "ASAN_OPTIONS": "detect_leaks=0 detect_odr_violation=0",
    "LD_LIBRARY_PATH": openblas_library_path(),
    # The embedded interpreter's search path: this one's, as run_harness hands it.
    "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
  }
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
    "3",
  ]
  proc = subprocess.run(
    cmd, capture_output=True, text=True, timeout=3600, env=dict(os.environ, **env)
  )
  reports = [
    line
    for line in proc.stderr.splitlines()
    if "WARNING: ThreadSanitizer" in line or "ERROR: AddressSanitizer" in line
  ]
  assert proc.returncode == 0 and not reports, proc.stdout[-3000:] + proc.stderr[-6000:]
