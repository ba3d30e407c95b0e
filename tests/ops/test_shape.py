"""Fast paths of StridedCopy and scatter (kernels/core/strided.cc, kernels/gather_scatter.cc).
Families: shape (transpose, broadcast, slice: most tests), indexing (reverse, pad) and
gather_scatter.

StridedCopy picks, after collapsing dims: tiled SIMD transposes (source contiguous along a
dim other than the destination's; 4x4/2x2/8x8/16x16 in-register blocks for 4/8/2/1-byte
elements, scalar tiles for 16; tiles staged through a buffer when a stride is a multiple
of 2 KiB), fills (broadcast rows; a memset when the value's bytes are all equal), memcpy
rows walked in stretches along the second-to-last dim, typed loops for reversed and
stride-2 rows, or an element loop; pad with interior padding 1 along rows stores rows
and gaps densely;
large copies split rows (a thread's range may start mid-stretch), pieces of one long row,
or tile bands across threads. Gather and scatter of dense rows (windows that are one
contiguous run) take a row loop that prefetches a few rows ahead.

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
from jax import lax

from reference import assert_matches_cpu
from op_samples import ALL, NUMERIC, assert_noargs_matches_cpu, ids, sample, vertical_slice
from op_samples import x64_each  # noqa: F401  (the fixture `vertical_slice` tests use)

DTYPES = [np.bool_, np.int8, np.float16, np.float32, np.float64, np.complex128]


def _random(rng, shape, dtype):
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype == np.complex128:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
  return (rng.standard_normal(shape) * 50).astype(dtype)


def _run(f, *args, platform="workshop"):
  with jax.enable_x64(True):  # Keep 64-bit arguments 64-bit.
    dev = jax.devices(platform)[0]
    return np.asarray(jax.jit(f)(*[jax.device_put(a, dev) for a in args]))


def _cpu(f, *args):
  """The reference: the same program on JAX's CPU backend."""
  return _run(f, *args, platform="cpu")


# Odd sizes, sizes around the tile and SIMD block edges, unit dims, and a large one that
# takes the threaded path.
TRANSPOSE_SHAPES = [
  (1, 1),
  (1, 17),
  (3, 17),
  (17, 3),
  (33, 65),
  (128, 128),
  (5, 7, 9),
  (2, 3, 4, 5),
  (2, 3, 1, 4, 5),
  (4, 9, 16, 3, 8),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES, ids=str)
def test_transpose_every_permutation(shape, dtype):
  x = _random(np.random.default_rng(0), shape, dtype)
  for perm in itertools.permutations(range(len(shape))):
    np.testing.assert_array_equal(
      _run(lambda x: jnp.transpose(x, perm), x), np.transpose(x, perm), err_msg=str(perm)
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
  "shape,perm",
  [
    ((1031, 517), (1, 0)),
    ((8, 300, 8, 64), (0, 2, 1, 3)),
    ((64, 3, 700), (2, 1, 0)),
    ((2, 515, 260), (0, 2, 1)),
  ],
  ids=str,
)
def test_large_transpose(shape, perm, dtype):
  x = _random(np.random.default_rng(1), shape, dtype)
  np.testing.assert_array_equal(_run(lambda x: jnp.transpose(x, perm), x), np.transpose(x, perm))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_of_reversed_and_sliced(dtype):
  # Negative and non-unit source strides combined with a transpose.
  x = _random(np.random.default_rng(2), (37, 45, 6), dtype)
  f = lambda x: jnp.transpose(x[::-1, 1::2], (1, 0, 2))[:, ::-1].T
  np.testing.assert_array_equal(_run(f, x), np.transpose(x[::-1, 1::2], (1, 0, 2))[:, ::-1].T)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
  "shape,out,dims",
  [
    ((), (7, 5), ()),
    ((), (1024, 1031), ()),
    ((5,), (3, 5), (1,)),
    ((5,), (5, 3), (0,)),
    ((1, 700), (900, 700), (0, 1)),
    ((3, 1), (3, 4, 600), (0, 2)),
  ],
  ids=str,
)
def test_broadcast(shape, out, dims, dtype):
  x = _random(np.random.default_rng(3), shape, dtype)
  expected = (
    np.broadcast_to(
      np.expand_dims(x, [d for d in range(len(out)) if d not in dims])
      if len(shape) < len(out)
      else x,
      out,
    )
    if shape != (3, 1)
    else np.broadcast_to(x[:, None, :], out)
  )
  np.testing.assert_array_equal(_run(lambda x: jax.lax.broadcast_in_dim(x, out, dims), x), expected)


