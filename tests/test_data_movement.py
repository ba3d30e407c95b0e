"""Fast paths of StridedCopy and scatter (kernels/strided.cc, kernels/gather_scatter.cc).

StridedCopy picks, after collapsing dims: tiled SIMD transposes (source contiguous along a
dim other than the destination's; 4x4/2x2/8x8 in-register blocks for 4/8/2-byte elements,
scalar tiles for 1/16), fills (broadcast rows), memcpy rows, or an element loop; large
copies split rows, pieces of one long row, or tile bands across threads. Scatter of dense
rows at multiples of the row length splits the result's rows across threads.

Every result is data movement (exact) except scatter-add, whose duplicate indices are
applied in batch order on both sides; we compare against numpy's np.add.at (same order), so
floats are compared with a few-ulp tolerance only because numpy may use a different
summation grouping; integers are exact.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

DTYPES = [np.bool_, np.int8, np.float16, np.float32, np.float64, np.complex128]


def _random(rng, shape, dtype):
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype == np.complex128:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
  return (rng.standard_normal(shape) * 50).astype(dtype)


def _run(f, *args):
  with jax.enable_x64(True):  # Keep 64-bit arguments 64-bit.
    dev = jax.devices("workshop")[0]
    return np.asarray(jax.jit(f)(*[jax.device_put(a, dev) for a in args]))


# Odd sizes, sizes around the tile and SIMD block edges, unit dims, and a large one that
# takes the threaded path.
TRANSPOSE_SHAPES = [(1, 1), (1, 17), (3, 17), (17, 3), (33, 65), (128, 128), (5, 7, 9),
                    (2, 3, 4, 5), (2, 3, 1, 4, 5), (4, 9, 16, 3, 8)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES, ids=str)
def test_transpose_every_permutation(shape, dtype):
  x = _random(np.random.default_rng(0), shape, dtype)
  for perm in itertools.permutations(range(len(shape))):
    np.testing.assert_array_equal(_run(lambda x: jnp.transpose(x, perm), x),
                                  np.transpose(x, perm), err_msg=str(perm))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm", [((1031, 517), (1, 0)), ((8, 300, 8, 64), (0, 2, 1, 3)),
                                        ((64, 3, 700), (2, 1, 0)), ((2, 515, 260), (0, 2, 1))],
                         ids=str)
def test_large_transpose(shape, perm, dtype):
  x = _random(np.random.default_rng(1), shape, dtype)
  np.testing.assert_array_equal(_run(lambda x: jnp.transpose(x, perm), x),
                                np.transpose(x, perm))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_of_reversed_and_sliced(dtype):
  # Negative and non-unit source strides combined with a transpose.
  x = _random(np.random.default_rng(2), (37, 45, 6), dtype)
  f = lambda x: jnp.transpose(x[::-1, 1::2], (1, 0, 2))[:, ::-1].T
  np.testing.assert_array_equal(_run(f, x), np.transpose(x[::-1, 1::2], (1, 0, 2))[:, ::-1].T)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,out,dims", [((), (7, 5), ()), ((), (1024, 1031), ()),
                                            ((5,), (3, 5), (1,)), ((5,), (5, 3), (0,)),
                                            ((1, 700), (900, 700), (0, 1)),
                                            ((3, 1), (3, 4, 600), (0, 2))], ids=str)
def test_broadcast(shape, out, dims, dtype):
  x = _random(np.random.default_rng(3), shape, dtype)
  expected = np.broadcast_to(np.expand_dims(x, [d for d in range(len(out)) if d not in dims])
                             if len(shape) < len(out) else x, out) if shape != (3, 1) else \
      np.broadcast_to(x[:, None, :], out)
  np.testing.assert_array_equal(
      _run(lambda x: jax.lax.broadcast_in_dim(x, out, dims), x), expected)


# f16 scatter-add is not supported by the kernel yet (DispatchReducer has no f16 add).
SCATTER_DTYPES = [np.int32, np.int64, np.uint8, np.float32, np.float64]


@pytest.mark.parametrize("dtype", SCATTER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rows,width,k", [(8192, 128, 8192), (100, 3, 5), (300, 1000, 700),
                                          (1000, 1, 70000)], ids=str)
def test_scatter_add_rows(rows, width, k, dtype):
  """x.at[idx].add(u) with duplicates and out-of-range indices. JAX wraps negative indices
  >= -rows, then the kernel drops windows still out of range."""
  rng = np.random.default_rng(4)
  idx = rng.integers(-rows - rows // 4, rows + rows // 4, k).astype(np.int32)
  idx[: k // 2] = idx[0]  # Many duplicates of one row.
  x = _random(rng, (rows, width), dtype)
  u = _random(rng, (k, width), dtype)
  ours = _run(lambda x, u, i: x.at[i].add(u, mode="drop"), x, u, idx)
  expected = x.copy()
  wrapped = np.where(idx < 0, idx + rows, idx)
  keep = (wrapped >= 0) & (wrapped < rows)
  np.add.at(expected, wrapped[keep], u[keep])
  if np.issubdtype(dtype, np.floating):
    tol = {np.float32: 1e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(ours.astype(np.float64), expected.astype(np.float64),
                               rtol=tol, atol=tol * np.abs(u).sum(axis=0).max())
  else:
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.complex128], ids=str)
def test_scatter_set_rows_last_wins(dtype):
  rng = np.random.default_rng(5)
  idx = rng.integers(0, 2048, 20000).astype(np.int32)
  x = _random(rng, (2048, 64), dtype)
  u = _random(rng, (20000, 64), dtype)
  expected = x.copy()
  for j, i in enumerate(idx):
    expected[i] = u[j]
  np.testing.assert_array_equal(_run(lambda x, u, i: x.at[i].set(u), x, u, idx), expected)
