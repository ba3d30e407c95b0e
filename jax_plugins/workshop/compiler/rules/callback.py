"""Host callbacks and the tokens that order them.

Family `callback`: plugin_src/kernels/callback.cc.

`custom_call @workshop_python_callback` (emitted by jax_plugins/workshop/extensions/callbacks.py for
pure_callback, io_callback and jax.debug.callback/print) becomes a `host_callback`
instruction over the call's array operands and results; attr `callback_id` names the
HostCallback the executor calls (plugin_src/kernels/callback.cc).

Tokens (`!stablehlo.token`) carry no data: a token value is a pred[0] slot (JAX passes
pred[0] buffers for main's token parameters). The executor runs a plan's instructions one
after another in program order, which already orders every side effect, so
`create_token` and `after_all` just produce an empty value and callbacks neither read nor
write tokens.
"""

from __future__ import annotations

import math

import numpy as np
from jaxlib.mlir import ir

from ... import custom_calls
from ...custom_calls import CALLBACK_TARGET as TARGET
from ...custom_calls import PARTITIONED_CALLBACK_TARGET
from .. import dtypes, errors
from ..lowering import CUSTOM_CALLS, Lowering, register
from ..plan import Instr, Plan, free_lists
from ..spmd.sharding import PINNED_ATTR, pinned_partition


def is_token(t: ir.Type) -> bool:
  return str(t) == "!stablehlo.token"


def _empty_token(ctx: Lowering, op: ir.Operation, value: ir.Value) -> None:
  (s,) = ctx.result_slots(op, [value])
  ctx.emit_kernel(op, "constant", [], [s], {"data": b""})


def _host_callback(ctx: Lowering, op: ir.Operation) -> None:
  """ins: the array operands; outs: the array results. Attrs: callback_id (int).

  A callback JAX pins to one device (a MAXIMAL sharding: jit over several devices outside
  shard_map) runs once, as under XLA: only on that partition (a `case` on partition_id),
  its results then broadcast to every partition (collective_broadcast). Elsewhere every
  device runs its own program's callback (pmap, shard_map, one device).
  """
  config = op.attributes["mhlo.backend_config"] if "mhlo.backend_config" in op.attributes else None
  if not isinstance(config, ir.DictAttr) or "callback_id" not in config:
    raise errors.malformed(op, f"{TARGET} without a callback_id in mhlo.backend_config")
  attrs = {"callback_id": ir.IntegerAttr(config["callback_id"]).value}
  operands = [v for v in op.operands if not is_token(v.type)]
  results = [r for r in op.results if not is_token(r.type)]
  device = _maximal_device(ctx, op)
  if device is None:
    ctx.emit(op, attrs, operands=operands, results=results, kernel="host_callback")
  else:
    _emit_on_one_partition(ctx, op, attrs, operands, results, device)
  for r in op.results:
    if is_token(r.type):
      _empty_token(ctx, op, r)


def _maximal_device(ctx: Lowering, op: ir.Operation) -> int | None:
  """The partition JAX pins `op` to (sharding.pinned_partition) in a multi-partition
  program, where `op` is outside manual computations; else None.

  In a partitioned program (partition.py: per-device code, lowered as if manual) the pin
  is PINNED_ATTR, which only ops outside shard_map bodies get."""
  if ctx.options.num_replicas != 1 or ctx.options.num_partitions == 1:
    return None
  if ctx._manual_depth and PINNED_ATTR not in op.attributes:  # pylint: disable=protected-access
    return None
  device = pinned_partition(op)
  return device if device is not None and device < ctx.options.num_partitions else None


