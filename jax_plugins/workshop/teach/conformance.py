"""The PJRT C API conformance harness, run against a plugin: the guide's "test the C API" step.

`tests/capi_harness/harness.cc` (in the repository, not in a wheel) is a standalone C++
program that dlopens a plugin and checks, through the PJRT_Api table only, the behaviours
of XLA's `pjrt_c_api_test` (our own implementation of them, same inputs and error texts),
plus what JAX relies on and the rest of the API. It is compiled with g++ against the
pjrt_c_api.h of the xla-cpu-pjrt wheel and runs against:

  * the workshop plugin, with CPython embedded (`python=True`): the plugin compiles through
    its Python compiler, so the harness hosts an interpreter with the repository on
    sys.path, as a JAX process does;
  * XLA's own CPU plugin (xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so), which needs none.

Every case passes on both, except the differences in XLA_CPU_DIFFERENCES, each with the
reason. tests/conformance/test_conformance.py asserts exactly that; notebook 01 shows the table.

`run_plugin` runs it against any other plugin, e.g. one `python -m
jax_plugins.workshop.new_device` generated (tests/new_device/test_new_device.py, notebook 08).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from .notebook import repository_root

REPO = str(repository_root(Path(__file__).resolve().parent))
HARNESS_DIR = os.path.join(REPO, "tests", "capi_harness")

# case -> (outcome on XLA's CPU plugin, why). Every other case passes on both plugins.
XLA_CPU_DIFFERENCES = {
  "DeviceDescriptionAndMemoryDescriptions": (
    "FAIL",
    "XLA's CPU plugin advertises the MemoryDescriptions extension but describes "
    "no memories (0 descriptions, default index -1)",
  ),
  "ExecutableOutputMemoryKinds": (
    "SKIP",
    "UNIMPLEMENTED in XLA's CPU plugin; jaxlib then assumes the default memory",
  ),
  "LoadedExecutableDelete": (
    "FAIL",
    "XLA's CPU executables ignore PJRT_LoadedExecutable_Delete: IsDeleted stays "
    "false and they still run",
  ),
  "HostLayoutColumnMajor": (
    "FAIL",
    "XLA's CPU plugin accepts a column-major host_layout in ToHostBuffer but writes row-major data",
  ),
  "TopologyDescription": (
    "FAIL",
    "XLA's CPU topology serializes, but deserializing it fails with NOT_FOUND "
    "(no compiler registered for the platform in a bare plugin)",
  ),
  "CompileAgainstTopology": (
    "SKIP",
    "PJRT_TopologyDescription_Create is UNIMPLEMENTED ('Topology not supported "
    "for CPU compilation')",
  ),
  "DeviceMemoryStats": (
    "SKIP",
    "PJRT_Device_MemoryStats is UNIMPLEMENTED (no allocator statistics on CPU)",
  ),
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
  flags = ["-O1", "-g"] + (
    [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"] if sanitize else []
  )
  cmd = [
    "g++",
    "-std=c++20",
    "-Wall",
    "-Wextra",
    *flags,
    "-DWORKSHOP_HARNESS_PYTHON",
    f"-I{os.path.join(REPO, 'plugin_src')}",
    f"-I{pjrt_include_dir()}",
    f"-I{sysconfig.get_paths()['include']}",
    os.path.join(HARNESS_DIR, "harness.cc"),
    "-o",
    out,
    f"-L{libdir}",
    f"-Wl,-rpath,{libdir}",
    f"-lpython{pyversion}",
    "-ldl",
    "-lpthread",
  ]
  subprocess.run(cmd, check=True, capture_output=True, text=True)
  return out


def write_inputs(out: str) -> str:
  """The harness's programs and options, made by JAX in a fresh process (CPU backend)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
  subprocess.run(
    [sys.executable, os.path.join(HARNESS_DIR, "inputs.py"), out],
    check=True,
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  return out


def run_harness(
  harness: str,
  plugin: str,
  inputs: str,
  platform: str,
  python: bool,
  env: dict | None = None,
  python_path: str = REPO,
) -> dict[str, tuple[str, str]]:
  """Runs every case; returns case -> (PASS/FAIL/SKIP, why).

  With `python`, the harness embeds CPython with `python_path` first on sys.path (where
  the plugin's compiler package is: this repository, or a generated project).
  """
  cmd = [harness, plugin, "--inputs", inputs, "--platform", platform]
  environment = dict(os.environ)
  if python:
    cmd += ["--python", python_path]
    # The embedded interpreter finds its prefix from `python3` on PATH, which need not be
    # this (virtual) environment's: hand it this interpreter's search path instead.
    environment["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
  proc = subprocess.run(
    cmd, capture_output=True, text=True, timeout=900, env=dict(environment, **(env or {}))
  )
  results = {}
  for line in proc.stdout.splitlines():
    outcome, _, rest = line.partition(" ")
    if outcome in ("PASS", "FAIL", "SKIP"):
      name, _, why = rest.partition(": ")
      results[name] = (outcome, why)
  assert results, f"the harness reported nothing:\n{proc.stdout}\n{proc.stderr[-4000:]}"
  return results


def case_names() -> list[str]:
  """The cases, read from the harness's table so the two never drift apart."""
  with open(os.path.join(HARNESS_DIR, "harness.cc")) as f:
    # An entry may wrap after the name ({"Long", \n Long},).
    return re.findall(r'^\s*\{"(\w+)",\s*\w+\},', f.read(), re.M)


def run_both(workdir: str) -> dict[str, dict[str, tuple[str, str]]]:
  """Builds the harness and its inputs in `workdir`, runs it on both plugins.

  Returns {"workshop": results, "cpu": results}, each case -> (PASS/FAIL/SKIP, why).
  """
  from .. import library_path

  harness = build_harness(os.path.join(workdir, "harness"))
  inputs = write_inputs(os.path.join(workdir, "inputs"))
  return {
    "workshop": run_harness(harness, library_path(), inputs, "workshop", python=True),
    "cpu": run_harness(harness, xla_cpu_plugin(), inputs, "cpu", python=False),
  }


def run_plugin(
  workdir: str, library: str, platform: str, python_path: str | None = None
) -> dict[str, tuple[str, str]]:
  """Builds the harness and its inputs in `workdir` and runs it on the plugin `library`
  for `platform`; returns case -> (PASS/FAIL/SKIP, why).

  `python_path`: for a plugin that compiles in Python, the directory to put first on the
  embedded interpreter's sys.path (its project); None for a plugin that needs none.
  """
  harness = build_harness(os.path.join(workdir, "harness"))
  inputs = write_inputs(os.path.join(workdir, "inputs"))
  return run_harness(
    harness,
    library,
    inputs,
    platform,
    python=python_path is not None,
    python_path=python_path or REPO,
  )
