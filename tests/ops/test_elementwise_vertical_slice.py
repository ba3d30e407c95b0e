"""Every elementwise op of the vertical slice on the workshop backend against JAX's CPU
backend (its shape, dot, reduce and whole-program tests are in test_shape.py, test_dot.py,
test_reduce.py and tests/models/test_whole_programs.py; tests/op_samples.py has what they
share).

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
from op_samples import ALL, F64, FLOATS, INTS, NUMERIC, PRED, ids, sample

# conftest.py: x64 on for the module; every test once as a user runs it (WORKSHOP_CODEGEN
# default: a single op is never big enough for the tier) and once with the tier taking
# every fusion and loop it covers ("force"), so each op here also runs as generated code
# wherever the tier can generate it.
pytestmark = [pytest.mark.usefixtures("x64"), pytest.mark.codegen_settings("1", "force")]


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


def _exact_div_rem(x: int, y: int, info: np.iinfo) -> tuple[int, int]:
  """XLA's integer quotient and remainder of Python ints (truncated; x / 0 = -1, x % 0 = x,
  MIN / -1 = MIN, x % -1 = 0), wrapped to the dtype's width."""
  if y == 0:
    q, r = -1, x
  elif y == -1:
    q, r = -x, 0
  else:
    q = abs(x) // abs(y) * (1 if (x >= 0) == (y > 0) else -1)
    r = x - q * y
  span = 1 << info.bits
  wrap = lambda v: (v - int(info.min)) % span + int(info.min)
  return wrap(q), wrap(r)


ALL_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", ALL_INTS, ids=lambda d: np.dtype(d).name)
def test_integer_divide_and_remainder_are_exact(dtype):
  # 8- to 32-bit quotients are computed in double (elementwise.cc): every pair of edge
  # values, random pairs, and dividends next to multiples of large divisors (quotients
  # just below and at an integer), against exact integer arithmetic; array and scalar
  # divisors (the kernels' two loops).
  info = np.iinfo(dtype)
  rng = np.random.default_rng(11)
  edges = sorted(
    {info.min, info.min + 1, 0, 1, 2, 3, 7, info.max - 1, info.max}
    | ({-1, -2, -7} if info.min < 0 else set())
  )
  random = lambda n: [
    int(v) for v in rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
  ]
  xs = [a for a in edges for _ in edges] + random(3000)
  ys = [b for _ in edges for b in edges] + random(3000)
  for y in rng.integers(max(int(info.min), -(2**31)), min(int(info.max), 2**31), 500):
    y = int(y) or 1
    k = int(rng.integers(0, max(1, min(int(info.max) // abs(y), 2**20))))
    for x in (k * abs(y), k * abs(y) - 1, k * abs(y) + 1):
      if int(info.min) <= x <= int(info.max):
        xs.append(x)
        ys.append(y)
  x, y = np.array([int(v) for v in xs], dtype), np.array([int(v) for v in ys], dtype)
  expected = [_exact_div_rem(int(a), int(b), info) for a, b in zip(x, y)]
  q = np.asarray(jax.jit(lax.div)(x, y)).astype(object)
  r = np.asarray(jax.jit(lax.rem)(x, y)).astype(object)
  assert [int(v) for v in q] == [e[0] for e in expected]
  assert [int(v) for v in r] == [e[1] for e in expected]
  for divisor in {edges[0], edges[-1], 3, 0, 1} | ({-1} if info.min < 0 else set()):
    d = np.array(divisor, dtype)
    q = np.asarray(jax.jit(lambda a, d=d: lax.div(a, d))(x)).astype(object)
    assert [int(v) for v in q] == [_exact_div_rem(int(a), int(divisor), info)[0] for a in x]


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
    (  # test_dot.py DOTS["odd_orders"]
      lambda x, y: lax.dot_general(x, y, (((1,), (2,)), ((2,), (1,)))),
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
  # Guards the vertical-slice tests (here and those moved to test_shape, test_dot,
  # test_reduce) against JAX rewriting the functions into other ops.
  text = jax.jit(f).lower(*args).as_text()
  assert " ".join(expected.split()) in " ".join(text.split()), text