# Permutations that keep the last dim: memcpy rows. Odd sizes; (3, 301, 7, 128) f32 is
# large enough to split across threads with 21 stretches of 301 rows, so a thread's range
# starts mid-stretch.
ROW_COPY_CASES = [
  ((5, 7, 3), (1, 0, 2)),
  ((3, 1, 4, 5), (2, 0, 1, 3)),
  ((8, 33, 8, 64), (0, 2, 1, 3)),
  ((3, 301, 7, 128), (0, 2, 1, 3)),
  ((2, 3, 4, 5, 6), (3, 1, 0, 2, 4)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm", ROW_COPY_CASES, ids=str)
def test_transpose_moving_whole_rows(shape, perm, dtype):
  x = _random(np.random.default_rng(6), shape, dtype)
  np.testing.assert_array_equal(_run(lambda x: jnp.transpose(x, perm), x), np.transpose(x, perm))
  # Rows read with a stride between them (a slice) and backwards (a reverse).
  f = lambda x: jnp.transpose(x[:, ::2][::-1], perm)
  np.testing.assert_array_equal(_run(f, x), np.transpose(x[:, ::2][::-1], perm))


# Staged tiles (strided.cc StageTiles): blocks of 1 MiB or more where a side's byte stride
# is a multiple of 2 KiB (2048-element rows fit every width). The odd other side leaves a
# partial last band (515 % tile) and partial last tiles, which go straight to the
# destination; the batched one splits bands of three blocks over threads.
STAGED_CASES = [
  ((2048, 515), (1, 0)),
  ((515, 2048), (1, 0)),
  ((2, 2048, 600), (0, 2, 1)),
  ((1024, 1024), (1, 0)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm", STAGED_CASES, ids=str)
def test_transpose_with_power_of_two_strides(shape, perm, dtype):
  x = _random(np.random.default_rng(7), shape, dtype)
  np.testing.assert_array_equal(_run(lambda x: jnp.transpose(x, perm), x), np.transpose(x, perm))


# Reverse along the contiguous dim and stride-2 slices take typed row loops (ReverseRow,
# EvenElementsRow): odd lengths, lengths below and around a SIMD vector, a row that is
# cut into pieces for the threads (2^18 elements in one row, 4 bytes or wider), and
# slices that start at an odd element.
ROW_LENGTHS = [1, 3, 7, 8, 9, 31, 33, 1001, 1 << 18]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_reverse_and_even_slice_of_rows(n, dtype):
  rows = 3 if n < 1 << 18 else 1
  x = _random(np.random.default_rng(8), (rows, 2 * n + 1), dtype)
  for f in (
    lambda x: x[:, ::-1],
    lambda x: x[:, ::2],
    lambda x: x[:, 1::2],
    lambda x: x[::-1, -2::-2],
    lambda x: x[:, : 2 * n : 2][:, ::-1],
  ):
    np.testing.assert_array_equal(_run(f, x), f(x))


def _fill_values(dtype):
  """Zero, a value whose bytes are all equal (memset) and one whose bytes differ."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return [np.bool_(False), np.bool_(True)]
  same = np.full(dtype.itemsize, 0x41, np.uint8).view(dtype)[0]
  differ = np.arange(1, dtype.itemsize + 1, dtype=np.uint8).view(dtype)[0]
  return [dtype.type(0), same, differ, dtype.type(-1) if dtype.kind != "c" else dtype.type(-1j)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_fill_values(dtype):
  for value in _fill_values(dtype):
    v = np.asarray(value)
    for out in [(7, 5), (1024, 1031)]:
      np.testing.assert_array_equal(
        _run(lambda v: jax.lax.broadcast_in_dim(v, out, ()), v),
        np.full(out, value),
        err_msg=repr(value),
      )
    # A column broadcast: one short fill per row.
    col = np.full((300, 1), value)
    np.testing.assert_array_equal(
      _run(lambda c: jax.lax.broadcast_in_dim(c[:, 0], (300, 7), (0,)), col),
      np.broadcast_to(col, (300, 7)),
    )
    x = _random(np.random.default_rng(7), (33, 65), dtype)
    pad = lambda x, v: jax.lax.pad(x, v, [(2, 3, 1), (0, 5, 0)])
    np.testing.assert_array_equal(_run(pad, x, v), _cpu(pad, x, v))


# Interior padding of 1 along the last dim (StridedCopyPadInterior's interleaving row loop):
# odd and even row lengths, crops by negative edges on either side, interior padding of
# the other dims too (rows then collapse across the gaps), a length-1 last dim, and one
# large enough to split rows over threads. The value's bytes differ, so a gap written
# with the wrong element or a missed one shows.
PAD_INTERIOR_CASES = [
  ((3, 1), [(0, 0, 0), (0, 0, 1)]),
  ((5, 8), [(0, 0, 0), (0, 0, 1)]),
  ((5, 9), [(1, 2, 0), (-1, -2, 1)]),
  ((4, 7), [(0, 0, 1), (2, 0, 1)]),
  ((2, 3, 33), [(0, 1, 1), (0, 0, 1), (-3, 4, 1)]),
  ((6, 1), [(0, 0, 0), (1, 1, 1)]),
  ((700, 800), [(1, 1, 0), (1, 1, 1)]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,config", PAD_INTERIOR_CASES, ids=str)
def test_pad_interior_along_rows(shape, config, dtype):
  x = _random(np.random.default_rng(9), shape, dtype)
  v = np.asarray(_fill_values(dtype)[-1])
  pad = lambda x, v: jax.lax.pad(x, v, config)
  np.testing.assert_array_equal(_run(pad, x, v), _cpu(pad, x, v))


# Dense-row gathers: row widths from 2 to 1000 elements, 1-D and 2-D index arrays (whose
# batch collapses to one dim), and a window that is part of a row (x[idx, 2:7] selects a
# start in both dims). Indices go out of range on both sides.
GATHER_ROW_CASES = [
  ((50, 2), (37,)),
  ((300, 17), (5, 40)),
  ((8192, 128), (8192,)),
  ((64, 1000), (300,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,idx_shape", GATHER_ROW_CASES, ids=str)
def test_gather_rows(shape, idx_shape, dtype):
  rng = np.random.default_rng(8)
  x = _random(rng, shape, dtype)
  rows = shape[0]
  idx = rng.integers(-rows - rows // 3, rows + rows // 3, idx_shape).astype(np.int32)
  in_range = np.clip(idx, 0, rows - 1)
  np.testing.assert_array_equal(_run(lambda x, i: x[i], x, in_range), x[in_range])
  # promise_in_bounds hands the indices (negative ones wrapped once, as in NumPy) to
  # stablehlo.gather, whose starts the kernel clamps into [0, rows - 1].
  take = lambda x, i: x.at[i].get(mode="promise_in_bounds")
  np.testing.assert_array_equal(_run(take, x, idx), _cpu(take, x, idx))
  if shape[1] >= 7:
    np.testing.assert_array_equal(_run(lambda x, i: x[i, 2:7], x, in_range), x[in_range, 2:7])
    part = lambda x, i: x.at[i, 2:7].get(mode="promise_in_bounds")
    np.testing.assert_array_equal(_run(part, x, idx), _cpu(part, x, idx))


SCATTER_DTYPES = [np.int32, np.int64, np.uint8, np.float32, np.float64]


@pytest.mark.parametrize("dtype", SCATTER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
  "rows,width,k",
  [(8192, 128, 8192), (100, 3, 5), (300, 1000, 700), (1000, 1, 70000), (50, 2, 1000), (7, 33, 9)],
  ids=str,
)
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
    np.testing.assert_allclose(
      ours.astype(np.float64),
      expected.astype(np.float64),
      rtol=tol,
      atol=tol * np.abs(u).sum(axis=0).max(),
    )
  else:
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("shape,k", [((8192, 128), 8192), ((64, 512), 4000)], ids=str)
def test_scatter_add_rows_split_over_threads_keeps_the_order(shape, k):
  """Whole-row scatters of 256 KiB to 8 MiB of updates split the table's rows over the
  thread pool; each row still adds its updates in index order, so float sums have the bits
  of XLA:CPU's sequential loop, even with most updates on a few rows."""
  rng = np.random.default_rng(6)
  idx = rng.integers(0, shape[0], k).astype(np.int32)
  idx[::3] = idx[1]
  u = rng.standard_normal((k, shape[1])).astype(np.float32)
  f = lambda u, i: jnp.zeros(shape, jnp.float32).at[i].add(u)
  np.testing.assert_array_equal(_run(f, u, idx), _cpu(f, u, idx))


def test_scatter_add_of_partial_rows_matches_cpu():
  # Windows of 64 columns starting at column 32: not whole rows, so one thread does them.
  rng = np.random.default_rng(7)
  idx = rng.integers(0, 512, 4096).astype(np.int32)
  u = rng.standard_normal((4096, 64)).astype(np.float32)
  f = lambda u, i: jnp.zeros((512, 128), jnp.float32).at[i, 32:96].add(u)
  np.testing.assert_array_equal(_run(f, u, idx), _cpu(f, u, idx))


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


@pytest.mark.parametrize("combine", ["add", "mul", "min", "max"])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64, np.float16], ids=str)
def test_scatter_rows_2d_indices(combine, dtype):
  """x.at[idx2d].<combine>(u): a 2-D index batch over rows of 17, duplicates, and indices
  out of range (the kernel drops those windows: JAX's default mode for .at[] updates)."""
  rng = np.random.default_rng(9)
  x = _random(rng, (40, 17), dtype)
  idx = rng.integers(-45, 45, (6, 25)).astype(np.int32)
  u = _random(rng, (6, 25, 17), dtype)
  f = lambda x, i, u: getattr(x.at[i], combine)(u)
  expected = _cpu(f, x, idx, u)
  ours = _run(f, x, idx, u)
  if dtype == np.float16:  # Combined in f32 and rounded per update on both backends.
    np.testing.assert_allclose(ours.astype(np.float32), expected.astype(np.float32), rtol=2e-3)
  elif np.issubdtype(dtype, np.floating):
    np.testing.assert_allclose(ours, expected, rtol=1e-6 if dtype == np.float32 else 1e-12)
  else:
    np.testing.assert_array_equal(ours, expected)


# ---- constant, iota ----


@vertical_slice
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)], ids=str)
def test_constant(dtype, shape):
  value = sample(dtype, shape, special=True)
  ours = assert_noargs_matches_cpu(lambda: jnp.asarray(value))
  np.testing.assert_array_equal(ours, value)  # Bit patterns: NaN, -0.0 included.
  assert ours.tobytes() == value.tobytes()


