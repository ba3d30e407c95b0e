"""Partitioning steps: which ops stay sharded, the fallback for the others, the guard.

convert-global-to-local turns only some ops into correct per-device code (`_is_local`);
every other op that touches a sharded value runs on the whole value (`fall_back`,
step 5 of partition.py), and `check_local` (step 7) refuses what would still abort the
process. partition.py runs these steps in order.
"""

from __future__ import annotations

from collections.abc import Iterator

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy, stablehlo

from ... import custom_calls
from .. import errors, optable
from ..attrs import ints
from ..irtools import is_zero_splat, main_func, rank_of, walk
from .sharding import (
  FALLBACK_ATTR,
  Meshes,
  axis_list,
  divides,
  is_sharded,
  manual_axes,
  mesh_name,
  only_axes,
  replicated,
  reshard,
  sums_unreduced,
  unreduced_axes,
  value_sharding,
  without_unreduced,
)

# StableHLO ops whose per-device form is the same op on local shapes, once
# insert-explicit-reshards has made operand and result shardings agree (the op table's
# elementwise ops) or resolved the op's sharding rule (the rest, named here);
# convert-global-to-local rewrites them.
LOCAL_OPS = frozenset(
  "stablehlo." + name
  for name in optable.ELEMENTWISE
  | {
    "broadcast_in_dim",
    "transpose",
    "reshape",
    "dot_general",
    "iota",
    "constant",
    "optimization_barrier",
  }
) | {
  "sdy.constant",
  "sdy.reshard",
  "sdy.manual_computation",
  "func.return",
  "sdy.return",
  "sdy.all_gather",
  "sdy.all_slice",
  "sdy.all_reduce",
  "sdy.all_to_all",
  "sdy.collective_permute",
  "sdy.reduce_scatter",
}

# Single-operand reductions with these bodies are local too: a reduction over a sharded
# dim leaves a partial result per device that an all-reduce with the same body completes.
# (Shardy's all_reduce is a sum, so fix_all_reduce_bodies puts the body back.)
_COMBINERS = frozenset(
  "stablehlo." + name for name in ("add", "multiply", "maximum", "minimum", "and", "or")
)


def fall_back(module: ir.Module, replicate_all: bool = False) -> list[str]:
  """Makes each op that is not `_is_local` and touches a sharded value run replicated.

  Runs after insert-explicit-reshards (run before, that pass would shard the operands
  again wherever the op's sharding rule allows it), so the op is rewired by hand: its
  sharded operands (and sharded values its regions capture) go through an `sdy.reshard`
  to replicated, its results are declared replicated and resharded to what their users
  were given, an all-reduce that completed its partial result is dropped (the result is
  whole now), and every sharding inside its regions is dropped (everything is whole).
  reshard-to-collectives then makes all-gathers and all-slices of the new reshards.
  """
  mesh = mesh_name(module)
  meshes = Meshes(module)
  notes, dead = [], []
  ops = [o.operation for b in _sharded_blocks(main_func(module)) for o in b.operations]
  for op in ops:
    if replicate_all:
      if op.name.startswith("sdy.") or op.name == "func.return":
        continue
    elif op.name == "sdy.all_reduce" or _is_local(op, meshes):
      continue
    inner = list(walk(op))
    defined_inside = {r for o in inner for r in o.results}
    defined_inside |= {
      a for o in [op, *inner] for reg in o.regions for b in reg.blocks for a in b.arguments
    }
    captured = {
      v
      for o in inner
      for v in o.operands
      if v not in defined_inside and is_sharded(value_sharding(v))
    }
    sharded_in = [i for i, v in enumerate(op.operands) if is_sharded(value_sharding(v))]
    result_shardings = [value_sharding(r) for r in op.results]
    nested = any(o.name.startswith("sdy.") or "sdy.sharding" in o.attributes for o in inner)
    if not (sharded_in or captured or nested or any(map(is_sharded, result_shardings))):
      continue
    with ir.InsertionPoint(op), op.location:
      for i in sharded_in:
        v = op.operands[i]
        op.operands[i] = reshard(v, replicated(mesh, rank_of(v), value_sharding(v)))
      whole = {v: reshard(v, replicated(mesh, rank_of(v), value_sharding(v))) for v in captured}
    for o in inner:
      for i, v in enumerate(o.operands):
        if v in whole:
          o.operands[i] = whole[v]
    _replicate_nested(op)
    if op.results:
      op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
        [replicated(mesh, rank_of(r), value_sharding(r)) for r in op.results]
      )
    for r, sharding in zip(op.results, result_shardings):
      for use in list(r.uses):
        user = use.owner.operation
        if user.name == "sdy.all_reduce":
          with ir.InsertionPoint(user), user.location:
            replacement = reshard(r, user.attributes["out_sharding"])
          user.results[0].replace_all_uses_with(replacement)
          dead.append(user)  # erased after the walk, which still lists it
      if (
        is_sharded(sharding)
        and divides(sharding, r, meshes)
        and "\":(" not in str(sharding)
        and list(r.uses)
      ):
        with ir.InsertionPoint(op), op.location:
          chain = _reshard_whole(r, sharding)
        for prev, o in zip([op, *chain[:-1]], chain):
          o.move_after(prev)
        back = chain[-1].results[0]
        for use in list(r.uses):
          if use.owner.operation != chain[0]:
            use.owner.operation.operands[use.operand_number] = back
    op.attributes[FALLBACK_ATTR] = ir.UnitAttr.get()
    notes.append(f"{op.name} at {op.location}")
  for op in dead:
    op.erase()
  return notes


