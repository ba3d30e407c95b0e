"""Every op of the vertical slice on the workshop backend against JAX's CPU backend.
Families: elementwise (most tests), shape, dot and reduce.

Each test jits a small function that lowers to (mostly) the one StableHLO op under test and
compares with the same program on XLA:CPU (`assert_matches_cpu`) or with numpy.

Dtypes: f32, f64, s32, s64, u32 and pred wherever JAX accepts the op for the dtype. x64 is
switched on for this module (and restored afterwards) so f64/s64 stay 64-bit.

Tolerances (see reference._DEFAULT_TOL unless a test says otherwise):
  * integers and pred: exact. Integer kernels must reproduce XLA's wrap-around and its
    defined results for division by zero and INT_MIN / -1.
  * f32 2e-5 / f64 1e-12 relative for elementwise math: libm and XLA's vectorized
    polynomial approximations (exp, log, tanh) differ by a few ulps.
  * sums and dot products add in a different order (OpenBLAS / pairwise vs XLA's loops), so
    they also get an absolute tolerance of ~n·eps·max|term| for n terms, needed where the
    result cancels to ~0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
S32, S64, U32 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32)
PRED = np.dtype(np.bool_)
FLOATS = [F32, F64]
INTS = [S32, S64, U32]
NUMERIC = FLOATS + INTS
ALL = NUMERIC + [PRED]


# conftest.py: x64 on for the module; every test once as a user runs it (WORKSHOP_CODEGEN
# default: a single op is never big enough for the tier) and once with the tier taking
# every fusion and loop it covers ("force"), so each op here also runs as generated code
# wherever the tier can generate it.
pytestmark = [pytest.mark.usefixtures("x64"), pytest.mark.codegen_settings("1", "force")]


def ids(dtypes):
  return [np.dtype(d).name for d in dtypes]


def sample(dtype, shape, seed=0, special=True) -> np.ndarray:
  """Random values of `dtype`; with `special`, the dtype's edge values are mixed in.

  Floats get NaN, ±inf, ±0 and huge values; integers their min, max, 0 and -1 (max for
  unsigned), so wrap-around and sign handling are exercised.
  """
  dtype = np.dtype(dtype)
  rng = np.random.default_rng(seed)
  if dtype == PRED:
    return rng.random(shape) < 0.5
  if dtype.kind == "f":
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30]
  else:
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), 1000, shape, dtype=dtype, endpoint=True)
    edges = [info.min, info.max, 0, 1] + ([-1] if info.min < 0 else [])
  if special and x.size:
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, min(len(edges), flat.size), replace=False)
    flat[picks] = np.array(edges[: len(picks)], dtype)
  return x


def run_noargs(device, f):
  """jit(f)() on `device`: a function with no arguments runs on the default device."""
  with jax.default_device(device):
    out = jax.jit(f)()
  assert out.devices() == {device}
  return np.asarray(out)


def assert_noargs_matches_cpu(f):
  ours = run_noargs(jax.devices("workshop")[0], f)
  ref = run_noargs(jax.devices("cpu")[0], f)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  np.testing.assert_array_equal(ours, ref)
  return ours


# ---- constant, iota ----


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)], ids=str)
def test_constant(dtype, shape):
  value = sample(dtype, shape, special=True)
  ours = assert_noargs_matches_cpu(lambda: jnp.asarray(value))
  np.testing.assert_array_equal(ours, value)  # Bit patterns: NaN, -0.0 included.
  assert ours.tobytes() == value.tobytes()


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_splat_constant(dtype):
  fill = sample(dtype, (1,), seed=3, special=False)[0]
  assert_noargs_matches_cpu(lambda: jnp.full((3, 5), fill, dtype))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize(
  "shape,dim", [((6,), 0), ((3, 4, 2), 0), ((3, 4, 2), 1), ((3, 4, 2), 2), ((0, 4), 1)], ids=str
)
def test_iota(dtype, shape, dim):
  ours = assert_noargs_matches_cpu(lambda: lax.broadcasted_iota(dtype, shape, dim))
  expected = np.broadcast_to(
    np.arange(shape[dim], dtype=dtype).reshape([-1 if d == dim else 1 for d in range(len(shape))]),
    shape,
  )
  np.testing.assert_array_equal(ours, expected)


# ---- convert ----


def convert_input(dtype) -> np.ndarray:
  """Values that probe every conversion's corner: saturation, NaN, rounding, sign."""
  dtype = np.dtype(dtype)
  if dtype == PRED:
    return np.array([True, False, True, True, False])
  if dtype.kind == "f":
    values = [
      np.nan,
      -np.nan,
      np.inf,
      -np.inf,
      0.0,
      -0.0,
      1.5,
      -1.5,
      2.5,
      -2.7,
      0.4,
      3e9,
      -3e9,
      4.5e9,
      1e19,
      -1e19,
      1e300 if dtype == F64 else 3e38,
      1e-30,
      2147483520.0,
      2147483648.0,
      -2147483648.0,
      4294967040.0,
      9.2e18,
    ]
    return np.array(values, dtype)
  info = np.iinfo(dtype)
  values = [info.min, info.max, 0, 1, 7, 16777217, 2**31 - 1, 2**32 - 1, info.max - 1, 123456789]
  if info.min < 0:
    values += [-1, -16777217, -(2**31), -(2**53) - 1]
  return np.array([v for v in values if info.min <= v <= info.max], dtype)


