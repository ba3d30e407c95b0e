"""PJRT C API conformance: one harness, two plugins (ours and XLA's CPU plugin).

tests/capi_harness/harness.cc is a standalone C++ program that dlopens a plugin and checks,
through the PJRT_Api table only, the behaviours of XLA's pjrt_c_api_test (our own
implementation of them, same inputs and error texts) plus what JAX relies on and the rest
of the API. It is compiled here with g++ against the pjrt_c_api.h of the xla-cpu-pjrt
wheel, and run against:

  * the workshop plugin, with CPython embedded (--python): our plugin compiles through its
    Python compiler, so the harness hosts an interpreter with this repository on sys.path,
    as a JAX process does;
  * XLA's own CPU plugin (xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so), which needs none.

Every case must PASS on both, except the differences listed in XLA_CPU_DIFFERENCES, each
with the reason. The programs and compile options come from tests/capi_harness/inputs.py,
made with JAX the way jaxlib makes them.

Sanitizers: WORKSHOP_CONFORMANCE_SANITIZE=thread (or address) also builds the plugin and
the harness with -fsanitize and runs the workshop cases under it (slow: a full plugin
build). Sanitizer runtimes cannot be preloaded into a python that imports jaxlib; a
standalone harness links them itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS_DIR = os.path.join(REPO, "tests", "capi_harness")

# case -> (outcome on XLA's CPU plugin, why). Every other case passes on both plugins.
XLA_CPU_DIFFERENCES = {
    "DeviceDescriptionAndMemoryDescriptions": (
        "FAIL", "XLA's CPU plugin advertises the MemoryDescriptions extension but describes "
        "no memories (0 descriptions, default index -1)"),
    "ExecutableOutputMemoryKinds": (
        "SKIP", "UNIMPLEMENTED in XLA's CPU plugin; jaxlib then assumes the default memory"),
    "LoadedExecutableDelete": (
        "FAIL", "XLA's CPU executables ignore PJRT_LoadedExecutable_Delete: IsDeleted stays "
        "false and they still run"),
    "HostLayoutColumnMajor": (
        "FAIL", "XLA's CPU plugin accepts a column-major host_layout in ToHostBuffer but "
        "writes row-major data"),
    "TopologyDescription": (
        "FAIL", "XLA's CPU topology serializes, but deserializing it fails with NOT_FOUND "
        "(no compiler registered for the platform in a bare plugin)"),
    "CompileAgainstTopology": (
        "SKIP", "PJRT_TopologyDescription_Create is UNIMPLEMENTED ('Topology not supported "
        "for CPU compilation')"),
    "DeviceMemoryStats": (
        "SKIP", "PJRT_Device_MemoryStats is UNIMPLEMENTED (no allocator statistics on CPU)"),
}


def pjrt_include_dir() -> str:
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  return os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "include")


def xla_cpu_plugin() -> str:
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  return os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "xla_cpu_pjrt.so")


def build_harness(out: str, sanitize: str = "") -> str:
  """Compiles harness.cc (with an embedded-Python host) into `out`; returns its path."""
  libdir = sysconfig.get_config_var("LIBDIR")
  pyversion = sysconfig.get_config_var("LDVERSION")
  flags = ["-O1", "-g"] + ([f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"]
                           if sanitize else [])
  cmd = ["g++", "-std=c++20", "-Wall", "-Wextra", *flags, "-DWORKSHOP_HARNESS_PYTHON",
         f"-I{os.path.join(REPO, 'plugin_src')}", f"-I{pjrt_include_dir()}",
         f"-I{sysconfig.get_paths()['include']}",
         os.path.join(HARNESS_DIR, "harness.cc"), "-o", out,
         f"-L{libdir}", f"-Wl,-rpath,{libdir}", f"-lpython{pyversion}", "-ldl", "-lpthread"]
  subprocess.run(cmd, check=True, capture_output=True, text=True)
  return out


def write_inputs(out: str) -> str:
  """The harness's programs and options, made by JAX in a fresh process (CPU backend)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
  subprocess.run([sys.executable, os.path.join(HARNESS_DIR, "inputs.py"), out], check=True,
                 capture_output=True, text=True, env=env, timeout=300)
  return out


def run_harness(harness: str, plugin: str, inputs: str, platform: str, python: bool,
                env: dict | None = None) -> dict[str, tuple[str, str]]:
  """Runs every case; returns case -> (PASS/FAIL/SKIP, why)."""
  cmd = [harness, plugin, "--inputs", inputs, "--platform", platform]
  if python:
    cmd += ["--python", REPO]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                        env=dict(os.environ, **(env or {})))
  results = {}
  for line in proc.stdout.splitlines():
    outcome, _, rest = line.partition(" ")
    if outcome in ("PASS", "FAIL", "SKIP"):
      name, _, why = rest.partition(": ")
      results[name] = (outcome, why)
  assert results, f"the harness reported nothing:\n{proc.stdout}\n{proc.stderr[-4000:]}"
  return results


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


def case_names() -> list[str]:
  """The cases, read from the harness's table so the two never drift apart."""
  import re

  with open(os.path.join(HARNESS_DIR, "harness.cc")) as f:
    return re.findall(r'^\s*\{"(\w+)", \w+\},', f.read(), re.M)


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


@pytest.mark.skipif(not os.environ.get("WORKSHOP_CONFORMANCE_SANITIZE"),
                    reason="set WORKSHOP_CONFORMANCE_SANITIZE=thread or address")
def test_workshop_under_sanitizer(tmp_path, built):
  """Builds the plugin and harness with -fsanitize and runs the workshop cases 3 times."""
  kind = os.environ["WORKSHOP_CONFORMANCE_SANITIZE"]
  _, inputs = built
  build = subprocess.run(
      [sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
       "--build-temp", str(tmp_path / "tmp")],
      cwd=REPO, capture_output=True, text=True, env=dict(os.environ, WORKSHOP_SANITIZE=kind))
  assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
  plugin = next(str(p) for p in (tmp_path / "lib").rglob("_plugin*.so"))
  harness = build_harness(str(tmp_path / "harness"), sanitize=kind)
  env = {"TSAN_OPTIONS": "halt_on_error=0 report_signal_unsafe=0",
         "ASAN_OPTIONS": "detect_leaks=0 detect_odr_violation=0"}
  cmd = [harness, plugin, "--inputs", inputs, "--platform", "workshop", "--python", REPO,
         "--repeat", "3"]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                        env=dict(os.environ, **env))
  reports = [line for line in proc.stderr.splitlines()
             if "WARNING: ThreadSanitizer" in line or "ERROR: AddressSanitizer" in line]
  assert proc.returncode == 0 and not reports, proc.stdout[-3000:] + proc.stderr[-6000:]