def drop_uneven_reshards(module: ir.Module) -> None:
  """Reshards to a sharding that does not divide their value are bypassed.

  XLA's SPMD partitioner pads such shards; convert-global-to-local aborts on them. After
  the fallback every user of one is a reshard (the op that needed it runs whole, its
  operands resharded to replicated): each such user reshards the uneven reshard's operand
  instead. What remains uneven is refused by check_local.
  """
  meshes = Meshes(module)
  bypassed = []
  for op in list(walk(main_func(module))):
    if op.name != "sdy.reshard" or divides(op.attributes["sharding"], op.results[0], meshes):
      continue
    users = [use.owner.operation for use in op.results[0].uses]
    if not users or any(u.name != "sdy.reshard" for u in users):
      continue
    for user in users:  # (a reshard to the source's own sharding: reshard-to-collectives
      user.operands[0] = op.operands[0]  # drops it)
    bypassed.append(op)
  for op in bypassed:  # erased last: the walk's list still holds them
    op.erase()


def _sharded_blocks(func: ir.Operation) -> Iterator[ir.Block]:
  """@main's block and the bodies of its manual computations: a manual computation
  over some axes leaves its body sharded over the others (`jax.shard_map(f,
  axis_names={"x"})` of a value sharded on "y"), which convert-global-to-local
  partitions like @main (and aborts on the same ops)."""
  block = func.regions[0].blocks[0]
  yield block
  for op in block.operations:
    if op.operation.name == "sdy.manual_computation":
      yield from _sharded_blocks(op.operation)


def _reshard_whole(value: ir.Value, sharding: ir.Attribute) -> list[ir.Operation]:
  """The ops taking a whole (replicated) `value` to `sharding`, in order.

  Unreduced axes are partial sums: only the devices at coordinate 0 of those axes keep
  the value (`sdy.replicated_to_unreduced`, lowered by lower_replicated_to_unreduced),
  so the partial sums add up to it once; a reshard straight to an unreduced sharding
  keeps it on every device (reshard-to-collectives makes it an all-slice), and the sum
  over the axes counts it once per device.
  """
  attr = sdy.TensorShardingAttr(sharding)
  unreduced = list(attr.unreduced_axes)
  if not unreduced:
    return [reshard(value, sharding).owner.operation]
  dims = without_unreduced(sharding, unreduced)
  chain = [reshard(value, dims).owner.operation] if is_sharded(dims) else []
  source = chain[-1].results[0] if chain else value
  chain.append(
    ir.Operation.create(
      "sdy.replicated_to_unreduced",
      results=[value.type],
      operands=[source],
      attributes={"axes": axis_list(unreduced), "out_sharding": sharding},
    )
  )
  return chain