@pytest.mark.parametrize("to", ALL, ids=ids(ALL))
@pytest.mark.parametrize("frm", ALL, ids=ids(ALL))
def test_convert(frm, to):
  # XLA semantics (not C's UB): float -> int rounds toward zero and saturates, NaN -> 0;
  # int -> float rounds to nearest; -> pred is x != 0 (JAX lowers it as compare NE);
  # integer narrowing / sign changes wrap.
  x = convert_input(frm)
  assert_matches_cpu(lambda x: lax.convert_element_type(x, to), x, rtol=0, atol=0)


# ---- shape ops ----


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


# ---- elementwise arithmetic ----

BINARY = {
  "add": (lax.add, NUMERIC),
  "subtract": (lax.sub, NUMERIC),
  "multiply": (lax.mul, NUMERIC),
  "maximum": (lax.max, ALL),
  "minimum": (lax.min, ALL),
}


@pytest.mark.parametrize(
  "name,dtype",
  [(n, d) for n, (_, ds) in BINARY.items() for d in ds],
  ids=[f"{n}-{d.name}" for n, (_, ds) in BINARY.items() for d in ds],
)
def test_binary(name, dtype):
  op = BINARY[name][0]
  x = sample(dtype, (5, 7), seed=4)
  y = sample(dtype, (5, 7), seed=5)
  y[0, :3] = x[0, :3]  # some equal pairs, including edge values
  assert_matches_cpu(op, x, y)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [lax.max, lax.min], ids=["maximum", "minimum"])
def test_min_max_propagate_nan(op, dtype):
  # NaN in either operand wins, whichever side it is on (unlike C's fmax/fmin).
  x = np.array([np.nan, 1.0, np.nan, -np.inf, np.inf, 0.0], dtype)
  y = np.array([1.0, np.nan, np.nan, np.nan, np.nan, 0.0], dtype)
  ours = assert_matches_cpu(op, x, y)
  np.testing.assert_array_equal(np.isnan(ours), [1, 1, 1, 1, 1, 0])


