"""Collective combining: independent all-reduces become one (XLA's AllReduceCombiner).

Each all-reduce is a rendezvous of every device in its group; a program that reduces
many small values (the gradients of each weight) pays that latency once per value. XLA
combines all-reduces that do not depend on each other into one variadic all-reduce, and
JAX's tests count them in the optimized program (`compiled.as_text()`). compile.py runs
this on the per-device program: after partitioning, or before the direct lowering of a
shard_map or pmap program.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy, stablehlo

from .. import dtypes
from ..irtools import main_func
from .sharding import FALLBACK_ATTR
from ..rules.reduce import match_combiner

# XLA's AllReduceCombiner thresholds as its GPU compiler sets them: up to 30 MiB and 256
# operands per combined all-reduce.
_COMBINE_BYTES = 30 * 1024 * 1024
_COMBINE_COUNT = 256


def combine_all_reduces(module: ir.Module) -> bool:
  """Independent all-reduces of one block over the same replica groups, body and element
  type become one variadic all-reduce (XLA's AllReduceCombiner): one rendezvous of the
  devices instead of one per value.

  The gradients of a scan over microbatches (`reshard(grad_acc, P())` of four weights)
  are four all-reduces after the loop; XLA:CPU's optimized program has one. A group is
  valid while every member's operands are defined before the first use of any member's
  result (so none depends on another); the combined op goes right after the last of
  those definitions. Groups stop at the thresholds above.

  Returns whether any all-reduces were combined.
  """
  changed = False
  for block in list(_blocks(main_func(module))):
    # One group at a time: combining moves and erases ops, so positions are re-read.
    while groups := _groups(ops := [o.operation for o in block.operations]):
      members, last_def, kind = groups[0]
      first = members[0]
      with ir.InsertionPoint(ops[last_def + 1]), first.location:
        combined = ir.Operation.create(
          "stablehlo.all_reduce",
          results=[m.results[0].type for m in members],
          operands=[m.operands[0] for m in members],
          attributes=_attributes(members),
          regions=1,
        )
      # A fresh body, not a copy of the first member's: no Python object may still point
      # into an op's region when the op is erased (jaxlib's bindings would keep the freed
      # ops in their table of live operations; a later op at the same address crashed).
      scalar = first.regions[0].blocks[0].arguments[0].type
      body = combined.regions[0].blocks.append(scalar, scalar)
      with ir.InsertionPoint(body), first.location:
        folded = ir.Operation.create(
          f"stablehlo.{kind}", results=[scalar], operands=list(body.arguments)
        )
        ir.Operation.create("stablehlo.return", operands=[folded.results[0]])
      for m, r in zip(members, combined.results):
        m.results[0].replace_all_uses_with(r)
        m.erase()
      changed = True
  return changed


def combinable(module: ir.Module) -> bool:
  """Whether combine_all_reduces would change `module`."""
  return any(_groups([o.operation for o in b.operations]) for b in _blocks(main_func(module)))


def _groups(ops: list[ir.Operation]) -> list[tuple[list[ir.Operation], int, str]]:
  """The all-reduces among `ops` (one block's) to combine: each group's members, in
  program order, the position of the last op defining one of their operands, and the
  body's op ("add", "maximum", ...)."""
  position = {op: i for i, op in enumerate(ops)}
  groups: dict[tuple, list[list]] = {}  # key -> [[members, last def, first use]]
  for op in ops:
    if op.name != "stablehlo.all_reduce" or len(op.operands) != 1:
      continue
    kind = match_combiner(op)
    t = op.operands[0].type
    if kind is None or not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
      continue
    key = (
      kind,
      str(ir.RankedTensorType(t).element_type),
      str(op.attributes["replica_groups"]),
      "use_global_device_ids" in op.attributes,
      _channel_type(op),
      FALLBACK_ATTR in op.attributes,
      "sdy.sharding" in op.attributes,
    )
    defined = _defined_at(op.operands[0], position)
    used = min((_used_at(u.owner, position) for u in op.results[0].uses), default=len(ops))
    for group in groups.setdefault(key, []):
      members, last_def, first_use = group
      if (
        len(members) < _COMBINE_COUNT
        # psum(psum(x)): fed by a member directly (through an op, `first_use` sees it).
        and defined not in (position[m] for m in members)
        and sum(_bytes(m.operands[0].type) for m in members) + _bytes(t) <= _COMBINE_BYTES
        and max(last_def, defined) < min(first_use, used)
      ):
        group[:] = [[*members, op], max(last_def, defined), min(first_use, used)]
        break
    else:
      groups[key].append([[op], defined, used])
  return [(g[0], g[1], key[0]) for key, gs in groups.items() for g in gs if len(g[0]) > 1]


def _attributes(members: list[ir.Operation]) -> dict[str, ir.Attribute]:
  """The first member's attributes, with a sharding per result when the members have
  one (each member's own)."""
  first = members[0]
  attrs = {name: first.attributes[name] for name in first.attributes}
  if "sdy.sharding" in attrs:
    attrs["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
      [sdy.TensorShardingPerValueAttr(m.attributes["sdy.sharding"]).shardings[0] for m in members]
    )
  return attrs


def _defined_at(value: ir.Value, position: dict[ir.Operation, int]) -> int:
  """The position in the block of the op defining `value`; -1 for a block argument or a
  value from outside the block."""
  if isinstance(value, ir.OpResult) and value.owner.operation in position:
    return position[value.owner.operation]
  return -1


def _used_at(user: ir.Operation, position: dict[ir.Operation, int]) -> int:
  """The position in the block of the op that is or holds `user` (a use inside a loop
  body counts at the loop)."""
  op = user.operation if hasattr(user, "operation") else user
  while op not in position:
    op = op.parent
  return position[op]


def _blocks(op: ir.Operation) -> Iterator[ir.Block]:
  """The blocks of `op`'s regions, nested ones too, except all-reduce bodies: combining
  erases all-reduces, and a block of an erased op must not be visited."""
  for region in op.regions:
    for block in region.blocks:
      yield block
      for inner in block.operations:
        if inner.operation.name != "stablehlo.all_reduce":
          yield from _blocks(inner.operation)


def _channel_type(op: ir.Operation) -> int | None:
  if "channel_handle" not in op.attributes:
    return None
  return stablehlo.ChannelHandle(op.attributes["channel_handle"]).channel_type


def _bytes(t: ir.Type) -> int:
  t = ir.RankedTensorType(t)
  dtype = dtypes.lookup(t.element_type)
  return math.prod(t.shape) * (dtype.numpy.itemsize if dtype is not None else 8)