def combiner(op: ir.Operation) -> str | None:
  """The single binary op of a one-operand reduce's body (e.g. "stablehlo.maximum")."""
  if op.name != "stablehlo.reduce" or len(op.operands) != 2:
    return None
  body = [o.operation for o in op.regions[0].blocks[0].operations]
  if len(body) != 2 or body[0].name not in _COMBINERS:
    return None
  args = list(op.regions[0].blocks[0].arguments)
  if list(body[0].operands) != args or list(body[1].operands) != [body[0].results[0]]:
    return None
  return body[0].name


def _sharded_dims(op: ir.Operation) -> set[int]:
  """Dims sharded in any operand or result of the result's rank (not scalar inits)."""
  dims = set()
  rank = rank_of(op.results[0])
  for v in (*op.operands, *op.results):
    sharding = value_sharding(v)
    if rank_of(v) != rank:
      continue
    if sharding is not None:
      for d, dim in enumerate(sdy.TensorShardingAttr(sharding).dimension_shardings):
        if sdy.DimensionShardingAttr(dim).axes:
          dims.add(d)
  return dims


def _sharded_only_along(v: ir.Value, dims) -> bool:
  """Whether every sharded dim of `v` is in `dims`."""
  return all(d in list(dims) for d, sharded in enumerate(_dim_axes(v)) if sharded)


def _whole_window_dims(operand: ir.Value, slice_sizes: list[int], dn) -> list[int]:
  """A gather's operand dims that every slice takes whole and no index moves along."""
  shape = ir.RankedTensorType(operand.type).shape
  return [
    d
    for d in range(len(shape))
    if slice_sizes[d] == shape[d]
    and d not in dn.start_index_map
    and d not in dn.collapsed_slice_dims
    and d not in dn.operand_batching_dims
  ]


