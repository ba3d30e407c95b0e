"""Partitioning steps for unreduced values (partial sums) and all-reduces.

A sharding `unreduced` over axes A means the devices' values sum to the value. Shardy's
passes (jaxlib 0.10.2) leave some of these wrong or unconverted: these steps lower
`sdy.replicated_to_unreduced` and `sdy.sharded_to_unreduced`, split constants and whole
results made unreduced, drop all-reduces that would count a partial sum twice, and give
all-reduces completing a max/min/product reduction their combiner back. partition.py runs
them in order.
"""

from __future__ import annotations

import math
import re

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy, stablehlo

from .. import errors
from ..irtools import is_zero_splat, main_func, rank_of, walk
from .fallback import LOCAL_OPS, combiner, partitioned_ops, scatters_partials
from .sharding import (
  Meshes,
  axis_list,
  axis_refs,
  device_coordinates,
  mesh_attr_of,
  mesh_attrs,
  reduction_axes,
  reshard,
  unreduced_axes,
  value_sharding,
  without_unreduced,
)

# The location name of the all-reduces mark_unreduced_partials inserts (and
# drop_marked_all_reduces removes again after convert-global-to-local).
_UNREDUCED_MARK = "workshop.unreduced_partial"


def _contracting_axes(op: ir.Operation) -> list[ir.Attribute]:
  """The axes sharding a dot's contracted dims (its lhs's), in dim order: the axes
  convert-global-to-local wants the dot's all-reduce over."""
  if op.name == "stablehlo.dot_general":
    dims = stablehlo.DotDimensionNumbers(
      op.attributes["dot_dimension_numbers"]
    ).lhs_contracting_dimensions
  elif op.name == "stablehlo.dot":
    dims = [rank_of(op.operands[0]) - 1]
  else:
    return []
  sharding = value_sharding(op.operands[0])
  if sharding is None:
    return []
  dim_shardings = sdy.TensorShardingAttr(sharding).dimension_shardings
  return [a for d in dims for a in sdy.DimensionShardingAttr(dim_shardings[d]).axes]


def drop_repeated_all_reduces(module: ir.Module) -> None:
  """An sdy.all_reduce of an all-reduce's result over the same axes is dropped.

  Propagation's export completes a value constrained from unreduced to reduced with an
  all-reduce, and insert-explicit-reshards then adds a second one over the same axes
  (jaxlib 0.10.2), which would count every partial sum twice (a reshard of an
  `unreduced={"y"}` array came out twice XLA:CPU's). The second one's operand is whole
  along those axes already.
  """
  for op in list(walk(main_func(module))):
    if op.name != "sdy.all_reduce" or not isinstance(op.operands[0], ir.OpResult):
      continue
    producer = op.operands[0].owner.operation
    if producer.name != "sdy.all_reduce":
      continue
    axes = set(reduction_axes(op))
    done = set(reduction_axes(producer)) - set(unreduced_axes(producer.attributes["out_sharding"]))
    if axes and axes <= done:
      if producer.attributes["out_sharding"] != op.attributes["out_sharding"]:
        with ir.InsertionPoint(op), op.location:
          replacement = reshard(op.operands[0], op.attributes["out_sharding"])
      else:
        replacement = op.operands[0]
      op.results[0].replace_all_uses_with(replacement)
      op.erase()


