"""The zero-size sweep's cases: every op of the op table (compiler/optable.py) on shapes
with a zero-size dimension in each position, size-1 and size-0 reduced, scanned and
windowed axes, empty index arrays, zero-size windows and batch dims.

A case is a JAX function (jnp/lax) or a StableHLO module (for ops JAX never emits, such
as `stablehlo.map`), the shapes and dtypes of its operands, and the op table entry it
exercises. `GENERATORS` maps each op table name to the function that makes its cases;
`EXCLUDED` lists, with the reason, the ops no sweep case can reach. test_zero_size_sweep.py
checks that the two cover the table, and runs the cases in worker processes (this file run
as a script is the worker, see `worker`) on workshop and on JAX's CPU backend.

One module of about 1,300 lines on purpose: it is both the case table and the worker
script each worker process runs, and one generator per op family sits beside the others
so that a new op's cases are written next to its family's.

Worker protocol (stdin: one case id a line; stdout: one line per event, JSON):
  {"start": id}                           written and flushed before the case runs, so a
                                          parent that reads EOF next knows which case
                                          killed the process;
  {"done": id, "ok": bool, "why": str,    the comparison's outcome, and for the first case
   "kernels": [str]}                      of each op the kernels of its workshop plan.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import zlib
from collections.abc import Callable
from functools import partial

import numpy as np

# Shapes with a zero-size dimension in each position, ranks 1-3.
ZERO_SHAPES = [(0,), (0, 3), (3, 0), (0, 2, 3), (2, 0, 3), (2, 3, 0)]
# Representative dtypes, in the order a generator prefers them (op table names).
_PREFERRED = ["f32", "s32", "pred", "c64", "bf16", "u8", "f64", "u32", "s64", "f16", "c128"]


@dataclasses.dataclass(frozen=True)
class Case:
  """One program of the sweep.

  op: the op table entry it exercises. label: operand shapes/dtypes and attributes, for
  the report. operands: (shape, op table dtype name) of each operand. fn: a function of
  the operands (jit-compiled per backend), or None with `mlir`, a StableHLO module whose
  @main takes the operands. mesh: fn takes a 4-device Mesh first (collectives).
  codegen: the WORKSHOP_CODEGEN setting to compile under (None: the default).
  """

  op: str
  label: str
  operands: tuple
  fn: Callable | None = None
  mlir: str | None = None
  mesh: bool = False
  codegen: str | None = None

  @property
  def id(self) -> str:
    return f"{self.op}:{self.label}"


def _label(operands, extra=""):
  parts = [f"{d}[{','.join(map(str, s))}]" for s, d in operands]
  return " ".join(parts) + (f" {extra}" if extra else "")


def _case(op, operands, fn=None, extra="", **kw):
  operands = tuple((tuple(s), d) for s, d in operands)
  return Case(op, _label(operands, extra), operands, fn, **kw)


def _dtypes(spec_dtypes, limit=3, prefer=_PREFERRED):
  return [d for d in prefer if d in spec_dtypes][:limit]


def _np_dtype(name):
  import ml_dtypes

  table = {
    "pred": np.bool_,
    "s8": np.int8,
    "s16": np.int16,
    "s32": np.int32,
    "s64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
  }
  return np.dtype(table[name])


def operand_values(case: Case) -> list[np.ndarray]:
  """Deterministic operands: floats in [0.25, 2), integers in [1, 4], alternating bools
  (positive, so division, shifts, logs and powers stay defined)."""
  rng = np.random.default_rng(zlib.crc32(case.id.encode()))
  out = []
  for shape, d in case.operands:
    t = _np_dtype(d)
    if d == "pred":
      x = rng.integers(0, 2, shape).astype(bool)
    elif d[0] in "su":
      x = rng.integers(1, 5, shape).astype(t)
    elif d[0] == "c":
      x = (rng.uniform(0.25, 2, shape) + 1j * rng.uniform(0.25, 2, shape)).astype(t)
    else:
      x = rng.uniform(0.25, 2, shape).astype(t)
    out.append(x)
  return out


# ---------------------------------------------------------------------------------------
# Generators: op table name -> cases.


def _lax():
  from jax import lax

  return lax


_UNARY = {
  "negate": "neg",
  "sign": "sign",
  "abs": "abs",
  "not": "bitwise_not",
  "popcnt": "population_count",
  "count_leading_zeros": "clz",
  "floor": "floor",
  "ceil": "ceil",
  "is_finite": "is_finite",
  "cbrt": "cbrt",
  "sqrt": "sqrt",
  "rsqrt": "rsqrt",
  "exponential": "exp",
  "exponential_minus_one": "expm1",
  "log": "log",
  "log_plus_one": "log1p",
  "logistic": "logistic",
  "sine": "sin",
  "cosine": "cos",
  "tan": "tan",
  "tanh": "tanh",
  "erf": "erf",
  "sinh": "sinh",
  "cosh": "cosh",
  "asin": "asin",
  "acos": "acos",
  "asinh": "asinh",
  "acosh": "acosh",
  "atanh": "atanh",
  "real": "real",
  "imag": "imag",
}
# Unary ops JAX lowers to others (lax.logistic: 1 / (1 + exp(-x))): StableHLO text.
MLIR_UNARY = {"logistic"}
_BINARY = {
  "add": "add",
  "multiply": "mul",
  "subtract": "sub",
  "divide": "div",
  "power": "pow",
  "remainder": "rem",
  "maximum": "max",
  "minimum": "min",
  "atan2": "atan2",
  "and": "bitwise_and",
  "or": "bitwise_or",
  "xor": "bitwise_xor",
  "shift_left": "shift_left",
  "shift_right_arithmetic": "shift_right_arithmetic",
  "shift_right_logical": "shift_right_logical",
}


def _unary_fn(name, x):
  lax = _lax()
  if name == "round_nearest_afz":
    return lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)
  if name == "round_nearest_even":
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
  return getattr(lax, _UNARY[name])(x)


def _binary_fn(name, x, y):
  return getattr(_lax(), _BINARY[name])(x, y)


def _unary_mlir(op, shape, dtype):
  t = _tensor(shape, {"f32": "f32", "c64": "complex<f32>"}[dtype])
  return f"""