def _emit_on_one_partition(
  ctx: Lowering,
  op: ir.Operation,
  attrs: dict,
  operands: list[ir.Value],
  results: list[ir.Value],
  device: int,
) -> None:
  ins = ctx.operand_slots(op, operands)
  outs = ctx.result_slots(op, results)
  u32, pred = dtypes.by_name("u32"), dtypes.by_name("pred")
  partition = ctx.temp_slot(u32, ())
  ctx.emit_kernel(
    op, "partition_id", [], [partition], {"num_partitions": ctx.options.num_partitions}
  )
  target = ctx.temp_slot(u32, ())
  ctx.emit_kernel(op, "constant", [], [target], {"data": np.uint32(device).tobytes()})
  here = ctx.temp_slot(pred, ())
  ctx.emit_kernel(
    op, "compare", [partition, target], [here], {"direction": "EQ", "compare_type": "UNSIGNED"}
  )
  loc = ctx.instrs[-1].loc

  def branch(make_instrs) -> Plan:
    slots = [ctx.slots[s] for s in ins] + [ctx.slots[s] for s in outs]
    params = list(range(len(ins)))
    results = list(range(len(ins), len(slots)))
    instrs = make_instrs(params, results, slots)
    return Plan(slots, params, results, instrs, free_lists(instrs, results))

  def zeros(params, results, slots):
    del params
    return [Instr("constant", [], [r], {"data": bytes(_byte_size(slots[r]))}, loc) for r in results]

  def call(params, results, slots):
    del slots
    return [Instr("host_callback", params, results, attrs, loc)]

  local = [ctx.temp_slot(dtypes.by_code(ctx.slots[s][0]), ctx.slots[s][1]) for s in outs]
  ctx.emit_kernel(
    op,
    "case",
    [here, *ins],
    local,
    {"branches": 2, "branch_0": branch(zeros), "branch_1": branch(call)},
  )
  for mine, out in zip(local, outs):
    ctx.emit_kernel(
      op, "collective_broadcast", [mine], [out], {"sources": [device] * ctx.options.num_partitions}
    )


def _byte_size(slot: tuple[int, tuple[int, ...]]) -> int:
  code, dims = slot
  return math.prod(dims) * dtypes.by_code(code).numpy.itemsize


@register("stablehlo.create_token", "stablehlo.after_all")
def _token(ctx: Lowering, op: ir.Operation) -> None:
  _empty_token(ctx, op, op.result)


def _inspect_sharding(ctx: Lowering, op: ir.Operation) -> None:
  """`custom_call @InspectSharding` (jax.debug.inspect_array_sharding) outside partitioned
  programs: the operand is whole on every device (replicated) or a shard_map body's
  (manual). Its answer is queued (custom_calls.inspection); the op computes nothing, its
  result is the operand. partition.py answers and removes the op in partitioned programs.

  Raises:
    NeedsPartitioning: the operand is sharded outside a manual computation.
  """
  key = (
    ir.StringAttr(op.attributes["backend_config"]).value
    if "backend_config" in op.attributes
    else ""
  )
  slot = ctx.slot(op.operands[0])
  manual = bool(ctx._manual_depth)  # pylint: disable=protected-access
  if not manual and ctx.sharding(slot) is not None:
    raise errors.needs_partitioning(op, "inspect_array_sharding of a sharded value")
  try:
    custom_calls.inspection(key, (), None, manual=manual)
  except ValueError as e:
    raise errors.malformed(op, str(e)) from None
  for r in op.results:
    ctx.bind(r, slot)


def _dce_sink(ctx: Lowering, op: ir.Operation) -> None:
  """`custom_call @dce_sink` (lax.dce_sink(x, prevent_mlir_dce=True)): a side-effecting use
  of its operands that keeps their computation alive through MLIR's DCE; it has no results
  and computes nothing (XLA:CPU's handler is a no-op too), so it emits no instruction. The
  operands' producers are lowered as any value's."""
  del ctx, op


CUSTOM_CALLS[TARGET] = _host_callback
CUSTOM_CALLS[PARTITIONED_CALLBACK_TARGET] = _host_callback
CUSTOM_CALLS["InspectSharding"] = _inspect_sharding
CUSTOM_CALLS["dce_sink"] = _dce_sink
