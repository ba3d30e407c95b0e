"""Family `elementwise`: kernels/elementwise/ (elementwise.cc, element_ops.h, complex.cc,
convert.cc, gelu.cc); kernels named after the op, operands and results of one shape.

Which dtypes each op takes, and which are computed in f32, is the op table's business
(optable.py); legalize.py checks and upcasts every instruction, so these rules only map
attributes.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes, errors
from ..lowering import Lowering, register
from ..optable import COMPLEX, ELEMENTWISE, SPECS  # noqa: F401  (ELEMENTWISE re-exported)
from ..upcast import element_dtype

# Ops whose kernel takes the op's operands and results as they are, without attributes:
# the elementwise family of the table (but gelu_tanh, which only idioms.py makes), plus
# byte-level ops (convert: any dtype to any; bitcast_convert: the row-major bytes
# reinterpreted, StableHLO has checked the shapes; copy).
_PLAIN = [
  name
  for name, spec in SPECS.items()
  if spec.family == "elementwise"
  and name not in ("compare", "reduce_precision", "gelu_tanh", "convert", "bitcast_convert")
] + ["convert", "bitcast_convert", "copy"]


@register(*(f"stablehlo.{name}" for name in _PLAIN))
def _plain(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op)


@register("stablehlo.reduce_precision")
def _reduce_precision(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: exponent_bits, mantissa_bits. Works on the bits of any float dtype."""
  ctx.emit(
    op,
    {
      "exponent_bits": op.attributes["exponent_bits"].value,
      "mantissa_bits": op.attributes["mantissa_bits"].value,
    },
  )


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
  if direction not in ("EQ", "NE") and element_dtype(op, op.operands[0]).name in COMPLEX:
    raise errors.unsupported(
      op, f"complex operands have no order: comparison direction {direction}"
    )
  ctx.emit(op, {"direction": direction, "compare_type": compare_type})


def _default_compare_type(t: ir.RankedTensorType) -> str:
  # The StableHLO spec's default: FLOAT for floats and complex, SIGNED for signed integers,
  # UNSIGNED for unsigned integers and pred.
  dtype = dtypes.lookup(t.element_type)
  kind = dtype.numpy.kind if dtype else "f"  # Unrepresentable types fail in emit anyway.
  return {"i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}.get(kind, "FLOAT")
