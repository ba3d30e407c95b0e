"""Shared helpers for the dtype tests: run one StableHLO op on both backends, interesting
values per dtype, and per-dtype comparison.

Programs are StableHLO text compiled directly by each backend's client, so a test pins
down exactly one op on exactly the dtypes it names (JAX's own lowering would promote,
upcast or reject some of them: lax.pow refuses integers, jnp.sum upcasts bf16).
"""

from __future__ import annotations


import ml_dtypes
import numpy as np

from reference import run_stablehlo

NUMPY = {
  "pred": np.dtype(np.bool_),
  "s8": np.dtype(np.int8),
  "s16": np.dtype(np.int16),
  "s32": np.dtype(np.int32),
  "s64": np.dtype(np.int64),
  "u8": np.dtype(np.uint8),
  "u16": np.dtype(np.uint16),
  "u32": np.dtype(np.uint32),
  "u64": np.dtype(np.uint64),
  "f16": np.dtype(np.float16),
  "bf16": np.dtype(ml_dtypes.bfloat16),
  "f32": np.dtype(np.float32),
  "f64": np.dtype(np.float64),
  "c64": np.dtype(np.complex64),
  "c128": np.dtype(np.complex128),
}
MLIR = {
  "pred": "i1",
  "s8": "i8",
  "s16": "i16",
  "s32": "i32",
  "s64": "i64",
  "u8": "ui8",
  "u16": "ui16",
  "u32": "ui32",
  "u64": "ui64",
  "f16": "f16",
  "bf16": "bf16",
  "f32": "f32",
  "f64": "f64",
  "c64": "complex<f32>",
  "c128": "complex<f64>",
}
SIGNED = ["s8", "s16", "s32", "s64"]
UNSIGNED = ["u8", "u16", "u32", "u64"]
INTS = SIGNED + UNSIGNED
FLOATS = ["f16", "bf16", "f32", "f64"]
COMPLEX = ["c64", "c128"]
ALL = ["pred"] + INTS + FLOATS + COMPLEX
COMPONENT = {"c64": "f32", "c128": "f64"}

# Relative tolerances for inexact math (exp, sin, pow, ...), per dtype. XLA:CPU evaluates
# transcendentals with its own vectorized approximations, ours with glibc's libm; both
# are within a few ulps, so allow some ulps of f32/f64. f16/bf16 results are both rounded
# once from f32 results that can straddle a rounding boundary: allow one f16/bf16 ulp.
INEXACT_RTOL = {"f16": 2**-10, "bf16": 2**-7, "f32": 1e-5, "f64": 1e-12, "c64": 1e-5, "c128": 1e-12}


def tensor(dtype: str, n: int) -> str:
  return f"tensor<{n}x{MLIR[dtype]}>"


def op_module(op: str, in_dtypes: list[str], out_dtype: str, n: int, attrs: str = "") -> str:
  """A module applying elementwise `op` (generic syntax) to n-element vectors."""
  return multi_op_module(op, in_dtypes, [(out_dtype, attrs)], n)


def multi_op_module(op: str, in_dtypes: list[str], variants: list[tuple[str, str]], n: int) -> str:
  """Like op_module, with one result per (out_dtype, attrs) variant of the same op on the
  same operands: one compile covers e.g. every target of a convert."""
  ins = ", ".join(f"%a{i}: {tensor(d, n)}" for i, d in enumerate(in_dtypes))
  names = ", ".join(f"%a{i}" for i in range(len(in_dtypes)))
  types = ", ".join(tensor(d, n) for d in in_dtypes)
  outs = [tensor(d, n) for d, _ in variants]
  body = "".join(
    f'  %{i} = "stablehlo.{op}"({names}){f" {{{attrs}}}" if attrs else ""} : '
    f'({types}) -> {out} loc("dtype_case.py":7:3)\n'
    for i, (out, (_, attrs)) in enumerate(zip(outs, variants))
  )
  results = ", ".join(f"%{i}" for i in range(len(variants)))
  return (
    f"func.func public @main({ins}) -> ({', '.join(outs)}) {{\n{body}"
    f"  return {results} : {', '.join(outs)}\n}}"
  )


