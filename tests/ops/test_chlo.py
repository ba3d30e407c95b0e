"""CHLO ops that reach the plugin (as stablehlo.composite "chlo.*"), against XLA:CPU.

XLA:CPU runs the composites' decompositions (polynomial/exp-log expansions); our kernels
call libm. The expansions lose a few ulps, more for sinh/cosh of large |x|
(exp(|x| + log 1/2) rounds |x|) and atanh near +-1, so the relative tolerances are 4e-6
(f32, eps 1.2e-7) and 5e-14 (f64, eps 2.2e-16); measured gaps are 1.5e-6 and 1.6e-14.
NaNs and infinities must match exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from family_helpers import workshop_device
from reference import cpu_device, run_on, run_stablehlo

RTOL = {np.float32: 4e-6, np.float64: 5e-14, np.complex64: 4e-6, np.complex128: 5e-14}

FUNCTIONS = {
  # name: (jax function, real sample interval: the domain, clipped where it overflows)
  "erf": (jax.scipy.special.erf, (-6, 6)),
  "sinh": (jnp.sinh, (-80, 80)),
  "cosh": (jnp.cosh, (-80, 80)),
  "asin": (jnp.arcsin, (-1, 1)),
  "acos": (jnp.arccos, (-1, 1)),
  "asinh": (jnp.arcsinh, (-1e6, 1e6)),
  "acosh": (jnp.arccosh, (1, 1e6)),
  "atanh": (jnp.arctanh, (-1, 1)),
}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1.0, -1.0, 2.0, -2.0, 1e30, -1e30]


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def assert_matches(f, x, dtype):
  ours = run_on(workshop_device(), f, x)
  ref = run_on(cpu_device(), f, x)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  np.testing.assert_allclose(ours, ref, rtol=RTOL[dtype], atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_real(name, dtype):
  f, (lo, hi) = FUNCTIONS[name]
  x = np.random.default_rng(0).uniform(lo, hi, 1000)
  x = np.concatenate([x, [lo, hi], SPECIAL]).astype(dtype).reshape(5, -1)  # Out of
  # domain values (asin(2), acosh(-1), ...) are NaN on both sides.
  assert_matches(f, x, dtype)


NUMPY = {
  "sinh": np.sinh,
  "cosh": np.cosh,
  "asin": np.arcsin,
  "acos": np.arccos,
  "asinh": np.arcsinh,
  "acosh": np.arccosh,
  "atanh": np.arctanh,
}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(NUMPY))
def test_complex(name, dtype):
  rng = np.random.default_rng(1)
  z = rng.uniform(-3, 3, 500) + 1j * rng.uniform(-3, 3, 500)
  # Points on the axes (branch cuts of asin/acos/atanh: real |x| > 1; of asinh: imaginary
  # |y| > 1), with +0 for the other part.
  axis = [0.5, 2.0, -2.0, 4.0]
  z = np.concatenate([z, [complex(a, 0.0) for a in axis], [complex(0.0, a) for a in axis]])
  assert_matches(FUNCTIONS[name][0], z.astype(dtype), dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("name", ["asin", "acos", "asinh", "acosh", "atanh"])
def test_complex_signed_zero_picks_the_side_of_the_cut(name, dtype):
  # On a branch cut, -0 selects the other side (C99 Annex G, as numpy and libm do).
  # XLA's expansions drop the zero's sign there (asin(2 - 0j) = pi/2 + 1.317j), so the
  # reference here is numpy. sinh and cosh have no branch cut: their signed zeros are
  # XLA:CPU's (tests/ops/test_elementwise_complex_edges.py).
  axis = [0.5, 2.0, -2.0, 4.0]
  z = np.array([complex(a, -0.0) for a in axis] + [complex(-0.0, a) for a in axis], dtype)
  ours = run_on(workshop_device(), FUNCTIONS[name][0], z)
  ref = NUMPY[name](z)
  np.testing.assert_allclose(ours, ref, rtol=RTOL[dtype])
  np.testing.assert_array_equal(np.signbit(ours.real), np.signbit(ref.real))
  np.testing.assert_array_equal(np.signbit(ours.imag), np.signbit(ref.imag))


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64], ids=lambda d: np.dtype(d).name
)
@pytest.mark.parametrize("shape,k", [((10,), 3), ((4, 7), 7), ((2, 3, 9), 1), ((5, 6), 0)], ids=str)
def test_top_k(shape, k, dtype):
  # Few distinct values, so ties are frequent: equal values come in index order.
  x = np.random.default_rng(2).integers(0, 5, shape).astype(dtype)
  f = lambda v: lax.top_k(v, k)
  ours = run_on(workshop_device(), f, x)
  ref = run_on(cpu_device(), f, x)
  for a, b in zip(ours, ref, strict=True):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def test_top_k_total_order():
  # NaN above +inf, -0 below +0, -NaN below everything.
  x = np.array([1.0, np.nan, -0.0, 0.0, -np.inf, np.inf, -np.nan, 0.0, -0.0, 1.0], np.float32)
  for k in (4, 10):
    f = lambda v: lax.top_k(v, k)
    values, indices = run_on(workshop_device(), f, x)
    ref_values, ref_indices = run_on(cpu_device(), f, x)
    np.testing.assert_array_equal(indices, ref_indices)
    np.testing.assert_array_equal(values.view(np.uint32), ref_values.view(np.uint32))


def test_unregistered_composite_runs_its_decomposition():
  def scaled_plus_one(x, *, scale):
    return x * scale + 1.0

  op = lax.composite(scaled_plus_one, name="test.scaled_plus_one")
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(run_on(workshop_device(), lambda v: op(v, scale=3.0), x), x * 3 + 1)


RAW_CHLO = """
func.func public @main(%x: tensor<4xf64>) -> (tensor<4xf64>, tensor<2xf64>, tensor<2xi32>) {
  %0 = chlo.sinh %x : tensor<4xf64> -> tensor<4xf64>
  %1:2 = chlo.top_k(%x, k = 2) : tensor<4xf64> -> (tensor<2xf64>, tensor<2xi32>)
  return %0, %1#0, %1#1 : tensor<4xf64>, tensor<2xf64>, tensor<2xi32>
}
"""


def test_raw_chlo_ops_in_mlir_text():
  # A program handed over as MLIR text keeps its chlo ops; the same rules lower them.
  x = np.array([0.5, -2.0, 3.0, 1.0])
  sinh, values, indices = run_stablehlo(RAW_CHLO, x)
  np.testing.assert_allclose(sinh, np.sinh(x), rtol=1e-15)
  np.testing.assert_array_equal(values, [3.0, 1.0])
  np.testing.assert_array_equal(indices, [2, 3])
