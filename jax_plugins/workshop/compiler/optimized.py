"""The optimized program: what PJRT_Executable_OptimizedProgram returns.

XLA answers that query with the partitioned HLO module it compiled: the program one device
runs (local shapes), with the global shardings of its parameters and results recorded
beside it. jaxlib converts whatever we return (format "mlir": StableHLO text) to HLO and
uses it for `compiled.as_text()` and, for multi-device programs, to read the parameter and
output shardings (HloModule::spmd_parameters_shardings / spmd_output_sharding), which JAX
needs when a jit leaves them unspecified.

We produce the same from the module the plan was lowered from:
  * every `sdy.manual_computation` is inlined (its body already is per-device code, and the
    lowering checked that its operands arrive as the shards the body expects), so @main's
    parameters and results take their local shapes;
  * each parameter's and result's `sdy.sharding` becomes an `mhlo.sharding` in XLA's
    HloSharding syntax, and the module gets `mhlo.spmd_parameters_shardings` and
    `mhlo.spmd_output_sharding`;
  * the remaining Shardy constructs (meshes, sharding constraints and attributes) go.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy

from .irtools import inline_calls
from .spmd.sharding import FALLBACK_ATTR as _FALLBACK_ATTR

_REPLICATED = "{replicated}"


def optimized_program(
  module: ir.Module,
  num_partitions: int,
  *,
  local_types: bool = False,
  layouts: tuple[list[list[int]], list[list[int]]] | None = None,
) -> str:
  """The per-device program of `module` as StableHLO text; "" if it cannot be built.

  `layouts` (parameter and result minor_to_major lists, layouts.py), when one is not
  row-major, become the module's `mhlo.xla_entry_computation_parameter_layouts` and
  `..._result_layout`: jaxlib reads the parameter layouts of a plugin at C API 0.81 from
  the entry computation layout of this program's HLO (PjRtExecutable::GetParameterLayouts).

  `module` is not modified. Failing here does not fail compilation (the text is for
  queries, and JAX needs it only for a multi-device jit without out_shardings), but it is a
  bug of this module, so it is not silent: the error is logged (logger
  "jax_plugins.workshop", level WARNING; a warning could be turned into a compile error
  by -W error), "" is returned and PJRT_Executable_OptimizedProgram reports
  UNIMPLEMENTED, which JAX turns into "'UnspecifiedValue' object has no attribute ..."
  where it needed the shardings.
  """
  try:
    clone = ir.Module.parse(str(module), module.context)
    _Rewriter(clone, num_partitions, local_types).run()
    if layouts is not None:
      _set_entry_layouts(clone, *layouts)
    clone.operation.verify()
    return str(clone)
  except (ValueError, ir.MLIRError, KeyError, IndexError, NotImplementedError) as e:
    logging.getLogger("jax_plugins.workshop").warning(
      "workshop: no optimized program for this executable (%s: %s); compiled.as_text() and "
      "the output shardings JAX reads from it are unavailable",
      type(e).__name__,
      e,
    )
    return ""


def _drop_signature_shardings(func: ir.Operation) -> None:
  """A private function's parameter and result shardings go with the meshes they name
  (a called exported function keeps its own; only @main's are the program's)."""
  for name in ("arg_attrs", "res_attrs"):
    if name in func.attributes:
      func.attributes[name] = ir.ArrayAttr.get(
        [
          ir.DictAttr.get({a.name: a.attr for a in ir.DictAttr(d) if a.name != "sdy.sharding"})
          for d in ir.ArrayAttr(func.attributes[name])
        ]
      )


def _set_entry_layouts(
  module: ir.Module, params: list[list[int]], results: list[list[int]]
) -> None:
  """The entry computation layout as module attributes (MLIR -> HLO conversion reads them)."""
  if all(order == sorted(order, reverse=True) for order in (*params, *results)):
    return  # All row-major: the default the conversion assumes.

  def attr(order: list[int]) -> ir.Attribute:
    index = ir.IndexType.get()
    return ir.DenseElementsAttr.get(
      np.asarray(order, np.int64), type=ir.RankedTensorType.get([len(order)], index)
    )

  attrs = module.operation.attributes
  attrs["mhlo.xla_entry_computation_parameter_layouts"] = ir.ArrayAttr.get(
    [attr(order) for order in params]
  )
  attrs["mhlo.xla_entry_computation_result_layout"] = ir.ArrayAttr.get(
    [attr(order) for order in results]
  )


class _Rewriter:
  def __init__(self, module: ir.Module, num_partitions: int, local_types: bool = False):
    self.module = module
    self.num_partitions = num_partitions
    # Set for a module partition.py already turned into per-device code.
    self.local_types = local_types
    self.meshes: dict[str, sdy.MeshAttr] = {}
    for op in module.body.operations:
      if op.operation.name == "sdy.mesh":
        self.meshes[op.attributes["sym_name"].value] = sdy.MeshAttr(op.attributes["mesh"])

  def run(self) -> None:
    # A program that is not partitioned (a shard_map, whose body is per-device code
    # already) can hold its manual computations in private functions (a call of an
    # exported function): inlined into @main, they get @main's local types.
    inline_calls(self.module)
    passmanager.PassManager.parse("builtin.module(symbol-dce)").run(self.module.operation)
    funcs = [op.operation for op in self.module.body.operations if op.operation.name == "func.func"]
    main = next((f for f in funcs if f.attributes["sym_name"].value == "main"), None)
    if main is None:
      raise ValueError("no @main")
    self._rewrite_signature(main)
    for func in funcs:
      if func != main:
        _drop_signature_shardings(func)
      self._inline_manual_computations(func)
    self._retype_main(main)
    for op in list(self.module.body.operations):
      if op.operation.name == "sdy.mesh":
        op.operation.erase()

  def _rewrite_signature(self, main: ir.Operation) -> None:
    """sdy.sharding -> mhlo.sharding on @main's arguments and results; local arg types."""
    block = main.regions[0].blocks[0]
    arg_shardings, res_shardings = [], []
    for name, shardings in (("arg_attrs", arg_shardings), ("res_attrs", res_shardings)):
      if name not in main.attributes:
        continue
      new_attrs = []
      for i, attrs in enumerate(ir.ArrayAttr(main.attributes[name])):
        entries = {a.name: a.attr for a in ir.DictAttr(attrs)}
        sharding = entries.pop("sdy.sharding", None)
        text = self._hlo_sharding(sharding) if sharding is not None else _REPLICATED
        shardings.append(text)
        if self.num_partitions > 1:
          entries["mhlo.sharding"] = ir.StringAttr.get(text)
        if name == "arg_attrs" and sharding is not None and not self.local_types:
          arg = block.arguments[i]
          arg.set_type(_local_type(arg.type, self._local_dims(sharding, arg.type)))
        new_attrs.append(ir.DictAttr.get(entries))
      main.attributes[name] = ir.ArrayAttr.get(new_attrs)
    if self.num_partitions > 1:
      n_args = len(block.arguments)
      arg_shardings += [_REPLICATED] * (n_args - len(arg_shardings))
      attrs = self.module.operation.attributes
      attrs["mhlo.spmd_parameters_shardings"] = ir.ArrayAttr.get(
        [ir.StringAttr.get(s) for s in arg_shardings]
      )
      ftype = ir.FunctionType(main.attributes["function_type"].value)
      res_shardings += [_REPLICATED] * (len(ftype.results) - len(res_shardings))
      # XLA's sharding of an empty tuple has one leaf (HloSharding::RequiredLeaves), and
      # jaxlib's PJRT executable rejects an output sharding of none ("HLO module output
      # is an empty tuple, but the output sharding has 0 elements").
      res_shardings = res_shardings or [_REPLICATED]
      attrs["mhlo.spmd_output_sharding"] = ir.StringAttr.get(_tuple(res_shardings))

  def _inline_manual_computations(self, func: ir.Operation) -> None:
    # One at a time, with a fresh walk each: inlining moves and erases ops.
    while (
      op := next((o for o in _walk(func) if o.name == "sdy.manual_computation"), None)
    ) is not None:
      body = op.regions[0].blocks[0]
      for arg, operand in zip(body.arguments, op.operands, strict=True):
        arg.replace_all_uses_with(operand)
      *ops, terminator = [o.operation for o in body.operations]
      for o in ops:
        o.move_before(op)
      for result, value in zip(op.results, terminator.operands, strict=True):
        result.replace_all_uses_with(value)
      op.erase()
    for op in _walk(func):
      # The annotations a direct lowering left (see rules/shardy.py) are identities; XLA's
      # HLO has no form for them.
      if op.name in ("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier"):
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
        continue
      if op.name == "sdy.sharding_group":
        op.erase()
        continue
      for name in ("sdy.sharding", "sdy.sharding_rule"):
        if name in op.attributes:
          del op.attributes[name]
      if _FALLBACK_ATTR in op.attributes:
        # as_text() shows frontend attributes: the op that made the partitioner gather.
        del op.attributes[_FALLBACK_ATTR]
        op.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(
          {
            "workshop_partitioning": ir.StringAttr.get(
              "not partitioned: gathered to replicated, computed whole, sliced"
            )
          }
        )

  def _retype_main(self, main: ir.Operation) -> None:
    """@main's type from its (now local) arguments and returned values."""
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1].operation
    main.attributes["function_type"] = ir.TypeAttr.get(
      ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in ret.operands])
    )

  # Shardings.

  def _mesh(self, sharding: sdy.TensorShardingAttr) -> sdy.MeshAttr:
    mesh = sharding.mesh_or_ref
    if isinstance(mesh, ir.FlatSymbolRefAttr):
      return self.meshes[mesh.value]
    return sdy.MeshAttr(mesh)

  def _local_dims(self, attr: ir.Attribute, t: ir.Type) -> list[int]:
    sharding = sdy.TensorShardingAttr(attr)
    sizes = _axis_sizes(self._mesh(sharding))
    dims = list(ir.RankedTensorType(t).shape)
    for d, dim_sharding in enumerate(sharding.dimension_shardings):
      dims[d] //= math.prod(_ref_size(a, sizes) for a in _refs(dim_sharding))
    return dims

  def _hlo_sharding(self, attr: ir.Attribute) -> str:
    """`#sdy.sharding<...>` in HloSharding syntax: "{devices=[2,1,2]0,2,1,3 ...}".

    Each mesh axis is split into the factors its sub-axis references need; the device ids
    laid out on those factors (mesh order, major to minor) are transposed so that the
    factors sharding dim 0 come first, then dim 1's, ..., then the unreduced axes' (a
    `last_tile_dims={unreduced}` subgroup), then the unused (replicated) ones: the order of
    XLA's HloSharding::V3ToV2Sharding.

    Raises:
      ValueError: an unreduced sub-axis (not produced by JAX).
    """
    sharding = sdy.TensorShardingAttr(attr)
    mesh = self._mesh(sharding)
    sizes = _axis_sizes(mesh)
    unreduced = [sdy.AxisRefAttr(a) for a in sharding.unreduced_axes]
    if any(a.sub_axis_info is not None for a in unreduced):
      raise ValueError("an unreduced sub-axis")
    dim_refs = [
      [sdy.AxisRefAttr(a) for a in sdy.DimensionShardingAttr(d).axes]
      for d in sharding.dimension_shardings
    ]
    # Split points per axis: 1, every sub-axis boundary, the axis size.
    bounds = {name: {1, size} for name, size in sizes.items()}
    for refs in dim_refs:
      for ref in refs:
        if ref.sub_axis_info is not None:
          sub = sdy.SubAxisInfoAttr(ref.sub_axis_info)
          bounds[ref.name] |= {sub.pre_size, sub.pre_size * sub.size}
    factors = []  # (axis, pre_size, size), mesh order, major to minor
    for name in sizes:
      points = sorted(bounds[name])
      factors += [(name, lo, hi // lo) for lo, hi in zip(points, points[1:])]

    def covered(ref: sdy.AxisRefAttr) -> list[int]:
      if ref.sub_axis_info is None:
        return [i for i, (name, _, _) in enumerate(factors) if name == ref.name]
      sub = sdy.SubAxisInfoAttr(ref.sub_axis_info)
      return [
        i
        for i, (name, pre, _) in enumerate(factors)
        if name == ref.name and sub.pre_size <= pre < sub.pre_size * sub.size
      ]

    order, tile = [], []
    for refs in dim_refs:
      used = [i for ref in refs for i in covered(ref)]
      order += used
      tile.append(math.prod(factors[i][2] for i in used))
    pending = [i for a in unreduced for i in covered(a) if i not in order]
    rest = [i for i in range(len(factors)) if i not in order and i not in pending]
    summed = math.prod(factors[i][2] for i in pending)
    replicated = math.prod(factors[i][2] for i in rest)
    if math.prod(tile) == 1 and summed == 1:
      return _REPLICATED
    if math.prod(tile) == 1 and replicated == 1:
      return "{unreduced}"
    ids = list(mesh.device_ids) or list(range(math.prod(sizes.values())))
    devices = np.array(ids).reshape([f[2] for f in factors] or [1])
    devices = devices.transpose(order + pending + rest).reshape(-1)
    subgroups = [
      (n, kind) for n, kind in ((summed, "unreduced"), (replicated, "replicated")) if n > 1
    ]
    shape = tile + [n for n, _ in subgroups]
    text = f"{{devices=[{','.join(map(str, shape))}]{','.join(map(str, devices))}"
    if [kind for _, kind in subgroups] == ["replicated"]:
      return text + " last_tile_dim_replicate}"
    if subgroups:
      return text + f" last_tile_dims={{{', '.join(kind for _, kind in subgroups)}}}}}"
    return text + "}"


def _walk(op: ir.Operation) -> list[ir.Operation]:
  """All ops nested in `op`, outermost first (a snapshot: safe to erase while iterating)."""
  out = []
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        out.append(child.operation)
        out += _walk(child.operation)
  return out


def _local_type(t: ir.Type, dims: list[int]) -> ir.Type:
  t = ir.RankedTensorType(t)
  return ir.RankedTensorType.get(dims, t.element_type)


def _axis_sizes(mesh: sdy.MeshAttr) -> dict[str, int]:
  return {a.name: a.size for a in map(sdy.MeshAxisAttr, mesh.axes)}


def _refs(dim_sharding: ir.Attribute) -> list[sdy.AxisRefAttr]:
  return [sdy.AxisRefAttr(a) for a in sdy.DimensionShardingAttr(dim_sharding).axes]


def _ref_size(ref: sdy.AxisRefAttr, sizes: dict[str, int]) -> int:
  sub = ref.sub_axis_info
  return sdy.SubAxisInfoAttr(sub).size if sub is not None else sizes[ref.name]


def _tuple(shardings: list[str]) -> str:
  return "{" + ", ".join(shardings) + "}"