func.func public @main(%x: {t}) -> {t} {{
  %r = stablehlo.{op} %x : {t}
  return %r : {t}
}}
"""


def _elementwise(op, spec, arity):
  """All of ZERO_SHAPES for the first dtype, (2, 0, 3) for the others."""
  dtypes = _dtypes(spec.dtypes)
  if op in ("real", "imag"):
    dtypes = _dtypes(spec.dtypes & {"c64", "f32", "c128"}, prefer=["c64", "f32", "c128"])
  cases = []
  for i, d in enumerate(dtypes):
    # Elementwise kernels see the element count only: the zero in each position of rank
    # 3, and rank 1, for the first dtype; the others once.
    for shape in [(0,), (0, 2, 3), (2, 0, 3), (2, 3, 0)] if i == 0 else [(3, 0)]:
      if op in MLIR_UNARY and d in ("f32", "c64"):
        cases.append(_case(op, [(shape, d)], mlir=_unary_mlir(op, shape, d)))
      elif arity == 1:
        cases.append(_case(op, [(shape, d)], partial(_unary_fn, op)))
      else:
        cases.append(_case(op, [(shape, d)] * 2, partial(_binary_fn, op)))
  return cases


def _gen_clamp(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes):
    for shape in [(0,), (3, 0), (2, 0, 3)]:
      cases.append(_case("clamp", [((), d), (shape, d), ((), d)], lax.clamp, "scalar bounds"))
    cases.append(_case("clamp", [((3, 0), d)] * 3, lax.clamp))
  return cases


def _gen_compare(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 4):
    for shape in [(0,), (3, 0), (2, 0, 3)]:
      fn = lax.eq if d[0] == "c" else lax.lt
      cases.append(_case("compare", [(shape, d)] * 2, fn))
  return cases


def _gen_select(spec):
  lax = _lax()
  return [
    _case("select", [(shape, "pred"), (shape, d), (shape, d)], lax.select)
    for d in _dtypes(spec.dtypes)
    for shape in [(0,), (3, 0), (2, 0, 3)]
  ] + [_case("select", [((), "pred"), ((3, 0), "f32"), ((3, 0), "f32")], lax.select)]


def _gen_reduce_precision(spec):
  lax = _lax()
  return [
    _case(
      "reduce_precision", [(s, d)], partial(lax.reduce_precision, exponent_bits=5, mantissa_bits=2)
    )
    for d in _dtypes(spec.dtypes, 2)
    for s in [(0,), (3, 0), (2, 0, 3)]
  ]


def _gen_convert(spec):
  pairs = [("f32", "s32"), ("s32", "f32"), ("pred", "f32"), ("f32", "bf16"), ("c64", "f32")]
  pairs += [("f32", "f8E4M3FN"), ("s8", "s4")]
  cases = []
  for a, b in pairs:
    for s in [(0,), (3, 0), (2, 0, 3)]:
      cases.append(_case("convert", [(s, a)], partial(_convert_to, b), f"-> {b}"))
  return cases


_JNP_DTYPE = {"f8E4M3FN": "float8_e4m3fn", "s4": "int4", "u4": "uint4", "bf16": "bfloat16"}


def _jnp_dtype(name):
  import jax.numpy as jnp

  if name in _JNP_DTYPE:
    return getattr(jnp, _JNP_DTYPE[name])
  return _np_dtype(name)


def _convert_to(target, x):
  return _lax().convert_element_type(x, _jnp_dtype(target))


def _bitcast_to(target, x):
  return _lax().bitcast_convert_type(x, _jnp_dtype(target))


def _gen_bitcast_convert(spec):
  pairs = [("f32", "s32"), ("f32", "u8"), ("u8", "f32"), ("s32", "f32"), ("c64", "c64")]
  pairs = [p for p in pairs if p != ("c64", "c64")]
  cases = []
  for a, b in pairs:
    for s in [(0,), (3, 0), (2, 0, 3)]:
      if a == "u8" and b == "f32":  # Narrow to wide: the last dim must be the width ratio.
        s = s + (4,)
      cases.append(_case("bitcast_convert", [(s, a)], partial(_bitcast_to, b), f"-> {b}"))
  return cases


def _gen_complex(spec):
  lax = _lax()
  return [
    _case("complex", [(s, d)] * 2, lax.complex)
    for d in _dtypes(spec.dtypes, 2)
    for s in [(0,), (3, 0), (2, 0, 3)]
  ]


def _gen_top_k(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, k in [((0, 4), 2), ((3, 0), 0), ((2, 0, 3), 1), ((3, 1), 1), ((3, 4), 0)]:
      cases.append(_case("top_k", [(s, d)], partial(lambda k, x: lax.top_k(x, k), k), f"k={k}"))
  return cases


def _gen_approx_top_k(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2, ["f32", "bf16"]):
    for s, k in [((0, 4), 2), ((3, 1), 1), ((2, 0, 5), 2)]:
      cases.append(
        _case("approx_top_k", [(s, d)], partial(lambda k, x: lax.approx_max_k(x, k), k), f"k={k}")
      )
  return cases


def _gen_constant(spec):
  import jax.numpy as jnp

  def fn(shape, dt, x):
    return x, jnp.asarray(np.ones(shape, dt)), jnp.asarray(np.arange(3, dtype=dt)[:0])

  return [
    _case("constant", [((1,), d)], partial(fn, s, _np_dtype(d)), f"constant {s}")
    for d in _dtypes(spec.dtypes, 2)
    for s in [(0,), (3, 0), (2, 0, 3)]
  ]


def _gen_reshape(spec):
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, t in [
      ((0,), (0, 3)),
      ((3, 0), (0,)),
      ((2, 0, 3), (0, 6)),
      ((0, 3), (3, 0, 1)),
      ((2, 3), (3, 2)),
    ]:
      cases.append(_case("reshape", [(s, d)], partial(lambda t, x: x.reshape(t), t), f"-> {t}"))
  return cases


def _gen_broadcast_in_dim(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, t, dims in [
      ((), (0, 3), ()),
      ((3,), (0, 3), (1,)),
      ((0,), (0, 3), (0,)),
      ((3, 0), (2, 3, 0), (1, 2)),
      ((1, 3), (0, 3), (0, 1)),
    ]:
      fn = partial(lambda t, dims, x: lax.broadcast_in_dim(x, t, dims), t, dims)
      cases.append(_case("broadcast_in_dim", [(s, d)], fn, f"-> {t}"))
  return cases


def _gen_transpose(spec):
  lax = _lax()
  return [
    _case("transpose", [(s, d)], partial(lambda p, x: lax.transpose(x, p), p), f"perm={p}")
    for d in _dtypes(spec.dtypes, 2)
    for s, p in [((0, 3), (1, 0)), ((3, 0), (1, 0)), ((2, 0, 3), (2, 0, 1)), ((2, 3, 0), (1, 2, 0))]
  ]


def _gen_slice(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, start, limit, strides in [
      ((0, 3), (0, 1), (0, 3), (1, 1)),
      ((3, 4), (1, 2), (1, 4), (1, 2)),  # An empty slice of a full array.
      ((3, 0), (0, 0), (3, 0), (2, 1)),
      ((2, 0, 3), (1, 0, 0), (2, 0, 3), (1, 1, 3)),
    ]:
      fn = partial(lambda a, b, c, x: lax.slice(x, a, b, c), start, limit, strides)
      cases.append(_case("slice", [(s, d)], fn, f"{start}:{limit}:{strides}"))
  return cases


def _gen_concatenate(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for a, b, dim in [
      ((0, 3), (2, 3), 0),
      ((0, 3), (0, 3), 0),
      ((3, 0), (3, 2), 1),
      ((2, 0, 3), (2, 0, 1), 2),
      ((2, 0, 3), (2, 4, 3), 1),
    ]:
      fn = partial(lambda dim, x, y: lax.concatenate([x, y], dim), dim)
      cases.append(_case("concatenate", [(a, d), (b, d)], fn, f"dim={dim}"))
  return cases


def _gen_iota(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 3):
    for s, dim in [((0,), 0), ((3, 0), 0), ((0, 3), 1), ((2, 0, 3), 2)]:

      def fn(d, s, dim, x):
        return x + 1, lax.broadcasted_iota(_jnp_dtype(d), s, dim)

      cases.append(_case("iota", [((1,), "s32")], partial(fn, d, s, dim), f"iota {d}{s} dim={dim}"))
  return cases


def _gen_pad(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, cfg in [
      ((0,), [(1, 2, 0)]),
      ((3, 0), [(0, 0, 0), (1, 1, 0)]),
      ((0, 3), [(0, 0, 0), (0, 0, 1)]),
      ((2, 0, 3), [(0, 0, 0), (0, 0, 0), (-1, 0, 0)]),
      ((3,), [(-2, -1, 0)]),  # Negative padding leaves nothing.
      ((2, 3), [(0, 0, 0), (-3, 0, 0)]),
    ]:
      fn = partial(lambda cfg, x, v: lax.pad(x, v, cfg), cfg)
      cases.append(_case("pad", [(s, d), ((), d)], fn, f"cfg={cfg}"))
  return cases


def _gen_reverse(spec):
  lax = _lax()
  return [
    _case("reverse", [(s, d)], partial(lambda dims, x: lax.rev(x, dims), dims), f"dims={dims}")
    for d in _dtypes(spec.dtypes, 2)
    for s, dims in [((0,), (0,)), ((3, 0), (0,)), ((3, 0), (1,)), ((2, 0, 3), (0, 2))]
  ]


def _gen_dynamic_slice(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, sizes in [((0, 3), (0, 2)), ((3, 0), (2, 0)), ((3, 4), (0, 2)), ((2, 0, 3), (1, 0, 3))]:
      fn = partial(lambda sizes, x, i: lax.dynamic_slice(x, [i] * len(sizes), sizes), sizes)
      cases.append(_case("dynamic_slice", [(s, d), ((), "s32")], fn, f"sizes={sizes}"))
  return cases


def _gen_dynamic_update_slice(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, u in [((0, 3), (0, 2)), ((3, 0), (2, 0)), ((3, 4), (0, 2)), ((3, 4), (2, 0))]:
      fn = lambda x, y, i: lax.dynamic_update_slice(x, y, [i] * x.ndim)  # noqa: E731
      cases.append(_case("dynamic_update_slice", [(s, d), (u, d), ((), "s32")], fn))
  return cases


def _gen_gather(spec):
  import jax.numpy as jnp

  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, i, axis in [
      ((4, 3), (0,), 0),  # An empty index array.
      ((4, 3), (2, 0), 0),
      ((4, 0), (2,), 0),  # A zero-size slice.
      ((0, 3), (2,), 1),
      ((2, 0, 3), (0,), 2),
      ((4, 3), (3,), 1),
    ]:
      fn = partial(lambda axis, x, idx: jnp.take(x, idx % 3, axis=axis, mode="clip"), axis)
      cases.append(_case("gather", [(s, d), (i, "s32")], fn, f"axis={axis}"))
    # take_along_axis: gathers with batching dims of size 0.
    cases.append(
      _case(
        "gather",
        [((0, 4), d), ((0, 2), "s32")],
        lambda x, i: jnp.take_along_axis(x, i % 4, axis=1),
        "along axis 1",
      )
    )
  return cases


def _scatter_fn(kind, x, i, u):
  ref = x.at[i % max(x.shape[0], 1)]
  if kind == "apply":  # A non-standard update computation: scatter_general.
    return x.at[i % max(x.shape[0], 1)].apply(lambda v: v * 2)
  return getattr(ref, kind)(u, mode="drop")


def _gen_scatter(spec, kinds=("set", "add", "max", "mul")):
  cases = []
  op = "scatter" if "apply" not in kinds else "scatter_general"
  for d in _dtypes(spec.dtypes & {"f32", "s32", "bf16", "pred", "c64"}, 2):
    for kind in kinds:
      if kind in ("max",) and d[0] == "c":
        continue
      for s, i, u in [
        ((4, 3), (0,), (0, 3)),  # An empty index array.
        ((4, 0), (2,), (2, 0)),  # Zero-size updates.
        ((0, 3), (2,), (2, 3)),  # Every index out of bounds (dropped).
        ((4, 3), (2,), (2, 3)),
      ]:
        fn = partial(_scatter_fn, kind)
        cases.append(_case(op, [(s, d), (i, "s32"), (u, d)], fn, kind))
  return cases


def _gen_scatter_general(spec):
  cases = _gen_scatter(spec, kinds=("apply",))

  def fn(x, i, u):  # A body of two ops: no named combiner.
    from jax import lax

    dnums = lax.ScatterDimensionNumbers(
      update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    return lax.scatter_apply(x, i[:, None] % 4, lambda v: v * 3 + 1, dnums, update_shape=u.shape)

  for s, i, u in [((4, 3), (0,), (0, 3)), ((4, 0), (2,), (2, 0))]:
    cases.append(_case("scatter_general", [(s, "f32"), (i, "s32"), (u, "f32")], fn, "v*3+1"))
  return cases


def _gen_sort(spec):
  import jax.numpy as jnp

  cases = []
  for d in _dtypes(spec.dtypes, 3):
    for s, axis in [((0,), 0), ((3, 0), 1), ((3, 0), 0), ((0, 3), 1), ((2, 0, 3), 2), ((3, 1), 1)]:
      cases.append(
        _case("sort", [(s, d)], partial(lambda a, x: jnp.sort(x, axis=a), axis), f"axis={axis}")
      )
    cases.append(
      _case("sort", [((3, 0), d)], lambda x: jnp.argsort(x, axis=0, stable=True), "argsort axis=0")
    )
  return cases


def _gen_sort_general(spec):
  # A comparator JAX's sort never emits (by |x|, descending): StableHLO text.
  return [
    _case(
      "sort_general", [(s, "f32")], mlir=_sort_general_mlir(s, axis), extra=f"axis={axis} |x| desc"
    )
    for s, axis in [((0,), 0), ((3, 0), 1), ((0, 3), 1), ((2, 0, 3), 0), ((3, 1), 1)]
  ]


def _tensor(shape, mlir_type):
  return f"tensor<{''.join(f'{n}x' for n in shape)}{mlir_type}>"


def _sort_general_mlir(shape, axis):
  t = _tensor(shape, "f32")
  return f"""