def unreduce_constants(module: ir.Module) -> None:
  """A constant (or iota) propagation made `unreduced` over axes A becomes the replicated
  constant and an `sdy.replicated_to_unreduced` over A (lowered as the other ones are).

  `unreduced` means the devices' values sum to the value; a constraint of a constant to
  unreduced (the cotangent seed of a `reduced` value's gradient: jax.grad through a
  shard_map with out_specs=P(reduced={"x"})) comes out of propagation's import as the
  constant's own sharding, which convert-global-to-local gives every device (twice the
  sum over a 2-device axis). XLA:CPU keeps the value on the devices at coordinate 0 of A
  and zeros on the others.
  """
  for op in list(partitioned_ops(main_func(module))):
    if (
      op.name not in ("sdy.constant", "stablehlo.constant", "stablehlo.iota")
      or "sdy.sharding" not in op.attributes
    ):
      continue
    sharding = sdy.TensorShardingAttr(
      sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings[0]
    )
    axes = list(sharding.unreduced_axes)
    if not axes:
      continue
    result = op.results[0]
    users = [(u.owner.operation, u.operand_number) for u in result.uses]
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
      [without_unreduced(sharding, axes)]
    )
    with ir.InsertionPoint(op), op.location:
      summed = _replicated_to_unreduced(result, axes, sharding)
    summed.move_after(op)
    for user, number in users:
      user.operands[number] = summed.results[0]


def _replicated_to_unreduced(
  value: ir.Value, axes: list[ir.Attribute], sharding: ir.Attribute
) -> ir.Operation:
  """An `sdy.replicated_to_unreduced` of `value` over `axes` (at the insertion point),
  its result sharded `sharding`; lower_replicated_to_unreduced lowers it."""
  return ir.Operation.create(
    "sdy.replicated_to_unreduced",
    results=[value.type],
    operands=[value],
    attributes={"axes": axis_list(axes), "out_sharding": sharding},
  )


def unreduce_whole_results(module: ir.Module) -> None:
  """An elementwise or shape op whose result propagation made `unreduced` over axes none
  of its operands is unreduced over computes the whole value on every device; the axes
  move to an `sdy.replicated_to_unreduced` after it.

  `jnp.array(x, out_sharding=P(unreduced={"x"}))` is a convert constrained unreduced:
  the constraint becomes the convert's own sharding (jaxlib 0.10.2), every device held x
  and the sum over "x" counted it once per device; XLA:CPU keeps x on the devices at
  coordinate 0 of the axes and zeros on the others, as replicated_to_unreduced does.
  Dots and reductions are left alone: their partial results are what unreduced means.
  """
  for op in list(partitioned_ops(main_func(module))):
    if (
      op.name not in LOCAL_OPS
      or not op.name.startswith("stablehlo.")
      or op.name == "stablehlo.dot_general"
      or len(op.results) != 1
    ):
      continue
    sharding = value_sharding(op.results[0])
    if sharding is None:
      continue
    held = {a for v in op.operands for a in unreduced_axes(value_sharding(v))}
    attr = sdy.TensorShardingAttr(sharding)
    new = [
      a
      for a in attr.unreduced_axes
      if str(a).removeprefix("#sdy<axis_ref").removesuffix(">") not in held
    ]
    if not new:
      continue
    result = op.results[0]
    users = [(u.owner.operation, u.operand_number) for u in result.uses]
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
      [without_unreduced(sharding, new)]
    )
    with ir.InsertionPoint(op), op.location:
      summed = _replicated_to_unreduced(result, new, sharding)
    summed.move_after(op)
    for user, number in users:
      user.operands[number] = summed.results[0]