@pytest.mark.xfail(
  strict=True,
  reason=(
    "BUG: Maximum/Minimum in element_ops.h return the second operand for equal values, so "
    "max(+0, -0) = -0 and min(-0, +0) = +0; StableHLO (IEEE-754 maximum/minimum) and "
    "XLA:CPU order -0 < +0"
  ),
)
@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [lax.max, lax.min], ids=["maximum", "minimum"])
def test_min_max_signed_zero(op, dtype):
  # assert_array_equal treats -0 == +0, so compare the sign bits.
  x = np.array([0.0, -0.0, 0.0, -0.0], dtype)
  y = np.array([-0.0, 0.0, 0.0, -0.0], dtype)
  ours = np.asarray(jax.jit(op)(x, y))
  cpu = jax.devices("cpu")[0]
  ref = np.asarray(jax.jit(op)(jax.device_put(x, cpu), jax.device_put(y, cpu)))
  np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_divide(dtype):
  x = sample(dtype, (6, 7), seed=6)
  y = sample(dtype, (6, 7), seed=7)
  assert_matches_cpu(lax.div, x, y)


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
def test_integer_divide_corner_cases(dtype):
  # x / 0 and INT_MIN / -1 are UB in C++; XLA defines them (-1 / all bits set, INT_MIN).
  info = np.iinfo(dtype)
  xs = [info.min, info.max, 0, 1, 7, -7, info.min, info.min + 1]
  ys = [0, 0, 0, 0, 2, 2, -1, -1]
  if info.min == 0:  # unsigned: no negatives
    xs, ys = [info.max, 0, 1, 7, info.max, 5], [0, 0, 0, 2, info.max, 7]
  x, y = np.array(xs, dtype), np.array(ys, dtype)
  assert_matches_cpu(lax.div, x, y)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_float_divide_by_zero(dtype):
  x = np.array([1.0, -1.0, 0.0, np.nan, np.inf, -0.0], dtype)
  y = np.array([0.0, 0.0, 0.0, 0.0, -0.0, -0.0], dtype)
  ours = assert_matches_cpu(lax.div, x, y)
  with np.errstate(divide="ignore", invalid="ignore"):
    np.testing.assert_array_equal(ours, x / y)


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_negate(dtype):
  # Integers include INT_MIN (wraps to itself) and, for u32, modular negation.
  assert_matches_cpu(lax.neg, sample(dtype, (4, 5), seed=8))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [lax.exp, lax.log, lax.tanh], ids=["exp", "log", "tanh"])
def test_transcendental(op, dtype):
  # Edge values: log of 0 / negative / inf, exp overflow and underflow, tanh saturation.
  x = np.concatenate(
    [
      sample(dtype, (40,), seed=9),
      np.array([0.5, 1.0, 1e-8, -1e-8, 88.0, 89.0, -104.0, 710.0, -750.0, 20.0, -20.0], dtype),
    ]
  )
  assert_matches_cpu(op, x)
  assert_matches_cpu(op, np.abs(x))  # log on the positive half too


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_where_results_reach_zero(dtype):
  # Around the bound below which vector_math.cc answers f64 lanes +0 itself (e^x under
  # half the smallest subnormal) and through the subnormal results, against numpy. Results
  # in the subnormal range are flushed under FTZ, so they only need to be tiny. (f32 exp,
  # exp_f32.cc, flushes everything under FLT_MIN: tests/ops/test_elementwise_exp_f32.py.)
  edge = -104.0 if dtype == np.float32 else -746.0
  tiny = np.finfo(dtype).tiny
  x = np.array(
    [
      edge - 1,
      edge - 1e-3,
      edge,
      edge + 1e-3,
      edge + 0.2,
      edge + 1,
      edge + 8,
      -1e30,
      -np.inf,
      np.nan,
      0.0,
      1.0,
      -20.0,
    ],
    dtype,
  )
  x = np.tile(x, 3)  # Whole vectors and a tail.
  ours = np.asarray(jax.jit(lax.exp)(x))
  want = np.exp(x.astype(np.float64)).astype(dtype)
  normal = np.abs(want) >= tiny
  np.testing.assert_allclose(ours[normal], want[normal], rtol=4 * np.finfo(dtype).eps)
  assert (ours[~normal & ~np.isnan(want)] <= tiny).all()
  assert (ours[x < edge] == 0).all() and np.isnan(ours[np.isnan(x)]).all()


@pytest.mark.parametrize("op", [lax.exp, lax.tanh], ids=["exp", "tanh"])
def test_transcendental_denormal_inputs(op):
  # Kernels run with subnormals flushed (FTZ/DAZ) as XLA:CPU does; tanh keeps x as there.
  x = np.array([5e-39, 1e-40, 1.4e-45, -5e-39], np.float32)
  assert_matches_cpu(op, x)


