"""Elementwise ops: kernels named after the op, operands and results of one shape.

Each compute op has a table entry of the operand dtypes it is implemented for; anything
else fails here, at compile time, naming op, dtype and location. f16/bf16 operands of
compute ops are computed in f32 (see upcast.py).
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes
from ..dtypes import ALL, COMPLEX, FLOATS, INTS, PRED
from ..lowering import Lowering, register
from ..upcast import check_dtype, element_dtype, emit_checked, emit_upcast

_NUMERIC = INTS | FLOATS
_INEXACT = FLOATS | COMPLEX

# Operand dtypes per op (of the first operand; StableHLO makes the others match, except
# clamp whose bounds match too). abs of complex returns the real magnitude.
_UNARY: dict[str, frozenset[str]] = {
    "negate": _NUMERIC | COMPLEX,
    "abs": _NUMERIC | COMPLEX,
    "sign": _NUMERIC | COMPLEX,
    "not": PRED | INTS,
    "popcnt": INTS,
    "count_leading_zeros": INTS,
    **dict.fromkeys(["floor", "ceil", "round_nearest_afz", "round_nearest_even", "cbrt",
                     "is_finite"], FLOATS),
    **dict.fromkeys(["sqrt", "rsqrt", "exponential", "exponential_minus_one", "log",
                     "log_plus_one", "logistic", "sine", "cosine", "tan", "tanh"], _INEXACT),
}
_BINARY: dict[str, frozenset[str]] = {
    "add": ALL,
    "multiply": ALL,
    "subtract": _NUMERIC | COMPLEX,
    "divide": _NUMERIC | COMPLEX,
    "power": _NUMERIC | COMPLEX,
    "remainder": _NUMERIC,
    "maximum": PRED | _NUMERIC,
    "minimum": PRED | _NUMERIC,
    "atan2": FLOATS,
    **dict.fromkeys(["and", "or", "xor"], PRED | INTS),
    **dict.fromkeys(["shift_left", "shift_right_arithmetic", "shift_right_logical"], INTS),
}
# clamp(min, x, max): min and max may be scalars.
_TERNARY: dict[str, frozenset[str]] = {"clamp": _NUMERIC}
_COMPUTE_OPS = {**_UNARY, **_BINARY, **_TERNARY}
# Kernel names of the ops that compute each element from the same element of their
# operands (lanes.py runs reduce and sort bodies made of them on vectors).
ELEMENTWISE = frozenset([*_COMPUTE_OPS, "convert", "copy", "select", "compare", "real",
                         "imag", "complex", "reduce_precision"])


@register(*(f"stablehlo.{name}" for name in _COMPUTE_OPS))
def _compute(ctx: Lowering, op: ir.Operation) -> None:
  name = op.name.removeprefix("stablehlo.")
  emit_checked(ctx, op, _COMPUTE_OPS[name], operand=1 if name == "clamp" else 0)


# Byte- or bit-level ops that take every dtype as it is stored (f16/bf16 included):
# convert (any dtype to any), copy, select (pred may be a scalar), bitcast_convert (the
# row-major bytes reinterpreted; StableHLO has checked the shapes), complex (f32/f64 ->
# c64/c128).
@register("stablehlo.convert", "stablehlo.copy", "stablehlo.select",
          "stablehlo.bitcast_convert", "stablehlo.complex")
def _as_stored(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op)


@register("stablehlo.real", "stablehlo.imag")
def _part(ctx: Lowering, op: ir.Operation) -> None:
  """Complex -> its component type; on real floats, the operand itself or zeros."""
  check_dtype(op, element_dtype(op, op.operands[0]), _INEXACT)
  ctx.emit(op)


@register("stablehlo.reduce_precision")
def _reduce_precision(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: exponent_bits, mantissa_bits. Works on the bits of any float dtype."""
  check_dtype(op, element_dtype(op, op.operands[0]), FLOATS)
  ctx.emit(op, {"exponent_bits": op.attributes["exponent_bits"].value,
                "mantissa_bits": op.attributes["mantissa_bits"].value})


@register("stablehlo.compare")
def _compare(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: direction ("EQ".."GE") and compare_type, filled in from the dtype if absent.

  Complex operands compare only for (in)equality.
  """
  direction = stablehlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value
  if "compare_type" in op.attributes:
    compare_type = stablehlo.ComparisonTypeAttr(op.attributes["compare_type"]).value
  else:
    compare_type = _default_compare_type(op.operands[0].type)
  supported = ALL if direction in ("EQ", "NE") else ALL - COMPLEX
  check_dtype(op, element_dtype(op, op.operands[0]), supported,
              f" for comparison direction {direction}")
  emit_upcast(ctx, op, {"direction": direction, "compare_type": compare_type})


def _default_compare_type(t: ir.RankedTensorType) -> str:
  # The StableHLO spec's default: FLOAT for floats and complex, SIGNED for signed integers,
  # UNSIGNED for unsigned integers and pred.
  dtype = dtypes.lookup(t.element_type)
  kind = dtype.numpy.kind if dtype else "f"  # Unrepresentable types fail in emit anyway.
  return {"i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}.get(kind, "FLOAT")
