"""Contractions and reductions: dot_general, reduce.

reduce lowers to one of three kernels, fastest first:
  * `reduce`: one operand and a body that is a single known combiner (add, max, ...);
  * `argmax` / `argmin`: the two-operand (value, index) body jnp.argmax/argmin emit;
  * `reduce_general`: any elementwise body, run as a lane plan (lanes.py) that folds the
    reduced elements pairwise, each body run vectorized over all outputs.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes, errors, lanes, patterns as pt
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


def _match_combiner(op: ir.Operation, region: int = 0) -> str | None:
  block = op.regions[region].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and len(block.arguments) == 2:
    combine, ret = body
    if (combine.name in _COMBINERS and ret.name == "stablehlo.return" and
        set(combine.operands) == set(block.arguments) and
        list(ret.operands) == list(combine.results)):
      return _COMBINERS[combine.name]
  return None


def combiner(op: ir.Operation, region: int = 0) -> str:
  """The kernel name of a reduction body like `^bb0(%a, %b): return add(%a, %b)`.

  Shared by reduce, all_reduce, reduce_window and select_and_scatter (whose scatter body
  is `region` 1).

  Raises:
    NotImplementedError: the body is anything but one binary op of _COMBINERS applied to
      the two block arguments (in either order).
  """
  name = _match_combiner(op, region)
  if name is None:
    ops = ", ".join(o.operation.name for o in op.regions[region].blocks[0].operations)
    raise errors.unsupported(op, f"unsupported reduction body ({ops})")
  return name


def _match_arg_reduce(op: ir.Operation) -> str | None:
  """"GT" for the body jnp.argmax emits, "LT" for jnp.argmin's; None otherwise.

  With a = (value, index) the accumulator and b the next element (block arguments
  a_v, a_i, b_v, b_i), the body keeps a when  a_v `dir` b_v  or  a_v is NaN, and takes the
  smaller index when the values are equal:

    keep = or(compare(dir, a_v, b_v), compare(NE, a_v, a_v))
    return select(keep, a_v, b_v),
           select(or(keep, and(compare(EQ, a_v, b_v), compare(LT, a_i, b_i))), a_i, b_i)

  Compare types must be the operand dtypes' defaults (FLOAT for floats).
  """
  if len(op.operands) != 4:
    return None
  block = op.regions[0].blocks[0]
  got = pt.returned(block)
  value_type = pt.default_compare_type(op.operands[0].type)
  index_type = pt.default_compare_type(op.operands[1].type)
  if index_type == "FLOAT":
    return None
  a_v, a_i, b_v, b_i = (pt.arg(i) for i in range(4))
  for direction in ("GT", "LT"):
    keep = pt.op("or", pt.compare(direction, value_type, a_v, b_v),
                 pt.compare("NE", value_type, a_v, a_v))
    tie = pt.op("and", pt.compare("EQ", value_type, a_v, b_v),
                pt.compare("LT", index_type, a_i, b_i))
    expected = [pt.op("select", keep, a_v, b_v),
                pt.op("select", pt.op("or", keep, tie), a_i, b_i)]
    if got == expected:
      return direction
  return None


@register("stablehlo.reduce")
def _reduce(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs..., inits... (then captured scalars for reduce_general). Attrs: dims (reduced
  dimensions) and the body: a combiner name, or a lane plan.

  Combiner reductions and argmax/argmin on f16/bf16 run in f32 (upcast.py); a general
  body converts inside its own lane plan.
  """
  dims = list(op.attributes["dimensions"])
  if len(op.operands) == 2 and (body := _match_combiner(op)) is not None:
    check_dtype(op, element_dtype(op, op.operands[0]), _REDUCE_DTYPES[body],
                f" for reduce body '{body}'")
    emit_upcast(ctx, op, {"dims": dims, "body": body})
  elif (direction := _match_arg_reduce(op)) is not None:
    check_dtype(op, element_dtype(op, op.operands[0]), PRED | INTS | FLOATS,
                " for argmax/argmin")
    emit_upcast(ctx, op, {"dims": dims}, kernel="argmax" if direction == "GT" else "argmin")
  else:
    [body], captures = ctx.lower_regions(op, op.regions)
    ctx.emit(op, {"dims": dims, "body": lanes.to_lanes(op, body, len(captures))},
             extra_ins=captures, kernel="reduce_general")


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
  attrs = {
      "lhs_batch": list(dn.lhs_batching_dimensions),
      "rhs_batch": list(dn.rhs_batching_dimensions),
      "lhs_contract": list(dn.lhs_contracting_dimensions),
      "rhs_contract": list(dn.rhs_contracting_dimensions),
  }
  if (transpose := _folded_transpose(op)) is not None:
    # (A B)^T = B^T A^T: the dot with swapped operands writes the transposed result.
    swapped = {"lhs_batch": attrs["rhs_batch"], "rhs_batch": attrs["lhs_batch"],
               "lhs_contract": attrs["rhs_contract"], "rhs_contract": attrs["lhs_contract"]}
    ins = ctx.operand_slots(op, [op.operands[1], op.operands[0]])
    ctx.emit_kernel(op, "dot_general", ins, ctx.result_slots(transpose), swapped)
    return
  compute = dtypes.compute_dtype(element_dtype(op, op.results[0]))
  emit_upcast(ctx, op, operand_dtype=compute, attrs=attrs)


def _folded_transpose(dot: ir.Operation) -> ir.Operation | None:
  """The transpose that is the only user of `dot`'s result, if it swaps the lhs and rhs free
  dims (keeping batch dims first): gradients of `x @ w` produce `transpose(dot(g, x))`.
  Only for dots without f16/bf16 upcasts, whose kernel writes the declared result.
  """
  uses = list(dot.results[0].uses)
  if len(uses) != 1 or uses[0].owner.name != "stablehlo.transpose":
    return None
  result = element_dtype(dot, dot.results[0])
  if dtypes.compute_dtype(result) != result or any(
      element_dtype(dot, v) != result for v in dot.operands):
    return None
  dn = stablehlo.DotDimensionNumbers(dot.attributes["dot_dimension_numbers"])
  batch = len(dn.lhs_batching_dimensions)
  lhs_free = ir.RankedTensorType(dot.operands[0].type).rank - batch - len(
      dn.lhs_contracting_dimensions)
  rank = ir.RankedTensorType(dot.results[0].type).rank
  swap = [*range(batch), *range(batch + lhs_free, rank), *range(batch, batch + lhs_free)]
  transpose = uses[0].owner.operation
  return transpose if list(transpose.attributes["permutation"]) == swap else None


def transpose_folded_into_dot(transpose: ir.Operation) -> bool:
  """Whether `transpose`'s result was already written by the dot_general it transposes."""
  producer = transpose.operands[0].owner
  if not isinstance(producer, (ir.Operation, ir.OpView)):
    return False  # A block argument.
  producer = producer.operation
  if producer.name != "stablehlo.dot_general":
    return False
  folded = _folded_transpose(producer)
  return folded is not None and folded == transpose.operation