func.func public @main(%x: {t}) -> {t} {{
  %r = "stablehlo.sort"(%x) <{{dimension = {axis} : i64, is_stable = true}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %aa = stablehlo.abs %a : tensor<f32>
    %bb = stablehlo.abs %b : tensor<f32>
    %c = stablehlo.compare GT, %aa, %bb, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }}) : ({t}) -> {t}
  return %r : {t}
}}
"""


def _reduce_shapes():
  """(shape, reduced axes): zero-size kept dims, zero-size and size-1 reduced axes."""
  return [
    ((0,), (0,)),
    ((3, 0), (1,)),
    ((3, 0), (0,)),
    ((0, 3), (1,)),
    ((2, 0, 3), (1,)),
    ((2, 0, 3), (0, 2)),
    ((2, 1, 3), (1,)),
    ((3, 1), (0, 1)),
  ]


def _gen_reduce(spec):
  cases = []
  for d in _dtypes(spec.dtypes, 4):
    # lax's reductions: jnp.max of a zero-size axis raises (no identity) on both backends.
    names = ("reduce_sum", "reduce_max") if d != "pred" else ("reduce_or", "reduce_and")
    if d[0] == "c":
      names = ("reduce_prod",)
    for name in names:
      for s, axes in _reduce_shapes():
        fn = partial(lambda name, axes, x: getattr(_lax(), name)(x, axes), name, axes)
        cases.append(_case("reduce", [(s, d)], fn, f"{name} axes={axes}"))
  return cases


def _gen_arg(op, spec):
  import jax.numpy as jnp

  name = op
  cases = []
  for d in _dtypes(spec.dtypes, 3):
    # A zero-size reduced axis has no argmax (JAX refuses it); kept dims may be empty.
    for s, axis in [((3, 0), 0), ((0, 3), 1), ((2, 0, 3), 2), ((2, 0, 3), 0), ((3, 1), 1)]:
      fn = partial(lambda axis, x: getattr(jnp, name)(x, axis=axis), axis)
      cases.append(_case(op, [(s, d)], fn, f"axis={axis}"))
  return cases


def _gen_reduce_general(spec):
  lax = _lax()
  cases = []
  for s, axes in _reduce_shapes():
    # A body of two ops (no named combiner): lane plan.
    fn = partial(lambda axes, x: lax.reduce(x, np.float32(0), lambda a, b: a * 0.5 + b, axes), axes)
    cases.append(_case("reduce_general", [(s, "f32")], fn, f"a*0.5+b axes={axes}"))
    # A variadic reduction that is not an argmax.
    fn2 = partial(
      lambda axes, x, y: lax.reduce(
        (x, y), (np.float32(0), np.int32(1)), lambda a, b: (a[0] + b[0], a[1] * b[1]), axes
      ),
      axes,
    )
    cases.append(_case("reduce_general", [(s, "f32"), (s, "s32")], fn2, f"(sum, prod) axes={axes}"))
  return cases


def _gen_map(spec):
  cases = []
  for s in [(0,), (3, 0), (2, 0, 3), (1, 2)]:
    t = _tensor(s, "f32")
    dims = ", ".join(str(i) for i in range(len(s)))
    mlir = f"""
