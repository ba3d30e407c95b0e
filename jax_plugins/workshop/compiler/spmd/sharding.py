"""Shardy (`sdy`) meshes and shardings: the sharding facts every pass reads and writes.

Meshes (axis sizes, local shapes, device coordinates), the sharding of a value (a
result's `sdy.sharding`, an argument's, a manual computation's), replication and
unreduced axes, and the shardings and reshards the partitioning steps build. The
lowering (lowering.py, rules/), sharding propagation (propagate.py), partitioning
(partition.py, fallback.py, unreduced.py) and the optimized program depend on this module; it depends on none of
them.

The bindings return sdy attributes (and the elements of their list properties) as plain
`ir.Attribute`; each must be cast to its sdy class before its properties can be read.
"""

from __future__ import annotations

import math
import re

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy


class Meshes:
  """The module's `sdy.mesh` symbols: axis name -> size, per mesh."""

  def __init__(self, module: ir.Module):
    self._axes: dict[str, dict[str, int]] = {}
    for op in module.body.operations:
      if op.operation.name == "sdy.mesh":
        mesh = sdy.MeshAttr(op.attributes["mesh"])
        self._axes[op.attributes["sym_name"].value] = _axis_sizes(mesh)

  def axis_sizes(self, sharding: ir.Attribute) -> dict[str, int]:
    """Axis sizes of the mesh a `#sdy.sharding` refers to (by symbol or inline)."""
    mesh = sdy.TensorShardingAttr(sharding).mesh_or_ref
    if isinstance(mesh, ir.FlatSymbolRefAttr):
      return self._axes[mesh.value]
    return _axis_sizes(sdy.MeshAttr(mesh))

  def effective(self, sharding: ir.Attribute | None) -> ir.Attribute | None:
    """`sharding`, or None if it splits nothing: every axis it names has size 1.

    JAX keeps the axis names of a one-device mesh (pmap over one device shards over
    `["i"=1]`); every device then holds the whole value, as if replicated.
    """
    if sharding is None:
      return None
    attr = sdy.TensorShardingAttr(sharding)
    sizes = self.axis_sizes(attr)
    axes = [a for d in attr.dimension_shardings for a in _dim_axes(d)]
    axes += [sdy.AxisRefAttr(a) for a in attr.unreduced_axes]
    return sharding if any(_axis_ref_size(a, sizes) > 1 for a in axes) else None

  def local_dims(self, sharding: ir.Attribute | None, dims: tuple[int, ...]) -> tuple[int, ...]:
    """The shard shape of a value with global shape `dims` under `sharding`.

    Each dimension is divided by the product of the sizes of the axes sharding it (sdy
    requires divisibility for the dimensions JAX shards). No sharding means replicated.
    """
    if sharding is None:
      return dims
    return tuple(d // n for d, n in zip(dims, self.shard_counts(sharding)))

  def shard_counts(self, sharding: ir.Attribute) -> tuple[int, ...]:
    """Per dimension, how many shards `sharding` cuts it into."""
    sharding = sdy.TensorShardingAttr(sharding)
    sizes = self.axis_sizes(sharding)
    return tuple(
      math.prod(_axis_ref_size(a, sizes) for a in _dim_axes(dim_sharding))
      for dim_sharding in sharding.dimension_shardings
    )


def is_replicated(sharding: ir.Attribute | None) -> bool:
  """Whether every device holds the whole value (no sharded dims, no pending sums)."""
  if sharding is None:
    return True
  sharding = sdy.TensorShardingAttr(sharding)
  return not sharding.unreduced_axes and not any(_dim_axes(d) for d in sharding.dimension_shardings)


def same_sharding(a: ir.Attribute | None, b: ir.Attribute | None) -> bool:
  """Whether two shardings (None: replicated) put the same shard on every device."""
  if is_replicated(a) or is_replicated(b):
    return is_replicated(a) and is_replicated(b)
  # Attributes are uniqued by the context, so == compares them structurally. (Comparing
  # an ir.Attribute with None raises TypeError, hence the order.)
  return a == b


def per_value(attr: ir.Attribute) -> list[ir.Attribute]:
  """The shardings in a `#sdy.sharding_per_value<[...]>` (e.g. manual_computation's)."""
  return sdy.TensorShardingPerValueAttr(attr).shardings


# The partition an op JAX pins to one device was given (partition.py moves it here from
# the op's MAXIMAL sharding, which Shardy's passes cannot partition around).
PINNED_ATTR = "workshop.on_partition"


def pinned_partition(op: ir.Operation) -> int | None:
  """The one partition `op` runs on, if JAX pinned it there; else None.

  JAX pins host callbacks in a jit over several devices (outside shard_map) to device 0,
  or to the device of `pure_callback(..., sharding=SingleDeviceSharding(d))`, with a
  MAXIMAL sharding: `sdy.sharding` on a mesh without axes, `@maximal_mesh_<d>` (or
  inline `mesh<[], device_ids=[d]>`). partition.py replaces it by PINNED_ATTR.
  """
  if PINNED_ATTR in op.attributes:
    return ir.IntegerAttr(op.attributes[PINNED_ATTR]).value
  if "sdy.sharding" not in op.attributes:
    return None
  match = re.search(
    r"@maximal_mesh_(\d+)|mesh<\[\], device_ids=\[(\d+)\]>", str(op.attributes["sdy.sharding"])
  )
  return None if match is None else int(match.group(1) or match.group(2))


def manual_axes(attr: ir.Attribute) -> set[str]:
  """Axis names in a `#sdy<manual_axes{"i", "j"}>` attribute.

  ManualAxesAttr has no Python binding, so this reads its printed form.
  """
  return set(re.findall(r'"([^"]*)"', str(attr)))


# The mark of an op the partitioner runs on the whole value (fallback.py
# fall_back), which the optimized program shows as `workshop_partitioning`.
FALLBACK_ATTR = "workshop.replicated"


def mesh_name(module: ir.Module) -> str | None:
  """The module's first mesh with axes (JAX adds an empty one for keys made outside jit)."""
  meshes = [op for op in module.body.operations if op.operation.name == "sdy.mesh"]
  for op in meshes:
    if list(sdy.MeshAttr(op.attributes["mesh"]).axes):
      return op.attributes["sym_name"].value
  return meshes[0].attributes["sym_name"].value if meshes else None


def replicated(
  mesh: str | ir.Attribute, rank: int, like: ir.Attribute | None = None
) -> ir.Attribute:
  """Replicated on `like`'s mesh if given (a reshard may not change mesh), else `mesh`."""
  if like is not None:
    mesh = sdy.TensorShardingAttr(like).mesh_or_ref
  return sdy.TensorShardingAttr.get(
    mesh, [sdy.DimensionShardingAttr.get([], True) for _ in range(rank)]
  )


def value_sharding(value: ir.Value) -> ir.Attribute | None:
  """The sdy sharding propagation gave `value` (None: none recorded); a loop region's
  argument has the loop result's."""
  if isinstance(value, ir.OpResult):
    owner = value.owner.operation
    for name in ("out_sharding", "sharding"):  # sdy collectives; reshard, constraint
      if owner.name.startswith("sdy.") and name in owner.attributes:
        return owner.attributes[name]
    if owner.name == "sdy.manual_computation":
      return per_value(owner.attributes["out_shardings"])[value.result_number]
    if "sdy.sharding" not in owner.attributes:
      return None
    return sdy.TensorShardingPerValueAttr(owner.attributes["sdy.sharding"]).shardings[
      value.result_number
    ]
  func = value.owner.owner.operation
  if func.name == "stablehlo.while":
    # A loop region's argument is the carry, sharded like the loop's result.
    return shardings_of(func)[value.arg_number]
  if func.name == "sdy.manual_computation":
    # A body argument is the operand's shard over the manual axes, still sharded over
    # the free ones: the in_sharding without the manual axes.
    return without_axes(
      per_value(func.attributes["in_shardings"])[value.arg_number],
      manual_axes(func.attributes["manual_axes"]),
    )
  if func.name != "func.func" or "arg_attrs" not in func.attributes:
    return None
  attrs = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[value.arg_number])
  return attrs["sdy.sharding"] if "sdy.sharding" in attrs else None