def _passes_through(op: ir.Operation) -> bool:
  """For ops that move data along some dims: whether the sharded dims are untouched, so
  each device's shard maps to the same shard (convert-global-to-local rewrites only
  such ops, and aborts on others)."""
  dims = _sharded_dims(op)
  shape = ir.RankedTensorType(op.operands[0].type).shape
  if op.name == "stablehlo.slice":
    start, limit, stride = (ints(op, n) for n in ("start_indices", "limit_indices", "strides"))
    return all(start[d] == 0 and limit[d] == shape[d] and stride[d] == 1 for d in dims)
  if op.name == "stablehlo.pad":
    lo, hi, interior = (
      ints(op, n) for n in ("edge_padding_low", "edge_padding_high", "interior_padding")
    )
    return all(lo[d] == hi[d] == interior[d] == 0 for d in dims)
  if op.name == "stablehlo.gather":
    # From a whole operand (an embedding table), each device gathers its own indices; from
    # an operand sharded along batching dims only (take_along_axis of batch-sharded
    # logits), its own batch rows, which its indices' batching dims hold.
    # Also sharded along dims it slices whole (`x[..., 0]`: a gather of slices as wide as
    # the operand there), whose slice sizes convert-global-to-local makes local.
    dn = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    whole = _whole_window_dims(op.operands[0], ints(op, "slice_sizes"), dn)
    return _sharded_only_along(op.operands[0], [*dn.operand_batching_dims, *whole])
  if op.name == "stablehlo.scatter":
    # Into an operand sharded along batching dims only (the gradient of take_along_axis):
    # each device scatters its batch rows' updates into its rows, with any body.
    # Or along window dims its updates cover whole (`x.at[..., 0].set(u)`).
    dn = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    operands = len(op.operands) // 2
    rank = rank_of(op.operands[0])
    window_dims = [
      d for d in range(rank) if d not in dn.inserted_window_dims and d not in dn.input_batching_dims
    ]
    update_shape = ir.RankedTensorType(op.operands[-1].type).shape
    sizes = [1] * rank
    for d, u in zip(window_dims, dn.update_window_dims):
      sizes[d] = update_shape[u]
    whole = [
      d for d in window_dims if d not in dn.scattered_dims_to_operand_dims and sizes[d] == shape[d]
    ]
    return all(
      _sharded_only_along(v, [*dn.input_batching_dims, *whole])
      and not unreduced_axes(value_sharding(v))
      for v in (*op.operands[:operands], *op.results)
    )
  if op.name == "stablehlo.dynamic_slice":
    sizes = ints(op, "slice_sizes")
    return all(sizes[d] == shape[d] for d in dims)
  if op.name == "stablehlo.dynamic_update_slice":
    update = ir.RankedTensorType(op.operands[1].type).shape
    return all(update[d] == shape[d] for d in dims)
  if op.name == "stablehlo.concatenate":
    return ir.IntegerAttr(op.attributes["dimension"]).value not in dims
  if op.name == "stablehlo.reverse":
    return not dims & set(ints(op, "dimensions"))
  if op.name == "stablehlo.sort":
    return ir.IntegerAttr(op.attributes["dimension"]).value not in dims
  if op.name in ("stablehlo.reduce_window", "stablehlo.select_and_scatter"):
    if len(op.operands) != (2 if op.name == "stablehlo.reduce_window" else 3):
      return False
    rank = len(shape)
    window = ints(op, "window_dimensions")
    strides = ints(op, "window_strides") or [1] * rank
    base = ints(op, "base_dilations") or [1] * rank
    dil = ints(op, "window_dilations") or [1] * rank
    pad = (
      list(ir.DenseIntElementsAttr(op.attributes["padding"]))
      if "padding" in op.attributes
      else [0] * (2 * rank)
    )
    return all(
      window[d] == strides[d] == base[d] == dil[d] == 1 and pad[2 * d] == pad[2 * d + 1] == 0
      for d in dims
    )
  return False


_PASS_THROUGH_OPS = frozenset(
  "stablehlo." + name
  for name in (
    "scatter",
    "slice",
    "pad",
    "reverse",
    "sort",
    "reduce_window",
    "select_and_scatter",
    "concatenate",
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
  )
)


def scatters_partials(op: ir.Operation, *, any_operand: bool = False) -> bool:
  """Whether `op` is a scatter-add whose result is `unreduced` over exactly the axes that
  shard its updates' scatter (batch) dims, into a zero or equally unreduced operand
  (`any_operand`: or a replicated one, which unreduce_scatter_operands makes unreduced).

  `jax.ops.segment_sum(x, ids, out_sharding=P(unreduced={"x"}))` and `jnp.bincount`:
  each device adds its own updates into its own part of the operand, and those sum to
  the scatter's value: the partial sums XLA's SPMD partitioner leaves (the shards
  XLA:CPU returns). Updates' window dims, indices' index vector and the operand's dims
  must be unsharded.
  """
  if op.name != "stablehlo.scatter" or len(op.operands) != 3:
    return False
  body = [o.operation for o in op.regions[0].blocks[0].operations]
  args = list(op.regions[0].blocks[0].arguments)
  if (
    len(body) != 2
    or body[0].name != "stablehlo.add"
    or list(body[0].operands) != args
    or list(body[1].operands) != [body[0].results[0]]
  ):
    return False
  operand, indices, updates = op.operands

  def dim_axes(v: ir.Value) -> list[list[str]]:
    sharding = value_sharding(v)
    if sharding is None:
      return [[] for _ in range(rank_of(v))]
    return [
      [sdy.AxisRefAttr(a).name for a in sdy.DimensionShardingAttr(d).axes]
      for d in sdy.TensorShardingAttr(sharding).dimension_shardings
    ]

  def summed_axes(v: ir.Value) -> set[str]:
    sharding = value_sharding(v)
    if sharding is None:
      return set()
    return {sdy.AxisRefAttr(a).name for a in sdy.TensorShardingAttr(sharding).unreduced_axes}

  summed = summed_axes(op.results[0])
  if not summed or any(dim_axes(op.results[0])) or any(dim_axes(operand)):
    return False
  if summed_axes(operand) != summed and not (
    not summed_axes(operand) and (any_operand or is_zero_splat(operand))
  ):
    return False
  dims = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
  if list(dims.input_batching_dims) or list(dims.scatter_indices_batching_dims):
    # A local scatter would put each device's batch rows at its local row 0.
    return False
  window = set(dims.update_window_dims)

  update_axes = dim_axes(updates)
  if any(update_axes[d] for d in window):
    return False
  batch = [d for d in range(rank_of(updates)) if d not in window]
  used = [a for d in batch for a in update_axes[d]]
  if set(used) != summed or len(used) != len(summed):
    return False
  index_axes = dim_axes(indices)
  index_batch = [d for d in range(rank_of(indices)) if d != dims.index_vector_dim]
  return [index_axes[d] for d in index_batch] == [update_axes[d] for d in batch] and (
    dims.index_vector_dim >= rank_of(indices) or not index_axes[dims.index_vector_dim]
  )


