"""Helpers for the op-family tests (random, fft, linalg, chlo).

* `run_mlir_text`: runs a hand-written StableHLO program (MLIR text) on one device, for op
  variants JAX never emits (a 3-word PHILOX state, cholesky with lower = false, raw CHLO
  ops); the same text compiled by XLA:CPU is the reference.
* `run_ours_or_skip`: runs a JAX function on the workshop device and skips the test if it
  fails only because an op of *another* family is missing (the test then runs once that
  family lands); a missing op of the family under test fails it.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jax._src.lib import xla_client

from reference import run_on

# UNIMPLEMENTED errors name the op: "workshop: unsupported op: 'stablehlo.pad' (f32) at",
# "workshop: unsupported variadic reduce: 'stablehlo.reduce' (f64, s64) at" (compiler), or
# "op 'select' has no kernel for dtype c128" (kernels).
_MISSING = re.compile(r"workshop: unsupported [^\n]*?'(?:stablehlo\.)?([\w.]+)' \(|"
                      r"op '(?:stablehlo\.|chlo\.)?([\w.]+)' has no kernel")


def workshop_device():
  return jax.devices("workshop")[0]


def run_mlir_text(device, text: str, *args: np.ndarray) -> list[np.ndarray]:
  """Compiles `text` (a module with @main) for `device` alone and runs it on `args`."""
  exe = device.client.compile_and_load(text, xla_client.DeviceList((device,)))
  outs = exe.execute([jax.device_put(a, device) for a in args])
  return [np.asarray(o) for o in outs]


def run_ours_or_skip(ours: tuple[str, ...], f, *args):
  """run_on(workshop, f, *args); pytest.skip if an op not in `ours` is missing.

  `ours` are op names as kernels call them ("fft", "rng_bit_generator", "composite").
  """
  try:
    return run_on(workshop_device(), f, *args)
  except jax.errors.JaxRuntimeError as e:
    m = "UNIMPLEMENTED" in str(e) and _MISSING.search(str(e))
    op = m and (m.group(1) or m.group(2))
    if op and op not in ours:
      pytest.skip(f"needs {op} (another op family)")
    raise
