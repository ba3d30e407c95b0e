"""Shardy (`sdy`) annotations outside manual computations.

No op-table family and no kernel: sdy annotations are bound or checked, never run.

JAX emits these around values whose placement it wants to pin down: a key made outside
`jit` is wrapped in `sdy.sharding_constraint` on an empty mesh, `with_sharding_constraint`
and `jax.reshard` become `sharding_constraint` / `reshard`, `shard_alike` a pair of
`sharding_group`s, `custom_vjp` and friends `propagation_barrier`. None of them changes a
value. A multi-device program with shardings is partitioned before lowering
(compiler/spmd/partition.py), which turns them into collectives or drops them; here they are
only ever seen where the value is whole on every device, so they are identities.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from .. import errors
from ..lowering import Lowering, register


@register("sdy.sharding_constraint", "sdy.reshard")
def _constraint(ctx: Lowering, op: ir.Operation) -> None:
  """The value itself where the constraint splits nothing (one device, or replicated).

  Raises:
    NotImplementedError: the constraint shards the value across devices, which only the
      partitioner can honour.
  """
  wanted = ctx.meshes.effective(op.attributes["sharding"])
  (operand,) = op.operands
  s = ctx.slot(operand)
  if wanted is not None or ctx.sharding(s) is not None:
    raise errors.needs_partitioning(
      op, f"sharding {wanted or 'replicated'} of a value held as {ctx.sharding(s) or 'replicated'}"
    )
  ctx.bind(op.results[0], s)


@register("sdy.propagation_barrier")
def _barrier(ctx: Lowering, op: ir.Operation) -> None:
  # Only stops sharding propagation; the value passes through.
  ctx.bind(op.results[0], ctx.slot(op.operands[0]))


@register("sdy.sharding_group")
def _group(ctx: Lowering, op: ir.Operation) -> None:
  """Ties the shardings of its group's values together for propagation; no results.

  Raises:
    NeedsPartitioning: a member of the group is sharded, so the others must be too
      (`shard_alike(x, jnp.arange(16))[1]` returns the iota sharded like x): only
      propagation and the partitioner can give them that.
  """
  if ctx.sharding(ctx.slot(op.operands[0])) is not None:
    raise errors.needs_partitioning(op, "a sharding group with a sharded member")
