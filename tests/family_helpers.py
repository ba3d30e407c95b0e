"""Helpers for the op-family tests (random, fft, linalg, chlo, control_flow, reduce,
indexing, gather_scatter, convolution, reduce_window).

Hand-written StableHLO programs (op variants JAX never emits: a 3-word PHILOX state,
cholesky with lower = false, raw CHLO ops) run with reference.run_stablehlo and
reference.assert_stablehlo_matches_cpu.

* `MOVE_DTYPES`, `INDEX_DTYPES`, `rand_array`, `rand_shape`, `check_matches_cpu`: operands
  and checks of the data-movement tests (indexing, gather_scatter).
* `rand_operand`: seeded operands of the window-op tests (convolution, reduce_window).
"""

from __future__ import annotations


import jax
import jax.extend  # noqa: F401  (jax.extend.backend)
import ml_dtypes
import numpy as np

from reference import assert_matches_cpu


def workshop_device():
  return jax.devices("workshop")[0]


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


# ---- Window ops (convolution, reduce_window) ----


def rand_operand(shape, dtype=np.float32, seed=0):
  """Small integers (-5..5) for integer dtypes, standard normals otherwise, from `seed`."""
  rng = np.random.default_rng(seed)
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-5, 6, shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)
