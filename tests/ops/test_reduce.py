"""Reduce with region bodies vs JAX's CPU backend: argmax/argmin (NaNs, ties, every axis,
integer and bool operands, long rows, the dedicated kernel, vmap) and reduce bodies no
single-combiner kernel has (variadic, with constants, empty dimensions, a captured value).
Family: reduce.

Tolerances: everything here is exact (indices, selections, sums of small integers in
float). The body capturing a value from outside its region is checked against numpy
(XLA refuses such regions).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu, run_on, run_stablehlo
from compiler_helpers import compile_fn
from op_samples import FLOATS, NUMERIC, PRED, S32, U32, ids, sample, vertical_slice
from op_samples import x64_each  # noqa: F401  (the fixture `vertical_slice` tests use)


# Every test twice: loops and fusions interpreted, and compiled whatever their size.
pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py

rng = np.random.default_rng(0)


# ---- reduce: argmax/argmin and general bodies ----


def _with_nans_and_ties(shape, dtype=np.float32):
  x = rng.integers(-3, 4, shape).astype(dtype)  # Small range: many ties.
  if np.dtype(dtype).kind == "f":
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, size=flat.size // 6, replace=False)] = np.nan
    x.reshape(-1)[: shape[-1]] = np.nan  # A row (or column) that is all NaN in places.
  return x


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_argmax_argmin_each_axis_with_nans_and_ties(fn, axis):
  assert_matches_cpu(lambda x: fn(x, axis=axis), _with_nans_and_ties((4, 5, 6)))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.int8])
def test_argmax_argmin_integer_and_bool(dtype):
  x = rng.integers(0, 3, (6, 7)).astype(dtype)
  assert_matches_cpu(lambda x: (jnp.argmax(x, 0), jnp.argmin(x, 1), jnp.argmax(x)), x)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_argmax_argmin_long_rows(fn):
  # Long contiguous rows take the kernel's chunked path; the chunks must combine to the
  # first extremum / first NaN.
  x = rng.integers(-2, 3, (4, 1003)).astype(np.float32)
  x[0, [700, 30, 999]] = np.nan
  x[1, 1002] = np.nan
  x[2, 500] = 7 if fn is jnp.argmax else -7
  assert_matches_cpu(lambda x: fn(x, axis=1), x)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_argmax_argmin_rows_by_position(fn, dtype):
  # Many rows over the last axis take the kernel's two-pass row fold, split over the pool:
  # rows with ties, +-0, NaN (first wins) and infinities, rows shorter than the fold's
  # lanes; checked against numpy, whose argmax/argmin pick the first extremum and the first
  # NaN.
  for n in (3, 16, 64, 67):
    x = rng.integers(-3, 4, (300, n)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
      x[1, :] = 0.0
      x[1, n // 2] = -0.0
      x[2, [n - 1, n // 3]] = np.nan
      x[3, n // 2] = np.inf
      x[4, :] = -np.inf
      x[5, [0, n - 1]] = [np.inf, -np.inf]
    got = np.asarray(jax.jit(lambda x: fn(x, axis=1))(x))
    np.testing.assert_array_equal(got, (np.argmax if fn is jnp.argmax else np.argmin)(x, axis=1))


def test_arg_reduce_with_an_index_operand_that_is_not_an_iota():
  # The argmax body over (x, idx) with idx not an iota: the kernel must read the indices
  # (the smallest index among equal maxima), not take positions.
  def f(x, idx):
    def body(a, b):
      keep = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
      return jnp.where(keep, a[0], b[0]), jnp.where(keep, a[1], b[1])

    return lax.reduce((x, idx), (np.float32(-np.inf), np.int32(0)), body, (1,))

  x = rng.integers(0, 3, (50, 40)).astype(np.float32)
  idx = rng.permutation(50 * 40).reshape(50, 40).astype(np.int32)
  assert_matches_cpu(f, x, idx)


@pytest.mark.parametrize("fn", [np.argmax, np.argmin])
def test_argmax_argmin_rows_split_over_the_pool(fn):
  # 20000 rows of 64 (a k-means assignment): enough work for every thread; many ties,
  # signed zeros, NaNs in some rows. numpy's first-extremum, first-NaN rule is the
  # sequential fold's.
  x = rng.integers(-3, 4, (20000, 64)).astype(np.float32)
  x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
  x[rng.integers(0, 20000, 300), rng.integers(0, 64, 300)] = np.nan
  jfn = jnp.argmax if fn is np.argmax else jnp.argmin
  got = run_on(jax.devices("workshop")[0], lambda x: jfn(x, axis=1), x)
  np.testing.assert_array_equal(got, fn(x, axis=1))
  assert_matches_cpu(lambda x: jfn(x, axis=1), x)


def test_argmax_uses_dedicated_kernel():
  plan = compile_fn(lambda x: jnp.argmax(x, axis=1), np.ones((3, 4), np.float32)).plan
  assert "argmax" in [i.op for i in plan.instrs]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_argmax_reads_a_one_dimensional_index(axis):
  # The index operand jnp.argmax builds (an iota of the operand's shape) becomes the 1-D
  # iota along the reduced dim (compiler/broadcasts.py, attribute index_dims).
  x = _with_nans_and_ties((6, 7, 8))
  plan = compile_fn(lambda x: jnp.argmax(x, axis=axis), x).plan
  [arg] = [i for i in plan.instrs if i.op == "argmax"]
  assert arg.attrs["index_dims"] == [axis] and plan.slots[arg.ins[1]][1] == (x.shape[axis],)
  assert all(plan.slots[i.outs[0]][1] == (x.shape[axis],) for i in plan.instrs if i.op == "iota")
  np.testing.assert_array_equal(
    run_on(jax.devices("workshop")[0], lambda x: jnp.argmax(x, axis=axis), x), np.argmax(x, axis)
  )


def test_vmap_of_argmax():
  assert_matches_cpu(jax.vmap(lambda x: jnp.argmin(x, axis=0)), _with_nans_and_ties((3, 4, 5)))


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_variadic_reduce_general_body(dims):
  # (sum, max) in one reduce, plus a count of positives: a body no single kernel has.
  def f(x, y):
    init = (np.float32(0), np.float32(-np.inf), np.int32(0))
    body = lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1]), a[2] + b[2])
    return lax.reduce((x, x, y), init, body, dims)

  x = rng.integers(-9, 9, (5, 6, 7)).astype(np.float32)
  assert_matches_cpu(f, x, (x > 0).astype(np.int32))


def test_reduce_general_body_with_constant_and_empty_dim():
  # xor is no single-combiner kernel; the mask constant is broadcast across lanes.
  f = lambda x: lax.reduce(x, np.uint32(0), lambda a, b: (a ^ b) & np.uint32(0xFFFF00FF), (1,))
  assert_matches_cpu(f, rng.integers(0, 2**32, (4, 9)).astype(np.uint32))
  assert_matches_cpu(f, np.zeros((4, 0), np.uint32))


def test_reduce_general_body_with_captured_scalar():
  # The body uses %s from outside the region: a clamp from below, still associative.
  text = """
    func.func public @main(%x: tensor<4x5xf32>, %s: tensor<f32>) -> tensor<4xf32> {
      %z = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %0 = stablehlo.reduce(%x init: %z) across dimensions = [1]
          : (tensor<4x5xf32>, tensor<f32>) -> tensor<4xf32>
       reducer(%a: tensor<f32>, %b: tensor<f32>) {
        %1 = stablehlo.maximum %a, %b : tensor<f32>
        %2 = stablehlo.maximum %1, %s : tensor<f32>
        stablehlo.return %2 : tensor<f32>
      }
      return %0 : tensor<4xf32>
    }"""
  x = rng.integers(-4, 4, (4, 5)).astype(np.float32)
  # XLA refuses regions that capture values, so numpy is the reference.
  [ours] = run_stablehlo(text, x, np.float32(1.5))
  np.testing.assert_array_equal(ours, np.maximum(x.max(1), 1.5))


# ---- reduce ----

SHAPE3 = (3, 4, 5)
AXES = [(0,), (1,), (2,), (0, 2), (0, 1, 2)]


def reduce_tol(dtype, n):
  if np.dtype(dtype).kind != "f":
    return 0, 0
  eps = np.finfo(dtype).eps
  return 10 * eps, 4 * n * eps * 10


@vertical_slice
@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("body", ["add", "max", "min"])
def test_reduce(body, axes, dtype):
  # lax.reduce keeps the dtype (jnp.sum would widen integers and add a convert).
  x = sample(dtype, SHAPE3, seed=23, special=False)
  combine = {"add": lax.add, "max": lax.max, "min": lax.min}[body]
  init = {
    "add": 0,
    "max": -np.inf if dtype.kind == "f" else np.iinfo(dtype).min,
    "min": np.inf if dtype.kind == "f" else np.iinfo(dtype).max,
  }[body]
  init = np.array(init, dtype)
  n = int(np.prod([SHAPE3[a] for a in axes]))
  rtol, atol = reduce_tol(dtype, n)
  assert_matches_cpu(lambda x: lax.reduce(x, init, combine, axes), x, rtol=rtol, atol=atol)


@vertical_slice
@pytest.mark.parametrize("dtype", [S32, U32], ids=ids([S32, U32]))
def test_reduce_sum_wraps(dtype):
  x = sample(dtype, (4, 6), seed=24, special=True)  # min/max included: sums overflow
  assert_matches_cpu(lambda x: lax.reduce(x, np.array(0, dtype), lax.add, (1,)), x)


@vertical_slice
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("jnp_reduce", [jnp.all, jnp.any], ids=["all", "any"])
def test_reduce_pred(jnp_reduce, axes):
  x = sample(PRED, SHAPE3, seed=25)
  x[0] = True
  assert_matches_cpu(lambda x: jnp_reduce(x, axis=axes), x)


@vertical_slice
@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize(
  "jnp_reduce", [jnp.sum, jnp.max, jnp.min, jnp.prod], ids=["sum", "max", "min", "prod"]
)
@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
def test_jnp_reduce_keepdims(jnp_reduce, axis, dtype):
  x = sample(dtype, SHAPE3, seed=26, special=False)
  rtol, atol = reduce_tol(dtype, 60)
  if jnp_reduce is jnp.prod:
    x = 1 + x / 10
    atol = 0
  assert_matches_cpu(lambda x: jnp_reduce(x, axis=axis, keepdims=True), x, rtol=rtol, atol=atol)


@vertical_slice
@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_reduce_max_propagates_nan(dtype):
  x = sample(dtype, (4, 5), seed=27, special=False)
  x[1, 2] = np.nan
  x[3, 0] = np.inf
  ours = assert_matches_cpu(lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0)), x)
  assert np.isnan(ours[0][1]) and np.isnan(ours[1][2])


@vertical_slice
def test_reduce_empty():
  # Reducing a zero-size dimension yields the init value.
  x = np.zeros((3, 0), np.float32)
  ours = assert_matches_cpu(lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=1, initial=-7.0)), x)
  np.testing.assert_array_equal(ours[0], [0.0] * 3)
  np.testing.assert_array_equal(ours[1], [-7.0] * 3)


@pytest.mark.parametrize(
  "shape, axes",
  [((4096, 3, 2), (1,)), ((512, 16, 5), (1,)), ((3, 40, 5, 3), (0, 2)), ((100, 2, 16), (1,))],
)
def test_narrow_kept_rows_fold_in_order(shape, axes):
  # A middle-axis reduction of at most 16 rows over a kept inner dim of at most 16
  # (reduce.cc's ReduceNarrowRows): float sums fold the reduced rows left to right, then
  # init + that, exactly as numpy's float32 adds in that order; max keeps NaN; integer
  # sums are exact. Against float64 as well.
  x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
  moved = np.moveaxis(x, axes, range(len(axes))).reshape(
    -1, *[d for i, d in enumerate(shape) if i not in axes]
  )
  expected = moved[0].copy()
  for r in moved[1:]:
    expected = expected + r
  expected = np.float32(0) + expected
  ours = np.asarray(jax.jit(lambda v: v.sum(axes))(x))
  np.testing.assert_array_equal(ours, expected)
  np.testing.assert_allclose(ours, x.astype(np.float64).sum(axes), rtol=1e-5, atol=1e-3)
  y = x.copy()
  y.reshape(-1)[::37] = np.nan
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v.max(axes))(y)), y.max(axes))
  k = rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)
  np.testing.assert_array_equal(
    np.asarray(jax.jit(lambda v: v.sum(axes))(k)), k.sum(axes, dtype=np.int32)
  )


# ---- short rows folded across rows (vector lanes = rows) ----


def _edge_rows(shape, dtype):
  """Small integers (many ties) of `dtype`; floats also get NaNs, +-0 and infinities."""
  x = rng.integers(-3, 4, shape).astype(dtype)
  if np.issubdtype(dtype, np.floating):
    flat = x.reshape(-1)
    flat[flat == 0] = np.where(rng.random(int((flat == 0).sum())) < 0.5, -0.0, 0.0)
    flat[rng.choice(flat.size, size=flat.size // 40, replace=False)] = np.nan
    flat[rng.choice(flat.size, size=flat.size // 40, replace=False)] = np.inf
    flat[rng.choice(flat.size, size=flat.size // 40, replace=False)] = -np.inf
  return x


@vertical_slice
@pytest.mark.parametrize("n", [1, 2, 4, 7, 15])
@pytest.mark.parametrize(
  "dtype", [np.float32, np.float64, np.int8, np.uint8, np.int16, np.int32, np.int64]
)
def test_argmax_argmin_over_short_rows_match_numpy(dtype, n):
  # Rows shorter than 16 fold eight at a time across rows (reduce_general.cc
  # ArgFoldShortRows), 64-bit indices included (x64); 50001 rows: the pool splits them,
  # and the last rows are fewer than the lanes. numpy's rule is the sequential fold's:
  # the first extremum, the first NaN.
  x = _edge_rows((50001, n), dtype)
  got = run_on(jax.devices("workshop")[0], lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 1)), x)
  np.testing.assert_array_equal(got[0], np.argmax(x, 1))
  np.testing.assert_array_equal(got[1], np.argmin(x, 1))


def test_argmax_over_short_rows_reads_each_rows_indices():
  # jnp.argmax's body over an index operand that is not positions and differs by row
  # (each row of 9 has its own permutation of 0..4): the lanes gather each row's indices
  # (ix_row != 0), and ties take the smaller index, not the earlier element.
  def f(x, idx2):
    idx = lax.broadcast_in_dim(idx2, x.shape, (0, 2))

    def body(a, b):  # jnp.argmax's body, with lax.select (jnp.where is a call).
      keep = (a[0] > b[0]) | (a[0] != a[0])
      keep_index = keep | ((a[0] == b[0]) & (a[1] < b[1]))
      return lax.select(keep, a[0], b[0]), lax.select(keep_index, a[1], b[1])

    return lax.reduce((x, idx), (np.float32(-np.inf), np.int32(0)), body, (2,))

  x = _edge_rows((9, 7001, 5), np.float32)
  idx2 = np.stack([rng.permutation(5) for _ in range(9)]).astype(np.int32)
  assert "argmax" in [i.op for i in compile_fn(f, x, idx2).plan.instrs]
  value, index = run_on(jax.devices("workshop")[0], f, x, idx2)
  # Reference: the sequential fold, in numpy over the last axis.
  idx = np.broadcast_to(idx2[:, None, :], x.shape)
  av = np.full(x.shape[:2], -np.inf, np.float32)
  ai = np.zeros(x.shape[:2], np.int32)
  for j in range(x.shape[2]):
    bv, bi = x[..., j], idx[..., j]
    keep = (av > bv) | np.isnan(av)
    keep_index = keep | ((av == bv) & (ai < bi))
    av, ai = np.where(keep, av, bv), np.where(keep_index, ai, bi)
  np.testing.assert_array_equal(index, ai)
  np.testing.assert_array_equal(value, av)


@pytest.mark.parametrize("shape, axis", [((5, 30001), 0), ((4, 6, 5001), 1), ((3, 2, 700), 0)])
@pytest.mark.parametrize("fn", [np.argmax, np.argmin])
def test_argmax_argmin_over_a_leading_or_middle_axis_match_numpy(fn, shape, axis):
  # Outputs along the kept inner dim: each input row folds into a row of accumulators
  # (ArgStepColumns), the columns split over the pool.
  x = _edge_rows(shape, np.float32)
  jfn = jnp.argmax if fn is np.argmax else jnp.argmin
  got = run_on(jax.devices("workshop")[0], lambda x: jfn(x, axis=axis), x)
  np.testing.assert_array_equal(got, fn(x, axis=axis))


@vertical_slice
@pytest.mark.parametrize("n", [1, 3, 7, 31])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int16, np.int32])
def test_reductions_over_short_rows_fold_left_to_right(dtype, n):
  # Rows shorter than a 32-byte vector fold across rows (reduce.cc FoldRows): each row
  # still takes its elements left to right, then init op that, so a float sum has the
  # bits of that order in numpy; max/min keep NaN; integer sums wrap. Rows of 31 int8 are
  # short, of 31 f32 are not: both ways checked. Against float64 as well.
  rows = 20003
  if np.issubdtype(dtype, np.floating):
    x = (rng.standard_normal((rows, n)) * 10.0 ** rng.integers(-3, 4, (rows, n))).astype(dtype)
    x.reshape(-1)[::7] = 0.0  # Ties of +0 and -0: which one max/min keep is bitwise checked.
    x.reshape(-1)[3::7] = -0.0
  else:
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (rows, n), dtype=dtype)
  total = x[:, 0].copy()
  for j in range(1, n):
    total = total + x[:, j]
  total = dtype(0) + total
  dev = jax.devices("workshop")[0]
  # lax.reduce, not jnp.sum: jnp.sum widens small integers.
  got_sum, got_max, got_min = run_on(
    dev, lambda v: (lax.reduce(v, dtype(0), lax.add, (1,)), v.max(1), v.min(1)), x
  )
  if n < 32 // np.dtype(dtype).itemsize:  # The short-row order; longer rows use lanes.
    np.testing.assert_array_equal(got_sum, total)
  if np.issubdtype(dtype, np.floating):
    np.testing.assert_allclose(got_sum, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-3)
  else:
    np.testing.assert_array_equal(got_sum, x.sum(1, dtype=dtype))
  np.testing.assert_array_equal(got_max, x.max(1))
  np.testing.assert_array_equal(got_min, x.min(1))
  # The sequential fold's bits (elementwise.cc Maximum/Minimum: the first operand on ties,
  # NaN from either side), then init op that: the sign of a zero included.
  acc_max, acc_min = x[:, 0].copy(), x[:, 0].copy()
  for j in range(1, n):
    v = x[:, j]
    with np.errstate(invalid="ignore"):
      acc_max = np.where((acc_max >= v) | (acc_max != acc_max), acc_max, v)
      acc_min = np.where((v >= acc_min) | (acc_min != acc_min), acc_min, v)
  low, high = (
    (-np.inf, np.inf)
    if np.issubdtype(dtype, np.floating)
    else (
      np.iinfo(dtype).min,
      np.iinfo(dtype).max,
    )
  )
  with np.errstate(invalid="ignore"):
    acc_max = np.where(dtype(low) >= acc_max, dtype(low), acc_max).astype(dtype)
    acc_min = np.where(acc_min >= dtype(high), dtype(high), acc_min).astype(dtype)
  np.testing.assert_array_equal(got_max.view(np.uint8), acc_max.view(np.uint8))
  np.testing.assert_array_equal(got_min.view(np.uint8), acc_min.view(np.uint8))
  if np.issubdtype(dtype, np.floating):
    y = x.copy()
    y.reshape(-1)[::11] = np.nan
    np.testing.assert_array_equal(
      run_on(dev, lambda v: (v.max(1), v.min(1)), y), (y.max(1), y.min(1))
    )


@pytest.mark.parametrize("n", [1, 5, 10, 31, 40])
def test_any_all_over_short_rows_match_numpy(n):
  # pred rows fold as bytes (reduce.cc FoldRows): or for any, and for all, the short-row
  # path below 32 and the vector lanes above; many rows, so the pool splits them.
  x = rng.random((30011, n)) < (1.0 / n)
  dev = jax.devices("workshop")[0]
  got_any, got_all = run_on(dev, lambda v: (jnp.any(v, 1), jnp.all(~v, 1)), x)
  np.testing.assert_array_equal(got_any, x.any(1))
  np.testing.assert_array_equal(got_all, (~x).all(1))
  ors = run_on(dev, lambda v: lax.reduce(v, False, lax.bitwise_or, (1,)), x)
  np.testing.assert_array_equal(ors, x.any(1))
