"""The vector loops of select and clamp (kernels/elementwise/elementwise.cc), against numpy.

select runs one loop per element width (1, 2, 4, 8, 16 bytes) with a bit mask built from
the pred byte, and a copy for a scalar pred; clamp has loops for scalar bounds and full
bounds, and broadcasts one scalar bound in chunks of 1024 when the other is full. Sizes
cover a vector remainder (odd sizes), several chunks and a chunk boundary. All results are
exact: select and clamp only move and compare values (no zeros in the data, so the sign of
a zero never decides).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import run_on

SIZES = [1, 7, 33, 1000, 2500]


pytestmark = pytest.mark.usefixtures("x64")  # conftest.py: x64 on for the module.


def workshop(f, *args):
  return run_on(jax.devices("workshop")[0], f, *args)


def data(dtype, n, seed):
  rng = np.random.default_rng(seed)
  if np.dtype(dtype).kind == "c":
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
  if np.dtype(dtype).kind == "f":
    return rng.standard_normal(n).astype(dtype)
  low = -100 if np.dtype(dtype).kind == "i" else 0
  return rng.integers(low, 100, n).astype(dtype)


@pytest.mark.parametrize(
  "dtype",
  [np.uint8, np.int16, np.float32, np.float64, np.complex128],
  ids=["u8", "s16", "f32", "f64", "c128"],
)
@pytest.mark.parametrize("n", SIZES)
def test_select_matches_numpy(dtype, n):
  a, b = data(dtype, n, 1), data(dtype, n, 2)
  pred = np.random.default_rng(3).random(n) < 0.5
  np.testing.assert_array_equal(
    workshop(lambda p, a, b: lax.select(p, a, b), pred, a, b), np.where(pred, a, b)
  )
  for scalar in (True, False):  # a scalar pred picks a whole operand
    np.testing.assert_array_equal(
      workshop(
        lambda p, a, b: lax.select(jnp.broadcast_to(p, a.shape), a, b), np.bool_(scalar), a, b
      ),
      a if scalar else b,
    )


@pytest.mark.parametrize(
  "dtype", [np.int8, np.int32, np.float32, np.float64], ids=["s8", "s32", "f32", "f64"]
)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
  "lo_scalar,hi_scalar", [(True, True), (False, False), (True, False), (False, True)]
)
def test_clamp_matches_numpy(dtype, n, lo_scalar, hi_scalar):
  x = data(dtype, n, 4)
  lo = data(dtype, 1 if lo_scalar else n, 5)
  hi = data(dtype, 1 if hi_scalar else n, 6)
  lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)  # lo <= hi where both are scalars
  if np.dtype(dtype).kind == "f":
    x[n // 2] = np.nan  # clamp propagates NaN (min/max as in the spec)
  lo_arg = lo[0] if lo_scalar else lo
  hi_arg = hi[0] if hi_scalar else hi
  ours = workshop(lambda lo, x, hi: lax.clamp(lo, x, hi), lo_arg, x, hi_arg)
  np.testing.assert_array_equal(ours, np.minimum(np.maximum(lo_arg, x), hi_arg))