def unreduce_summed_scatters(module: ir.Module) -> None:
  """A scatter-add of updates sharded along their scatter dims into a whole result that
  only all-reduces use (insert-explicit-reshards' reading of it: each device's updates
  make a partial sum) gets the result `unreduced` over those all-reduces' axes: then it is
  the local scatter of scatters_partials, which the all-reduces complete. The gradient of
  an embedding lookup in a data-parallel step (`table[ids]` with ids sharded over the
  batch) is one; it ran whole. unreduce_scatter_operands, next, keeps a nonzero operand
  on one device per group.
  """
  for op in list(partitioned_ops(main_func(module))):
    if op.name != "stablehlo.scatter" or len(op.results) != 1:
      continue
    uses = [u.owner.operation for u in op.results[0].uses]
    if not uses or any(u.name != "sdy.all_reduce" for u in uses):
      continue
    # No sharding recorded: whole, on the all-reduces' mesh.
    sharding = value_sharding(op.results[0]) or uses[0].attributes["out_sharding"]
    if unreduced_axes(sharding) or any(
      sdy.DimensionShardingAttr(d).axes
      for d in sdy.TensorShardingAttr(sharding).dimension_shardings
    ):
      continue
    axes = {tuple(reduction_axes(u)) for u in uses}
    if len(axes) != 1 or any(":" in a for a in next(iter(axes))):
      continue
    names = [a.strip('"') for a in next(iter(axes))]
    attr = sdy.TensorShardingAttr(sharding)
    unreduced = sdy.TensorShardingAttr.get(
      attr.mesh_or_ref,
      list(attr.dimension_shardings),
      list(attr.replicated_axes),
      [sdy.AxisRefAttr.get(n) for n in names],
    )
    before = op.attributes["sdy.sharding"] if "sdy.sharding" in op.attributes else None
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get([unreduced])
    if not scatters_partials(op, any_operand=True):
      if before is None:
        del op.attributes["sdy.sharding"]
      else:
        op.attributes["sdy.sharding"] = before


def unreduce_scatter_operands(module: ir.Module) -> None:
  """A scatter-add of sharded updates into an `unreduced` result whose operand is whole
  (not zero) gets an `sdy.replicated_to_unreduced` on the operand: the devices at
  coordinate 0 of the axes add their updates into the operand, the others into zeros,
  and the scatter stays local (scatters_partials). XLA:CPU returns the same shards
  (`b.at[i].add(u, out_sharding=P(unreduced={"x"}))`)."""
  for op in list(partitioned_ops(main_func(module))):
    if not scatters_partials(op, any_operand=True) or scatters_partials(op):
      continue
    operand = op.operands[0]
    sharding = value_sharding(op.results[0])
    axes = list(sdy.TensorShardingAttr(sharding).unreduced_axes)
    with ir.InsertionPoint(op), op.location:
      moved = _replicated_to_unreduced(operand, axes, sharding)
    op.operands[0] = moved.results[0]


def lower_replicated_to_unreduced(module: ir.Module) -> None:
  """`sdy.replicated_to_unreduced` over axes A (a reshard from P() to
  P(unreduced={"x"})) keeps the value on the devices at coordinate 0 of every axis in A
  and zeros on the others, as XLA:CPU does, so the partial sums add up to the value.

  convert-global-to-local has no pattern for the op (jaxlib 0.10.2: "failed to legalize
  operation 'sdy.replicated_to_unreduced'"); it becomes a select on a per-partition
  table read at `partition_id` (the way that pass makes all-slices).
  """
  meshes = mesh_attrs(module)
  for op in list(walk(main_func(module))):
    if op.name != "sdy.replicated_to_unreduced":
      continue
    out_sharding = sdy.TensorShardingAttr(op.attributes["out_sharding"])
    axes = axis_refs(op.attributes["axes"])
    if any(":" in a for a in axes):
      raise errors.unsupported(op, "unreduced over a sub-axis")
    axes = [a.strip('"') for a in axes]
    coords = device_coordinates(mesh_attr_of(out_sharding, meshes))
    keep = [int(all(c[a] == 0 for a in axes)) for c in coords]
    x = op.operands[0]
    t = ir.RankedTensorType(x.type)
    i1 = ir.IntegerType.get_signless(1)
    with ir.InsertionPoint(op), op.location:
      flag = _partition_table(keep, i1)
      whole = without_unreduced(out_sharding, list(out_sharding.unreduced_axes))
      mask = ir.Operation.create(
        "stablehlo.broadcast_in_dim",
        results=[ir.RankedTensorType.get(t.shape, i1)],
        operands=[flag],
        attributes={
          "broadcast_dimensions": ir.DenseI64ArrayAttr.get([]),
          "sdy.sharding": sdy.TensorShardingPerValueAttr.get([whole]),
        },
      ).result
      zero = _zeros(t, whole)
      out = ir.Operation.create(
        "stablehlo.select",
        results=[t],
        operands=[mask, x, zero],
        attributes={"sdy.sharding": sdy.TensorShardingPerValueAttr.get([out_sharding])},
      ).result
    op.results[0].replace_all_uses_with(out)
    op.erase()