def test_log_denormal_inputs():
  # Under FTZ/DAZ a subnormal is (nearly) zero: XLA:CPU itself gives -inf or -103.97
  # depending on how it compiled log, and for a negative one -inf or NaN depending on the
  # array's size, so no backend is an exact reference here. Both are below log of the
  # smallest normal f32; a negative subnormal is -0 (-inf) or negative (NaN).
  x = np.array([5e-39, 1e-40, 1.4e-45, -5e-39], np.float32)
  ours = np.asarray(jax.jit(lax.log)(x))
  assert (ours[:3] <= np.log(np.finfo(np.float32).tiny)).all()
  assert np.isnan(ours[3]) or ours[3] == -np.inf


# ---- compare, select ----

# direction: (JAX op, numpy reference)
DIRECTIONS = {
  "EQ": (lax.eq, np.equal),
  "NE": (lax.ne, np.not_equal),
  "LT": (lax.lt, np.less),
  "LE": (lax.le, np.less_equal),
  "GT": (lax.gt, np.greater),
  "GE": (lax.ge, np.greater_equal),
}


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_compare(direction, dtype):
  # Floats carry NaN (every ordered comparison false, NE true), ±0 (equal) and ±inf.
  x = sample(dtype, (6, 6), seed=10)
  y = sample(dtype, (6, 6), seed=11)
  y[:2] = x[:2]
  if dtype.kind == "f":
    x[2, :3], y[2, :3] = [0.0, -0.0, np.nan], [-0.0, 0.0, 1.0]
  op, reference = DIRECTIONS[direction]
  ours = assert_matches_cpu(op, x, y, rtol=0, atol=0)
  np.testing.assert_array_equal(ours, reference(x, y))


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_select(dtype):
  pred = sample(PRED, (4, 5), seed=12)
  a, b = sample(dtype, (4, 5), seed=13), sample(dtype, (4, 5), seed=14)
  ours = assert_matches_cpu(lambda p, a, b: lax.select(p, a, b), pred, a, b, rtol=0, atol=0)
  np.testing.assert_array_equal(ours, np.where(pred, a, b))


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("pred", [True, False])
def test_select_scalar_pred(dtype, pred):
  # select_n with a 0-d predicate lowers to stablehlo.select with tensor<i1>.
  a, b = sample(dtype, (3, 4), seed=15), sample(dtype, (3, 4), seed=16)
  ours = assert_matches_cpu(
    lambda p, a, b: lax.select_n(p, b, a), np.bool_(pred), a, b, rtol=0, atol=0
  )
  np.testing.assert_array_equal(ours, a if pred else b)


# ---- dot_general ----


def dot_tol(dtype, k):
  """(rtol, atol) for a sum of k products of terms |x| <= ~10."""
  if np.dtype(dtype).kind != "f":
    return 0, 0
  eps = np.finfo(dtype).eps
  return 10 * eps, 4 * k * eps * 100


def dot_operand(dtype, shape, seed):
  # Small integers: products and sums stay exact in every dtype (no overflow).
  rng = np.random.default_rng(seed)
  if np.dtype(dtype).kind == "f":
    return (rng.standard_normal(shape) * 3).astype(dtype)
  lo = 0 if np.dtype(dtype).kind == "u" else -20
  return rng.integers(lo, 20, shape).astype(dtype)


DOTS = {
  # name: (lhs shape, rhs shape, ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)))
  "matmul": ((5, 7), (7, 3), (((1,), (0,)), ((), ()))),
  "matvec": ((5, 7), (7,), (((1,), (0,)), ((), ()))),
  "vector_dot": ((9,), (9,), (((0,), (0,)), ((), ()))),
  "outer": ((4,), (3,), (((), ()), ((), ()))),
  "lhs_transposed": ((7, 5), (7, 3), (((0,), (0,)), ((), ()))),  # x.T @ y
  "rhs_transposed": ((5, 7), (3, 7), (((1,), (1,)), ((), ()))),  # x @ y.T
  "both_transposed": ((7, 5), (3, 7), (((0,), (1,)), ((), ()))),
  "batched": ((2, 5, 7), (2, 7, 3), (((2,), (1,)), ((0,), (0,)))),
  "batch_last": ((5, 7, 2), (7, 3, 2), (((1,), (0,)), ((2,), (2,)))),
  "two_contractions": ((3, 4, 5), (4, 5, 2), (((1, 2), (0, 1)), ((), ()))),
  "odd_orders": ((3, 4, 2), (5, 2, 4), (((1,), (2,)), ((2,), (1,)))),
  "empty_contraction": ((3, 0), (0, 4), (((1,), (0,)), ((), ()))),
  "empty_result": ((0, 4), (4, 3), (((1,), (0,)), ((), ()))),
}


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("name", list(DOTS))
def test_dot_general(name, dtype):
  lhs_shape, rhs_shape, dn = DOTS[name]
  x, y = dot_operand(dtype, lhs_shape, 17), dot_operand(dtype, rhs_shape, 18)
  k = int(np.prod([lhs_shape[d] for d in dn[0][0]]))
  rtol, atol = dot_tol(dtype, k)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


