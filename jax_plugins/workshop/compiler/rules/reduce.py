"""Contractions and reductions: dot_general, reduce."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import Lowering, register

# Reduction bodies the kernels implement, by the single op the body applies.
_COMBINERS = {f"stablehlo.{name}": name
              for name in ("add", "multiply", "maximum", "minimum", "and", "or")}


def combiner(op: ir.Operation, region: int = 0) -> str:
  """The kernel name of a reduction body like `^bb0(%a, %b): return add(%a, %b)`.

  Shared by reduce, all_reduce, reduce_window and select_and_scatter (whose scatter body
  is `region` 1).

  Raises:
    NotImplementedError: the body is anything but one binary op of _COMBINERS applied to
      the two block arguments (in either order).
  """
  block = op.regions[region].blocks[0]
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
  ctx.emit(op, {"dims": list(op.attributes["dimensions"]), "body": combiner(op)})


@register("stablehlo.dot_general")
def _dot_general(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: batch and contracting dimensions of each side.

  Result dims are [batch..., lhs free..., rhs free...]; precision and algorithm
  attributes are hints we don't need for exact-dtype CPU kernels.
  """
  dn = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
  ctx.emit(op, {
      "lhs_batch": list(dn.lhs_batching_dimensions),
      "rhs_batch": list(dn.rhs_batching_dimensions),
      "lhs_contract": list(dn.lhs_contracting_dimensions),
      "rhs_contract": list(dn.rhs_contracting_dimensions),
  })