def lower_sharded_to_unreduced(module: ir.Module) -> None:
  """`sdy.sharded_to_unreduced` (a reshard from P("x") to P(None, unreduced={"x"})):
  each device puts its shard at its place in a zero block of the result's local shape,
  as XLA:CPU does, so the partial sums add up to the value; no communication.

  convert-global-to-local has no pattern for the op (jaxlib 0.10.2: "failed to legalize
  operation 'sdy.sharded_to_unreduced'"). It becomes a dynamic_update_slice of the operand
  into zeros at per-partition offsets (read at `partition_id`, as _partition_table does),
  which that pass makes local: the operand becomes the shard, the zeros the result's
  local block. Along a dim whose axes lose the suffix A, a device's offset is its
  linearized coordinate over A times the operand's local size.

  Raises:
    NotImplementedError: sub-axes, or axes that are not the last ones sharding the dim.
  """
  meshes, sizes = mesh_attrs(module), Meshes(module)
  for op in list(walk(main_func(module))):
    if op.name != "sdy.sharded_to_unreduced":
      continue
    x = op.operands[0]
    in_sharding = value_sharding(x)
    out_sharding = sdy.TensorShardingAttr(op.attributes["out_sharding"])
    per_dim = [axis_refs(a) for a in re.findall(r"\{([^}]*)\}", str(op.attributes["axes"]))]
    if any(":" in a for axes in per_dim for a in axes):
      raise errors.unsupported(op, "unreduced over a sub-axis")
    t = ir.RankedTensorType(x.type)
    if in_sharding is None or len(per_dim) != t.rank:
      raise errors.unsupported(
        op, f"operand sharding {in_sharding} and axes {op.attributes['axes']} do not match"
      )
    in_dims = [
      [str(a) for a in sdy.DimensionShardingAttr(d).axes]
      for d in sdy.TensorShardingAttr(in_sharding).dimension_shardings
    ]
    local = sizes.local_dims(in_sharding, tuple(t.shape))
    coords = device_coordinates(mesh_attr_of(out_sharding, meshes))
    axis_size = sizes.axis_sizes(out_sharding)
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op), op.location:
      starts = []
      for d, axes in enumerate(per_dim):
        names = [a.strip('"') for a in axes]
        held = [
          a.removeprefix("#sdy<axis_ref").removesuffix(">").strip().strip('"') for a in in_dims[d]
        ]
        if names and held[len(held) - len(names) :] != names:
          raise errors.unsupported(op, f"axes {names} are not the last of dim {d}'s axes {held}")
        offsets = []
        for c in coords:
          index = 0
          for a in names:
            index = index * axis_size[a] + c[a]
          offsets.append(index * local[d])
        starts.append(_partition_table(offsets, i32))
      whole = without_unreduced(out_sharding, list(out_sharding.unreduced_axes))
      zero = _zeros(t, whole)
      out = ir.Operation.create(
        "stablehlo.dynamic_update_slice",
        results=[t],
        operands=[zero, x, *starts],
        attributes={
          "sdy.sharding": sdy.TensorShardingPerValueAttr.get([op.attributes["out_sharding"]])
        },
      ).result
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _zeros(t: ir.RankedTensorType, sharding: ir.Attribute) -> ir.Value:
  """Zeros of type `t` sharded as `sharding`: a broadcast scalar (convert-global-to-local
  keeps a sharded constant's global value, which then fails verification)."""
  scalar = ir.RankedTensorType.get([], t.element_type)
  zero = ir.Operation.create(
    "stablehlo.constant",
    results=[scalar],
    attributes={"value": ir.DenseElementsAttr.get_splat(scalar, _zero_of(t.element_type))},
  ).result
  return ir.Operation.create(
    "stablehlo.broadcast_in_dim",
    results=[t],
    operands=[zero],
    attributes={
      "broadcast_dimensions": ir.DenseI64ArrayAttr.get([]),
      "sdy.sharding": sdy.TensorShardingPerValueAttr.get([sharding]),
    },
  ).result


