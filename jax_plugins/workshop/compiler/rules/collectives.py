"""Cross-device collectives and the SPMD identity ops partition_id / replica_id.

Family `collectives`: plugin_src/kernels/collectives.cc.

Every collective's kernel works on *participants*: the devices of one launch, numbered
r * num_partitions + p for replica r, partition p (the order of the device assignment, and
StableHLO's "flattened id"). The rules here turn StableHLO's replica_groups /
source_target_pairs, whose ids mean replicas, partitions or flattened ids depending on the
op's channel_handle and use_global_device_ids, into participant ids, and check them:
kernels then only index.

How JAX 0.10 spells them (pmap and shard_map are both SPMD: 1 replica, N partitions):
psum / pmean / pmax / pmin, all_gather and psum_scatter carry a channel handle and
use_global_device_ids, with groups of flattened (= partition) ids, e.g. [[0, 2], [1, 3]]
for the first axis of a 2x2 mesh; all_to_all and ppermute carry a channel handle only, so
their ids are partition ids; axis_index becomes partition_id (and arithmetic on it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import Lowering, register
from .reduce import combiner


class Mode(enum.Enum):
  """What the ids in replica_groups mean (the StableHLO spec's process grouping modes)."""

  CROSS_REPLICA = "replica ids, within each partition"
  CROSS_PARTITION = "partition ids, within each replica"
  CROSS_REPLICA_AND_PARTITION = "replica ids, each spanning all partitions"
  FLATTENED_IDS = "flattened ids r * num_partitions + p"


def mode_of(op: ir.Operation) -> Mode:
  """The grouping mode of `op`, from its channel handle and use_global_device_ids.

  Only all_reduce, all_gather and reduce_scatter have use_global_device_ids; for them a
  channel alone means cross-replica-and-partition, for the others cross-partition.

  Raises:
    ValueError: use_global_device_ids without a channel.
  """
  channel = (
    "channel_handle" in op.attributes
    and stablehlo.ChannelHandle(op.attributes["channel_handle"]).handle > 0
  )
  if "use_global_device_ids" in op.attributes:
    if not channel:
      raise errors.malformed(op, "use_global_device_ids without a channel_handle")
    return Mode.FLATTENED_IDS
  if not channel:
    return Mode.CROSS_REPLICA
  if op.name in ("stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter"):
    return Mode.CROSS_REPLICA_AND_PARTITION
  return Mode.CROSS_PARTITION


def participant_groups(
  groups: Sequence[Sequence[int]],
  mode: Mode,
  num_replicas: int,
  num_partitions: int,
  what: str = "replica_groups",
) -> list[list[int]]:
  """Translates replica_groups (as written, [] = everyone) into groups of participants.

  Follows XLA's participant order, which fixes the concatenation order of all_gather and
  all_to_all: within a group, ids in the order written (for cross-replica-and-partition,
  each replica's partitions in order).

  Raises:
    ValueError: an id outside its range, or no groups in flattened-id mode.
  """
  R, P = num_replicas, num_partitions
  id_range = {
    Mode.CROSS_REPLICA: R,
    Mode.CROSS_PARTITION: P,
    Mode.CROSS_REPLICA_AND_PARTITION: R,
    Mode.FLATTENED_IDS: R * P,
  }[mode]
  if not groups:
    if mode == Mode.FLATTENED_IDS:
      raise ValueError(f"{what} cannot be empty with use_global_device_ids")
    groups = [list(range(id_range))]
  for g in groups:
    for i in g:
      if not 0 <= i < id_range:
        raise ValueError(
          f"{what} {list(map(list, groups))} name {i}, outside [0, {id_range}) ({mode.value})"
        )
  if mode == Mode.CROSS_REPLICA:
    return [[r * P + p for r in g] for g in groups for p in range(P)]
  if mode == Mode.CROSS_PARTITION:
    return [[r * P + p for p in g] for g in groups for r in range(R)]
  if mode == Mode.CROSS_REPLICA_AND_PARTITION:
    return [[r * P + p for r in g for p in range(P)] for g in groups]
  return [list(g) for g in groups]


def _groups(ctx: Lowering, op: ir.Operation, *, cover: bool = True) -> list[list[int]]:
  """`op`'s replica_groups as disjoint groups of participants.

  Args:
    cover: every participant must be in a group (all ops but collective_broadcast, where
      the others get zeros).

  Raises:
    ValueError: ids out of range, in two groups, or (with `cover`) missing.
  """
  # Rows of unequal groups are padded with -1; an empty group list may come as shape
  # [0, 0] or [1, 0], either meaning "everyone".
  rows = np.asarray(op.attributes["replica_groups"]).tolist()
  written = [g for g in ([i for i in row if i != -1] for row in rows) if g]
  n = ctx.options.num_replicas * ctx.options.num_partitions
  try:
    groups = participant_groups(
      written, mode_of(op), ctx.options.num_replicas, ctx.options.num_partitions
    )
  except ValueError as e:
    raise errors.malformed(op, str(e)) from None
  ids = [p for g in groups for p in g]
  if len(set(ids)) != len(ids):
    raise errors.malformed(op, f"replica_groups {written} name a participant twice")
  if cover and len(ids) != n:
    raise errors.malformed(
      op,
      f"replica_groups {written} leave out participants {sorted(set(range(n)) - set(ids))} of {n}",
    )
  return groups


def _int(op: ir.Operation, name: str) -> int:
  return ir.IntegerAttr(op.attributes[name]).value


def _dims(v: ir.Value) -> list[int]:
  return list(ir.RankedTensorType(v.type).shape)


def _check_scaled(
  op: ir.Operation, groups: list[list[int]], dim: int, what: str, scale: Callable[[int, int], int]
) -> None:
  """Checks each result has the operand's shape with `dim` scaled by `scale(group size)`.

  Raises:
    ValueError: `dim` is out of range or a shape disagrees (e.g. groups of unequal size).
  """
  for x, r in zip(op.operands, op.results, strict=True):
    shape = _dims(x)
    if not 0 <= dim < len(shape):
      raise errors.malformed(op, f"{what} {dim} is out of range for rank {len(shape)}")
    for g in groups:
      want = list(shape)
      want[dim] = scale(shape[dim], len(g))
      if want != _dims(r):
        raise errors.malformed(
          op,
          f"result shape {_dims(r)} does not match operand "
          f"shape {shape} for a group of {len(g)} participants",
        )


@register("stablehlo.all_reduce")
def _all_reduce(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs... (variadic, folded independently). Attrs: body, groups."""
  ctx.emit(op, {"body": combiner(op), "groups": _groups(ctx, op)})


@register("stablehlo.all_gather")
def _all_gather(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs... Attrs: dim (all_gather_dim), groups.

  Each result is its group's operands concatenated along dim, in group order.
  """
  groups = _groups(ctx, op)
  dim = _int(op, "all_gather_dim")
  _check_scaled(op, groups, dim, "all_gather_dim", lambda d, g: d * g)
  ctx.emit(op, {"dim": dim, "groups": groups})


@register("stablehlo.reduce_scatter")
def _reduce_scatter(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x. Attrs: dim (scatter_dimension), body, groups.

  The group's operands are folded elementwise, split along dim into one block per member,
  and member i keeps block i.
  """
  groups = _groups(ctx, op)
  dim = _int(op, "scatter_dimension")
  for x in op.operands:
    if dim < len(_dims(x)) and any(_dims(x)[dim] % len(g) for g in groups):
      raise errors.malformed(
        op,
        f"scatter dimension {dim} of {_dims(x)} does not split "
        f"into groups of {[len(g) for g in groups]}",
      )
  _check_scaled(op, groups, dim, "scatter_dimension", lambda d, g: d // g)
  ctx.emit(op, {"dim": dim, "body": combiner(op), "groups": groups})


@register("stablehlo.all_to_all")
def _all_to_all(ctx: Lowering, op: ir.Operation) -> None:
  """ins: xs... Attrs: split_dim, concat_dim, groups (each of split_count members).

  Member j sends block i of its operand (split along split_dim into split_count blocks)
  to member i, which concatenates what it receives along concat_dim in member order.
  """
  groups = _groups(ctx, op)
  split, concat, count = (
    _int(op, "split_dimension"),
    _int(op, "concat_dimension"),
    _int(op, "split_count"),
  )
  if any(len(g) != count for g in groups):
    raise errors.malformed(
      op, f"split_count {count} but groups of {sorted({len(g) for g in groups})} participants"
    )
  for x, r in zip(op.operands, op.results, strict=True):
    shape = _dims(x)
    if not (0 <= split < len(shape) and 0 <= concat < len(shape)):
      raise errors.malformed(op, f"split/concat dimension out of range for rank {len(shape)}")
    if shape[split] % count:
      raise errors.malformed(
        op, f"split dimension {split} of {shape} is not divisible by split_count {count}"
      )
    want = list(shape)
    want[split] //= count
    want[concat] *= count
    if want != _dims(r):
      raise errors.malformed(op, f"result shape {_dims(r)}, expected {want}")
  ctx.emit(op, {"split_dim": split, "concat_dim": concat, "groups": groups})


@register("stablehlo.collective_permute")
def _collective_permute(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x. Attrs: sources (per participant, whose operand it receives; -1: zeros).

  Pairs are replica ids within each partition without a channel, partition ids within
  each replica with one (XLA has no flattened-id permute).

  Raises:
    ValueError: an id out of range, or a participant that sends or receives twice.
  """
  R, P = ctx.options.num_replicas, ctx.options.num_partitions
  pairs = np.asarray(op.attributes["source_target_pairs"]).reshape(-1, 2).tolist()
  for end, ids in (("source", [s for s, _ in pairs]), ("target", [t for _, t in pairs])):
    if len(set(ids)) != len(ids):
      raise errors.malformed(op, f"source_target_pairs {pairs} repeat a {end}")
  try:
    # Each pair, as a two-member group, becomes one pair per replica (or partition).
    mapped = participant_groups(pairs, mode_of(op), R, P, "source_target_pairs") if pairs else []
  except ValueError as e:
    raise errors.malformed(op, str(e)) from None
  sources = [-1] * (R * P)
  for src, dst in mapped:
    sources[dst] = src
  ctx.emit(op, {"sources": sources})


@register("stablehlo.collective_broadcast")
def _collective_broadcast(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x. Attrs: sources (per participant, its group's first member; -1: zeros).

  The same kernel contract as collective_permute: each participant copies one peer's
  operand, or zeros when it is in no group.
  """
  sources = [-1] * (ctx.options.num_replicas * ctx.options.num_partitions)
  for g in _groups(ctx, op, cover=False):
    for p in g:
      sources[p] = g[0]
  ctx.emit(op, {"sources": sources})


@register("stablehlo.partition_id", "stablehlo.replica_id")
def _spmd_id(ctx: Lowering, op: ir.Operation) -> None:
  """No ins; a u32 scalar. Attrs: num_partitions.

  Participant p is partition p % num_partitions of replica p // num_partitions.
  """
  ctx.emit(op, {"num_partitions": ctx.options.num_partitions})
