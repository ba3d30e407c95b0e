"""The f32 exp and logistic kernels (plugin_src/kernels/math/exp_f32.cc) against float64 numpy
over a dense sweep of float32, the range edges, special values, and the 16-bit floats
computed through them.

Bounds, in float32 ulps at the exact (float64) result: tools/fit_exp.py replays the kernels'
arithmetic over every float32 in [-100, 100] and finds exp within 1.035 ulp with FMA (the
x86-64-v3 clone) and 1.009 without (the SSE2 clone), logistic (1 / (1 + e^-x), two more
roundings) within 2.481 either way; this test checks whichever clone the running CPU
gets. Results below the smallest normal float32 are +0 (the FTZ mode kernels run in, and
what XLA:CPU returns); they are checked for being +0 exactly where the exact result rounds
below it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from f32_ulps import floats_around, on_workshop, ulp_error

EXP_ULP_BOUND = 1.1
LOGISTIC_ULP_BOUND = 2.5
TINY = np.finfo(np.float32).tiny
LN_TINY = float(np.log(TINY))  # ~-87.3365: below, e^x flushes to +0
LN_MAX = float(np.log(np.float64(np.finfo(np.float32).max)))  # ~88.7228: above, +inf


def _check(y: np.ndarray, ref: np.ndarray, x: np.ndarray, bound: float, name: str):
  # Results that round below the smallest normal are checked for +0 below, not in ulps.
  err = np.where(ref < TINY, 0.0, ulp_error(y, ref))
  worst = int(err.argmax())
  assert err[worst] <= bound, f"{name}({x[worst]!r}) = {y[worst]!r} is {err[worst]:.2f} ulp off"
  # +0 (not -0, not a subnormal) exactly where the exact result rounds below FLT_MIN;
  # +inf exactly where it rounds past FLT_MAX.
  with np.errstate(over="ignore"):
    rounded = ref.astype(np.float32)
  flushed = rounded < TINY
  assert (y.view(np.uint32)[flushed] == 0).all(), f"{name}({x[flushed & (y != 0)][:4]})"
  assert (y[~flushed] >= TINY).all(), f"{name}({x[~flushed & (y < TINY)][:4]}) flushed"
  np.testing.assert_array_equal(np.isinf(y), np.isinf(rounded))


def _sweep() -> np.ndarray:
  # Every 61st float32 in [0, 100] (past both ends of the range) and the negatives; all of
  # them around the overflow and underflow edges, 0, and a few points where k = round(x /
  # ln2) steps and r jumps from +ln2/2 to -ln2/2.
  step = np.arange(0, int(np.array(100.0, np.float32).view(np.int32)), 61, dtype=np.int32)
  x = np.concatenate([step.view(np.float32), floats_around(2.0**-25, 4096)])
  x = np.concatenate(
    [x, -x, floats_around(LN_MAX, 4096), floats_around(LN_TINY, 4096)]
    + [floats_around((k + 0.5) * np.log(2.0), 2048) for k in (-126, -60, -2, -1, 0, 1, 7, 127)]
  )
  return x


def test_exp_accuracy_dense_sweep():
  x = _sweep()
  _check(on_workshop(jnp.exp, x), np.exp(x.astype(np.float64)), x, EXP_ULP_BOUND, "exp")


def test_logistic_accuracy_dense_sweep():
  x = _sweep()
  ref = 1 / (1 + np.exp(-x.astype(np.float64)))
  _check(on_workshop(jax.nn.sigmoid, x), ref, x, LOGISTIC_ULP_BOUND, "logistic")


def test_exp_special_values():
  big = np.finfo(np.float32).max
  subnormals = np.array([TINY / 2, TINY / 1024, np.float32(1.4e-45)], np.float32)
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
          big,
          -big,
          1e30,
          -1e30,
          100.0,
          -100.0,
          100.5,
          -100.5,
          1.0,
        ],
        np.float32,
      ),
      subnormals,
      -subnormals,
    ]
  )
  y = on_workshop(jnp.exp, x)
  want = {0.0: 1.0, np.inf: np.inf, big: np.inf, 1e30: np.inf, 100.0: np.inf, 100.5: np.inf}
  for value, result in want.items():
    np.testing.assert_array_equal(y[x == np.float32(value)], np.float32(result))
  # Results that round to zero are +0, bit for bit; e^(subnormal) is exactly 1.
  for value in (-np.inf, -big, -1e30, -100.0, -100.5):
    assert y[x == np.float32(value)].view(np.uint32).tolist() == [0], value
  np.testing.assert_array_equal(y[np.abs(x) < TINY], np.float32(1))
  assert np.isnan(y[np.isnan(x)]).all()
  assert y[x == 1] == np.float32(np.e)


def test_logistic_special_values():
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0, 1e30, -1e30, 20.0], np.float32)
  y = on_workshop(jax.nn.sigmoid, x)
  np.testing.assert_array_equal(y[[0, 1]], np.float32(0.5))
  np.testing.assert_array_equal(y[[2, 5, 7, 9]], np.float32(1))  # 1 - e^-20 rounds to 1.
  assert y[[3, 6, 8]].view(np.uint32).tolist() == [0, 0, 0]
  assert np.isnan(y[4])


@pytest.mark.parametrize("f", [jnp.exp, jax.nn.sigmoid], ids=["exp", "logistic"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1023, 1025, 4099])
def test_independent_of_position_and_fusion(f, n):
  # The loop's vector body and its scalar tail must agree bit for bit, so a value's result
  # never depends on where an array or a fusion block (kernels/fusion.cc) cuts it.
  rng = np.random.default_rng(n)
  x = (rng.standard_normal(n + 5) * 30).astype(np.float32)
  whole = on_workshop(f, x)
  for offset in (1, 3, 5):
    np.testing.assert_array_equal(
      on_workshop(f, x[offset : offset + n]), whole[offset : offset + n]
    )
  # Fused with the multiply that feeds it (so it runs on fusion blocks).
  fused = np.asarray(jax.jit(lambda v: f(v * 2))(x))
  np.testing.assert_array_equal(fused, on_workshop(f, x * 2))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_exp_16_bit_floats_every_value(dtype):
  # f16/bf16 are computed in f32 and rounded once: within 1 ulp of their own type, i.e. one
  # of the two neighbours of the exact value (inf past the type's largest value). Every
  # finite value of the type; results under FLT_MIN (bf16 only) are 0 as in f32.
  bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
  x = bits.view(dtype)
  x = x[np.isfinite(x.astype(np.float32))]
  y = on_workshop(jnp.exp, x).astype(np.float64)
  with np.errstate(over="ignore"):
    ref = np.exp(x.astype(np.float64))
    lo = ref.astype(dtype)  # Round to nearest; the other neighbour:
    hi = np.nextafter(lo, np.where(ref > lo.astype(np.float64), np.inf, -np.inf).astype(dtype))
  ok = (y == lo.astype(np.float64)) | (y == hi.astype(np.float64)) | ((y == 0) & (ref < TINY))
  assert ok.all(), f"exp({x[~ok][:4]}) = {y[~ok][:4]}, exact {ref[~ok][:4]}"
