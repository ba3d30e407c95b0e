"""Every elementwise, convert, compare, reduce and dot op on every dtype it allows, against
JAX's CPU backend (XLA:CPU). Families: elementwise (most tests), reduce and dot.

Two layers:
* op level: one StableHLO op per program, written as text and compiled by each backend's
  client, over edge values of each dtype (all pairs for binary ops). Independent of
  jax_enable_x64, which only affects how JAX builds programs.
* JAX level: jnp/lax programs with jax_enable_x64 off and on, the way users reach the ops
  (weak types, dtype canonicalization, preferred_element_type, jnp's own upcasts).

Exact ops (integer math, IEEE add/subtract/multiply/divide/sqrt, rounding, comparisons,
conversions) must match bit for bit, including the sign of zero and NaN positions; this
holds for f16/bf16 too because both backends compute them in f32 and round once. Inexact
math (transcendentals, complex multiply/divide) gets dtype_cases.INEXACT_RTOL.

Op/dtype pairs the plugin does not implement must fail at compile time, naming the op,
the dtype and the location.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import run_stablehlo
from dtype_cases import (
  ALL,
  COMPLEX,
  COMPONENT,
  FLOATS,
  INEXACT_RTOL,
  INTS,
  MLIR,
  NUMPY,
  SIGNED,
  assert_same,
  compare_text,
  multi_op_module,
  op_module,
  pairs,
  values,
)

# Edge values (f64 max, NaN) are cast to narrower dtypes on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in cast:RuntimeWarning")
# The tests whose programs fuse (16-bit float math is convert -> f32 op -> convert) run
# twice: interpreted, and with every fusion compiled (WORKSHOP_CODEGEN=force, conftest.py).
both_ways = pytest.mark.codegen_settings("0", "force")

# ---- Op level. ----

# op: (dtypes StableHLO allows, dtypes where the result is inexact math).
UNARY = {
  "negate": (INTS + FLOATS + COMPLEX, []),
  "abs": (SIGNED + FLOATS + COMPLEX, COMPLEX),
  "sign": (SIGNED + FLOATS + COMPLEX, COMPLEX),
  "floor": (FLOATS, []),
  "ceil": (FLOATS, []),
  "round_nearest_afz": (FLOATS, []),
  "round_nearest_even": (FLOATS, []),
  "is_finite": (FLOATS, []),
  "sqrt": (FLOATS + COMPLEX, COMPLEX),
  "rsqrt": (FLOATS + COMPLEX, FLOATS + COMPLEX),
  "cbrt": (FLOATS + COMPLEX, FLOATS),
  **{
    op: (FLOATS + COMPLEX, FLOATS + COMPLEX)
    for op in [
      "exponential",
      "exponential_minus_one",
      "log",
      "log_plus_one",
      "logistic",
      "sine",
      "cosine",
      "tan",
      "tanh",
    ]
  },
  "not": (["pred"] + INTS, []),
  "popcnt": (INTS, []),
  "count_leading_zeros": (INTS, []),
  "real": (FLOATS + COMPLEX, []),
  "imag": (FLOATS + COMPLEX, []),
}
BINARY = {
  "add": (ALL, []),
  "multiply": (ALL, COMPLEX),
  "subtract": (INTS + FLOATS + COMPLEX, []),
  "divide": (INTS + FLOATS + COMPLEX, COMPLEX),
  "remainder": (INTS + FLOATS + COMPLEX, []),
  "power": (INTS + FLOATS + COMPLEX, FLOATS + COMPLEX),
  "maximum": (["pred"] + INTS + FLOATS + COMPLEX, []),
  "minimum": (["pred"] + INTS + FLOATS + COMPLEX, []),
  "atan2": (FLOATS + COMPLEX, FLOATS + COMPLEX),
  **{op: (["pred"] + INTS, []) for op in ["and", "or", "xor"]},
  **{op: (INTS, []) for op in ["shift_left", "shift_right_arithmetic", "shift_right_logical"]},
}
# Allowed by StableHLO, deliberately not implemented: must be a compile-time error.
UNSUPPORTED = {
  ("cbrt", "c64"),
  ("cbrt", "c128"),
  ("remainder", "c64"),
  ("remainder", "c128"),
  ("clamp", "c64"),
  ("clamp", "c128"),
}
# Transcendentals compare on |x| <= 100 (plus inf/NaN): XLA:CPU's approximations and libm
# disagree on huge arguments (range reduction of sin(1e38), ...), where neither is useful.
MODERATE = {
  "exponential",
  "exponential_minus_one",
  "log",
  "log_plus_one",
  "logistic",
  "sine",
  "cosine",
  "tan",
  "tanh",
  "atan2",
  "power",
  "rsqrt",
  "cbrt",
}


def _result_dtype(op: str, dtype: str) -> str:
  if op in ("is_finite",):
    return "pred"
  if op in ("abs", "real", "imag"):
    return COMPONENT.get(dtype, dtype)
  return dtype


def _inputs(op: str, dtype: str) -> np.ndarray:
  x = values(dtype)
  if op in MODERATE and dtype in FLOATS:
    wide = x.astype(np.float64)
    x = x[~(np.abs(wide) > 100) | ~np.isfinite(wide)]
  return x


def _rtol(op_table, op, dtype):
  return INEXACT_RTOL[dtype] if dtype in op_table[op][1] else 0.0


def _expect_unsupported(text, args, op, dtype):
  with pytest.raises(Exception, match="UNIMPLEMENTED") as e:
    run_stablehlo(text, *args)
  message = str(e.value)
  assert f"stablehlo.{op}" in message and dtype in message and "dtype_case.py" in message


@both_ways
@pytest.mark.parametrize("op,dtype", [(op, d) for op, (ds, _) in UNARY.items() for d in ds])
def test_unary(op, dtype):
  x = _inputs(op, dtype)
  text = op_module(op, [dtype], _result_dtype(op, dtype), x.size)
  if (op, dtype) in UNSUPPORTED:
    return _expect_unsupported(text, [x], op, dtype)
  compare_text(text, [x], rtol=_rtol(UNARY, op, dtype))


@both_ways
@pytest.mark.parametrize("op,dtype", [(op, d) for op, (ds, _) in BINARY.items() for d in ds])
def test_binary(op, dtype):
  x = _inputs(op, dtype)
  a, b = pairs(x, x)
  if op == "power" and dtype in INTS:
    # XLA:CPU reads only the low 6 bits of an integer exponent (2^64 == 1 for s16, and
    # u8 exponents >= 128 count as negative); we compute the exact power modulo 2^bits as
    # the StableHLO spec does. Both agree on exponents below 64.
    keep = b.astype(np.float64) < 64
    a, b = a[keep], b[keep]
  text = op_module(op, [dtype, dtype], dtype, a.size)
  if (op, dtype) in UNSUPPORTED:
    return _expect_unsupported(text, [a, b], op, dtype)
  if op in ("maximum", "minimum") and dtype in COMPLEX:
    # The StableHLO spec orders complex numbers lexicographically (real part, then
    # imaginary); XLA:CPU compares real parts only (max(0j, 1j) is 0j there), so the
    # reference is numpy's lexicographic maximum/minimum, and NaN propagates.
    (ours,) = run_stablehlo(text, a, b)
    nan = np.isnan(a) | np.isnan(b)
    assert np.isnan(ours[nan]).all()
    ref = (np.maximum if op == "maximum" else np.minimum)(a[~nan], b[~nan])
    np.testing.assert_array_equal(ours[~nan], ref)
    return
  if op == "atan2" and dtype in COMPLEX:
    # -i log((x + iy) / sqrt(x^2 + y^2)) as XLA:CPU defines it, with libm's complex log
    # and division: a few ulps of pi apart, and either side of the branch cut for signed
    # zeros; compared where finite, to an absolute tolerance.
    (ours,) = run_stablehlo(text, a, b)
    (ref,) = run_stablehlo(text, a, b, platform="cpu")
    keep = np.isfinite(a) & np.isfinite(b) & np.isfinite(ref) & (a != 0) & (b != 0)
    ours, ref = ours[keep].astype(np.complex128), ref[keep].astype(np.complex128)
    # On the cut (argument +-pi) rounding picks either side: the same angle mod 2 pi.
    turns = np.round((ours.real - ref.real) / (2 * np.pi))
    np.testing.assert_allclose(
      ours - turns * 2 * np.pi, ref, rtol=1e-5, atol=2e-6 if dtype == "c64" else 1e-12
    )
    return
  if op in ("maximum", "minimum") and dtype in FLOATS:
    # StableHLO propagates NaN from either operand, and so do we. XLA:CPU returns the
    # first operand when either is NaN (a known XLA:CPU bug, b/209827141): compare with
    # it only where neither operand is NaN.
    (ours,) = run_stablehlo(text, a, b)
    (ref,) = run_stablehlo(text, a, b, platform="cpu")
    nan = np.isnan(a.astype(np.float32)) | np.isnan(b.astype(np.float32))
    assert np.isnan(ours[nan].astype(np.float32)).all()
    return assert_same(ours[~nan], ref[~nan])
  compare_text(text, [a, b], rtol=_rtol(BINARY, op, dtype))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_complex_from_parts(dtype):
  a, b = pairs(values(dtype), values(dtype))
  out = {"f32": "c64", "f64": "c128"}[dtype]
  compare_text(op_module("complex", [dtype, dtype], out, a.size), [a, b])


@both_ways
@pytest.mark.parametrize("dtype", ALL)
def test_compare(dtype):
  """Every direction, in one program per dtype."""
  a, b = pairs(values(dtype), values(dtype))
  kind = "FLOAT" if dtype in FLOATS + COMPLEX else "SIGNED" if dtype in SIGNED else "UNSIGNED"
  directions = ["EQ", "NE"] if dtype in COMPLEX else ["EQ", "NE", "LT", "LE", "GT", "GE"]
  variants = [
    (
      "pred",
      f"comparison_direction = #stablehlo<comparison_direction {d}>, "
      f"compare_type = #stablehlo<comparison_type {kind}>",
    )
    for d in directions
  ]
  compare_text(multi_op_module("compare", [dtype, dtype], variants, a.size), [a, b])


@pytest.mark.parametrize("dtype", COMPLEX)
def test_compare_complex_order_is_unsupported(dtype):
  a, b = pairs(values(dtype), values(dtype))
  attrs = (
    "comparison_direction = #stablehlo<comparison_direction LT>, "
    "compare_type = #stablehlo<comparison_type FLOAT>"
  )
  _expect_unsupported(
    op_module("compare", [dtype, dtype], "pred", a.size, attrs), [a, b], "compare", dtype
  )


@pytest.mark.parametrize("dtype", FLOATS)
def test_compare_totalorder(dtype):
  a, b = pairs(values(dtype), values(dtype))
  attrs = (
    "comparison_direction = #stablehlo<comparison_direction LT>, "
    "compare_type = #stablehlo<comparison_type TOTALORDER>"
  )
  compare_text(op_module("compare", [dtype, dtype], "pred", a.size, attrs), [a, b])


@both_ways
@pytest.mark.parametrize("dtype", ALL)
def test_select(dtype):
  x = values(dtype)
  a, b = pairs(x, x)
  pred = np.arange(a.size) % 3 == 0
  compare_text(op_module("select", ["pred", dtype, dtype], dtype, a.size), [pred, a, b])


@both_ways
@pytest.mark.parametrize("dtype", INTS + FLOATS + COMPLEX)
def test_clamp(dtype):
  x = values(dtype)
  lo, hi = pairs(x, x)
  mid = np.resize(x, lo.size)
  text = op_module("clamp", [dtype] * 3, dtype, lo.size)
  if ("clamp", dtype) in UNSUPPORTED:
    return _expect_unsupported(text, [lo, mid, hi], "clamp", dtype)
  if dtype in FLOATS:
    # clamp is min(max(x, lo), hi), NaN-propagating as in the spec; XLA:CPU's max/min
    # drop NaN (see test_binary): compare with it where no operand is NaN.
    (ours,) = run_stablehlo(text, lo, mid, hi)
    (ref,) = run_stablehlo(text, lo, mid, hi, platform="cpu")
    nan = np.isnan(np.stack([lo, mid, hi]).astype(np.float32)).any(axis=0)
    assert np.isnan(ours[nan].astype(np.float32)).all()
    return assert_same(ours[~nan], ref[~nan])
  compare_text(text, [lo, mid, hi])


@both_ways
@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("src", ALL)
def test_convert(src):
  """src to every dtype, in one program."""
  x = values(src)
  if src in FLOATS:  # Also every rounding case of the narrower float types.
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    extra = (
      bits.view(np.float32).astype(NUMPY[src])
      if src != "f64"
      else (rng.standard_normal(4096) * 10.0 ** rng.integers(-40, 40, 4096))
    )
    x = np.concatenate([x, np.asarray(extra, NUMPY[src])])
  compare_text(multi_op_module("convert", [src], [(to, "") for to in ALL], x.size), [x])


@both_ways
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_convert_16bit_exhaustive(dtype):
  """All 65536 bit patterns to f32, and every f32 rounding case back: bit for bit, NaN
  payloads included. (Separate programs: XLA folds a convert round trip away.)"""
  x = np.arange(2**16, dtype=np.uint16).view(NUMPY[dtype])
  up = op_module("convert", [dtype], "f32", x.size)
  (ours,) = run_stablehlo(up, x)
  (ref,) = run_stablehlo(up, x, platform="cpu")
  np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))
  # Each f32 bit pattern near every 16-bit value: exact, halfway, and one ulp around it.
  base = ref.view(np.uint32)
  wide = (
    np.concatenate([base, base + 1, base - 1, base + 0x1000, base + 0x8000, base + 0x7FFF])
    .astype(np.uint32)
    .view(np.float32)
  )
  down = op_module("convert", ["f32"], dtype, wide.size)
  (ours,) = run_stablehlo(down, wide)
  (ref,) = run_stablehlo(down, wide, platform="cpu")
  np.testing.assert_array_equal(ours.view(np.uint16), ref.view(np.uint16))


@pytest.mark.parametrize(
  "src,to",
  [
    ("f32", "u32"),
    ("u32", "f32"),
    ("f64", "s64"),
    ("s8", "u8"),
    ("f16", "s16"),
    ("bf16", "u16"),
    ("c64", "c64"),
    ("s16", "u8"),
    ("u8", "bf16"),
    ("f64", "f16"),
    ("u16", "s64"),
  ],
)
def test_bitcast_convert(src, to):
  x = values(src)
  n_in = x.size
  width = NUMPY[src].itemsize, NUMPY[to].itemsize
  if width[0] > width[1]:
    ratio = width[0] // width[1]
    out_type = f"tensor<{n_in}x{ratio}x{MLIR[to]}>"
  elif width[0] < width[1]:
    ratio = width[1] // width[0]
    x = x[: n_in // ratio * ratio].reshape(-1, ratio)
    out_type = f"tensor<{x.shape[0]}x{MLIR[to]}>"
  else:
    out_type = f"tensor<{n_in}x{MLIR[to]}>"
  in_type = f"tensor<{'x'.join(map(str, x.shape))}x{MLIR[src]}>"
  text = (
    f"func.func public @main(%a: {in_type}) -> {out_type} {{\n"
    f"  %0 = stablehlo.bitcast_convert %a : ({in_type}) -> {out_type}\n"
    f"  return %0 : {out_type}\n}}"
  )
  (ours,) = run_stablehlo(text, x)
  (ref,) = run_stablehlo(text, x, platform="cpu")
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  assert ours.tobytes() == ref.tobytes()


_U8, _U32, _F16, _F32, _F64 = np.uint8, np.uint32, np.float16, np.float32, np.float64
BITCAST_PROGRAMS = {
  # lax.bitcast_convert_type between widths: a wider source gains a minor dimension of
  # the ratio, a narrower one must end in it; inside fusions, loops and after transposes.
  "f32[4]->u8[4,4]": lambda x: lax.bitcast_convert_type(x[:4], _U8),
  "u8[3,4,2]->f16[3,4]": lambda x: lax.bitcast_convert_type(
    lax.bitcast_convert_type(x[:6], _U8).reshape(3, 4, 2), _F16
  ),
  "u32[2]->f64": lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x[:2], _U32), _F64),
  "u32[3,2]->f64[3]": lambda x: lax.bitcast_convert_type(
    lax.bitcast_convert_type(x[:6], _U32).reshape(3, 2), _F64
  ),
  "f64[3]->u16[3,4]": lambda x: lax.bitcast_convert_type(x[:3].astype(_F64) * 3, np.uint16),
  "f32[6,2]->u64[6]": lambda x: lax.bitcast_convert_type(x.reshape(6, 2), np.uint64) >> 3,
  "transposed": lambda x: lax.bitcast_convert_type(x.reshape(3, 4).T, _U8) + 1,
  "fused": lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x * 2, _U32) + 1, _F32) - x,
  "in_a_loop": lambda x: lax.fori_loop(
    0,
    3,
    lambda i, c: lax.bitcast_convert_type(lax.bitcast_convert_type(c, _U8)[..., ::-1], _F32) + 1,
    x,
  ),
}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(BITCAST_PROGRAMS))
def test_bitcast_convert_type_between_widths_as_on_cpu(name):
  x = np.random.default_rng(3).standard_normal(12).astype(np.float32)
  ours, ref = _both(BITCAST_PROGRAMS[name], x)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  assert ours.tobytes() == ref.tobytes()
  if name == "f32[4]->u8[4,4]":  # Against numpy's view of the same bytes.
    assert ours.tobytes() == x[:4].tobytes() and ours.shape == (4, 4)


def _nibbles(data: bytes, bits: int) -> np.ndarray:
  """numpy's reference for a bitcast to a `bits`-bit type: each byte's fields, lowest
  bits first (ml_dtypes' packing, XLA's), as unsigned values."""
  b = np.frombuffer(data, np.uint8)
  fields = [(b >> (k * bits)) & ((1 << bits) - 1) for k in range(8 // bits)]
  return np.stack(fields, axis=-1).reshape(-1)


SUB_BYTE_BITCASTS = {
  # name: (program, bits of the sub-byte result to check against numpy, or None)
  "f32[3]->u4[3,8]": (lambda x: lax.bitcast_convert_type(x[:3], ml_dtypes.uint4), 4),
  "f32[2]->s4[2,8]": (lambda x: lax.bitcast_convert_type(x[:2], ml_dtypes.int4), 4),
  "f64[2]->u2[2,32]": (lambda x: lax.bitcast_convert_type(x[:2].astype(_F64), ml_dtypes.uint2), 2),
  "u8[4]->s4[4,2]": (
    lambda x: lax.bitcast_convert_type((jnp.abs(x[:4]) * 50).astype(_U8), ml_dtypes.int4),
    4,
  ),
  "s4[3,4]->s16[3]": (
    lambda x: lax.bitcast_convert_type(
      lax.bitcast_convert_type(x[:3], ml_dtypes.int4).reshape(3, 8)[:, :4], np.int16
    ),
    None,
  ),
  "u4[3,8]->f32[3] (round trip)": (
    lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x[:3], ml_dtypes.uint4), _F32),
    None,
  ),
  "u2[2,4]->u8[2] (view)": (
    lambda x: jnp.asarray(lax.bitcast_convert_type(x[:1], ml_dtypes.uint2)).reshape(4, 4).view(_U8),
    None,
  ),
}


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name", list(SUB_BYTE_BITCASTS))
def test_bitcast_convert_sub_byte_as_numpy_and_cpu(name):
  """Between 8/16/32/64-bit types and 4/2-bit ones the sub-byte side's last dim holds each
  wide element's fields, lowest bits first (f32 -> u4 was the bytes read one per value:
  [11, 0, 1, 0, 1, 0, 0, 0] for numpy's [11, 0, 1, 0, 2, 15, 0, 0]); x.view(int16) of
  an int4 array packs them back."""
  program, bits = SUB_BYTE_BITCASTS[name]
  x = np.random.default_rng(5).standard_normal(12).astype(np.float32)
  ours, ref = _both(program, x)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ours.shape, ref.shape)
  np.testing.assert_array_equal(ours, ref)
  if bits is not None:  # Against numpy's fields of the source bytes.
    source = {
      "f64[2]->u2[2,32]": x[:2].astype(_F64),
      "u8[4]->s4[4,2]": (np.abs(x[:4]) * 50).astype(_U8),
      "f32[2]->s4[2,8]": x[:2],
    }.get(name, x[:3])
    want = _nibbles(source.tobytes(), bits)
    np.testing.assert_array_equal(ours.reshape(-1).astype(np.int64) & ((1 << bits) - 1), want)
  if "round trip" in name:
    assert ours.tobytes() == x[:3].tobytes()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
  "exponent_bits,mantissa_bits",
  [(5, 10), (8, 7), (4, 3), (5, 2), (2, 0), (11, 52), (8, 23), (1, 1)],
)
def test_reduce_precision(dtype, exponent_bits, mantissa_bits):
  rng = np.random.default_rng(1)
  width = NUMPY[dtype].itemsize * 8
  bits = rng.integers(0, 2 ** min(width, 63), 2048, dtype=np.uint64)
  x = np.concatenate([values(dtype), bits.astype(f"u{width // 8}").view(NUMPY[dtype])])
  attrs = f"exponent_bits = {exponent_bits} : i32, mantissa_bits = {mantissa_bits} : i32"
  text = op_module("reduce_precision", [dtype], dtype, x.size, attrs)
  (ours,) = run_stablehlo(text, x)
  (ref,) = run_stablehlo(text, x, platform="cpu")
  if mantissa_bits == 0:
    # No mantissa bits, no NaN: the StableHLO interpreter (and XLA's constant folder) make
    # NaN inf, which we follow; XLA:CPU's compiled kernel keeps the NaN.
    nan_in = np.isnan(x.astype(np.float64))
    assert np.isinf(ours[nan_in].astype(np.float64)).all()
    ours, ref = ours[~nan_in], ref[~nan_in]
  # NaN payloads are whatever the input's were: compare NaN positions, then the rest.
  nan = np.isnan(ref.astype(np.float64))
  np.testing.assert_array_equal(np.isnan(ours.astype(np.float64)), nan)
  np.testing.assert_array_equal(ours[~nan].view(f"u{width // 8}"), ref[~nan].view(f"u{width // 8}"))


REDUCE_BODIES = {
  "add": ALL,
  "multiply": ALL,
  "maximum": ["pred"] + INTS + FLOATS,
  "minimum": ["pred"] + INTS + FLOATS,
  "and": ["pred"] + INTS,
  "or": ["pred"] + INTS,
}


def _reduce_module(body: str, dtype: str, shape: tuple[int, int], dim: int) -> str:
  t = MLIR[dtype]
  rows, cols = shape
  out = cols if dim == 0 else rows
  return f"""func.func public @main(%x: tensor<{rows}x{cols}x{t}>, %init: tensor<{t}>) -> tensor<{out}x{t}> {{
  %0 = stablehlo.reduce(%x init: %init) across dimensions = [{dim}] : (tensor<{rows}x{cols}x{t}>, tensor<{t}>) -> tensor<{out}x{t}>
   reducer(%a: tensor<{t}>, %b: tensor<{t}>) {{
    %1 = stablehlo.{body} %a, %b : tensor<{t}>
    stablehlo.return %1 : tensor<{t}>
  }}
  return %0 : tensor<{out}x{t}>
}}"""


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("body,dtype", [(b, d) for b, ds in REDUCE_BODIES.items() for d in ds])
def test_reduce(body, dtype, dim):
  rng = np.random.default_rng(2)
  shape = (6, 37)
  if dtype in FLOATS + COMPLEX:
    # Small integers (and, for multiply, mostly +-1 so products stay below 2^11) are
    # exact in every float type, so any summation order gives the same result.
    low = -1 if body == "multiply" else -3
    x = rng.integers(low, -low + 1, shape).astype(np.float64)
    if dtype in COMPLEX:
      x = x + 1j * rng.integers(low, -low + 1, shape) * (rng.random(shape) < 0.3)
    if body == "multiply":
      x[rng.random(shape) < 0.1] = 2
      x[x == 0] = 1
    x = x.astype(NUMPY[dtype])
    if body == "multiply":
      x[3] = 0  # One row of zeros, with -0 where a sign flips.
  else:
    x = np.resize(values(dtype), shape)
  if body in ("maximum", "minimum"):
    # The identity: -inf/+inf for floats, the extremes for integers and pred.
    lowest = -np.inf if dtype in FLOATS else values(dtype).min()
    highest = np.inf if dtype in FLOATS else values(dtype).max()
    init = lowest if body == "maximum" else highest
  else:
    init = {"add": 0, "multiply": 1, "or": 0, "and": -1}[body]
    if body == "and":
      init = np.array(-1).astype(NUMPY[dtype]) if dtype != "pred" else True
  init = np.asarray(init).astype(NUMPY[dtype])
  if dtype in FLOATS and body in ("maximum", "minimum"):
    x[1, 1], x[2, 2] = np.inf, -np.inf
  # The sign of a zero imaginary part of a complex product depends on the order of the
  # factors, which differs between the backends.
  compare_text(
    _reduce_module(body, dtype, shape, dim),
    [x, init],
    signed_zeros=not (body == "multiply" and dtype in COMPLEX),
  )


@pytest.mark.parametrize("body", ["maximum", "minimum"])
def test_reduce_max_min_propagate_nan(body):
  """StableHLO's max/min propagate NaN, so a NaN anywhere makes the reduction NaN.

  (XLA:CPU drops NaN here; see test_binary.) The reference is numpy.
  """
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  x[1, 2] = np.nan
  init = np.float32(-np.inf if body == "maximum" else np.inf)
  (ours,) = run_stablehlo(_reduce_module(body, "f32", (3, 4), 1), x, init)
  ref = np.max(x, axis=1) if body == "maximum" else np.min(x, axis=1)
  assert_same(ours, ref)


def _dot_module(lhs: str, rhs: str, out: str, m: int, k: int, n: int) -> str:
  tl, tr, to = MLIR[lhs], MLIR[rhs], MLIR[out]
  return f"""func.func public @main(%a: tensor<2x{m}x{k}x{tl}>, %b: tensor<2x{k}x{n}x{tr}>) -> tensor<2x{m}x{n}x{to}> {{
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x{m}x{k}x{tl}>, tensor<2x{k}x{n}x{tr}>) -> tensor<2x{m}x{n}x{to}>
  return %0 : tensor<2x{m}x{n}x{to}>
}}"""


@pytest.mark.parametrize(
  "lhs,rhs,out",
  [(d, d, d) for d in INTS + FLOATS + COMPLEX]
  + [
    ("s8", "s8", "s32"),
    ("bf16", "bf16", "f32"),
    ("f16", "f16", "f32"),
    ("u8", "u8", "u32"),
    ("f32", "f32", "bf16"),
  ],
)
def test_dot_general(lhs, rhs, out):
  rng = np.random.default_rng(3)
  m, k, n = 5, 33, 7

  def operand(dtype, shape):
    x = (
      rng.integers(-3, 4, shape)
      if dtype not in INTS or dtype in SIGNED
      else (rng.integers(0, 4, shape))
    )
    if dtype in COMPLEX:
      x = x + 1j * rng.integers(-3, 4, shape)
    return x.astype(NUMPY[dtype])

  # Small integers: every partial sum is exact, so the result is exact in any order.
  compare_text(
    _dot_module(lhs, rhs, out, m, k, n), [operand(lhs, (2, m, k)), operand(rhs, (2, k, n))]
  )


def test_f8_add_is_computed_in_f32():
  text = op_module("add", ["f32", "f32"], "f32", 2).replace("f32", "f8E4M3FN")
  x = np.array([1.5, -448], jnp.float8_e4m3fn)
  y = np.array([0.0625, -32], jnp.float8_e4m3fn)
  np.testing.assert_array_equal(
    np.asarray(run_stablehlo(text, x, y)).view(np.uint8),
    np.asarray(run_stablehlo(text, x, y, platform="cpu")).view(np.uint8),
  )


# ---- JAX level, x64 off and on. ----


def _dtypes_for(x64: bool) -> list[str]:
  return ALL if x64 else [d for d in ALL if d not in ("s64", "u64", "f64", "c128")]


PROGRAMS = {
  "sum": (lambda x: jnp.sum(x, axis=0), ALL),
  "prod": (lambda x: jnp.prod(x[:3], axis=1), ALL),
  "max": (lambda x: jnp.max(x, axis=1), ["pred"] + INTS + FLOATS),
  "mean": (lambda x: jnp.mean(x), FLOATS + COMPLEX),
  "matmul": (lambda x: x @ x.T, INTS + FLOATS + COMPLEX),
  "where_clip": (lambda x: jnp.where(x > 1, jnp.clip(x, 0, 2), x * 2), INTS + FLOATS),
  "arith": (
    lambda x: (x - 1) * x + x // 3 if jnp.issubdtype(x.dtype, jnp.integer) else (x - 1) * x + x / 3,
    INTS + FLOATS + COMPLEX,
  ),
  "math": (lambda x: jnp.tanh(x) + jnp.exp(-jnp.abs(x)) + jnp.sqrt(jnp.abs(x)), FLOATS + COMPLEX),
  "astype": (
    lambda x: (x.astype(jnp.float32), x.astype(jnp.int8), x.astype(bool), x.astype(jnp.bfloat16)),
    ALL,
  ),
  "arange_like": (lambda x: x + jnp.arange(x.shape[-1], dtype=x.dtype), INTS + FLOATS + COMPLEX),
  "compare": (lambda x: (x == x[:1], x != 1), ALL),
}


@both_ways
@pytest.mark.filterwarnings("ignore:Casting from complex")
@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_jax_programs(program, x64):
  f, allowed = PROGRAMS[program]
  rng = np.random.default_rng(4)
  cpu = jax.devices("cpu")[0]
  with jax.enable_x64(x64):
    for dtype in _dtypes_for(x64):
      if dtype not in allowed:
        continue
      x = rng.integers(-4, 5, (4, 6))
      if dtype == "pred":
        x = x > 0
      elif dtype in INTS and dtype not in SIGNED:
        x = np.abs(x)
      elif dtype in COMPLEX:
        x = x + 0.5j * rng.integers(-4, 5, (4, 6))
      x = np.asarray(x).astype(NUMPY[dtype])
      ours = jax.tree.leaves(jax.tree.map(np.asarray, jax.jit(f)(x)))
      ref = jax.tree.leaves(jax.tree.map(np.asarray, jax.jit(f)(jax.device_put(x, cpu))))
      for o, r in zip(ours, ref, strict=True):
        inexact = program in ("math", "mean", "matmul") and r.dtype.kind in "fcV"
        rtol = INEXACT_RTOL[_name_of(r.dtype)] if inexact else 0.0
        assert_same(o, r, rtol)


def _name_of(np_dtype) -> str:
  return next(n for n, d in NUMPY.items() if d == np_dtype)


def test_unsupported_dtype_names_op_dtype_location():
  """A JAX program on a dtype its op's kernel lacks (pred convolution, which XLA:CPU runs)
  fails at compile time, located."""
  x = np.ones((1, 1, 3, 3), np.float32)
  with pytest.raises(Exception, match="UNIMPLEMENTED") as e:
    jax.jit(lambda x: lax.conv(x > 0, x > 1, (1, 1), "SAME")).lower(x).compile()
  message = str(e.value)
  assert "stablehlo.convolution" in message and "pred" in message
  assert "test_elementwise_dtypes.py" in message


@both_ways
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_16bit_chain_rounds_every_op(dtype):
  """Each op rounds to bf16/f16 (no excess precision): bit-exact with numpy (ml_dtypes),
  which rounds every op's result to the dtype. (XLA:CPU's own result depends on the host:
  on a CPU without AVX512-FP16 it keeps a chain of f16 ops in f32, which is XLA's
  allowed excess precision, so it is not the reference here.)"""
  x = np.array([1.5, 2.0, 3.0, 1 + 2**-8, 100.25], NUMPY[dtype])
  f = lambda a: (a * a + a) / 3 - a  # noqa: E731
  ours = np.asarray(jax.jit(f)(x))
  ref = f(x)
  assert ref.dtype == x.dtype
  np.testing.assert_array_equal(ours.view(np.uint16), ref.view(np.uint16))


@pytest.mark.parametrize("dtype", ALL)
def test_constants(dtype):
  """Dense constants of every dtype: printed lists (NaN/inf/-0 as hex), hex blobs, splats.

  Also guards the compiler against the caller's float mode: parsing bf16 1.17549e-38
  under flush-to-zero gave 0.
  """
  small = values(dtype)
  rng = np.random.default_rng(5)
  width = NUMPY[dtype].itemsize
  big = rng.integers(0, 256, 600 * width, dtype=np.uint8).view(NUMPY[dtype])
  if dtype == "pred":
    big = big.astype(bool)
  splat = np.full((3, 2), small[-1])

  def f():
    return jnp.asarray(small), jnp.asarray(big), jnp.asarray(splat)

  with jax.enable_x64(True):
    ours = [np.asarray(v) for v in jax.jit(f)()]
    with jax.default_device(jax.devices("cpu")[0]):
      ref = [np.asarray(v) for v in jax.jit(f)()]
  for o, r in zip(ours, ref, strict=True):
    assert o.tobytes() == r.tobytes()


# ---- 8- and 4-bit floats: converted bit-exactly, computed in f32 (optable.IN_F32). ----

import ml_dtypes  # noqa: E402

_MINIFLOATS = [
  ml_dtypes.float8_e5m2,
  ml_dtypes.float8_e4m3fn,
  ml_dtypes.float8_e4m3b11fnuz,
  ml_dtypes.float8_e4m3fnuz,
  ml_dtypes.float8_e5m2fnuz,
  ml_dtypes.float8_e3m4,
  ml_dtypes.float8_e4m3,
  ml_dtypes.float8_e8m0fnu,
  ml_dtypes.float4_e2m1fn,
]
_MINI_IDS = [np.dtype(t).name for t in _MINIFLOATS]


def _patterns(t):
  return np.arange(16 if t == ml_dtypes.float4_e2m1fn else 256, dtype=np.uint8).view(t)


def _bits(a):
  a = np.asarray(a)
  return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fcV" else a


def _both(f, *args):
  from reference import run_on

  return (run_on(jax.devices("workshop")[0], f, *args), run_on(jax.devices("cpu")[0], f, *args))


@pytest.mark.parametrize("t", _MINIFLOATS, ids=_MINI_IDS)
def test_minifloat_convert_every_bit_pattern_matches_cpu(t):
  """Every bit pattern to every float type (and ints, pred), bit for bit."""
  targets = [
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    np.int32,
    np.int8,
    np.bool_,
    np.complex64,
    *_MINIFLOATS,
  ]
  if jax.config.jax_enable_x64:
    targets.append(np.float64)
  v = _patterns(t)
  for to in targets:
    if t == ml_dtypes.float4_e2m1fn and np.dtype(to).kind in "iu":
      continue  # XLA:CPU converts +-6 (the largest f4E2M1FN) to INT_MAX/INT_MIN.
    ours, ref = _both(lambda x: x.astype(to), v)
    np.testing.assert_array_equal(_bits(ours), _bits(ref), err_msg=f"to {np.dtype(to).name}")


@pytest.mark.parametrize("t", _MINIFLOATS, ids=_MINI_IDS)
def test_minifloat_round_to_nearest_even_matches_cpu(t):
  """f32 -> minifloat: midpoints between neighbours, either side of them, overflow, inf,
  NaN and signed zeros round as XLA:CPU (and ml_dtypes)."""
  values = _patterns(t).astype(np.float64)
  finite = np.unique(values[np.isfinite(values)])
  mids = (finite[1:] + finite[:-1]) / 2
  rng = np.random.default_rng(0)
  x = np.concatenate(
    [
      mids,
      mids * (1 + 1e-6),
      mids * (1 - 1e-6),
      -mids,
      finite * 1.1,
      rng.standard_normal(2000) * np.exp(rng.uniform(-20, 20, 2000)),
      [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e30, -1e30],
    ]
  )
  if t == ml_dtypes.float8_e8m0fnu:  # XLA:CPU rounds f32 subnormals apart from ml_dtypes.
    x = x[~((np.abs(x) < 2.0**-125) & (x != 0))]
  with np.errstate(all="ignore"):
    x = x.astype(np.float32)
  for frm in (np.float32, np.float16, ml_dtypes.bfloat16, np.int32):
    with np.errstate(all="ignore"):
      xs = x.astype(frm) if frm != np.int32 else np.nan_to_num(x).clip(-2e9, 2e9).astype(frm)
    ours, ref = _both(lambda y: y.astype(t), xs)
    np.testing.assert_array_equal(_bits(ours), _bits(ref), err_msg=f"from {np.dtype(frm).name}")


@pytest.mark.parametrize("t", _MINIFLOATS, ids=_MINI_IDS)
def test_minifloat_math_in_f32_matches_cpu(t):
  v = _patterns(t)
  v = v[np.isfinite(v.astype(np.float32))]
  w = v[::-1]
  for f in (
    lambda a, b: a + b,
    lambda a, b: a * b,
    lambda a, b: a / b,
    lambda a, b: jnp.maximum(a, b),
    lambda a, b: a < b,
    lambda a, b: jnp.where(a > 0, a, b),
    lambda a, b: jax.lax.iota(t, 8),
    lambda a, b: jnp.tanh(a),
  ):
    ours, ref = _both(f, v, w)
    np.testing.assert_array_equal(_bits(ours), _bits(ref))


_M = ml_dtypes
_DOT_TYPES = [  # (lhs, rhs, result): XLA:CPU computes in the higher precision of the three.
  (_M.float8_e5m2, _M.float8_e4m3fn, _M.float8_e5m2),
  (_M.float8_e4m3fn, _M.float8_e5m2, _M.float8_e4m3fn),
  (_M.float8_e4m3fn, _M.float8_e4m3fn, _M.float8_e5m2),
  (_M.float8_e4m3fn, _M.float8_e4m3fn, _M.float8_e4m3fn),
  (_M.float8_e4m3fn, _M.float8_e4m3fn, _M.float8_e4m3b11fnuz),
  (_M.float8_e3m4, _M.float8_e4m3, _M.float8_e4m3),
  (_M.float8_e4m3fnuz, _M.float8_e5m2fnuz, _M.float8_e4m3fnuz),
  (_M.float8_e4m3fn, _M.float8_e4m3fnuz, _M.float8_e3m4),
  (_M.float4_e2m1fn, _M.float8_e4m3fn, _M.float8_e4m3fn),
  (_M.float8_e4m3fn, _M.float8_e5m2, _M.float8_e8m0fnu),
  (_M.float8_e4m3fn, _M.float8_e5m2, jnp.bfloat16),
  (_M.float8_e4m3fn, _M.float8_e5m2, np.float32),
]


@pytest.mark.parametrize(
  "lhs,rhs,out", _DOT_TYPES, ids=["x".join(np.dtype(t).name for t in c) for c in _DOT_TYPES]
)
def test_minifloat_dot_general_matches_cpu(lhs, rhs, out):
  """Bit for bit (NaN as NaN), batched, operands and result of minifloat types mixed."""
  rng = np.random.default_rng(1)
  a = (rng.standard_normal((2, 8, 16)) * 2).astype(lhs)
  b = (rng.standard_normal((2, 16, 4)) * 2).astype(rhs)
  ours, ref = _both(
    lambda x, y: jax.lax.dot_general(
      x, y, (((2,), (1,)), ((0,), (0,))), preferred_element_type=out
    ),
    a,
    b,
  )
  assert ours.dtype == ref.dtype == np.dtype(out)
  nan = np.isnan(ref.astype(np.float32))
  np.testing.assert_array_equal(np.isnan(ours.astype(np.float32)), nan)
  np.testing.assert_array_equal(_bits(ours)[~nan], _bits(ref)[~nan])
  # Against float64 of the operands in the compute type T (the higher precision of the
  # three): f32 sums, then at most two roundings to T (f16, then T) and one to the result,
  # each within an ulp of its type.
  t = max((lhs, rhs, out), key=lambda d: (ml_dtypes.finfo(d).maxexp, ml_dtypes.finfo(d).nmant))
  exact = np.einsum("bik,bkj->bij", a.astype(t).astype(np.float64), b.astype(t).astype(np.float64))

  def ulp(x, d):
    info = ml_dtypes.finfo(d)
    e = np.floor(np.log2(np.maximum(np.abs(x), float(info.smallest_normal))))
    return 2.0 ** (e - info.nmant)

  err = np.abs(ours.astype(np.float64) - exact)
  finite = ~nan & (np.abs(exact) <= float(ml_dtypes.finfo(out).max))
  assert np.all((err <= ulp(exact, t) + ulp(exact, out))[finite])