def test_dot_general_pred():
  # Computed in s32 (optable.py): a nonzero sum of products converts back to true, XLA:CPU's
  # OR of ANDs.
  x = sample(PRED, (4, 5), seed=31)
  y = sample(PRED, (5, 3), seed=32)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ()))), x, y)


@pytest.mark.parametrize("dtype", [F32, S32], ids=ids([F32, S32]))
@pytest.mark.parametrize(
  "expr,shapes",
  [
    ("x.T @ y", ((6, 4), (6, 3))),
    ("ibj,jkb->bki", ((2, 3, 4), (4, 5, 3))),
    ("bij,bjk->bik", ((3, 2, 4), (3, 4, 5))),
    ("ijk,kj->ij", ((2, 3, 4), (4, 3))),
  ],
  ids=["xT_at_y", "einsum_odd", "einsum_batched", "einsum_batch_in_rhs"],
)
def test_jnp_contractions(expr, shapes, dtype):
  # Whatever mix of transpose/dot_general jnp emits for these, the result must match.
  x, y = dot_operand(dtype, shapes[0], 19), dot_operand(dtype, shapes[1], 20)
  f = (lambda x, y: x.T @ y) if expr == "x.T @ y" else (lambda x, y: jnp.einsum(expr, x, y))
  assert_matches_cpu(f, x, y, rtol=1e-5 if dtype == F32 else 0, atol=1e-4 if dtype == F32 else 0)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_large_float_matmul(transpose_a, transpose_b):
  # Big enough that the GEMM path (OpenBLAS) is taken rather than a small-loop fallback.
  x = dot_operand(F32, (65, 96) if not transpose_a else (96, 65), 21)
  y = dot_operand(F32, (96, 70) if not transpose_b else (70, 96), 22)
  dn = (((0 if transpose_a else 1,), (1 if transpose_b else 0,)), ((), ()))
  rtol, atol = dot_tol(F32, 96)
  assert_matches_cpu(lambda x, y: lax.dot_general(x, y, dn), x, y, rtol=rtol, atol=atol)


# ---- reduce ----

SHAPE3 = (3, 4, 5)
AXES = [(0,), (1,), (2,), (0, 2), (0, 1, 2)]


def reduce_tol(dtype, n):
  if np.dtype(dtype).kind != "f":
    return 0, 0
  eps = np.finfo(dtype).eps
  return 10 * eps, 4 * n * eps * 10


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


@pytest.mark.parametrize("dtype", [S32, U32], ids=ids([S32, U32]))
def test_reduce_sum_wraps(dtype):
  x = sample(dtype, (4, 6), seed=24, special=True)  # min/max included: sums overflow
  assert_matches_cpu(lambda x: lax.reduce(x, np.array(0, dtype), lax.add, (1,)), x)


@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("jnp_reduce", [jnp.all, jnp.any], ids=["all", "any"])
def test_reduce_pred(jnp_reduce, axes):
  x = sample(PRED, SHAPE3, seed=25)
  x[0] = True
  assert_matches_cpu(lambda x: jnp_reduce(x, axis=axes), x)


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


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_reduce_max_propagates_nan(dtype):
  x = sample(dtype, (4, 5), seed=27, special=False)
  x[1, 2] = np.nan
  x[3, 0] = np.inf
  ours = assert_matches_cpu(lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0)), x)
  assert np.isnan(ours[0][1]) and np.isnan(ours[1][2])


