"""Elementwise ops: kernels named after the op, operands and results of one shape."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes
from ..lowering import Lowering, register

_UNARY = """negate abs sign floor ceil sqrt rsqrt cbrt exponential exponential_minus_one log
    log_plus_one logistic sine cosine tan tanh not round_nearest_afz round_nearest_even
    is_finite popcnt count_leading_zeros convert copy""".split()
_BINARY = """add subtract multiply divide remainder power maximum minimum atan2 and or xor
    shift_left shift_right_arithmetic shift_right_logical""".split()
# select: pred may be a scalar; clamp: min and max may be scalars.
_TERNARY = ["select", "clamp"]
# Kernel names of the ops that compute each element from the same element of their
# operands (lanes.py runs reduce and sort bodies made of them on vectors).
ELEMENTWISE = frozenset(_UNARY + _BINARY + _TERNARY + ["compare"])


@register(*(f"stablehlo.{name}" for name in _UNARY + _BINARY + _TERNARY))
def _elementwise(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op)


@register("stablehlo.compare")
def _compare(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: direction ("EQ".."GE") and compare_type, filled in from the dtype if absent."""
  direction = stablehlo.ComparisonDirectionAttr(op.attributes["comparison_direction"])
  if "compare_type" in op.attributes:
    compare_type = stablehlo.ComparisonTypeAttr(op.attributes["compare_type"]).value
  else:
    compare_type = _default_compare_type(op.operands[0].type)
  ctx.emit(op, {"direction": direction.value, "compare_type": compare_type})


def _default_compare_type(t: ir.RankedTensorType) -> str:
  # The StableHLO spec's default: FLOAT for floats and complex, SIGNED for signed integers,
  # UNSIGNED for unsigned integers and pred.
  dtype = dtypes.lookup(t.element_type)
  kind = dtype.numpy.kind if dtype else "f"  # Unrepresentable types fail in emit anyway.
  return {"i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}.get(kind, "FLOAT")
