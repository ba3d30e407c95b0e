"""approx_top_k (jax.lax.approx_max_k / approx_min_k), against JAX's CPU backend and numpy.

Off TPU both backends compute the exact top k, sorted, so values must be equal, not close.
Indices are equal too where no two values tie. Among equal values the plugin puts the
lower index first (numpy's stable argsort checks that); XLA:CPU's order among equals
depends on the dtype, the direction and the size (its TopK kernel for f32 max_k, a sort
otherwise), and approx_max_k promises nothing about it. Notebook 03's exercise writes this
file.
"""

import jax
import numpy as np
import pytest
from jax import lax

from reference import cpu_device, run_on

CASES = [
    # (shape, k, reduction_dimension)
    ((10,), 3, -1),
    ((4, 33), 5, 1),
    ((33, 4), 33, 0),
    ((2, 7, 3), 2, 1),
]


def _run(x, k, dim, is_max_k):
  top_k = lax.approx_max_k if is_max_k else lax.approx_min_k

  def f(v):
    return top_k(v, k, reduction_dimension=dim)

  with jax.enable_x64(x.dtype == np.float64):
    ours = [np.asarray(r) for r in jax.jit(f)(x)]
    ref = [np.asarray(r) for r in run_on(cpu_device(), f, x)]
  assert [(r.dtype, r.shape) for r in ours] == [(r.dtype, r.shape) for r in ref]
  return ours, ref


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,k,dim", CASES)
def test_distinct_values_match_cpu(shape, k, dim, dtype, is_max_k):
  rng = np.random.default_rng(1)
  x = (rng.permutation(np.prod(shape)).reshape(shape) - 20).astype(dtype)
  ours, ref = _run(x, k, dim, is_max_k)
  np.testing.assert_array_equal(ours[0], ref[0])
  np.testing.assert_array_equal(ours[1], ref[1])


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,k,dim", CASES)
def test_ties_go_to_the_lower_index(shape, k, dim, dtype, is_max_k):
  # Values rounded to a few levels, so that ties occur (-0 and +0 among them).
  x = np.round(np.random.default_rng(0).normal(size=shape) * 2).astype(dtype)
  ours, ref = _run(x, k, dim, is_max_k)
  np.testing.assert_array_equal(ours[0], ref[0])
  stable = np.argsort(-x if is_max_k else x, axis=dim, kind="stable")
  np.testing.assert_array_equal(ours[1], np.take(stable, np.arange(k), axis=dim))
  np.testing.assert_array_equal(np.take_along_axis(x, ours[1], axis=dim), ours[0])


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
def test_aggregate_to_topk_false_sorts_the_whole_dimension(is_max_k):
  # Off TPU, XLA:CPU returns every candidate: the whole dimension, sorted.
  x = np.random.default_rng(2).permutation(4 * 64).reshape(4, 64).astype(np.float32)
  top_k = lax.approx_max_k if is_max_k else lax.approx_min_k
  f = jax.jit(lambda v: top_k(v, 2, aggregate_to_topk=False))
  ours = [np.asarray(r) for r in f(x)]
  ref = [np.asarray(r) for r in run_on(cpu_device(), f, x)]
  order = np.argsort(-x if is_max_k else x, axis=1, kind="stable")
  np.testing.assert_array_equal(ours[1], order)
  np.testing.assert_array_equal(ours[1], ref[1])
  np.testing.assert_array_equal(ours[0], np.take_along_axis(x, order, axis=1))
