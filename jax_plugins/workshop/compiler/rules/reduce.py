"""Contractions and reductions: dot_general, reduce."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes, errors
from ..dtypes import ALL, COMPLEX, FLOATS, INTS, PRED
from ..lowering import Lowering, register
from ..upcast import check_dtype, element_dtype, emit_upcast

# Reduction bodies the kernels implement, by the single op the body applies.
_COMBINERS = {f"stablehlo.{name}": name
              for name in ("add", "multiply", "maximum", "minimum", "and", "or")}
# The dtypes reduce implements each body for (f16/bf16 accumulate in f32).
_REDUCE_DTYPES = {
    "add": ALL, "multiply": ALL,
    "maximum": PRED | INTS | FLOATS, "minimum": PRED | INTS | FLOATS,
    "and": PRED | INTS, "or": PRED | INTS,
}
_DOT_DTYPES = INTS | FLOATS | COMPLEX


def combiner(op: ir.Operation) -> str:
  """The kernel name of a reduction body like `^bb0(%a, %b): return add(%a, %b)`.

  Shared by reduce and all_reduce.

  Raises:
    NotImplementedError: the body is anything but one binary op of _COMBINERS applied to
      the two block arguments (in either order).
  """
  block = op.regions[0].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and len(block.arguments) == 2:
    combine, ret = body
    if (combine.name in _COMBINERS and ret.name == "stablehlo.return" and
        set(combine.operands) == set(block.arguments) and
        list(ret.operands) == list(combine.results)):
      return _COMBINERS[combine.name]
  ops = ", ".join(o.name for o in body)
  raise errors.unsupported(op, f"unsupported reduction body ({ops})")


@register("stablehlo.reduce")
def _reduce(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x, init. Attrs: dims (reduced dimensions of x), body (the combiner)."""
  if len(op.operands) != 2:
    raise errors.unsupported(op, "unsupported variadic reduce")
  body = combiner(op)
  check_dtype(op, element_dtype(op, op.operands[0]), _REDUCE_DTYPES[body],
              f" for reduce body '{body}'")
  emit_upcast(ctx, op, {"dims": list(op.attributes["dimensions"]), "body": body})


@register("stablehlo.dot_general")
def _dot_general(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: batch and contracting dimensions of each side.

  Result dims are [batch..., lhs free..., rhs free...]; precision and algorithm
  attributes are hints we don't need for exact-dtype CPU kernels. Operands are converted
  to the result's compute dtype (operands of another dtype come from
  preferred_element_type, e.g. s8 x s8 -> s32 or bf16 x bf16 -> f32), so the kernel
  sees one dtype.
  """
  for v in (*op.operands, *op.results):
    check_dtype(op, element_dtype(op, v), _DOT_DTYPES)
  dn = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
  compute = dtypes.compute_dtype(element_dtype(op, op.results[0]))
  emit_upcast(ctx, op, operand_dtype=compute, attrs={
      "lhs_batch": list(dn.lhs_batching_dimensions),
      "rhs_batch": list(dn.rhs_batching_dimensions),
      "lhs_contract": list(dn.lhs_contracting_dimensions),
      "rhs_contract": list(dn.rhs_contracting_dimensions),
  })