def _partition_table(values: list[int], element_type: ir.Type) -> ir.Value:
  """A scalar: `values[partition_id]` (a constant table read at the partition id)."""
  i32 = ir.IntegerType.get_signless(32)
  pid = ir.Operation.create(
    "stablehlo.partition_id", results=[ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))]
  ).result
  pid = ir.Operation.create(
    "stablehlo.convert", results=[ir.RankedTensorType.get([], i32)], operands=[pid]
  ).result
  n = len(values)
  dtype = np.bool_ if element_type == ir.IntegerType.get_signless(1) else np.int32
  table = ir.Operation.create(
    "stablehlo.constant",
    results=[ir.RankedTensorType.get([n], element_type)],
    attributes={
      "value": ir.DenseElementsAttr.get(np.array(values, dtype), type=element_type, shape=[n])
    },
  ).result
  entry = ir.Operation.create(
    "stablehlo.dynamic_slice",
    results=[ir.RankedTensorType.get([1], element_type)],
    operands=[table, pid],
    attributes={"slice_sizes": ir.DenseI64ArrayAttr.get([1])},
  ).result
  return ir.Operation.create(
    "stablehlo.reshape", results=[ir.RankedTensorType.get([], element_type)], operands=[entry]
  ).result


def _zero_of(element_type: ir.Type) -> ir.Attribute:
  if isinstance(element_type, ir.IntegerType):
    return ir.IntegerAttr.get(element_type, 0)
  if isinstance(element_type, ir.ComplexType):
    raise NotImplementedError("workshop: an unreduced complex value")
  return ir.FloatAttr.get(element_type, 0.0)


def mark_unreduced_partials(module: ir.Module) -> None:
  """A dot whose partial result is kept unreduced gets an all-reduce that is not one.

  A dot contracting a sharded dim leaves a partial sum per device. When its result is
  `unreduced` over those axes (jax `out_sharding=P(..., unreduced={"y"})`, the transpose
  of a `reduced` operand), nothing completes it: the partial sums are the value. But
  convert-global-to-local CHECK-aborts the process (jaxlib 0.10.2: "Expected sharded
  contracting dot_general to have one user and the user is an sdy.all_reduce") unless
  the dot's one user is an `sdy.all_reduce` over exactly its contracted axes. Such dots
  get that all-reduce, located at _UNREDUCED_MARK, in front of all their users (an
  all-reduce insert-explicit-reshards made over part of the axes follows it), and
  drop_marked_all_reduces takes it out again after the pass: the local dot is the
  partial sum the unreduced sharding asks for.
  """
  meshes = Meshes(module)
  for op in list(partitioned_ops(main_func(module))):
    if op.name not in ("stablehlo.dot_general", "stablehlo.dot"):
      continue
    axes = _contracting_axes(op)
    if not axes:
      continue
    for operand in op.operands[:2]:
      if isinstance(operand, ir.OpResult) and operand.owner.operation.name == "stablehlo.pad":
        # convert-global-to-local CHECK-aborts on a nonzero padding value ("Padding value
        # must be zero for sharded contracting dot_general"), and on a zero it does not
        # see as one: an sdy.constant (Shardy's own, from propagation) or one behind a
        # convert (a data-parallel flax LM's step had one: the process aborted).
        pad = operand.owner.operation
        if not is_zero_splat(pad.operands[1]):
          raise errors.unsupported(
            op, "a dot contracting a sharded dim of an operand padded with a nonzero value"
          )
        _plain_zero_operand(pad, 1)
    order = list(meshes.axis_sizes(value_sharding(op.operands[0])))
    names = [sdy.AxisRefAttr(a).name for a in axes]
    if [order.index(n) for n in names] != sorted(order.index(n) for n in names):
      # The all-reduce must list them in mesh order, the pass wants them in dims' order.
      raise errors.unsupported(op, f"a dot contracting dims sharded out of mesh order ({names})")
    users = list(op.results[0].uses)
    if (
      len(users) == 1
      and users[0].owner.operation.name == "sdy.all_reduce"
      and str(users[0].owner.operation.attributes["reduction_axes"]) == str(axis_list(axes))
    ):
      continue
    result = op.results[0]
    sharding = value_sharding(result)
    with ir.InsertionPoint(op), ir.Location.name(_UNREDUCED_MARK, op.location):
      marked = ir.Operation.create(
        "sdy.all_reduce",
        results=[result.type],
        operands=[result],
        attributes={
          "reduction_axes": axis_list(axes),
          "out_sharding": without_unreduced(sharding, axes),
        },
      )
    marked.move_after(op)
    for use in users:
      use.owner.operation.operands[use.operand_number] = marked.results[0]


