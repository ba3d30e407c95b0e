"""The f32 tanh kernel (plugin_src/kernels/math/tanh_f32.cc) against float64 numpy over a dense
sweep of float32, its special values, and the 16-bit floats computed through it.

Bound: 2 ulp of float32, measured at the exact (float64) tanh. tools/fit_tanh.py replays
the kernel's arithmetic over every float32 and finds at most 1.72 ulp with FMA (the AVX2
clone) and 1.91 ulp without (the SSE2 clone); this test checks whichever clone the running
CPU gets. libmvec's tanhf, which the kernel replaced, is documented at 4 ulp.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from f32_ulps import floats_around, on_workshop, ulp_error

ULP_BOUND = 2.0
SATURATE = np.float32(9.01091385)  # The smallest float32 whose tanh rounds to 1.0f.


def _tanh_on_workshop(x: np.ndarray) -> np.ndarray:
  return on_workshop(jnp.tanh, x)


def test_tanh_accuracy_dense_sweep():
  # Every 97th float32 from 0 to 20 (past saturation), all of them around the points where
  # the kernel switches formulas (2^-12, 1, the saturation), and the negatives of all.
  step = np.arange(0, int(np.array(20.0, np.float32).view(np.int32)), 97, dtype=np.int32)
  x = np.concatenate(
    [
      step.view(np.float32),
      floats_around(2.0**-12, 4096),
      floats_around(1.0, 4096),
      floats_around(SATURATE, 4096),
    ]
  )
  x = np.concatenate([x, -x])
  err = ulp_error(_tanh_on_workshop(x), np.tanh(x.astype(np.float64)))
  worst = int(err.argmax())
  assert err[worst] <= ULP_BOUND, f"tanh({x[worst]!r}) is {err[worst]:.2f} ulp off"


def test_tanh_special_values():
  tiny = np.finfo(np.float32).tiny
  subnormals = np.array([tiny / 2, tiny / 1024, np.float32(1.4e-45), tiny * 0.999], np.float32)
  x = np.concatenate(
    [
      np.array(
        [
          0.0,
          -0.0,
          np.inf,
          -np.inf,
          np.nan,
          -np.nan,
          np.finfo(np.float32).max,
          -np.finfo(np.float32).max,
          SATURATE,
          -SATURATE,
          9.0,
          20.0,
          2.0**-12,
          -(2.0**-13),
        ],
        np.float32,
      ),
      subnormals,
      -subnormals,
    ]
  )
  y = _tanh_on_workshop(x)
  bits = lambda a: a.view(np.uint32)
  # +-0 keeps its sign and subnormals pass through unchanged (as XLA:CPU): bit for bit.
  passthrough = (x == 0) | (np.abs(x) < tiny)
  np.testing.assert_array_equal(bits(y[passthrough]), bits(x[passthrough]))
  assert np.isnan(y[np.isnan(x)]).all()
  # Saturated inputs (incl. +-inf, +-FLT_MAX) give exactly +-1; tanh(2^-12) rounds to 2^-12.
  big = np.abs(x) >= SATURATE
  np.testing.assert_array_equal(y[big], np.sign(x[big]))
  np.testing.assert_array_equal(y[x == 2.0**-12], x[x == 2.0**-12])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1023, 1025, 4099])
def test_tanh_independent_of_position_and_fusion(n):
  # The loop's vector body and its scalar tail must agree bit for bit, so a value's result
  # never depends on where an array or a fusion block (kernels/fusion.cc) cuts it.
  rng = np.random.default_rng(n)
  x = (rng.standard_normal(n + 5) * 3).astype(np.float32)
  whole = _tanh_on_workshop(x)
  for offset in (1, 3, 5):
    np.testing.assert_array_equal(
      _tanh_on_workshop(x[offset : offset + n]), whole[offset : offset + n]
    )
  # Fused with the multiply that feeds it (so it runs on fusion blocks).
  fused = np.asarray(jax.jit(lambda v: jnp.tanh(v * 2))(x))
  np.testing.assert_array_equal(fused, _tanh_on_workshop(x * 2))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_tanh_16_bit_floats_every_value(dtype):
  # f16/bf16 are computed in f32 and rounded once: within 1 ulp of their own type, i.e. one
  # of the two neighbours of the exact value. Every finite value of the type.
  bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
  x = bits.view(dtype)
  x = x[np.isfinite(x.astype(np.float32))]
  y = _tanh_on_workshop(x).astype(np.float64)
  ref = np.tanh(x.astype(np.float64))
  lo = ref.astype(dtype).astype(np.float64)  # Round to nearest; the other neighbour:
  hi = np.nextafter(lo.astype(dtype), np.where(ref > lo, np.inf, -np.inf).astype(dtype))
  ok = (y == lo) | (y == hi.astype(np.float64)) | ((y == 0) & (ref == 0))
  assert ok.all(), f"tanh({x[~ok][:4]}) = {y[~ok][:4]}, exact {ref[~ok][:4]}"