def without_axes(sharding: ir.Attribute, names: set[str]) -> ir.Attribute:
  """`sharding` with the axes (and sub-axes) of `names` removed from every dim and from
  its replicated and unreduced axes."""
  attr = sdy.TensorShardingAttr(sharding)

  def keep(axes) -> list[ir.Attribute]:
    return [a for a in axes if sdy.AxisRefAttr(a).name not in names]

  return sdy.TensorShardingAttr.get(
    attr.mesh_or_ref,
    [
      sdy.DimensionShardingAttr.get(keep(d.axes), d.is_closed, d.priority)
      for d in map(sdy.DimensionShardingAttr, attr.dimension_shardings)
    ],
    keep(attr.replicated_axes),
    keep(attr.unreduced_axes),
  )


def only_axes(sharding: ir.Attribute, names: set[str]) -> ir.Attribute:
  """`sharding` over the axes of `names` only (the others removed)."""
  attr = sdy.TensorShardingAttr(sharding)
  used = {
    sdy.AxisRefAttr(a).name
    for d in map(sdy.DimensionShardingAttr, attr.dimension_shardings)
    for a in d.axes
  } | {sdy.AxisRefAttr(a).name for a in (*attr.replicated_axes, *attr.unreduced_axes)}
  return without_axes(sharding, used - names)