def _is_local(op: ir.Operation, meshes: Meshes) -> bool:
  """Whether convert-global-to-local makes a correct per-device form of `op`."""
  if not all(divides(value_sharding(v), v, meshes) for v in (*op.operands, *op.results)):
    # An uneven sharding (a reshard insert-explicit-reshards made to match the op's rule:
    # a 3-element slice of an 8-element x sharded 4 ways, going into a concatenate): the
    # op runs whole; drop_uneven_reshards then bypasses the uneven reshard.
    return False
  if (
    op.name == "stablehlo.custom_call"
    and ir.StringAttr(op.attributes["call_target_name"]).value
    == custom_calls.PARTITIONED_CALLBACK_TARGET
  ):
    # jax.debug.callback(..., partitioned=True): each device's call takes its shards.
    return all(
      divides(value_sharding(v), v, meshes) and "\":(" not in str(value_sharding(v))
      for v in op.operands
    )
  if op.name == "stablehlo.scatter" and scatters_partials(op):
    return all(divides(value_sharding(v), v, meshes) for v in (*op.operands, *op.results))
  if op.name in ("stablehlo.while", "stablehlo.case", "stablehlo.if"):
    # A loop or conditional whose every op runs on shards: the carries and results keep
    # their shardings (a case's index is a scalar, whole on every device).
    return all(
      _is_local(o, meshes)
      or o.name in ("stablehlo.return", "sdy.return")
      or not any(is_sharded(value_sharding(v)) for v in (*o.operands, *o.results))
      for o in walk(op)
    )
  if op.name == "stablehlo.reduce":
    # Along unsharded dims any body (argmax's pair of operands too) reduces each device's
    # own rows; along sharded ones only a combiner its all-reduce can complete.
    reduced = set(ints(op, "dimensions"))
    half = len(op.operands) // 2
    if combiner(op) is None and any(
      sharded and d in reduced for v in op.operands[:half] for d, sharded in enumerate(_dim_axes(v))
    ):
      return False
  elif op.name == "stablehlo.convolution":
    if not _convolution_is_local(op):
      return False
  elif op.name == "stablehlo.bitcast_convert":
    # Elementwise between types of one width (random bits to floats); otherwise a dim is
    # added or removed.
    if rank_of(op.operands[0]) != rank_of(op.results[0]):
      return False
  elif op.name in _PASS_THROUGH_OPS:
    if not _passes_through(op):
      return False
  elif op.name not in LOCAL_OPS:
    return False
  if not _reduced_axes_in_mesh_order(op, meshes):
    return False
  values = [*op.operands, *op.results]
  # Sub-axes ("i":(2)2, from reshapes that split a sharded dim): the replica groups
  # convert-global-to-local gives their all-gathers disagree with the shards its
  # all-slices take (jaxlib 0.10.2), so such values are not left sharded.
  return all(
    divides(value_sharding(v), v, meshes) and "\":(" not in str(value_sharding(v)) for v in values
  )


