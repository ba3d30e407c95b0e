"""Cross-device collectives."""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir

from .. import errors
from ..lowering import Lowering, register
from .reduce import combiner


@register("stablehlo.all_reduce")
def _all_reduce(ctx: Lowering, op: ir.Operation) -> None:
  """One `all_reduce` kernel per operand. Attrs: body, groups (partition ids; [] = all).

  Raises:
    NotImplementedError: more than one replica (groups would mix replicas and partitions).
  """
  num_partitions = ctx.options.num_partitions
  if ctx.options.num_replicas != 1:
    raise errors.unsupported(op, f"all_reduce with {ctx.options.num_replicas} replicas")
  # An empty group list may come as shape [0, 0] or [1, 0]; either means "all".
  groups = [g for g in np.asarray(op.attributes["replica_groups"]).tolist() if g]
  # StableHLO spells groups in three modes; with a single replica (id 0):
  #  * use_global_device_ids: flattened ids r * num_partitions + p, i.e. partition ids;
  #  * channel_handle only (cross-replica-and-partition): groups of replica ids, each
  #    spanning all partitions, so {0} means everyone;
  #  * neither (cross-replica): each partition reduces with its own replicas: no-op groups.
  if "use_global_device_ids" not in op.attributes:
    if "channel_handle" in op.attributes:
      groups = []
    else:
      groups = [[p] for p in range(num_partitions)]
  ids = [p for g in groups for p in g]
  if len(set(ids)) != len(ids) or not all(0 <= p < num_partitions for p in ids):
    raise errors.malformed(op, f"replica_groups {groups} are not disjoint subsets of "
                           f"the {num_partitions} partitions")
  attrs = {"body": combiner(op), "groups": groups}
  for x, r in zip(op.operands, op.results, strict=True):
    ctx.emit(op, attrs, operands=[x], results=[r])