func.func public @main(%x: {t}, %y: {t}) -> {t} {{
  %r = "stablehlo.map"(%x, %y) <{{dimensions = array<i64: {dims}>}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.multiply %a, %b : tensor<f32>
    %c = stablehlo.add %m, %a : tensor<f32>
    stablehlo.return %c : tensor<f32>
  }}) : ({t}, {t}) -> {t}
  return %r : {t}
}}
"""
    cases.append(_case("map", [(s, "f32"), (s, "f32")], mlir=mlir, extra="a*b+a"))
  return cases


def _gen_dot_general(spec):
  import jax.numpy as jnp

  cases = []
  for d in _dtypes(spec.dtypes, 4):
    for a, b in [
      ((0, 3), (3, 4)),
      ((3, 0), (0, 4)),  # Zero-size contraction: zeros.
      ((3, 4), (4, 0)),
      ((0, 3, 4), (0, 4, 2)),  # Zero batch.
      ((2, 3, 0), (2, 0, 5)),
      ((0,), (0,)),
      ((1, 1), (1, 0)),
    ]:
      cases.append(_case("dot_general", [(a, d), (b, d)], jnp.matmul))
  return cases


def _gen_convolution(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for x, w, strides, pad in [
      ((0, 2, 5), (3, 2, 2), (1,), "VALID"),  # Zero batch (NCH, OIH).
      ((2, 0, 5), (3, 0, 2), (1,), "VALID"),  # Zero input features: zeros.
      ((2, 2, 5), (0, 2, 2), (1,), "SAME"),  # Zero output features.
      ((2, 2, 0), (3, 2, 1), (1,), "VALID"),  # Zero spatial size.
      ((2, 2, 3), (3, 2, 4), (1,), "VALID"),  # A window larger than the input: zero outputs.
      ((2, 2, 0, 4), (3, 2, 1, 2), (1, 2), "SAME"),
      ((1, 1, 5), (1, 1, 1), (2,), "VALID"),
    ]:
      fn = partial(
        lambda strides, pad, x, w: lax.conv_general_dilated(x, w, strides, pad), strides, pad
      )
      cases.append(_case("convolution", [(x, d), (w, d)], fn, f"strides={strides} {pad}"))
  return cases


def _cum(name, axis, reverse, x):
  lax = _lax()
  return getattr(lax, name)(x, axis=axis, reverse=reverse)


def _gen_reduce_window(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 3):
    names = ("cumsum", "cummax") if d != "pred" else ("cummax",)
    if d == "pred":
      names = ("cumsum",)  # lax.cumsum of bool: an or-scan.
    for name in names:
      for s, axis in [
        ((3, 0), 0),
        ((3, 0), 1),
        ((2, 0, 3), 0),
        ((2, 0, 3), 2),
        ((0, 3), 1),
        ((3, 1), 1),
        ((1, 4), 0),
      ]:
        for reverse in (False, True) if s == (2, 0, 3) else (False,):
          fn = partial(_cum, name, axis, reverse)
          extra = f"{name} axis={axis}" + (" reverse" if reverse else "")
          cases.append(_case("reduce_window", [(s, d)], fn, extra))
    if d == "pred":
      continue
    for s, window, strides, pad in [
      ((0, 4), (1, 2), (1, 1), "VALID"),
      ((4, 0), (2, 1), (1, 1), "SAME"),
      ((2, 3), (3, 2), (1, 1), "VALID"),  # A window larger than the operand.
      ((0, 4, 4, 2), (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
      ((2, 4, 4, 0), (1, 3, 3, 1), (1, 2, 2, 1), "VALID"),
      ((2, 3), (1, 0), (1, 1), "VALID"),  # A zero-size window.
    ]:
      fn = partial(
        lambda w, st, p, x: lax.reduce_window(x, np.array(0, x.dtype), lax.add, w, st, p),
        window,
        strides,
        pad,
      )
      cases.append(_case("reduce_window", [(s, d)], fn, f"add window={window} {pad}"))
  return cases


def _gen_select_and_scatter(spec):
  lax = _lax()
  cases = []
  for d in _dtypes(spec.dtypes, 2):
    for s, window, strides, pad in [
      ((0, 4, 4, 2), (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
      ((2, 4, 4, 0), (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
      ((2, 0, 4, 1), (1, 2, 2, 1), (1, 1, 1, 1), "SAME"),
      ((1, 2, 2, 1), (1, 3, 3, 1), (1, 1, 1, 1), "VALID"),  # No window fits: no output.
      ((1, 3, 1), (1, 1, 1), (1, 1, 1), "VALID"),
    ]:

      def pool_grad(w, st, p, x):
        # The max-pool gradient's select_and_scatter_add, called directly (a vjp of an
        # integer function has float0 cotangents): source = the pooled values.
        from jax._src.lax import windowed_reductions as wr

        init = np.array(-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min, x.dtype)
        pads = lax.padtype_to_pads(x.shape, w, st, p)
        y = lax.reduce_window(x, init, lax.max, w, st, pads)
        return wr._select_and_scatter_add(y, x, lax.ge_p, w, st, pads)

      fn = partial(pool_grad, window, strides, pad)
      cases.append(_case("select_and_scatter", [(s, d)], fn, f"max-pool grad window={window}"))
  return cases


_MATRIX_SHAPES = [(0, 0), (0, 3, 3), (2, 0, 0), (1, 1)]


def _gen_linalg_fn(op, fn, shapes=_MATRIX_SHAPES, dtypes=("f32", "c64"), extra=""):
  return [_case(op, [(s, d)], fn, extra) for d in dtypes for s in shapes]


def _spd(x):
  import jax.numpy as jnp

  return x @ jnp.conj(jnp.swapaxes(x, -1, -2)) + jnp.eye(x.shape[-1], dtype=x.dtype) * 4


def _gen_cholesky(spec):
  import jax.numpy as jnp

  return _gen_linalg_fn("cholesky", lambda x: jnp.linalg.cholesky(_spd(x)))


def _gen_triangular_solve(spec):
  lax = _lax()
  cases = []
  for d in ("f32", "c64"):
    for a, b, left in [
      ((0, 0), (0, 3), True),
      ((3, 3), (3, 0), True),
      ((0, 2, 2), (0, 2, 4), True),
      ((2, 2), (0, 2), False),
    ]:
      fn = partial(
        lambda left, a, b: lax.linalg.triangular_solve(
          a + 4 * np.eye(a.shape[-1], dtype=a.dtype), b, left_side=left, lower=True
        ),
        left,
      )
      cases.append(_case("triangular_solve", [(a, d), (b, d)], fn, f"left={left}"))
  return cases


def _gen_geqrf(spec):
  shapes = [(0, 0), (0, 3), (3, 0), (0, 3, 2), (1, 1)]
  from jax._src.lax import linalg  # lax.linalg does not export geqrf.

  return _gen_linalg_fn("geqrf", linalg.geqrf, shapes)


def _gen_householder_product(spec):
  lax = _lax()
  cases = []
  for d in ("f32", "c64"):
    for a, tau in [((0, 0), (0,)), ((3, 0), (0,)), ((0, 3, 2), (0, 2)), ((2, 1), (1,))]:
      cases.append(_case("householder_product", [(a, d), (tau, d)], lax.linalg.householder_product))
  return cases


def _gen_lapack(op, spec):
  import jax.numpy as jnp

  lax = _lax()
  sym = lambda x: x + jnp.conj(jnp.swapaxes(x, -1, -2))  # noqa: E731
  fns = {
    "lapack_evd": lambda x: jnp.linalg.eigh(sym(x)),
    "lapack_svd": lambda x: jnp.linalg.svd(x),
    "lapack_geev": lambda x: jnp.linalg.eigvals(x),
    "lapack_gees": lambda x: jax_schur(x),
    "lapack_gehrd": lambda x: lax.linalg.hessenberg(x),
    "lapack_sytrd": lambda x: lax.linalg.tridiagonal(sym(x)),
    "lapack_getrf": lambda x: lax.linalg.lu(x),
    "lapack_geqp3": lambda x: jax_qr_pivoting(x),
  }
  if op == "tridiagonal_solve_perturbed":
    cases = []
    for d in ("f32",):
      for n, m in [(0, 2), (3, 0), (1, 1)]:
        # perturb_singular: the kernel (without it, JAX's generic lowering, whose empty
        # systems tests/ops/test_lapack.py checks).
        fn = lambda dl, dd, du, b: lax.linalg.tridiagonal_solve(  # noqa: E731
          dl, dd + 4, du, b, perturb_singular=True
        )
        cases.append(_case(op, [((n,), d)] * 3 + [((n, m), d)], fn))
    return cases
  shapes = [(0, 0), (0, 3, 3), (1, 1)]
  if op in ("lapack_svd", "lapack_geqp3"):
    shapes += [(0, 3), (3, 0)]
  return _gen_linalg_fn(op, fns[op], shapes, ("f32",))


def jax_schur(x):
  from jax import lax

  return lax.linalg.schur(x, compute_schur_vectors=True)


def jax_qr_pivoting(x):
  from jax import lax

  return lax.linalg.qr(x, pivoting=True, full_matrices=False)


def _gen_host_callback(spec):
  import jax

  def fn(x):
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.pure_callback(lambda v: np.asarray(v) * 2, out, x)

  return [
    _case("host_callback", [(s, "f32")], fn, "pure_callback") for s in [(0,), (3, 0), (2, 0, 3)]
  ]


def _gen_fft(spec):
  import jax.numpy as jnp

  cases = []
  for s, kind in [
    ((0, 4), "fft"),
    ((3, 0, 4), "fft"),
    ((0, 4), "rfft"),
    ((0, 4), "irfft"),
    ((2, 0, 4), "fft2"),
    ((3, 1), "fft"),
  ]:
    d = "f32" if kind == "rfft" else "c64"
    fn = getattr(jnp.fft, kind)
    cases.append(_case("fft", [(s, d)], fn, kind))
  return cases


def _gen_rng_bit_generator(spec):
  lax = _lax()
  cases = []
  for shape in [(0,), (3, 0), (2, 0, 3), (1,)]:
    fn = partial(lambda shape, key: lax.rng_bit_generator(key, shape, dtype=np.uint32), shape)
    cases.append(_case("rng_bit_generator", [((4,), "u32")], fn, f"shape={shape}"))
  return cases


def _gen_while(spec):
  lax = _lax()

  def fn(x, n):
    return lax.fori_loop(0, n, lambda i, v: v * 2 + 1, x)

  def fn_count(x):  # A loop of zero trips.
    return lax.fori_loop(0, 0, lambda i, v: v * 2, x)

  # Interpreted (WORKSHOP_CODEGEN=0): by default the loop becomes a jit_loop.
  return [
    _case("while", [(s, "f32"), ((), "s32")], fn, codegen="0")
    for s in [(0,), (3, 0), (2, 0, 3), (1,)]
  ] + [_case("while", [((3, 0), "f32")], fn_count, "zero trips", codegen="0")]


def _gen_case(spec):
  lax = _lax()

  def fn(x, i):
    return lax.switch(i % 3, [lambda v: v + 1, lambda v: v * 2, lambda v: -v], x)

  return [_case("case", [(s, "f32"), ((), "s32")], fn) for s in [(0,), (3, 0), (2, 0, 3)]]


def _gen_fusion(spec):
  lax = _lax()

  def chain(x, y):  # Elementwise ops with broadcasts: one fusion (of ops codegen covers).
    return (x * 2 + y) * lax.abs(x) - 1

  def with_bcast(x, v):
    return lax.tanh(x * v[:, None] + 1) * 3

  cases = [_case("fusion", [(s, "f32")] * 2, chain) for s in ZERO_SHAPES + [(64, 64)]]
  cases += [
    _case("fusion", [(s, "f32"), ((s[0],), "f32")], with_bcast, "row broadcast")
    for s in [(0, 3), (3, 0)]
  ]
  return cases


def _gen_gelu_tanh(spec):
  import jax

  return [
    _case("gelu_tanh", [(s, "f32")], partial(jax.nn.gelu, approximate=True))
    for s in [(0,), (3, 0), (2, 0, 3)]
  ]


def _gen_jit_fusion(spec):
  cases = _gen_fusion(spec)
  return [dataclasses.replace(c, op="jit_fusion", codegen="force") for c in cases[:4] + cases[6:7]]


def _gen_horizontal_fusion(spec):
  def leaves(a, b, c):  # Three independent chains: one kernel when small and generated.
    return a * 2 + 1, b * 3 - b * b, c * 0.5 + 2

  return [
    _case(
      "horizontal_fusion", [(s, "f32"), ((64, 64), "f32"), ((100,), "f32")], leaves, codegen="force"
    )
    for s in [(0,), (3, 0), (7,)]
  ]


def _gen_jit_loop(spec):
  return [dataclasses.replace(c, op="jit_loop", codegen="force") for c in _gen_while(spec)]


def _shard_map_case(op, body, shape, d="f32", extra=""):
  def fn(mesh, x):
    import jax
    from jax.sharding import PartitionSpec as P

    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)(x)

  return _case(op, [(shape, d)], fn, extra, mesh=True)


def _gen_collectives(op, spec):
  import jax
  from jax import lax

  bodies = {
    "all_reduce": lambda x: lax.psum(x, "i"),
    "reduce_scatter": lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
    "all_gather": lambda x: lax.all_gather(x, "i", axis=1, tiled=True),
    "all_to_all": lambda x: lax.all_to_all(x, "i", 1, 1, tiled=True),
    "collective_permute": lambda x: lax.ppermute(x, "i", [(j, (j + 1) % 4) for j in range(4)]),
    "collective_broadcast": lambda x: (
      lax.pbroadcast(x, "i", 0) if hasattr(lax, "pbroadcast") else x
    ),
  }
  del jax
  # The first dim is the sharded one (4 shards); the zero-size dims are the rest.
  # (4, 4, 0): a zero-size dim after the scattered/gathered one (row stride 0).
  shapes = [(4, 0), (0, 4), (4, 0, 3), (4, 4, 0), (4, 4)]
  return [_shard_map_case(op, bodies[op], s) for s in shapes]


GENERATORS: dict[str, Callable] = {}
EXCLUDED: dict[str, str] = {
  # compiler/codegen compile_blocks takes values of 1-256 elements only (loops.block_op).
  "jit_block": "takes only values of 1 to 256 elements: no zero-size operand reaches it",
  # No operand and a scalar result: no shape of theirs can be zero-size.
  "partition_id": "a scalar of no operand: nothing of it can be zero-size",
  "replica_id": "a scalar of no operand: nothing of it can be zero-size",
  # A user FFI handler needs a compiled handler library; tests/ops/test_ffi.py and
  # tests/ffi/ build one and cover its buffers (including empty ones).
  "ffi_call": "needs a user handler library (tests/ffi builds one)",
  # The compiler folds mhlo.copy away as the identity (compile.py) and StableHLO has no
  # copy op, so no program reaches the kernel.
  "copy": "no program lowers to it (mhlo.copy is folded away; StableHLO has no copy)",
  # JAX's pbroadcast is not a collective_broadcast in 0.10 (it marks varying axes).
  "collective_broadcast": "JAX emits no stablehlo.collective_broadcast (lax has no binding)",
}


def _register():
  from jax_plugins.workshop.compiler.optable import SPECS

  special = {
    "clamp": _gen_clamp,
    "compare": _gen_compare,
    "select": _gen_select,
    "reduce_precision": _gen_reduce_precision,
    "convert": _gen_convert,
    "bitcast_convert": _gen_bitcast_convert,
    "complex": _gen_complex,
    "top_k": _gen_top_k,
    "approx_top_k": _gen_approx_top_k,
    "constant": _gen_constant,
    "reshape": _gen_reshape,
    "broadcast_in_dim": _gen_broadcast_in_dim,
    "transpose": _gen_transpose,
    "slice": _gen_slice,
    "concatenate": _gen_concatenate,
    "iota": _gen_iota,
    "pad": _gen_pad,
    "reverse": _gen_reverse,
    "dynamic_slice": _gen_dynamic_slice,
    "dynamic_update_slice": _gen_dynamic_update_slice,
    "gather": _gen_gather,
    "scatter": _gen_scatter,
    "scatter_general": _gen_scatter_general,
    "sort": _gen_sort,
    "sort_general": _gen_sort_general,
    "reduce": _gen_reduce,
    "argmax": partial(_gen_arg, "argmax"),
    "argmin": partial(_gen_arg, "argmin"),
    "reduce_general": _gen_reduce_general,
    "map": _gen_map,
    "dot_general": _gen_dot_general,
    "convolution": _gen_convolution,
    "reduce_window": _gen_reduce_window,
    "select_and_scatter": _gen_select_and_scatter,
    "cholesky": _gen_cholesky,
    "triangular_solve": _gen_triangular_solve,
    "geqrf": _gen_geqrf,
    "householder_product": _gen_householder_product,
    "host_callback": _gen_host_callback,
    "fft": _gen_fft,
    "rng_bit_generator": _gen_rng_bit_generator,
    "while": _gen_while,
    "case": _gen_case,
    "fusion": _gen_fusion,
    "gelu_tanh": _gen_gelu_tanh,
    "jit_fusion": _gen_jit_fusion,
    "horizontal_fusion": _gen_horizontal_fusion,
    "jit_loop": _gen_jit_loop,
  }
  for name, spec in SPECS.items():
    if name in EXCLUDED:
      continue
    if name in special:
      GENERATORS[name] = partial(special[name], spec)
    elif name in _UNARY or name in ("round_nearest_afz", "round_nearest_even"):
      GENERATORS[name] = partial(_elementwise, name, spec, 1)
    elif name in _BINARY:
      GENERATORS[name] = partial(_elementwise, name, spec, 2)
    elif spec.family == "lapack":
      GENERATORS[name] = partial(_gen_lapack, name, spec)
    elif spec.family == "collectives":
      GENERATORS[name] = partial(_gen_collectives, name, spec)


_register()


def _nonempty(case: Case) -> bool:
  return all(0 not in shape for shape, _ in case.operands)


def _probe(case: Case) -> Case:
  """`case` with every zero-size dim of its operands made 1."""
  operands = tuple((tuple(n or 1 for n in shape), d) for shape, d in case.operands)
  return dataclasses.replace(case, operands=operands, label=_label(operands, "probe"))


def all_cases() -> list[Case]:
  """Every case of every generator, in op table order (ids are unique), and for a
  generator whose cases all have a zero-size operand, a probe: its first case with those
  dims 1 (first_case_of_each_op)."""
  cases = []
  for gen in GENERATORS.values():
    made = gen()
    if not any(map(_nonempty, made)) and made[0].mlir is None:
      made.append(_probe(made[0]))
    cases += made
  ids = [c.id for c in cases]
  assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1][:5]
  return cases


# ---------------------------------------------------------------------------------------
# The worker.

_RTOL = {"f16": 2e-3, "bf16": 2e-2, "f32": 2e-5, "c64": 2e-5}


def _same(a: np.ndarray, b: np.ndarray) -> str:
  """'' when a (workshop) equals b (CPU): shape, dtype, values (floats to a tolerance
  per dtype: libm and XLA's vector math differ in the last ulps)."""
  if a.shape != b.shape or a.dtype != b.dtype:
    return f"workshop {a.dtype}{list(a.shape)}, cpu {b.dtype}{list(b.shape)}"
  if a.size == 0:
    return ""
  if a.dtype.kind in "fcV" or a.dtype.name == "bfloat16":
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    rtol = _RTOL.get(
      {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "complex64": "c64"}.get(
        a.dtype.name, ""
      ),
      1e-9,
    )
    if np.allclose(a.astype(wide), b.astype(wide), rtol=rtol, atol=rtol, equal_nan=True):
      return ""
  elif np.array_equal(a, b):
    return ""
  return f"values differ: workshop {a.ravel()[:8]}, cpu {b.ravel()[:8]}"


def _run(case: Case, backend: str):
  """The case's results on `backend` as numpy arrays, or the exception it raised."""
  import jax

  devices = jax.devices(backend)
  args = operand_values(case)
  if case.mlir is not None:
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jaxlib.mlir import ir

    with mlir.make_ir_context():
      code = mlir.module_to_bytecode(ir.Module.parse(case.mlir))
    client = xla_bridge.get_backend(backend)
    exe = client.compile_and_load(
      code, xla_client.DeviceList((devices[0],)), xla_client.CompileOptions()
    )
    out = exe.execute_sharded([jax.device_put(a, devices[0]) for a in args])
    return [np.asarray(o[0]) for o in out.disassemble_into_single_device_arrays()]
  if case.mesh:
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("i",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i"))
    fn = jax.jit(partial(case.fn, mesh))
    result = fn(*[jax.device_put(a, spec) for a in args])
  else:
    with jax.default_device(devices[0]):
      result = jax.jit(case.fn)(*[jax.device_put(a, devices[0]) for a in args])
  return [np.asarray(r) for r in jax.tree.leaves(result)]


def _plan_kernels(plan) -> set[str]:
  """The kernel names of `plan` and of the sub-plans its instructions hold."""
  from jax_plugins.workshop.compiler.plan import Plan

  names = set()
  for instr in plan.instrs:
    names.add(instr.op)
    for value in instr.attrs.values():
      for sub in value if isinstance(value, list) else [value]:
        if isinstance(sub, Plan):
          names |= _plan_kernels(sub)
  return names


def kernels_of(case: Case) -> list[str]:
  """The kernels of the case's workshop plan (compiled again, by compile_program)."""
  import jax
  from jax_plugins.workshop.compiler import compile_program

  if case.mlir is not None:
    text = case.mlir
  else:
    args = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in operand_values(case)]
    if case.mesh:
      mesh = jax.sharding.Mesh(np.array(jax.devices("workshop")[:4]), ("i",))
      text = jax.jit(partial(case.fn, mesh)).lower(*args).as_text()
    else:
      text = jax.jit(case.fn).lower(*args).as_text()
  return sorted(_plan_kernels(compile_program(text.encode(), "mlir", b"", 4).plan))


def run_case(case: Case, want_kernels: bool = False) -> tuple[str, list[str]]:
  """('' when the case gives the same results on workshop and on the CPU backend (or both
  refuse it), else what differs; the kernels of its workshop plan if `want_kernels`)."""
  import jax

  old = os.environ.get("WORKSHOP_CODEGEN")
  kernels: list[str] = []
  if case.codegen is not None:
    os.environ["WORKSHOP_CODEGEN"] = case.codegen
  try:
    try:
      ours = _run(case, "workshop")
    except Exception as e:  # pylint: disable=broad-except  (reported, compared below)
      ours = e
    if want_kernels and not isinstance(ours, Exception):
      try:
        kernels = kernels_of(case)
      except Exception as e:  # pylint: disable=broad-except
        kernels = [f"(compile_program failed: {e})"]
  finally:
    if case.codegen is not None:
      if old is None:
        os.environ.pop("WORKSHOP_CODEGEN", None)
      else:
        os.environ["WORKSHOP_CODEGEN"] = old
      jax.clear_caches()
  try:
    ref = _run(case, "cpu")
  except Exception as e:  # pylint: disable=broad-except
    ref = e
  return _compare(ours, ref), kernels


def _compare(ours, ref) -> str:
  if isinstance(ref, Exception):
    if isinstance(ours, Exception):
      return ""  # Both refuse the program (JAX or the verifier rejects it).
    return f"cpu raised {type(ref).__name__}: {str(ref).splitlines()[0][:200]}; workshop ran it"
  if isinstance(ours, Exception):
    return f"workshop raised {type(ours).__name__}: {str(ours).splitlines()[0][:300]}"
  if len(ours) != len(ref):
    return f"{len(ours)} results, cpu {len(ref)}"
  for k, (a, b) in enumerate(zip(ours, ref)):
    why = _same(a, b)
    if why:
      return f"result {k}: {why}"
  return ""


def first_case_of_each_op(cases: list[Case]) -> set[str]:
  """The ids whose workshop plan the sweep checks holds their op, one per op: its first
  case with no zero-size operand (JAX and the compiler fold some empty computations
  away, so a zero-size case may never reach the kernel; all_cases adds such a probe
  where a generator has none), else its first."""
  firsts: dict[str, str] = {}
  for c in cases:
    if _nonempty(c):
      firsts.setdefault(c.op, c.id)
  for c in cases:
    firsts.setdefault(c.op, c.id)
  return set(firsts.values())


def worker():
  """Runs the case ids read from stdin, one a line, reporting on stdout (module docstring)."""
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
  import warnings

  warnings.filterwarnings("ignore")
  import jax

  jax.config.update("jax_enable_x64", True)
  cases = all_cases()
  by_id = {c.id: c for c in cases}
  check = first_case_of_each_op(cases)
  out = sys.stdout
  for line in sys.stdin:
    case_id = line.rstrip("\n")
    if not case_id:
      continue
    out.write(json.dumps({"start": case_id}) + "\n")
    out.flush()
    kernels: list[str] = []
    try:
      why, kernels = run_case(by_id[case_id], want_kernels=case_id in check)
    except Exception as e:  # pylint: disable=broad-except  (a harness error is a failure too)
      why = f"harness error {type(e).__name__}: {e}"
    event = {"done": case_id, "ok": not why, "why": why, "kernels": kernels}
    out.write(json.dumps(event) + "\n")
    out.flush()


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  worker()
