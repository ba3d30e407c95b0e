"""Walking and rewriting MLIR modules: the ops nested in an op, @main, inlining calls.

Shared by the partitioning steps (partition*.py) and the optimized program (optimized.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from jaxlib.mlir import ir

# A bound on inlining, against (invalid) recursive programs.
_MAX_INLINED_CALLS = 100_000


def inline_calls(module: ir.Module) -> None:
  """Replaces every func.call and composite (at any depth) by a copy of its callee's
  (decomposition's) body; the callees go with symbol-dce.

  Propagation does not look into composites (jax.lax.top_k's would come out replicated
  where XLA:CPU keeps the batch sharded); the plugin's composite kernels (top_k) are
  traded for their decompositions in partitioned programs."""
  funcs = {
    op.attributes["sym_name"].value: op.operation
    for op in module.body.operations
    if op.operation.name == "func.func"
  }
  main = funcs["main"]
  for _ in range(_MAX_INLINED_CALLS):
    call = next((o for o in walk(main) if o.name in ("func.call", "stablehlo.composite")), None)
    if call is None:
      break
    callee = funcs[call.attributes["callee" if call.name == "func.call" else "decomposition"].value]
    body = callee.regions[0].blocks[0]
    mapping = dict(zip(body.arguments, call.operands))
    *ops, ret = [o.operation for o in body.operations]
    with ir.InsertionPoint(call):
      for o in ops:
        clone = o.clone()
        remap(clone, mapping)
        for old, new in zip(o.results, clone.results):
          mapping[old] = new
    for r, v in zip(call.results, ret.operands, strict=True):
      r.replace_all_uses_with(mapping.get(v, v))
    call.erase()
  else:
    raise NotImplementedError(
      f"workshop: more than {_MAX_INLINED_CALLS} calls to inline (recursion?)"
    )


def walk(op: ir.Operation) -> Iterator[ir.Operation]:
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        yield child.operation
        yield from walk(child.operation)


def remap(op: ir.Operation, mapping: dict) -> None:
  """Points the operands of `op` and of the ops nested in it at their copies."""
  for i, v in enumerate(op.operands):
    if v in mapping:
      op.operands[i] = mapping[v]
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        remap(child.operation, mapping)


def main_func(module: ir.Module) -> ir.Operation:
  return next(
    op.operation
    for op in module.body.operations
    if op.operation.name == "func.func" and op.operation.attributes["sym_name"].value == "main"
  )


def rank_of(value: ir.Value) -> int:
  """A tensor's rank; 0 for a token (whose sdy sharding has no dims: `<@mesh, []>`)."""
  if not isinstance(value.type, ir.RankedTensorType):
    return 0
  return ir.RankedTensorType(value.type).rank


def shape_of(value: ir.Value) -> list[int]:
  """A ranked tensor's dimensions."""
  return list(ir.RankedTensorType(value.type).shape)


def is_zero_splat(value: ir.Value) -> bool:
  """Whether `value` is a constant zero (a splat `stablehlo.constant`/`sdy.constant`, seen
  through broadcasts, converts and reshards)."""
  while isinstance(value, ir.OpResult) and value.owner.operation.name in (
    "stablehlo.broadcast_in_dim",
    "stablehlo.convert",
    "sdy.reshard",
  ):
    value = value.owner.operation.operands[0]
  if not isinstance(value, ir.OpResult) or value.owner.operation.name not in (
    "stablehlo.constant",
    "sdy.constant",
  ):
    return False
  attr = ir.DenseElementsAttr(value.owner.operation.attributes["value"])
  if not attr.is_splat:
    return False
  v = attr.get_splat_value()
  for cls in (ir.FloatAttr, ir.IntegerAttr):
    try:
      return cls(v).value == 0
    except (TypeError, ValueError):
      pass
  return False
