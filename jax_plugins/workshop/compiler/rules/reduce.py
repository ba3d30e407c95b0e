"""Family `reduce` (reduce, argmax, argmin, reduce_general, map): kernels/reduce/
(reduce.cc, reduce_general.cc, reduce.h).

reduce lowers to one of three kernels, fastest first:
  * `reduce`: one operand and a body that is a single known combiner (add, max, ...);
  * `argmax` / `argmin`: the two-operand (value, index) body jnp.argmax/argmin emit;
  * `reduce_general`: any elementwise body, run as a lane plan (lanes.py) that folds the
    reduced elements pairwise, each body run vectorized over all outputs.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from .. import errors, lanes, patterns as pt
from ..lowering import Lowering, register
from .elementwise import default_compare_type

# Reduction bodies the kernels implement, by the single op the body applies.
_COMBINERS = {
  f"stablehlo.{name}": name for name in ("add", "multiply", "maximum", "minimum", "and", "or")
}


def match_combiner(op: ir.Operation, region: int = 0) -> str | None:
  """The kernel name of a body like `^bb0(%a, %b): return add(%a, %b)`, else None."""
  block = op.regions[region].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and len(block.arguments) == 2:
    combine, ret = body
    if (
      combine.name in _COMBINERS
      and ret.name == "stablehlo.return"
      and set(combine.operands) == set(block.arguments)
      and list(ret.operands) == list(combine.results)
    ):
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
  name = match_combiner(op, region)
  if name is None:
    ops = ", ".join(o.operation.name for o in op.regions[region].blocks[0].operations)
    raise errors.unsupported(op, f"unsupported reduction body ({ops})")
  return name


def _match_arg_reduce(op: ir.Operation) -> str | None:
  """ "GT" for the body jnp.argmax emits, "LT" for jnp.argmin's; None otherwise.

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
  value_type = default_compare_type(op.operands[0].type)
  index_type = default_compare_type(op.operands[1].type)
  if index_type == "FLOAT":
    return None
  a_v, a_i, b_v, b_i = (pt.arg(i) for i in range(4))
  for direction in ("GT", "LT"):
    keep = pt.op(
      "or", pt.compare(direction, value_type, a_v, b_v), pt.compare("NE", value_type, a_v, a_v)
    )
    tie = pt.op(
      "and", pt.compare("EQ", value_type, a_v, b_v), pt.compare("LT", index_type, a_i, b_i)
    )
    expected = [pt.op("select", keep, a_v, b_v), pt.op("select", pt.op("or", keep, tie), a_i, b_i)]
    if got == expected:
      return direction
  return None


@register("stablehlo.reduce")
def _reduce(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs..., inits... (then captured scalars for reduce_general). Attrs: dims (reduced
  dimensions) and the body: a combiner name, or a lane plan.

  Combiner reductions and argmax/argmin on f16/bf16 run in f32 (legalize.py), and so
  does a general body's lane plan.
  """
  dims = list(op.attributes["dimensions"])
  if len(op.operands) == 2 and (body := match_combiner(op)) is not None:
    ctx.emit(op, {"dims": dims, "body": body})
  elif (direction := _match_arg_reduce(op)) is not None:
    ctx.emit(op, {"dims": dims}, kernel="argmax" if direction == "GT" else "argmin")
  else:
    [body], captures = ctx.lower_regions(op, op.regions)
    ctx.emit(
      op,
      {"dims": dims, "body": lanes.to_lanes(op, body, len(captures))},
      extra_ins=captures,
      kernel="reduce_general",
    )


@register("stablehlo.map")
def _map(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs..., captures. Attrs: operands (how many xs), body (a lane plan).

  Raises:
    NotImplementedError: `dimensions` is not every dimension in order (the only form the
      StableHLO spec allows today).
  """
  rank = ir.RankedTensorType(op.operands[0].type).rank
  if list(op.attributes["dimensions"]) != list(range(rank)):
    raise errors.unsupported(op, "map over some of the dimensions")
  [body], captures = ctx.lower_regions(op, op.regions)
  ctx.emit(
    op,
    {"operands": len(op.operands), "body": lanes.to_lanes(op, body, len(captures))},
    extra_ins=captures,
    kernel="map",
  )