def is_sharded(sharding: ir.Attribute | None) -> bool:
  return not is_replicated(sharding)


def divides(sharding: ir.Attribute | None, value: ir.Value, meshes: Meshes) -> bool:
  """Whether `sharding` splits every dim of `value` evenly (convert-global-to-local aborts
  the process on any other)."""
  if sharding is None or not isinstance(value.type, ir.RankedTensorType):
    return True
  dims = ir.RankedTensorType(value.type).shape
  return all(d % n == 0 for d, n in zip(dims, meshes.shard_counts(sharding)))


def evenly(sharding: ir.Attribute, t: ir.Type, meshes: Meshes) -> ir.Attribute:
  """`sharding` with each dim's axes cut to the longest prefix that divides the dim."""
  if not isinstance(t, ir.RankedTensorType):
    return sharding
  attr = sdy.TensorShardingAttr(sharding)
  sizes = meshes.axis_sizes(sharding)
  dims, changed = [], False
  for n, d in zip(
    ir.RankedTensorType(t).shape, map(sdy.DimensionShardingAttr, attr.dimension_shardings)
  ):
    axes, count = [], 1
    for a in map(sdy.AxisRefAttr, d.axes):
      sub = a.sub_axis_info
      count *= sdy.SubAxisInfoAttr(sub).size if sub is not None else sizes[a.name]
      if n % count or n == 0:
        break  # (an all-gather of zero-size shards is invalid)
      axes.append(a)
    changed |= len(axes) != len(d.axes)
    dims.append(sdy.DimensionShardingAttr.get(axes, d.is_closed, d.priority))
  if not changed:
    return sharding
  return sdy.TensorShardingAttr.get(
    attr.mesh_or_ref, dims, list(attr.replicated_axes), list(attr.unreduced_axes)
  )


