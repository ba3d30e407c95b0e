"""Shardy (`sdy`) meshes and shardings: local shapes and replication checks.

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

  def local_dims(self, sharding: ir.Attribute | None,
                 dims: tuple[int, ...]) -> tuple[int, ...]:
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
    return tuple(math.prod(_axis_ref_size(a, sizes) for a in _dim_axes(dim_sharding))
                 for dim_sharding in sharding.dimension_shardings)


def is_replicated(sharding: ir.Attribute | None) -> bool:
  """Whether every device holds the whole value (no sharded dims, no pending sums)."""
  if sharding is None:
    return True
  sharding = sdy.TensorShardingAttr(sharding)
  return (not sharding.unreduced_axes and
          not any(_dim_axes(d) for d in sharding.dimension_shardings))


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
  match = re.search(r"@maximal_mesh_(\d+)|mesh<\[\], device_ids=\[(\d+)\]>",
                    str(op.attributes["sdy.sharding"]))
  return None if match is None else int(match.group(1) or match.group(2))


def manual_axes(attr: ir.Attribute) -> set[str]:
  """Axis names in a `#sdy<manual_axes{"i", "j"}>` attribute.

  ManualAxesAttr has no Python binding, so this reads its printed form.
  """
  return set(re.findall(r'"([^"]*)"', str(attr)))


def _axis_sizes(mesh: sdy.MeshAttr) -> dict[str, int]:
  return {axis.name: axis.size for axis in map(sdy.MeshAxisAttr, mesh.axes)}


def _dim_axes(dim_sharding: ir.Attribute) -> list[sdy.AxisRefAttr]:
  return [sdy.AxisRefAttr(a) for a in sdy.DimensionShardingAttr(dim_sharding).axes]


def _axis_ref_size(axis: sdy.AxisRefAttr, sizes: dict[str, int]) -> int:
  # A sub-axis ("i":(1)2) names a factor of a mesh axis.
  sub = axis.sub_axis_info
  return sdy.SubAxisInfoAttr(sub).size if sub is not None else sizes[axis.name]