def _dim_axes(v: ir.Value) -> list[bool]:
  """Per dim of `v`, whether it is sharded."""
  sharding = value_sharding(v)
  if sharding is None:
    return [False] * rank_of(v)
  return [
    bool(sdy.DimensionShardingAttr(d).axes)
    for d in sdy.TensorShardingAttr(sharding).dimension_shardings
  ]


def _convolution_is_local(op: ir.Operation) -> bool:
  """A convolution whose sharded dims are batch and feature dims only: each device
  convolves its batch rows (a data-parallel CNN), its output features, or its share of the
  input features (a partial sum that an all-reduce completes, as a dot's: the weight
  gradient of a data-parallel step, where the batch is the contracted dim). Spatial dims
  would need halos (XLA exchanges them; insert-explicit-reshards replicates them, but a
  sharding given by hand may still hold one), and grouped convolutions tie features to
  groups: both run whole.
  """
  dn = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
  lhs, rhs, out = (_dim_axes(v) for v in (op.operands[0], op.operands[1], op.results[0]))
  spatial = (
    [lhs[d] for d in dn.input_spatial_dimensions]
    + [rhs[d] for d in dn.kernel_spatial_dimensions]
    + [out[d] for d in dn.output_spatial_dimensions]
  )
  if any(spatial):
    return False
  groups = (
    ir.IntegerAttr(op.attributes["feature_group_count"]).value,
    ir.IntegerAttr(op.attributes["batch_group_count"]).value,
  )
  features = (
    lhs[dn.input_feature_dimension]
    or rhs[dn.kernel_input_feature_dimension]
    or rhs[dn.kernel_output_feature_dimension]
    or out[dn.output_feature_dimension]
  )
  return groups == (1, 1) or not features and groups[1] == 1


def _reduced_axes_in_mesh_order(op: ir.Operation, meshes: Meshes) -> bool:
  """False for a dot (reduction) whose contracted (reduced) dims are sharded over axes
  out of mesh order, e.g. [{"model", "data"}] on a ("data", "model") mesh.

  The all-reduce completing it must list its axes in mesh order for
  reshard-to-collectives' verifier, and in the dims' order for convert-global-to-local,
  which aborts the process otherwise (jaxlib 0.10.2).
  """
  if op.name == "stablehlo.dot_general":
    dims = stablehlo.DotDimensionNumbers(
      op.attributes["dot_dimension_numbers"]
    ).lhs_contracting_dimensions
  elif op.name == "stablehlo.reduce":
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
  elif op.name == "stablehlo.convolution":
    dims = [
      stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"]).input_feature_dimension
    ]
  else:
    return True
  sharding = value_sharding(op.operands[0])
  if sharding is None:
    return True
  order = list(meshes.axis_sizes(sharding))
  dim_shardings = sdy.TensorShardingAttr(sharding).dimension_shardings
  axes = [
    order.index(sdy.AxisRefAttr(a).name)
    for d in dims
    for a in sdy.DimensionShardingAttr(dim_shardings[d]).axes
  ]
  return axes == sorted(axes)


