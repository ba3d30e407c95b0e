"""Property-based tests per op family: random shapes, dtypes and values (NaN, inf, huge,
tiny, subnormal, extreme integers) through one StableHLO op on the workshop backend and
on JAX's CPU backend, which must agree.

Float operands are drawn as raw bit patterns, so every class of value appears (about one
f32 in 256 is subnormal: arithmetic flushes those to zero on both backends, as XLA:CPU
runs with FTZ/DAZ; transcendentals are not compared on subnormal operands, where
XLA:CPU's approximations are inconsistent).
Tolerances, per dtype (dtype_cases.INEXACT_RTOL): exact for integer, bitwise,
comparison, conversion and IEEE-exact float ops (+ - * / sqrt, rounding, min/max);
transcendentals allow a few f32/f64 ulps (XLA:CPU uses its own polynomial approximations,
we use libm) and one f16/bf16 ulp (both compute in f32 and round once, so a last-ulp f32
difference can flip the 16-bit rounding), plus an absolute ulp of the dtype near zero.

Example counts are bounded so the whole file runs in well under a minute.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import run_stablehlo
from dtype_cases import (
  ALL,
  COMPLEX,
  FLOATS,
  INEXACT_RTOL,
  INTS,
  NUMPY,
  SIGNED,
  assert_same,
  op_module,
)

# Every test twice: loops and fusions interpreted, and compiled whatever their size.
pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py

SETTINGS = settings(
  max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# Shapes are flattened to vectors for the op; sizes cover empty, scalar-like and the
# vectorized main loop plus a remainder.
sizes = st.sampled_from([0, 1, 7, 64, 129])


@st.composite
def operands(draw, dtype: str, count: int = 1, bits_only: bool = False):
  """`count` arrays of one random size with arbitrary bit patterns of `dtype`."""
  n = draw(sizes)
  np_dtype = NUMPY[dtype]
  out = []
  for _ in range(count):
    if dtype == "pred":
      out.append(draw(hnp.arrays(np.bool_, n)))
      continue
    raw = draw(
      hnp.arrays(
        np.dtype(f"u{np_dtype.itemsize}")
        if dtype not in COMPLEX
        else np.dtype(f"u{np_dtype.itemsize // 2}"),
        n * (2 if dtype in COMPLEX else 1),
      )
    )
    out.append(raw.view(np_dtype))
  return out


def _run_both(text, args):
  ours = run_stablehlo(text, *args)
  ref = run_stablehlo(text, *args, platform="cpu")
  return ours, ref


def _tiny(dtype: str) -> float:
  """Two ulps of the subnormal range of `dtype`: the absolute error allowed near zero."""
  return 2 * float(ml_dtypes.finfo(NUMPY[dtype]).smallest_subnormal)


# ---- Exact float ops: bit for bit on any bit pattern. ----

EXACT_UNARY = [
  "negate",
  "abs",
  "sign",
  "floor",
  "ceil",
  "round_nearest_afz",
  "round_nearest_even",
  "sqrt",
  "is_finite",
]
EXACT_BINARY = ["add", "subtract", "multiply", "divide", "remainder"]


@SETTINGS
@given(st.data(), st.sampled_from(EXACT_UNARY), st.sampled_from(FLOATS))
def test_exact_float_unary(data, op, dtype):
  (x,) = data.draw(operands(dtype))
  out = "pred" if op == "is_finite" else dtype
  ours, ref = _run_both(op_module(op, [dtype], out, x.size), [x])
  assert_same(ours[0], ref[0])


@SETTINGS
@given(st.data(), st.sampled_from(EXACT_BINARY), st.sampled_from(FLOATS))
def test_exact_float_binary(data, op, dtype):
  x, y = data.draw(operands(dtype, 2))
  ours, ref = _run_both(op_module(op, [dtype, dtype], dtype, x.size), [x, y])
  assert_same(ours[0], ref[0])


# ---- Transcendentals: tolerance per dtype. ----

INEXACT_UNARY = [
  "exponential",
  "exponential_minus_one",
  "log",
  "log_plus_one",
  "logistic",
  "tanh",
  "rsqrt",
  "cbrt",
  "sine",
  "cosine",
  "tan",
]


@SETTINGS
@given(st.data(), st.sampled_from(INEXACT_UNARY), st.sampled_from(FLOATS))
def test_transcendental(data, op, dtype):
  (x,) = data.draw(operands(dtype))
  wide = x.astype(np.float64)
  if op in ("sine", "cosine", "tan"):
    # Huge arguments need exact range reduction; XLA:CPU's approximations don't attempt
    # it. Keep |x| <= 1000 (and inf/NaN, which must agree).
    wide = np.where(np.abs(wide) > 1000, np.fmod(wide, 1000), wide)
  # Subnormal operands: XLA:CPU's approximations are inconsistent there (log(5e-39) is
  # -103.97, tanh(5e-39) is 5e-39, log1p(5e-39) is 0); libm stays accurate. Not compared.
  tiny = float(ml_dtypes.finfo(np.float32 if dtype != "f64" else np.float64).tiny)
  wide = np.where(np.abs(wide) < tiny, 0.0, wide)
  x = wide.astype(NUMPY[dtype])
  ours, ref = _run_both(op_module(op, [dtype], dtype, x.size), [x])
  # Results in the subnormal range may be flushed on one side only.
  atol = max(_tiny(dtype), tiny) if op not in ("sine", "cosine", "tan") else (INEXACT_RTOL[dtype])
  if op == "tan":  # Near its poles tan amplifies the argument's last-ulp differences.
    mask = np.abs(np.cos(x.astype(np.float64))) > 1e-2
    ours, ref = [ours[0][mask]], [ref[0][mask]]
  assert_same(ours[0], ref[0], rtol=INEXACT_RTOL[dtype], atol=atol)


# ---- Integers: every binary op, exact, including division by zero, INT_MIN / -1 and
# out-of-range shifts. ----

INT_BINARY = [
  "add",
  "subtract",
  "multiply",
  "divide",
  "remainder",
  "maximum",
  "minimum",
  "and",
  "or",
  "xor",
  "shift_left",
  "shift_right_arithmetic",
  "shift_right_logical",
]
INT_UNARY = ["negate", "not", "popcnt", "count_leading_zeros", "sign"]


@SETTINGS
@given(st.data(), st.sampled_from(INT_BINARY), st.sampled_from(INTS))
def test_integer_binary(data, op, dtype):
  x, y = data.draw(operands(dtype, 2))
  # Small shift amounts and divisors are the interesting ones; draw some of each.
  y = np.where(np.arange(y.size) % 2 == 0, y % 70 - (35 if dtype in SIGNED else 0), y)
  y = y.astype(NUMPY[dtype])
  ours, ref = _run_both(op_module(op, [dtype, dtype], dtype, x.size), [x, y])
  assert_same(ours[0], ref[0])


@SETTINGS
@given(st.data(), st.sampled_from(INT_UNARY), st.sampled_from(INTS))
def test_integer_unary(data, op, dtype):
  if op == "sign" and dtype not in SIGNED:
    dtype = "s" + dtype[1:]
  (x,) = data.draw(operands(dtype))
  ours, ref = _run_both(op_module(op, [dtype], dtype, x.size), [x])
  assert_same(ours[0], ref[0])


# ---- Comparisons on every dtype and direction. ----

DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


@SETTINGS
@given(st.data(), st.sampled_from(ALL), st.sampled_from(DIRECTIONS), st.booleans())
def test_compare(data, dtype, direction, total_order):
  if dtype in COMPLEX:
    direction = direction if direction in ("EQ", "NE") else "EQ"
  x, y = data.draw(operands(dtype, 2))
  y = np.where(np.arange(y.size) % 3 == 0, x, y)  # Equal pairs too.
  kind = (
    "TOTALORDER"
    if total_order and dtype in FLOATS
    else "FLOAT"
    if dtype in FLOATS + COMPLEX
    else "SIGNED"
    if dtype in SIGNED
    else "UNSIGNED"
  )
  attrs = (
    f"comparison_direction = #stablehlo<comparison_direction {direction}>, "
    f"compare_type = #stablehlo<comparison_type {kind}>"
  )
  ours, ref = _run_both(op_module("compare", [dtype, dtype], "pred", x.size, attrs), [x, y])
  assert_same(ours[0], ref[0])


# ---- Conversions between any two dtypes, on arbitrary bit patterns. ----


@SETTINGS
@given(st.data(), st.sampled_from(ALL), st.sampled_from(ALL))
def test_convert(data, src, to):
  (x,) = data.draw(operands(src))
  ours, ref = _run_both(op_module("convert", [src], to, x.size), [x])
  assert_same(ours[0], ref[0])


# ---- Complex arithmetic on moderate values. ----

COMPLEX_OPS = {
  "add": 2,
  "subtract": 2,
  "multiply": 2,
  "divide": 2,
  "negate": 1,
  "exponential": 1,
  "log": 1,
  "sqrt": 1,
  "tanh": 1,
  "sine": 1,
  "cosine": 1,
  "sign": 1,
}


@SETTINGS
@given(st.data(), st.sampled_from(sorted(COMPLEX_OPS)), st.sampled_from(COMPLEX))
def test_complex(data, op, dtype):
  n = data.draw(sizes)
  parts = hnp.arrays(np.float64, 2 * n, elements=st.floats(-20, 20, width=32))
  args = [data.draw(parts).view(np.complex128).astype(NUMPY[dtype]) for _ in range(COMPLEX_OPS[op])]
  ours, ref = _run_both(op_module(op, [dtype] * len(args), dtype, n), args)
  exact = op in ("add", "subtract", "negate")
  # Relative to |ref|: complex results' components can cancel, so allow an absolute
  # error proportional to the magnitude (assert_same scales by |ref| for complex).
  assert_same(ours[0], ref[0], rtol=0.0 if exact else 4 * INEXACT_RTOL[dtype])