def values(dtype: str) -> np.ndarray:
  """Edge and ordinary values of `dtype`: extremes, zero, signs, inf/NaN, halves."""
  np_dtype = NUMPY[dtype]
  if dtype == "pred":
    return np.array([False, True])
  if dtype in INTS:
    info = np.iinfo(np_dtype)
    bits = info.bits
    vals = [0, 1, 2, 3, 7, 100, bits - 1, bits, info.max, info.max - 1]
    if dtype in SIGNED:
      vals += [-1, -2, -7, -100, info.min, info.min + 1]
    return np.array(vals, np_dtype)
  if dtype in FLOATS:
    info = ml_dtypes.finfo(np_dtype)
    vals = [
      0.0,
      -0.0,
      1.0,
      -1.0,
      0.5,
      -2.5,
      3.0,
      7.25,
      100.0,
      -1000.0,
      float(info.tiny),
      float(info.max),
      -float(info.max),
      np.inf,
      -np.inf,
      np.nan,
    ]
    return np.array(vals, np.float64).astype(np_dtype)
  parts = [0.0, 1.0, -1.0, 0.5, -2.5, 3.0]
  return np.array([complex(r, i) for r in parts for i in parts], np_dtype)


def pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Every (x[i], y[j]) pair, as two flat arrays."""
  a, b = np.meshgrid(x, y, indexing="ij")
  return a.reshape(-1), b.reshape(-1)


def _as_comparable(x: np.ndarray) -> np.ndarray:
  # numpy has no bf16 arithmetic; 16-bit floats are exact in f32.
  return x.astype(np.float32) if x.dtype in (NUMPY["f16"], NUMPY["bf16"]) else x


def assert_same(
  ours: np.ndarray, ref: np.ndarray, rtol: float = 0.0, atol: float = 0.0, signed_zeros: bool = True
):
  """Equal dtype and shape; NaN in the same places; values equal (rtol = atol = 0: with
  the sign of zero unless not `signed_zeros`) or within rtol * |ref| + atol."""
  assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ref.dtype)
  a, b = _as_comparable(ours), _as_comparable(ref)
  if a.dtype.kind not in "fc":
    np.testing.assert_array_equal(a, b)
    return
  for part in (np.real, np.imag) if a.dtype.kind == "c" else (lambda v: v,):
    pa, pb = part(a), part(b)
    np.testing.assert_array_equal(np.isnan(pa), np.isnan(pb), err_msg="NaN positions")
    keep = ~np.isnan(pb)
    pa, pb = pa[keep], pb[keep]
    if rtol == 0 and atol == 0:
      np.testing.assert_array_equal(pa, pb)
      if signed_zeros:
        np.testing.assert_array_equal(np.signbit(pa), np.signbit(pb), err_msg="sign of zero")
    else:
      # inf must match exactly; finite values within tolerance.
      np.testing.assert_array_equal(np.isinf(pa) & (pa > 0), np.isinf(pb) & (pb > 0))
      np.testing.assert_array_equal(np.isinf(pa) & (pa < 0), np.isinf(pb) & (pb < 0))
      fin = np.isfinite(pb)
      scale = np.abs(b[keep][fin]) if a.dtype.kind == "c" else np.abs(pb[fin])
      err = np.abs(pa[fin].astype(np.float64) - pb[fin].astype(np.float64))
      bad = err > atol + rtol * scale
      assert not bad.any(), (
        f"{bad.sum()} of {bad.size} differ: ours {pa[fin][bad][:5]} ref {pb[fin][bad][:5]}"
      )


def compare_text(
  text: str, args: list[np.ndarray], rtol: float = 0.0, atol: float = 0.0, signed_zeros: bool = True
):
  """Runs `text` on workshop and on cpu and asserts the results agree (see assert_same)."""
  ref = run_stablehlo(text, *args, platform="cpu")
  ours = run_stablehlo(text, *args)
  for o, r in zip(ours, ref, strict=True):
    assert_same(o, r, rtol, atol, signed_zeros)
