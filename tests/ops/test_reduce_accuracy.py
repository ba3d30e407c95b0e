"""Reductions and scans at least as accurate as XLA:CPU's, against float64. Families: reduce
and reduce_window (the scans: cumulative ops).

Each case of jax_plugins.workshop.bench.accuracy (a reduction pattern or a cumulative op
on one dtype) runs on both backends from the same fixed-seed inputs; the rule of
docs/performance.md: workshop's max relative error <= 2 x XLA:CPU's + 4 ulp of the
result dtype. Deterministic: no timing is involved.
"""

import jax
import numpy as np
import pytest
from jax import lax

from jax_plugins.workshop.bench import accuracy
from reference import assert_matches_cpu


@pytest.mark.parametrize("case", accuracy.cases(), ids=lambda c: c.name)
def test_as_accurate_as_xla_cpu(case):
  row = accuracy.measure(case)
  assert np.isfinite(row.cpu), "the reference backend failed"
  assert row.ok, (
    f"{case.name}: workshop's error {row.workshop:.3g} exceeds "
    f"2 x XLA:CPU's {row.cpu:.3g} + 4 ulp = {row.bound:.3g}"
  )


@pytest.mark.parametrize("case", accuracy.x64_cases(), ids=lambda c: c.name)
def test_float64_as_accurate_as_xla_cpu(case):
  with jax.enable_x64(True):
    row = accuracy.measure(case)
  assert row.ok, (
    f"{case.name}: workshop's error {row.workshop:.3g} exceeds "
    f"2 x XLA:CPU's {row.cpu:.3g} + 4 ulp = {row.bound:.3g}"
  )


def test_long_sum_error_does_not_grow_with_rows():
  """A leading-axis sum of ones, exact for every order that never rounds: 2^24 + k rows
  would lose every further 1 in one running f32 sum (stuck at 2^24); the pairwise
  cascade gets the exact count."""
  x = np.ones((1 << 24 | 1000, 2), np.float32)
  got = np.asarray(jax.jit(lambda a: a.sum(axis=0))(x))
  np.testing.assert_array_equal(got, np.float32((1 << 24) + 1000))


@pytest.mark.parametrize(
  "shape,axis,reverse",
  [
    ((2,), 0, False),
    ((5,), 0, True),
    ((7, 5), 1, True),
    ((9, 3, 4), 0, False),
    ((3, 33, 2), 1, False),
    ((1000,), 0, True),
  ],
)
def test_cumlogsumexp_general_scan(shape, axis, reverse):
  x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
  assert_matches_cpu(
    lambda a: lax.cumlogsumexp(a, axis=axis, reverse=reverse), x, rtol=1e-6, atol=1e-6
  )
  ref = np.logaddexp.accumulate(np.flip(x, axis) if reverse else x, axis=axis)
  ref = np.flip(ref, axis) if reverse else ref
  got = np.asarray(jax.jit(lambda a: lax.cumlogsumexp(a, axis=axis, reverse=reverse))(x))
  np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reverse", [False, True])
def test_complex_cummax_general_scan(reverse):
  """cummax of complex numbers: a two-operand compare body (lexicographic order)."""
  rng = np.random.default_rng(2)
  x = (rng.integers(-3, 3, 70) + 1j * rng.normal(size=70)).astype(np.complex64)
  assert_matches_cpu(lambda a: lax.cummax(a, reverse=reverse), x)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.int32])
def test_scan_tiles_of_wide_rows(dtype):
  """A cumsum over axis 0 of rows wider than the scan's column tile (256): tiles are
  gathered and scattered back."""
  x = np.random.default_rng(3).normal(size=(37, 600)).astype(np.float32)
  x = (x * 10).astype(dtype) if dtype == np.int32 else x.astype(dtype)
  assert_matches_cpu(lambda a: lax.cumsum(a, axis=0), x, rtol=1e-5, atol=1e-4)
  assert_matches_cpu(lambda a: lax.cumsum(a, axis=0, reverse=True), x, rtol=1e-5, atol=1e-4)