def _replicate_nested(op: ir.Operation) -> None:
  """Inside a replicated op everything is whole: sdy ops become identities (a reshard,
  constraint or collective of a whole value is the value) and shardings go. A manual
  computation (shard_map in a loop body) still takes and gives shards: its operands are
  resharded to its in_shardings and its results back to replicated, which
  reshard-to-collectives makes all-slices and all-gathers."""
  manual = []
  for child in list(walk(op)):
    if child.name == "sdy.manual_computation":
      manual.append(child)
    elif (
      child.name.startswith("sdy.")
      and child.name != "sdy.return"
      and len(child.operands) == len(child.results) == 1
    ):
      child.results[0].replace_all_uses_with(child.operands[0])
      child.erase()
    elif "sdy.sharding" in child.attributes:
      del child.attributes["sdy.sharding"]
  for m in manual:
    if _inside_manual(m, op):
      continue  # nested in another manual computation: already per-device code
    # Its body's shardings are gone with the rest: it runs whole over the free axes (a
    # shard_map with axis_names={"x"} in a replicated scan), sharded over the manual ones.
    kept = manual_axes(m.attributes["manual_axes"])
    ins = [
      only_axes(s, kept)
      for s in sdy.TensorShardingPerValueAttr(m.attributes["in_shardings"]).shardings
    ]
    outs = [
      only_axes(s, kept)
      for s in sdy.TensorShardingPerValueAttr(m.attributes["out_shardings"]).shardings
    ]
    m.attributes["in_shardings"] = sdy.TensorShardingPerValueAttr.get(ins)
    m.attributes["out_shardings"] = sdy.TensorShardingPerValueAttr.get(outs)
    with ir.InsertionPoint(m), m.location:
      for i, sharding in enumerate(ins):
        m.operands[i] = reshard(m.operands[i], sharding)
    for r, sharding in zip(m.results, outs):
      users = [(u.owner.operation, u.operand_number) for u in r.uses]
      with ir.InsertionPoint(m), m.location:
        whole = reshard(r, replicated(None, rank_of(r), sharding))
      whole.owner.move_after(m)
      for user, number in users:
        user.operands[number] = whole


def _inside_manual(op: ir.Operation, top: ir.Operation) -> bool:
  """Whether a manual computation encloses `op` below `top`."""
  parent = op.parent
  while parent is not None:
    parent = parent.operation
    if parent == top:
      return False
    if parent.name == "sdy.manual_computation":
      return True
    parent = parent.parent
  return False


def partitioned_ops(op: ir.Operation) -> Iterator[ir.Operation]:
  """The ops nested in `op` that run on shards: not inside replicated ops or manual
  computations (already per-device code)."""
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        child = child.operation
        yield child
        if child.name != "sdy.manual_computation" and FALLBACK_ATTR not in child.attributes:
          yield from partitioned_ops(child)


def check_local(module: ir.Module) -> None:
  """Every op left sharded is one convert-global-to-local handles correctly.

  A guard: on some ops and shardings that pass aborts the process instead of failing.

  Raises:
    NotImplementedError: naming the op and the sharding.
  """
  meshes = Meshes(module)
  for op in partitioned_ops(main_func(module)):
    if op.name in ("stablehlo.return", "sdy.return"):
      continue
    for v in (*op.operands, *op.results):
      if not divides(value_sharding(v), v, meshes):
        raise errors.unsupported(
          op,
          f"sharding {value_sharding(v)} does not divide {v.type} evenly; uneven "
          "shardings are not supported",
        )
    if op.name == "sdy.all_reduce":
      producer = op.operands[0].owner.operation if isinstance(op.operands[0], ir.OpResult) else None
      if not sums_unreduced(op) and (
        producer is None
        or not (
          producer.name in ("stablehlo.dot_general", "stablehlo.convolution")
          or combiner(producer) is not None
        )
      ):
        raise errors.unsupported(
          op,
          "a partial result that is not a reduction's or a dot's; the combiner "
          "of its all-reduce is unknown",
        )
    if op.name.startswith("sdy.") and "\":(" in str(
      value_sharding(op.results[0]) if op.results else ""
    ):
      raise errors.unsupported(
        op, f"resharding over a sub-axis ({value_sharding(op.results[0])}) is not supported"
      )
    if op.name.startswith("sdy.") or FALLBACK_ATTR in op.attributes or _is_local(op, meshes):
      continue
    if any(is_sharded(value_sharding(v)) for v in (*op.operands, *op.results)):
      raise errors.unsupported(
        op,
        f"sharded as {value_sharding(op.results[0]) if op.results else '?'} after "
        "partitioning, which the per-device conversion does not support",
      )