def test_reduce_empty():
  # Reducing a zero-size dimension yields the init value.
  x = np.zeros((3, 0), np.float32)
  ours = assert_matches_cpu(lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=1, initial=-7.0)), x)
  np.testing.assert_array_equal(ours[0], [0.0] * 3)
  np.testing.assert_array_equal(ours[1], [-7.0] * 3)


# ---- whole programs ----


def mlp_params(seed=28):
  rng = np.random.default_rng(seed)
  shapes = [(16, 32), (32,), (32, 10), (10,)]
  return [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def mlp(params, x):
  w1, b1, w2, b2 = params
  h = jnp.tanh(x @ w1 + b1)
  return jax.nn.softmax(h @ w2 + b2, axis=-1)


def test_mlp_forward():
  x = np.random.default_rng(29).standard_normal((8, 16)).astype(np.float32)
  ours = assert_matches_cpu(mlp, mlp_params(), x, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ours.sum(axis=-1), 1, rtol=1e-5)


def test_mlp_grad():
  x = np.random.default_rng(30).standard_normal((8, 16)).astype(np.float32)
  labels = np.arange(8) % 10

  def loss(params, x):
    # one_hot rather than probs[i, labels]: gather is outside the slice.
    probs = mlp(params, x)
    return -jnp.mean(jnp.sum(jnp.log(probs) * jax.nn.one_hot(labels, 10), axis=-1))

  # Gradients of O(0.1) summed over a batch of 8: a few f32 ulps of the largest entry.
  assert_matches_cpu(jax.value_and_grad(loss), mlp_params(), x, rtol=1e-5, atol=1e-6)


# ---- the tests above exercise the ops they name ----

_X = np.ones((2, 3), np.float32)
_I = np.ones((2, 3), np.int32)


@pytest.mark.parametrize(
  "f,args,expected",
  [
    (lambda: jnp.asarray(_I), (), "stablehlo.constant dense<1>"),
    (lambda: lax.broadcasted_iota(np.uint32, (2, 3), 1), (), "stablehlo.iota dim = 1"),
    (lambda x: lax.convert_element_type(x, np.int64), (_X,), "stablehlo.convert"),
    (lambda x: lax.convert_element_type(x, np.bool_), (_X,), "stablehlo.compare  NE"),
    (
      lambda x: lax.broadcast_in_dim(x, (3, 4, 2), (2, 0)),
      (_X,),
      "stablehlo.broadcast_in_dim %arg0, dims = [2, 0]",
    ),
    (lambda x: x.reshape(6), (_X,), "stablehlo.reshape"),
    (lambda x: jnp.transpose(x), (_X,), "stablehlo.transpose %arg0, dims = [1, 0]"),
    (lax.div, (_I, _I), "stablehlo.divide %arg0, %arg1"),
    (lax.neg, (_I,), "stablehlo.negate %arg0"),
    (lax.max, (_X, _X), "stablehlo.maximum %arg0, %arg1"),
    (lax.lt, (_X, _X), "stablehlo.compare  LT, %arg0, %arg1,  FLOAT"),
    (lambda p, a, b: lax.select_n(p, b, a), (True, _X, _X), "stablehlo.select %arg0"),
    (
      lambda x, y: lax.dot_general(x, y, DOTS["odd_orders"][2]),
      (np.ones((3, 4, 2), np.float32), np.ones((5, 2, 4), np.float32)),
      "batching_dims = [2] x [1], contracting_dims = [1] x [2]",
    ),
    (
      lambda x: lax.reduce(x, np.int32(0), lax.add, (0,)),
      (_I,),
      "applies stablehlo.add across dimensions = [0]",
    ),
  ],
  ids=[
    "constant",
    "iota",
    "convert",
    "convert_to_pred",
    "broadcast_in_dim",
    "reshape",
    "transpose",
    "divide",
    "negate",
    "maximum",
    "compare",
    "select_scalar_pred",
    "dot_general",
    "reduce",
  ],
)
def test_lowering_emits_the_op(f, args, expected):
  # Guards the tests above against JAX rewriting the functions into other ops.
  text = jax.jit(f).lower(*args).as_text()
  assert " ".join(expected.split()) in " ".join(text.split()), text
