"""Helpers for the op-family tests (random, fft, linalg, chlo, control_flow, reduce,
indexing, gather_scatter, convolution, reduce_window).

* `run_mlir_text`: runs a hand-written StableHLO program (MLIR text) on one device, for op
  variants JAX never emits (a 3-word PHILOX state, cholesky with lower = false, raw CHLO
  ops); the same text compiled by XLA:CPU is the reference.
* `run_ours_or_skip`: runs a JAX function on the workshop device and skips the test if it
  fails only because an op of *another* family is missing (the test then runs once that
  family lands); a missing op of the family under test fails it.
* `run_mlir`: StableHLO text compiled on a device's client and run sharded (control_flow,
  reduce).
* `MOVE_DTYPES`, `INDEX_DTYPES`, `rand_array`, `rand_shape`, `check_matches_cpu`,
  `check_stablehlo_matches_cpu`: operands and checks of the data-movement tests (indexing,
  gather_scatter).
* `rand_operand`: seeded operands of the window-op tests (convolution, reduce_window).
"""

from __future__ import annotations

import re

import jax
import jax.extend  # noqa: F401  (jax.extend.backend)
import ml_dtypes
import numpy as np
import pytest
from jax._src.interpreters import mlir
from jax._src.lib import xla_client
from jax._src.lib.mlir import ir

from reference import assert_matches_cpu, run_on


# UNIMPLEMENTED errors name the op: "workshop: unsupported op: 'stablehlo.pad' (f32) at",
# "workshop: unsupported variadic reduce: 'stablehlo.reduce' (f64, s64) at" (compiler), or
# "op 'select' has no kernel for dtype c128" (kernels).
_MISSING = re.compile(
  r"workshop: unsupported [^\n]*?'(?:stablehlo\.)?([\w.]+)' \(|"
  r"op '(?:stablehlo\.|chlo\.)?([\w.]+)' has no kernel"
)


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


# ---- StableHLO text on a device's client (control_flow, reduce) ----


def run_mlir(text: str, device, *args):
  """Compiles StableHLO text directly on `device`'s client (ops JAX never emits as such)."""
  exe = device.client.compile_and_load(
    text, xla_client.DeviceList((device,)), xla_client.CompileOptions()
  )
  results = exe.execute_sharded([jax.device_put(a, device) for a in args])
  return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


# ---- Data movement (indexing, gather_scatter) ----


# One dtype per element width (1, 2, 4, 8, 16 bytes) and kind. The 64-bit ones need x64.
MOVE_DTYPES = [
  np.bool_,
  np.int8,
  np.uint16,
  ml_dtypes.bfloat16,
  np.float16,
  np.int32,
  np.float32,
  np.int64,
  np.float64,
  np.complex64,
  np.complex128,
]
INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64]


def rand_array(rng, shape, dtype):
  """Random values of `dtype`: bools, small integers, standard normals (complex too)."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype.kind in "iu":
    lo = 0 if dtype.kind == "u" else -50
    return rng.integers(lo, 50, shape).astype(dtype)
  if dtype.kind == "c":
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def rand_shape(rng, rank, lo=1, hi=6):
  """A random shape of `rank` with every dimension in [lo, hi]."""
  return tuple(int(d) for d in rng.integers(lo, hi + 1, rank))


def check_matches_cpu(f, *args, **kw):
  """assert_matches_cpu with x64 enabled when any argument needs it."""
  wide = any(np.asarray(a).dtype.itemsize >= 8 and np.asarray(a).dtype.kind != "b" for a in args)
  with jax.enable_x64(wide):
    return assert_matches_cpu(f, *args, **kw)


def _run_stablehlo(platform, text, *args):
  backend = jax.extend.backend.get_backend(platform)
  device = backend.local_devices()[0]
  with mlir.make_ir_context():
    module = ir.Module.parse(text)
    exe = backend.compile_and_load(
      mlir.module_to_bytecode(module), xla_client.DeviceList((device,)), xla_client.CompileOptions()
    )
  outs = exe.execute([jax.device_put(a, device) for a in args])
  return [np.asarray(o) for o in outs]


def check_stablehlo_matches_cpu(text, *args):
  """Runs `text` on the workshop device and on XLA:CPU (x64 on); equal outputs, ours returned."""
  with jax.enable_x64(True):  # Keep 64-bit arguments 64-bit.
    ours = _run_stablehlo("workshop", text, *args)
    ref = _run_stablehlo("cpu", text, *args)
  for a, b in zip(ours, ref, strict=True):
    np.testing.assert_array_equal(a, b)
  return ours


# ---- Window ops (convolution, reduce_window) ----


def rand_operand(shape, dtype=np.float32, seed=0):
  """Small integers (-5..5) for integer dtypes, standard normals otherwise, from `seed`."""
  rng = np.random.default_rng(seed)
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-5, 6, shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)