@vertical_slice
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_splat_constant(dtype):
  fill = sample(dtype, (1,), seed=3, special=False)[0]
  assert_noargs_matches_cpu(lambda: jnp.full((3, 5), fill, dtype))


@vertical_slice
@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize(
  "shape,dim",
  [((6,), 0), ((3, 4, 2), 0), ((3, 4, 2), 1), ((3, 4, 2), 2), ((0, 4), 1), ((5, 0), 0)],
  ids=str,
)
def test_iota(dtype, shape, dim):
  ours = assert_noargs_matches_cpu(lambda: lax.broadcasted_iota(dtype, shape, dim))
  expected = np.broadcast_to(
    np.arange(shape[dim], dtype=dtype).reshape([-1 if d == dim else 1 for d in range(len(shape))]),
    shape,
  )
  np.testing.assert_array_equal(ours, expected)


# ---- shape ops ----


@vertical_slice
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize(
  "in_shape,shape,dims",
  [
    ((), (2, 3), ()),
    ((3,), (2, 3), (1,)),
    ((3,), (3, 2), (0,)),
    ((1, 3), (4, 3), (0, 1)),  # size-1 dimension expands
    ((2, 3), (3, 4, 2), (2, 0)),  # operand dims map out of order
    ((2, 1, 3), (2, 5, 3, 2), (0, 1, 2)),
  ],
  ids=str,
)
def test_broadcast_in_dim(dtype, in_shape, shape, dims):
  x = sample(dtype, in_shape, seed=1)
  assert_matches_cpu(lambda x: lax.broadcast_in_dim(x, shape, dims), x, rtol=0, atol=0)


