"""Family `control_flow` (while, case): kernels/control_flow.cc; and the structural ops.

Inlined: func.call, sdy.manual_computation, optimization_barrier (no kernel at all);
stablehlo.composite is in composite.py.
Sub-plans (Lowering.lower_regions): while (`cond`, `body`) and case/if (`branch_<i>`), run
by the kernels in plugin_src/kernels/control_flow.cc; values the regions capture from
outside become extra operands after the op's own.

func.return, sdy.return and stablehlo.return are region terminators, handled by
Lowering.lower_block.

stablehlo.custom_call dispatches on its target through lowering.CUSTOM_CALLS, where the
rules of the custom-call families (callback.py, ffi.py, lapack.py, linalg.py,
approx_top_k.py) register their targets.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir

from .. import errors
from ..spmd import sharding
from ..lowering import (
  CUSTOM_CALL_FALLBACKS,
  CUSTOM_CALLS,
  UNKNOWN_TARGET_HINTS,
  Lowering,
  register,
)


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
    errors.NeedsPartitioning: some mesh axes stay automatic, or an operand's sharding is
      not the one the body expects: the partitioner (partition.py) then reshards.
    ValueError: the mesh doesn't have num_partitions devices.
  """
  in_shardings = sharding.per_value(op.attributes["in_shardings"])
  out_shardings = sharding.per_value(op.attributes["out_shardings"])
  manual = sharding.manual_axes(op.attributes["manual_axes"])
  for s in (*in_shardings, *out_shardings):
    axes = ctx.meshes.axis_sizes(s)
    if auto := sorted(a for a, size in axes.items() if size > 1 and a not in manual):
      raise errors.needs_partitioning(op, f"mesh axes {auto} are not manual")
    if (n := math.prod(axes.values())) != ctx.options.num_partitions:
      raise errors.malformed(
        op, f"mesh of {n} devices, but the program has {ctx.options.num_partitions} partitions"
      )

  body = op.regions[0].blocks[0]
  ins = [ctx.slot(v) for v in op.operands]
  for i, (s, expected, arg) in enumerate(zip(ins, in_shardings, body.arguments, strict=True)):
    if not isinstance(arg.type, ir.RankedTensorType):
      continue  # a token (callbacks inside shard_map): no data, nothing to shard
    held, expected = ctx.sharding(s), ctx.meshes.effective(expected)
    if not sharding.same_sharding(held, expected) or ctx.dims(s) != tuple(arg.type.shape):
      raise errors.needs_partitioning(
        op,
        f"operand {i} is {held or 'replicated'} with local shape {list(ctx.dims(s))} "
        f"but the body expects {expected} with shape {arg.type}",
      )
  with ctx.manual():
    outs = ctx.lower_block(body, ins)
  for r, s, out_sharding in zip(op.results, outs, out_shardings, strict=True):
    ctx.bind(r, s)
    ctx.set_sharding(s, out_sharding)


@register("stablehlo.optimization_barrier")
def _optimization_barrier(ctx: Lowering, op: ir.Operation) -> None:
  # The executor runs instructions in order and never reorders across them, so the
  # barrier is just another name for each operand: no kernel, no copy.
  for r, v in zip(op.results, op.operands, strict=True):
    ctx.bind(r, ctx.slot(v))


@register("stablehlo.while")
def _while(ctx: Lowering, op: ir.Operation) -> None:
  """ins: initial values..., captures... Attrs: cond (-> pred[]), body (-> new values).

  Both sub-plans take (values..., captures...).
  """
  (cond, body), captures = ctx.lower_regions(op, op.regions)
  ctx.emit(op, {"cond": cond, "body": body}, extra_ins=captures)


@register("stablehlo.case")
def _case(ctx: Lowering, op: ir.Operation) -> None:
  """ins: index (s32[]), captures... Attrs: branches (count), branch_<i>: Plan.

  An index outside [0, branches) runs the last branch, as the spec says.
  """
  _emit_branches(ctx, op, list(op.regions))


@register("stablehlo.if")
def _if(ctx: Lowering, op: ir.Operation) -> None:
  # A case on the pred (0 or 1): branch 0 is the false branch.
  true_branch, false_branch = op.regions
  _emit_branches(ctx, op, [false_branch, true_branch])


def _emit_branches(ctx: Lowering, op: ir.Operation, regions: list[ir.Region]) -> None:
  plans, captures = ctx.lower_regions(op, regions)
  attrs = {"branches": len(plans), **{f"branch_{i}": p for i, p in enumerate(plans)}}
  ctx.emit(op, attrs, extra_ins=captures, kernel="case")


@register("stablehlo.custom_call")
def _custom_call(ctx: Lowering, op: ir.Operation) -> None:
  """Dispatches on call_target_name to CUSTOM_CALLS.

  Raises:
    NotImplementedError: naming the target, for every target not in CUSTOM_CALLS.
  """
  target = ir.StringAttr(op.attributes["call_target_name"]).value
  rule = CUSTOM_CALLS.get(target)
  for fallback in CUSTOM_CALL_FALLBACKS:
    rule = rule or fallback(target)
  if rule is None:
    hints = "".join(hint(target, op) for hint in UNKNOWN_TARGET_HINTS)
    raise errors.unsupported(op, f"unsupported custom_call target '{target}'{hints}")
  rule(ctx, op)