def _plain_zero_operand(op: ir.Operation, index: int) -> None:
  """Operand `index` of `op`, a zero (is_zero_splat), becomes a stablehlo.constant zero of
  its type defined right before `op`, of the same sign (a -0.0 pad keeps padding -0.0)."""
  t = ir.RankedTensorType(op.operands[index].type)
  e = t.element_type
  if isinstance(e, ir.IntegerType):
    zero = ir.IntegerAttr.get(e, 0)
  else:
    zero = ir.FloatAttr.get(e, math.copysign(0.0, _splat_value(op.operands[index])))
  with ir.InsertionPoint(op), op.location:
    op.operands[index] = stablehlo.ConstantOp(ir.DenseElementsAttr.get_splat(t, zero)).result


def _splat_value(value: ir.Value) -> float:
  """The float a splat constant holds, seen through what is_zero_splat sees through."""
  while value.owner.operation.name in (
    "stablehlo.broadcast_in_dim",
    "stablehlo.convert",
    "sdy.reshard",
  ):
    value = value.owner.operation.operands[0]
  splat = ir.DenseElementsAttr(value.owner.operation.attributes["value"]).get_splat_value()
  return (
    ir.FloatAttr(splat).value
    if isinstance(splat, ir.FloatAttr)
    else float(ir.IntegerAttr(splat).value)
  )


def drop_marked_all_reduces(module: ir.Module) -> None:
  """Removes the all-reduces mark_unreduced_partials inserted: their operands (a dot's
  partial sums) are what their users take."""
  for op in list(walk(main_func(module))):
    if op.name == "stablehlo.all_reduce" and _UNREDUCED_MARK in str(op.location):
      op.results[0].replace_all_uses_with(op.operands[0])
      op.erase()


def fix_all_reduce_bodies(module: ir.Module) -> None:
  """An all-reduce completing a max (min, product, ...) reduction combines with max.

  After convert-global-to-local every all-reduce sums; the ones whose operand comes
  straight from a reduction (checked in check_local) get that reduction's body op.
  """
  for op in walk(main_func(module)):
    if op.name != "stablehlo.all_reduce":
      continue
    producer = op.operands[0].owner.operation if isinstance(op.operands[0], ir.OpResult) else None
    kind = combiner(producer) if producer is not None else None
    if kind is None or kind == "stablehlo.add":
      continue
    block = op.regions[0].blocks[0]
    old = list(block.operations)[0].operation
    with ir.InsertionPoint(old), old.location:
      new = ir.Operation.create(kind, results=[old.results[0].type], operands=list(block.arguments))
    old.results[0].replace_all_uses_with(new.results[0])
    old.erase()