def without_sub_axes(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
  dims = []
  for d in map(sdy.DimensionShardingAttr, sharding.dimension_shardings):
    axes = []
    for a in d.axes:
      if sdy.AxisRefAttr(a).sub_axis_info is not None:
        break  # the axes after it would shard a different way without it
      axes.append(a)
    dims.append(sdy.DimensionShardingAttr.get(axes, d.is_closed, d.priority))
  return sdy.TensorShardingAttr.get(
    sharding.mesh_or_ref,
    dims,
    [a for a in sharding.replicated_axes if sdy.AxisRefAttr(a).sub_axis_info is None],
    [a for a in sharding.unreduced_axes if sdy.AxisRefAttr(a).sub_axis_info is None],
  )


def reshard(value: ir.Value, sharding: ir.Attribute) -> ir.Value:
  return ir.Operation.create(
    "sdy.reshard", results=[value.type], operands=[value], attributes={"sharding": sharding}
  ).results[0]


def reduction_axes(op: ir.Operation) -> list[str]:
  """The printed axis refs of an sdy.all_reduce's `reduction_axes`."""
  return re.findall(r'"[^"]*"(?::\(\d+\)\d+)?', str(op.attributes["reduction_axes"]))


def unreduced_axes(sharding: ir.Attribute | None) -> list[str]:
  if sharding is None:
    return []
  return [
    str(a).removeprefix("#sdy<axis_ref").removesuffix(">")
    for a in sdy.TensorShardingAttr(sharding).unreduced_axes
  ]


def sums_unreduced(op: ir.Operation) -> bool:
  """Whether an sdy.all_reduce completes a value `unreduced` over every axis it reduces
  (a parameter JAX passes as partial sums, a value constrained unreduced): a sum, the
  meaning of `unreduced`."""
  axes = reduction_axes(op)
  return bool(axes) and set(axes) <= set(unreduced_axes(value_sharding(op.operands[0])))


def mesh_attrs(module: ir.Module) -> dict[str, sdy.MeshAttr]:
  return {
    op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
    for op in module.body.operations
    if op.operation.name == "sdy.mesh"
  }


def mesh_attr_of(sharding: sdy.TensorShardingAttr, meshes: dict[str, sdy.MeshAttr]) -> sdy.MeshAttr:
  mesh = sharding.mesh_or_ref
  return meshes[mesh.value] if isinstance(mesh, ir.FlatSymbolRefAttr) else sdy.MeshAttr(mesh)


def device_coordinates(mesh: sdy.MeshAttr) -> list[dict[str, int]]:
  """Per partition (device id), its coordinate along each mesh axis (row-major)."""
  names = [sdy.MeshAxisAttr(a).name for a in mesh.axes]
  sizes = [sdy.MeshAxisAttr(a).size for a in mesh.axes]
  ids = list(mesh.device_ids) or list(range(math.prod(sizes)))
  coords: list[dict[str, int]] = [{} for _ in ids]
  for position, device in enumerate(ids):
    rest = position
    for name, size in reversed(list(zip(names, sizes))):
      coords[device][name], rest = rest % size, rest // size
  return coords


def axis_refs(attr: ir.Attribute) -> list[str]:
  return re.findall(r'"[^"]*"(?::\(\d+\)\d+)?', str(attr))


def axis_list(axes: list[ir.Attribute]) -> ir.Attribute:
  return ir.Attribute.parse("#sdy<axis_ref_list{" + ", ".join(map(str, axes)) + "}>")


def without_unreduced(sharding: ir.Attribute, axes: list[ir.Attribute]) -> ir.Attribute:
  attr = sdy.TensorShardingAttr(sharding)
  names = {str(a) for a in axes}
  return sdy.TensorShardingAttr.get(
    attr.mesh_or_ref,
    list(attr.dimension_shardings),
    list(attr.replicated_axes),
    [a for a in attr.unreduced_axes if str(a) not in names],
  )


def shardings_of(op: ir.Operation) -> list[ir.Attribute | None]:
  """The sharding of each result of `op` (None: none recorded)."""
  if "sdy.sharding" not in op.attributes:
    return [None] * len(op.results)
  return list(sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings)


def _axis_sizes(mesh: sdy.MeshAttr) -> dict[str, int]:
  return {axis.name: axis.size for axis in map(sdy.MeshAxisAttr, mesh.axes)}


def _dim_axes(dim_sharding: ir.Attribute) -> list[sdy.AxisRefAttr]:
  return [sdy.AxisRefAttr(a) for a in sdy.DimensionShardingAttr(dim_sharding).axes]


def _axis_ref_size(axis: sdy.AxisRefAttr, sizes: dict[str, int]) -> int:
  # A sub-axis ("i":(1)2) names a factor of a mesh axis.
  sub = axis.sub_axis_info
  return sdy.SubAxisInfoAttr(sub).size if sub is not None else sizes[axis.name]
