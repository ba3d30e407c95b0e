"""Helpers of the code-generation tier's tests (ops/test_codegen_loops.py: loops,
ops/test_codegen_fusion.py: fusions): compile or run a function under one WORKSHOP_CODEGEN
setting (compiler/codegen/__init__.py lists them), and keep generated objects out of
~/.cache.

    from codegen_helpers import ops, plan_of, private_cache, run_with, workshop
    # private_cache is an autouse fixture: importing it applies it to the module.
"""

from __future__ import annotations

import contextlib
import os

import jax
import numpy as np
import pytest

from jax_plugins.workshop.compiler import compile_program
from reference import run_on


@contextlib.contextmanager
def environ(**values: str):
  """The environment variables `values` set inside the block, as they were after it."""
  old = {name: os.environ.get(name) for name in values}
  os.environ.update(values)
  try:
    yield
  finally:
    for name, was in old.items():
      if was is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = was


@pytest.fixture(autouse=True, scope="module")
def private_cache(tmp_path_factory):
  """Generated objects and libraries go to a fresh directory, not ~/.cache."""
  path = str(tmp_path_factory.mktemp("codegen"))
  with environ(WORKSHOP_CODEGEN_CACHE=path):
    yield path


def workshop():
  return jax.devices("workshop")[0]


def plan_of(f, *args, env="1"):
  """The plan of jit(f)(*args), compiled with WORKSHOP_CODEGEN=env (on 4 devices' worth
  of threads, as the tests' client)."""
  text = jax.jit(f).lower(*args).as_text()
  with environ(WORKSHOP_CODEGEN=env):
    return compile_program(text.encode(), "mlir", b"", 4).plan


def ops(f, *args, env="1"):
  """Top-level op names of f's plan under WORKSHOP_CODEGEN=env."""
  return [i.op for i in plan_of(f, *args, env=env).instrs]


def run_with(monkeypatch, setting, f, *args):
  """jit(f)(*args) on workshop, compiled under WORKSHOP_CODEGEN=setting, as numpy."""
  monkeypatch.setenv("WORKSHOP_CODEGEN", setting)
  jax.clear_caches()
  try:
    return run_on(workshop(), f, *args)
  finally:
    jax.clear_caches()


def serialized_round_trip(monkeypatch, f, x, marker: bytes):
  """jit(f)(x) compiled with the tier on and serialized (the blob holds `marker`, the
  generated op's name, and the generated source), then deserialized and run twice: as
  usual, then with code generation failing (a process without llvmlite), when the region
  must run interpreted. Returns the two results, as numpy."""
  from jax._src.lib import xla_client as xc  # pylint: disable=import-outside-toplevel
  from jax_plugins.workshop.compiler import codegen  # pylint: disable=import-outside-toplevel

  monkeypatch.setenv("WORKSHOP_CODEGEN", "1")
  jax.clear_caches()
  device = workshop()
  blob = device.client.serialize_executable(jax.jit(f).lower(x).compile().runtime_executable())
  assert marker in blob and b"workshop_" + marker.removeprefix(b"jit_") + b"_" in blob

  def load_and_run():
    loaded = device.client.deserialize_executable(
      blob, xc.DeviceList((device,)), xc.CompileOptions()
    )
    return np.asarray(loaded.execute([jax.device_put(x, device)])[0])

  with_jit = load_and_run()
  monkeypatch.setattr(codegen, "_loaded", {})

  def fail(*_):
    raise RuntimeError("no JIT here")

  monkeypatch.setattr(codegen, "_compile_llvm", fail)
  return with_jit, load_and_run()