@vertical_slice
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize(
  "in_shape,shape",
  [((2, 3, 4), (6, 4)), ((6,), (1, 2, 1, 3)), ((), (1, 1)), ((0, 3), (3, 0))],
  ids=str,
)
def test_reshape(dtype, in_shape, shape):
  x = sample(dtype, in_shape, seed=2)
  ours = assert_matches_cpu(lambda x: x.reshape(shape), x, rtol=0, atol=0)
  np.testing.assert_array_equal(ours, x.reshape(shape))


@vertical_slice
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize(
  "shape,perm",
  [
    ((3, 4), (1, 0)),
    ((2, 3, 4), (2, 0, 1)),
    ((2, 3, 4), (1, 2, 0)),
    ((2, 3, 4, 5), (3, 1, 0, 2)),
    ((1, 5, 1), (2, 1, 0)),
    ((0, 3), (1, 0)),
  ],
  ids=str,
)
def test_transpose(dtype, shape, perm):
  x = sample(dtype, shape, seed=3)
  ours = assert_matches_cpu(lambda x: jnp.transpose(x, perm), x, rtol=0, atol=0)
  np.testing.assert_array_equal(ours, np.transpose(x, perm))


@pytest.mark.usefixtures("x64_each")
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_concatenate_of_single_element_blocks(dtype):
  # Columns of one element joined (the index pairs of img[y, x]), a middle dim of 1 and 2,
  # and a leading-dim concatenate: each operand goes through StridedCopy as [outer, block].
  rng = np.random.default_rng(31)
  a, b, c = (_random(rng, s, dtype) for s in ((30001, 1), (30001, 1), (30001, 2)))
  got = jax.jit(lambda a, b, c: jnp.concatenate([a, b, c, a], 1))(a, b, c)
  np.testing.assert_array_equal(np.asarray(got), np.concatenate([a, b, c, a], 1))
  d, e = _random(rng, (7, 1, 5), dtype), _random(rng, (7, 2, 5), dtype)
  got = jax.jit(lambda d, e: (jnp.concatenate([d, e], 1), jnp.concatenate([e, e], 0)))(d, e)
  np.testing.assert_array_equal(np.asarray(got[0]), np.concatenate([d, e], 1))
  np.testing.assert_array_equal(np.asarray(got[1]), np.concatenate([e, e], 0))
