"""Structural ops, lowered by inlining their regions: func.call, sdy.manual_computation.

func.return and sdy.return are region terminators, handled by Lowering.lower_block.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir

from .. import errors, sharding
from ..lowering import Lowering, Rule, register


@register("func.call")
def _call(ctx: Lowering, op: ir.Operation) -> None:
  callee = op.attributes["callee"].value
  outs = ctx.lower_call(op, callee, [ctx.slot(v) for v in op.operands])
  for r, s in zip(op.results, outs, strict=True):
    ctx.bind(r, s)


@register("sdy.manual_computation")
def _manual_computation(ctx: Lowering, op: ir.Operation) -> None:
  """Inlines the per-device body: operands are already the shards its arguments expect.

  Each operand's slot holds the local shard (main's parameters get the local shape), so
  a body argument is the operand's slot; likewise each result is the slot of the value
  the body returns, and carries the op's out sharding outside.

  Raises:
    NotImplementedError: some mesh axes stay automatic, or an operand's sharding is not
      the one the body expects (resharding).
    ValueError: the mesh doesn't have num_partitions devices.
  """
  in_shardings = sharding.per_value(op.attributes["in_shardings"])
  out_shardings = sharding.per_value(op.attributes["out_shardings"])
  manual = sharding.manual_axes(op.attributes["manual_axes"])
  for s in (*in_shardings, *out_shardings):
    axes = ctx.meshes.axis_sizes(s)
    if auto := sorted(a for a, size in axes.items() if size > 1 and a not in manual):
      raise errors.unsupported(op, f"mesh axes {auto} are not manual; automatic SPMD "
                               "partitioning is not supported")
    if (n := math.prod(axes.values())) != ctx.options.num_partitions:
      raise errors.malformed(op, f"mesh of {n} devices, but the program has "
                             f"{ctx.options.num_partitions} partitions")

  body = op.regions[0].blocks[0]
  ins = [ctx.slot(v) for v in op.operands]
  for i, (s, expected, arg) in enumerate(zip(ins, in_shardings, body.arguments, strict=True)):
    held = ctx.sharding(s)
    if not sharding.same_sharding(held, expected) or ctx.dims(s) != tuple(arg.type.shape):
      raise errors.unsupported(
          op, f"operand {i} is {held or 'replicated'} with local shape {list(ctx.dims(s))} "
          f"but the body expects {expected} with shape {arg.type}; resharding is not "
          "supported")
  with ctx.manual():
    outs = ctx.lower_block(body, ins)
  for r, s, out_sharding in zip(op.results, outs, out_shardings, strict=True):
    ctx.bind(r, s)
    ctx.set_sharding(s, out_sharding)


# custom_call targets the plugin implements: target name -> lowering rule.
CUSTOM_CALLS: dict[str, Rule] = {}


@register("stablehlo.custom_call")
def _custom_call(ctx: Lowering, op: ir.Operation) -> None:
  """Dispatches on call_target_name to CUSTOM_CALLS.

  Raises:
    NotImplementedError: naming the target, for every target not in CUSTOM_CALLS.
  """
  target = ir.StringAttr(op.attributes["call_target_name"]).value
  rule = CUSTOM_CALLS.get(target)
  if rule is None:
    raise errors.unsupported(op, f"unsupported custom_call target '{target}'")
  rule(ctx, op)
