"""Automatic SPMD partitioning with Shardy's own passes.

A jit over sharded arrays arrives as a *global* program: global shapes, `sdy.sharding` on
@main's parameters and results (and on some intermediates, via `sdy.sharding_constraint`),
ops in between unannotated. XLA partitions such a program with Shardy propagation and its
SPMD partitioner; jaxlib registers Shardy's passes in its MLIR bindings, and we run them:

  1. Inlining (`inline_calls`; MLIR's `inline` pass is registered but jaxlib's context
     lacks func's inliner interface, so it inlines nothing): JAX's private functions
     (pjit inside jit, jnp helpers) and composites' decompositions become straight code, so every op sits in @main where
     propagation and the checks below see it, and one function called under two
     shardings is no conflict. Ops JAX pins to one device (host callbacks, MAXIMAL
     sharding) keep the device in an attribute instead (`_unpin`) and run whole, like
     any custom call.
  2. `sdy-propagation-pipeline`: import (constraints, sharding groups, constants split per
     use), propagation, export: every op gets an `sdy.sharding` per result, and the
     parameters and results JAX left open get theirs.
  3. Sub-axes dropped from intermediates (`_drop_sub_axes`; see there why).
  4. `func.func(sdy-insert-explicit-reshards{enable-full-version=true})`: makes every op's
     operands and results agree with its sharding rule by inserting `sdy.reshard`s, and
     `sdy.all_reduce`s after partial results (a contraction over a sharded dim). Without
     `enable-full-version` it leaves a reduction over a sharded dim un-reduced.
  5. Our fallback (`fall_back`): ops that convert-global-to-local cannot turn into
     per-device code, or would get wrong (slices, pads, windows, sorts along sharded dims,
     loops, gathers, custom calls, chlo ops, variadic reductions), run on the whole value: their
     sharded operands are resharded to replicated, their results resharded back. Each
     such op carries `workshop.replicated`, which the optimized program (`as_text()`)
     shows as the frontend attribute `workshop_partitioning` on the op. An op reading a
     value sharded unevenly is one of them, and the uneven reshard feeding it is then
     bypassed (`drop_uneven_reshards`).
  6. `func.func(sdy-reshard-to-collectives)`: each reshard becomes `sdy.all_gather`,
     `all_slice`, `all_to_all`, `collective_permute` or `reduce_scatter`.
  7. A guard (`check_local`): uneven shardings, resharding over sub-axes, and all-reduces
     of unknown combiners are compile errors naming op and sharding.
  8. `sdy-convert-global-to-local`: local (shard) types everywhere, manual computations
     inlined, sdy collectives as StableHLO collectives with explicit replica groups; then
     all-reduces completing a max/min/product reduction get that combiner back (the
     pass always sums).

The result is per-device SPMD code, like a shard_map body, which the lowering and the
collective kernels already run. @main keeps `sdy.sharding` on its (now local) parameters
and results, which the optimized program reports to JAX.

This module is the pass driver (`partition`, the steps in order) and the steps that
prepare the module for Shardy's passes or repair what they leave; the steps deciding
which ops stay sharded (the fallback, the guard) are in fallback.py, those for
unreduced values and all-reduces in unreduced.py. The sharding facts they all
read and write (a value's sharding, meshes, replicated and unreduced shardings) are in
sharding.py; walking and inlining in ../irtools.py.
"""

from __future__ import annotations

import math
import re

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy

from ... import custom_calls
from .. import errors
from ..attrs import ints
from ..irtools import inline_calls, main_func, rank_of, walk
from ..options import Options, may_choose
from .fallback import (
  check_local,
  drop_uneven_reshards,
  fall_back,
  partitioned_ops,
)
from .unreduced import (
  drop_marked_all_reduces,
  drop_repeated_all_reduces,
  fix_all_reduce_bodies,
  lower_replicated_to_unreduced,
  lower_sharded_to_unreduced,
  mark_unreduced_partials,
  unreduce_constants,
  unreduce_scatter_operands,
  unreduce_summed_scatters,
  unreduce_whole_results,
)
from .sharding import (
  FALLBACK_ATTR,
  PINNED_ATTR,
  Meshes,
  evenly,
  is_sharded,
  mesh_attr_of,
  mesh_attrs,
  mesh_name,
  pinned_partition,
  replicated,
  reshard,
  shardings_of,
  value_sharding,
  without_sub_axes,
)

# The location name of the identity reshapes _relay_loop_arguments inserts (and
# _drop_loop_relays removes again after convert-global-to-local).
_RELAY_MARK = "workshop.loop_argument_relay"


def partition(module: ir.Module, options: Options, *, replicate_all: bool = False) -> list[str]:
  """Rewrites the global program `module` into per-device code, in place.

  The steps of the module docstring, in order:
    1. `_prepare`: even shardings checked, calls inlined, meshes unified, pinned ops
       unpinned, unchoosable parameters and results closed.
    2-3. `_propagate`: Shardy's propagation, then what it leaves that the later passes
       cannot take (sub-axes, uneven axes, unreduced constants) and the
       inspect_array_sharding answers.
    4. `_insert_reshards`: insert-explicit-reshards and the unreduced values it leaves.
    5. `_replicate_unpartitionable`: ops that cannot run on shards run on the whole value.
    6. `_reshard_to_collectives`: each reshard becomes a collective.
    7. `check_local` (fallback.py): what would still abort the process is refused.
    8. `_convert_to_local`: convert-global-to-local and the repairs after it.

  `replicate_all`: every op runs on the whole value (the fallback for a program the
  per-op partitioning rejects): inputs gathered, results sliced to their shardings.

  Returns:
    One line per op that runs on the whole value (replicated) instead of its shard.

  Raises:
    NotImplementedError: Shardy rejects the program; the message names its op and
      sharding.
  """
  _prepare(module, options)
  _propagate(module)
  _insert_reshards(module)
  notes = _replicate_unpartitionable(module, replicate_all)
  _reshard_to_collectives(module)
  check_local(module)
  _convert_to_local(module)
  return notes


def _prepare(module: ir.Module, options: Options) -> None:
  """Step 1: the module as Shardy's passes can take it."""
  _check_even(module)
  inline_calls(module)
  _unify_meshes(module)
  _unpin(module)
  _close_unchoosable(module, options)
  _fold_empty(module)


def _propagate(module: ir.Module) -> None:
  """Steps 2-3: every op gets a sharding; those the later passes cannot take are dropped."""
  # symbol-dce: the inlined callees.
  _run(module, "symbol-dce", "sdy-propagation-pipeline")
  _drop_sub_axes(module)
  _drop_uneven_axes(module)
  unreduce_constants(module)
  _answer_inspections(module)


def _insert_reshards(module: ir.Module) -> None:
  """Step 4: operands and results agree with each op's sharding rule; the unreduced
  values the pass leaves wrong or unconverted are repaired (unreduced.py)."""
  _run(module, "func.func(sdy-insert-explicit-reshards{enable-full-version=true})")
  _fold_empty(module)
  drop_repeated_all_reduces(module)
  unreduce_whole_results(module)
  unreduce_summed_scatters(module)
  unreduce_scatter_operands(module)
  lower_replicated_to_unreduced(module)
  lower_sharded_to_unreduced(module)


def _replicate_unpartitionable(module: ir.Module, replicate_all: bool) -> list[str]:
  """Step 5 (fallback.py): ops convert-global-to-local cannot take run on the whole
  value. Returns one line per such op."""
  notes = fall_back(module, replicate_all)
  lower_replicated_to_unreduced(module)  # the fallback's results that are unreduced
  drop_uneven_reshards(module)
  return notes


def _reshard_to_collectives(module: ir.Module) -> None:
  """Step 6: each reshard (split where it crosses sub-axes or meshes) becomes a collective."""
  _split_sub_axis_reshards(module)
  _reshard_across_meshes(module)
  _run(module, "func.func(sdy-reshard-to-collectives)")


def _convert_to_local(module: ir.Module) -> None:
  """Step 8: local types everywhere (regions and slice sizes first, which the pass leaves
  global), then the marks and all-reduce bodies the pass gets wrong repaired."""
  _localize_region_arguments(module)
  _localize_slice_sizes(module)
  mark_unreduced_partials(module)
  _relay_loop_arguments(module)
  _run(module, "sdy-convert-global-to-local")
  _drop_loop_relays(module)
  drop_marked_all_reduces(module)
  fix_all_reduce_bodies(module)


def _unify_meshes(module: ir.Module) -> None:
  """Shardings on a second mesh over the same devices move onto the program's mesh.

  A program can name two meshes of the same devices: a call of an exported function
  (jax.export) brings the exported module's mesh (`@mesh`, axis "d") next to the
  caller's (`@mesh_0`, axis "e"). XLA turns every sharding into a device assignment,
  where mesh and axis names vanish; Shardy keeps them, and a reshard from one mesh to
  another is one reshard-to-collectives leaves alone (convert-global-to-local then
  fails on it). A mesh with the same axis sizes in the same order over the same devices
  is the program's mesh with its axes renamed: its shardings (and manual axes) are
  renamed onto the program's mesh. On a mesh of the same devices with other axes, only
  replicated shardings move (replicated is the same on every mesh of those devices).
  Any other mesh is left as it is.
  """
  target = mesh_name(module)
  meshes = {
    op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
    for op in module.body.operations
    if op.operation.name == "sdy.mesh"
  }
  if target is None or len(meshes) < 2:
    return

  def devices(mesh: sdy.MeshAttr) -> tuple[int, ...]:
    count = math.prod(sdy.MeshAxisAttr(a).size for a in mesh.axes)
    return tuple(mesh.device_ids) or tuple(range(count))

  def axes(mesh: sdy.MeshAttr) -> list[tuple[str, int]]:
    return [(a.name, a.size) for a in map(sdy.MeshAxisAttr, mesh.axes)]

  goal = meshes[target]
  renames: dict[str, dict[str, str] | None] = {}  # mesh -> axis renames (None: replicated only)
  for name, mesh in meshes.items():
    if name == target or not list(mesh.axes) or devices(mesh) != devices(goal):
      continue
    same = [s for _, s in axes(mesh)] == [s for _, s in axes(goal)]
    renames[name] = {a: b for (a, _), (b, _) in zip(axes(mesh), axes(goal))} if same else None
  if not renames:
    return
  target_ref = ir.FlatSymbolRefAttr.get(target)

  def mesh_of(attr: ir.Attribute) -> str | None:
    mesh = sdy.TensorShardingAttr(attr).mesh_or_ref
    return mesh.value if isinstance(mesh, ir.FlatSymbolRefAttr) else None

  def moved(attr: ir.Attribute) -> ir.Attribute:
    if sdy.TensorShardingPerValueAttr.isinstance(attr):
      per_value = list(sdy.TensorShardingPerValueAttr(attr).shardings)
      new = [moved(s) for s in per_value]
      return attr if new == per_value else sdy.TensorShardingPerValueAttr.get(new)
    if not sdy.TensorShardingAttr.isinstance(attr) or mesh_of(attr) not in renames:
      return attr
    sharding = sdy.TensorShardingAttr(attr)
    rename = renames[mesh_of(attr)]
    dims = list(map(sdy.DimensionShardingAttr, sharding.dimension_shardings))
    if rename is None:
      if any(list(d.axes) for d in dims) or list(sharding.unreduced_axes):
        return attr
      return sdy.TensorShardingAttr.get(
        target_ref, [sdy.DimensionShardingAttr.get([], d.is_closed, d.priority) for d in dims]
      )
    axis = lambda a: sdy.AxisRefAttr.get(rename[a.name], a.sub_axis_info)
    return sdy.TensorShardingAttr.get(
      target_ref,
      [
        sdy.DimensionShardingAttr.get(
          [axis(sdy.AxisRefAttr(a)) for a in d.axes], d.is_closed, d.priority
        )
        for d in dims
      ],
      [axis(sdy.AxisRefAttr(a)) for a in sharding.replicated_axes],
      [axis(sdy.AxisRefAttr(a)) for a in sharding.unreduced_axes],
    )

  def moved_dicts(array: ir.Attribute) -> ir.Attribute:
    dicts = [{a.name: a.attr for a in ir.DictAttr(d)} for d in ir.ArrayAttr(array)]
    for d in dicts:
      if "sdy.sharding" in d:
        d["sdy.sharding"] = moved(d["sdy.sharding"])
    return ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])

  for top in module.body.operations:
    for op in (top.operation, *walk(top.operation)):
      if op.name == "func.func":
        for name in ("arg_attrs", "res_attrs"):
          if name in op.attributes:
            op.attributes[name] = moved_dicts(op.attributes[name])
      if op.name == "sdy.manual_computation":
        meshes_used = {
          mesh_of(s)
          for s in sdy.TensorShardingPerValueAttr(op.attributes["in_shardings"]).shardings
        } | {
          mesh_of(s)
          for s in sdy.TensorShardingPerValueAttr(op.attributes["out_shardings"]).shardings
        }
        rename = next((renames[m] for m in meshes_used if m in renames), None)
        if rename is not None:
          op.attributes["manual_axes"] = sdy.ManualAxesAttr.get(
            [
              ir.StringAttr.get(rename[a])
              for a in re.findall(r'"([^"]*)"', str(op.attributes["manual_axes"]))
            ]
          )
        elif any(m in renames for m in meshes_used):
          continue  # manual over axes the program's mesh has not: left as it is
      for name in ("sdy.sharding", "sharding", "in_shardings", "out_shardings"):
        if name in op.attributes:
          op.attributes[name] = moved(op.attributes[name])


def _unpin(module: ir.Module) -> None:
  """Ops JAX pins to one device (host callbacks: a MAXIMAL sharding, see
  sharding.pinned_partition) keep their partition in PINNED_ATTR and lose the sharding.

  Shardy's passes cannot partition around a maximal sharding on jaxlib 0.10.2:
  insert-explicit-reshards leaves the sharded operands of its users unresharded, and
  reshard-to-collectives rejects one on a result of rank > 0. Without it the op is a
  custom call on whole values, which the fallback gathers (results declared replicated);
  the callback lowering (rules/callback.py) then runs it on the pinned partition only and
  broadcasts its results, as XLA runs a MAXIMAL op once.
  """
  mesh = mesh_name(module)
  meshes = {
    op.attributes["sym_name"].value: op
    for op in module.body.operations
    if op.operation.name == "sdy.mesh"
  }
  if mesh is not None and not list(sdy.MeshAttr(meshes[mesh].attributes["mesh"]).axes):
    mesh = None  # Only maximal meshes: let propagation choose the results' sharding.
  for op in walk(main_func(module)):
    partition = pinned_partition(op)
    if partition is None or PINNED_ATTR in op.attributes:
      continue
    op.attributes[PINNED_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), partition)
    if op.results and mesh is not None:
      op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
        [replicated(mesh, rank_of(r)) for r in op.results]
      )
    else:
      del op.attributes["sdy.sharding"]


def _answer_inspections(module: ir.Module) -> None:
  """Each `custom_call @InspectSharding` (jax.debug.inspect_array_sharding) is answered with
  the sharding propagation gave its operand (XLA's partitioner answers at the same point)
  and removed: it computes nothing, and as a custom call the fallback would gather its
  operand."""
  meshes = {
    op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
    for op in module.body.operations
    if op.operation.name == "sdy.mesh"
  }
  for op in list(walk(main_func(module))):
    if (
      op.name != "stablehlo.custom_call"
      or ir.StringAttr(op.attributes["call_target_name"]).value != custom_calls.INSPECT_TARGET
    ):
      continue
    key = (
      ir.StringAttr(op.attributes["backend_config"]).value
      if "backend_config" in op.attributes
      else ""
    )
    manual, parent = False, op.parent
    while parent is not None and parent.name != "func.func":
      manual = manual or parent.name == "sdy.manual_computation"
      parent = parent.parent
    sharding, mesh_axes, dims = value_sharding(op.operands[0]), (), None
    if sharding is not None and not manual:
      attr = sdy.TensorShardingAttr(sharding)
      mesh = attr.mesh_or_ref
      mesh = meshes[mesh.value] if isinstance(mesh, ir.FlatSymbolRefAttr) else sdy.MeshAttr(mesh)
      mesh_axes = [(sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in mesh.axes]
      dims = [
        [sdy.AxisRefAttr(a).name for a in sdy.DimensionShardingAttr(d).axes]
        for d in attr.dimension_shardings
      ]
    try:
      custom_calls.inspection(key, mesh_axes, dims, manual=manual)
    except ValueError as e:
      raise NotImplementedError(f"workshop: {e}") from None
    for r in op.results:
      r.replace_all_uses_with(op.operands[0])
    op.erase()


def _run(module: ir.Module, *passes: str) -> None:
  """Runs `passes` on `module`; their failures (and an invalid module) are
  NotImplementedError. The module is not verified before convert-global-to-local:
  _localize_* gave regions and slice sizes their local types already."""
  pipeline = f"builtin.module({','.join(passes)})"
  try:
    # Our own rewrites must leave valid IR: the passes assume it (and some abort on
    # what a verifier would have rejected).
    if "sdy-convert-global-to-local" not in passes:
      module.operation.verify()
    passmanager.PassManager.parse(pipeline).run(module.operation)
  except ir.MLIRError as e:
    # Diagnostics carry the full call-site chain of each location; the first lines say
    # which op and why.
    message = str(e) if len(str(e)) < 2000 else str(e)[:2000] + " ..."
    raise NotImplementedError(
      f"workshop: automatic SPMD partitioning failed in {', '.join(passes)}: {message}"
    ) from None


def _close_unchoosable(module: ir.Module, options: Options) -> None:
  """Parameters and results JAX left unannotated and the compiler may not choose for are
  replicated (XLA's default); the rest stay open for propagation to choose."""
  mesh = mesh_name(module)
  if mesh is None:
    return
  main = main_func(module)
  ftype = ir.FunctionType(main.attributes["function_type"].value)
  for name, types, flags in (
    ("arg_attrs", ftype.inputs, options.propagate_to_parameters),
    ("res_attrs", ftype.results, options.propagate_to_outputs),
  ):
    current = (
      list(ir.ArrayAttr(main.attributes[name]))
      if name in main.attributes
      else [ir.DictAttr.get({})] * len(types)
    )
    updated = []
    for i, (attrs, t) in enumerate(zip(current, types)):
      entries = {a.name: a.attr for a in ir.DictAttr(attrs)}
      if (
        "sdy.sharding" not in entries
        and not may_choose(flags, i)
        and isinstance(t, ir.RankedTensorType)
      ):
        entries["sdy.sharding"] = replicated(mesh, t.rank)
      updated.append(ir.DictAttr.get(entries))
    main.attributes[name] = ir.ArrayAttr.get(updated)


def _check_even(module: ir.Module) -> None:
  """Parameters and results are split evenly (JAX only makes such shardings; Shardy's
  passes would abort the process on others)."""
  main = main_func(module)
  meshes = Meshes(module)
  ftype = ir.FunctionType(main.attributes["function_type"].value)
  for name, role, types in (
    ("arg_attrs", "parameter", ftype.inputs),
    ("res_attrs", "result", ftype.results),
  ):
    if name not in main.attributes:
      continue
    for i, (attrs, t) in enumerate(zip(ir.ArrayAttr(main.attributes[name]), types)):
      attrs = ir.DictAttr(attrs)
      if "sdy.sharding" not in attrs or not isinstance(t, ir.RankedTensorType):
        continue
      counts = meshes.shard_counts(attrs["sdy.sharding"])
      if any(d % n for d, n in zip(t.shape, counts)):
        raise errors.unsupported(
          main,
          f"{role} {i} of type {t} is sharded as {attrs['sdy.sharding']}, which "
          "does not split it evenly; uneven shardings are not supported",
        )


def _drop_sub_axes(module: ir.Module) -> None:
  """Intermediates propagation sharded over a sub-axis ("i":(2)2, from a reshape that
  splits a sharded dim) lose that axis: the all-gathers and all-slices
  convert-global-to-local makes for sub-axes disagree on which device holds which shard
  (jaxlib 0.10.2), so no reshard may involve one. Fewer sharded axes is always valid."""
  for op in walk(main_func(module)):
    if "sdy.sharding" not in op.attributes:
      continue
    per_value = sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings
    if not any("\":(" in str(s) for s in per_value):
      continue
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
      [without_sub_axes(sdy.TensorShardingAttr(s)) for s in per_value]
    )


def _reshard_across_meshes(module: ir.Module) -> None:
  """A reshard from one mesh to another of the same devices goes through the whole value:
  all-gathers on the source mesh, an `optimization_barrier` whose operand is replicated
  on that mesh and whose result is replicated on the target mesh (every device holds
  the whole value on both), then all-slices on the target mesh.

  `jax.device_put(x, s)` between meshes of other axes over the same devices (pjit_test
  test_device_put_efficient_reshard_complex_mesh: P("model_q") on a 1x1x4x2x1 mesh to
  P("model") on a 1x2x2x2 one) compiles an identity program over two meshes, which
  _unify_meshes cannot merge; reshard-to-collectives leaves such a reshard alone and
  convert-global-to-local fails on it. XLA, where meshes are device assignments,
  permutes shards instead; this moves more data.
  """
  meshes = mesh_attrs(module)

  def mesh_of(sharding: ir.Attribute) -> sdy.MeshAttr | None:
    return mesh_attr_of(sdy.TensorShardingAttr(sharding), meshes)

  def devices(mesh: sdy.MeshAttr) -> list[int]:
    count = math.prod(sdy.MeshAxisAttr(a).size for a in mesh.axes)
    return sorted(mesh.device_ids) or list(range(count))

  for op in list(walk(main_func(module))):
    if op.name != "sdy.reshard":
      continue
    source, target = value_sharding(op.operands[0]), op.attributes["sharding"]
    if source is None:
      continue
    a, b = mesh_of(source), mesh_of(target)
    if a is None or b is None or a == b or devices(a) != devices(b):
      continue
    if sdy.TensorShardingAttr(source).unreduced_axes:
      continue
    rank = rank_of(op.operands[0])
    with ir.InsertionPoint(op), op.location:
      whole = reshard(op.operands[0], replicated("", rank, source))
      moved = ir.Operation.create(
        "stablehlo.optimization_barrier",
        results=[whole.type],
        operands=[whole],
        attributes={
          "sdy.sharding": sdy.TensorShardingPerValueAttr.get([replicated("", rank, target)])
        },
      )
    op.operands[0] = moved.results[0]


def _split_sub_axis_reshards(module: ir.Module) -> None:
  """A reshard that reshard-to-collectives would make over sub-axes goes in two steps:
  all-gathers to the longest common prefix of the two shardings' axes in each dim, then
  all-slices to the target.

  `x @ x.T` of an (8, 2) array sharded P("x", "y") on a 4x2 mesh moves "y" from dim 0 to
  dim 1 and "x" out: the pass makes a collective_permute to {"x":(1)2}, {"y", "x":(2)2}
  and all-gathers over those sub-axes, whose replica groups convert-global-to-local gets
  wrong (see _drop_sub_axes). XLA:CPU runs the program. Each reshard is tried alone, in a
  module of its own, to see what the pass makes of it; the two steps move more data than
  an all-to-all would, but neither involves a sub-axis.
  """
  meshes = "\n".join(str(op) for op in module.body.operations if op.operation.name == "sdy.mesh")
  tried: dict[str, bool] = {}
  for op in list(walk(main_func(module))):
    if op.name != "sdy.reshard":
      continue
    source, target = value_sharding(op.operands[0]), op.attributes["sharding"]
    t = op.operands[0].type
    if source is None or not isinstance(t, ir.RankedTensorType):
      continue
    if (
      sdy.TensorShardingAttr(source).unreduced_axes or sdy.TensorShardingAttr(target).unreduced_axes
    ):
      continue
    key = f"{t}|{source}|{target}"
    if key not in tried:
      tried[key] = _makes_sub_axes(meshes, t, source, target)
    if not tried[key]:
      continue
    src, dst = sdy.TensorShardingAttr(source), sdy.TensorShardingAttr(target)
    common = []
    for a, b in zip(src.dimension_shardings, dst.dimension_shardings):
      a_axes = [str(x) for x in sdy.DimensionShardingAttr(a).axes]
      b_axes = [str(x) for x in sdy.DimensionShardingAttr(b).axes]
      n = 0
      while n < min(len(a_axes), len(b_axes)) and a_axes[n] == b_axes[n]:
        n += 1
      common.append(list(sdy.DimensionShardingAttr(a).axes)[:n])
    middle = sdy.TensorShardingAttr.get(
      src.mesh_or_ref, [sdy.DimensionShardingAttr.get(axes, True) for axes in common]
    )
    with ir.InsertionPoint(op), op.location:
      op.operands[0] = reshard(op.operands[0], middle)


def _makes_sub_axes(meshes: str, t: ir.Type, source: ir.Attribute, target: ir.Attribute) -> bool:
  """Whether reshard-to-collectives turns a reshard of a `t` from `source` to `target`
  into collectives over a sub-axis (on a module holding only that reshard)."""
  text = (
    f"module {{\n{meshes}\n"
    f"func.func @main(%arg0: {t} {{sdy.sharding = {source}}}) -> {t} {{\n"
    f'  %0 = "sdy.reshard"(%arg0) <{{sharding = {target}}}> : ({t}) -> {t}\n'
    f"  return %0 : {t}\n}}\n}}"
  )
  trial = ir.Module.parse(text)
  passmanager.PassManager.parse("builtin.module(func.func(sdy-reshard-to-collectives))").run(
    trial.operation
  )
  return any("\":(" in str(o) for o in walk(main_func(trial)) if o.name.startswith("sdy."))


# Ops that compute nothing when their results have no elements (_fold_empty): StableHLO
# ops without regions or effects, and sdy's value-preserving ones.
_NOT_FOLDED = frozenset(
  "stablehlo." + name
  for name in """
    custom_call rng rng_bit_generator all_gather all_reduce all_to_all reduce_scatter
    collective_permute collective_broadcast send recv infeed outfeed after_all
    create_token optimization_barrier partition_id replica_id
    """.split()
)
_FOLDED_SDY = frozenset(
  {
    "sdy.reshard",
    "sdy.sharding_constraint",
    "sdy.all_gather",
    "sdy.all_slice",
    "sdy.all_to_all",
    "sdy.collective_permute",
  }
)


def _fold_empty(module: ir.Module) -> None:
  """Ops whose every result has no elements become empty constants (XLA's
  ZeroSizedHloElimination).

  There is nothing to compute or move, and the passes break on such values: an
  associative_scan run op by op (eager) over a 16-element array sharded 2 ways comes to
  an add of two 0-element arrays sharded differently, whose reshard convert-global-to-local
  rejects ("dimension size of operand at 'all_gather_dim' cannot be zero"). A constant
  keeps the result's sharding (a reshard's: the one it asked for).
  """
  for op in list(partitioned_ops(main_func(module))):
    if (
      op.regions
      or not op.results
      or op.name in _NOT_FOLDED
      or not (op.name.startswith("stablehlo.") or op.name in _FOLDED_SDY)
      or op.name == "stablehlo.constant"
    ):
      continue
    types = [r.type for r in op.results]
    if not all(
      isinstance(t, ir.RankedTensorType) and 0 in ir.RankedTensorType(t).shape for t in types
    ):
      continue
    shardings = [value_sharding(r) for r in op.results]
    with ir.InsertionPoint(op), op.location:
      for r, t, sharding in zip(op.results, types, shardings):
        attrs = {"value": ir.Attribute.parse(f"dense<> : {t}")}
        if sharding is not None:
          attrs["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get([sharding])
        empty = ir.Operation.create("stablehlo.constant", results=[t], attributes=attrs)
        r.replace_all_uses_with(empty.results[0])
    op.erase()


def _drop_uneven_axes(module: ir.Module) -> None:
  """Intermediates propagation sharded unevenly lose the axes that do not divide them.

  Shardy's propagation shards a dim by its operand's axes whatever its size (every
  level of jax.lax.associative_scan over a 16-element x sharded 2 ways came out [{"x"}],
  down to 7-, 3- and 1-element slices), and XLA's SPMD partitioner pads such shards;
  convert-global-to-local aborts the process on them (jaxlib 0.10.2), and check_local
  refused them. Fewer sharded axes is always valid: each dim keeps the longest prefix
  of its axes that splits it evenly (none for a zero-size dim), and insert-explicit-reshards then reshards between
  the value and its producer and users as their rules need.
  """
  meshes = Meshes(module)
  for op in walk(main_func(module)):
    if "sdy.sharding" in op.attributes and op.results:
      per_value = sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings
      if len(per_value) != len(op.results):
        continue
      even = [evenly(s, r.type, meshes) for s, r in zip(per_value, op.results)]
      if any(e != s for e, s in zip(even, per_value)):
        op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(even)
    elif op.name in ("sdy.sharding_constraint", "sdy.reshard") and "sharding" in op.attributes:
      even = evenly(op.attributes["sharding"], op.results[0].type, meshes)
      if even != op.attributes["sharding"]:
        op.attributes["sharding"] = even


def _localize_slice_sizes(module: ir.Module) -> None:
  """A dynamic_slice left partitioned takes its local slice sizes.

  Its sharded dims are whole (`_passes_through`), so the local size of each is the local
  dim; convert-global-to-local retypes the op but keeps the global `slice_sizes`
  (jaxlib 0.10.2), which then fails verification.
  """
  meshes = Meshes(module)
  # walk, not partitioned_ops: a manual computation over some axes leaves its body
  # sharded over the others (shard_map with axis_names={"x"} of a value sharded on "y").
  for op in walk(main_func(module)):
    if op.name != "stablehlo.dynamic_slice":
      continue
    sharding = value_sharding(op.results[0])
    if sharding is None:
      continue
    local = meshes.local_dims(sharding, tuple(ints(op, "slice_sizes")))
    op.attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(list(local))


def _localize_region_arguments(module: ir.Module) -> None:
  """Gives the regions of a loop left partitioned their local argument types.

  convert-global-to-local retypes a while's operands, results and body ops, but not its
  regions' block arguments (jaxlib 0.10.2), and then fails verification.
  """
  meshes = Meshes(module)
  for op in walk(main_func(module)):
    if op.name != "stablehlo.while" or FALLBACK_ATTR in op.attributes:
      continue
    for region in op.regions:
      for arg, v in zip(region.blocks[0].arguments, op.operands):
        sharding = value_sharding(v)
        if sharding is not None:
          t = ir.RankedTensorType(arg.type)
          arg.set_type(
            ir.RankedTensorType.get(
              list(meshes.local_dims(sharding, tuple(t.shape))), t.element_type
            )
          )


def _relay_loop_arguments(module: ir.Module) -> None:
  """The sharded block arguments of a loop left partitioned reach their users (other
  than the region's terminator) through an identity reshape carrying their sharding.

  convert-global-to-local finds no sharding for a while region's block argument
  (jaxlib 0.10.2), and its patterns that read an operand's sharding then take it for
  replicated: a slice of a sharded loop carry dereferences the missing sharding and
  kills the process (SIGSEGV in StablehloSliceOpPattern), a pad CHECK-fails
  ("isFullyReplicated(outSharding)"), so would the sdy collectives that look at their
  operand's. An op result has its sharding in `sdy.sharding`, which every pattern finds.
  The reshapes are located at _RELAY_MARK and removed by _drop_loop_relays after the
  pass; a carry returned unchanged is not relayed.
  """
  for op in list(walk(main_func(module))):  # also in manual computations (see above)
    if op.name != "stablehlo.while" or FALLBACK_ATTR in op.attributes:
      continue
    shardings = shardings_of(op)
    for region in op.regions:
      block = region.blocks[0]
      first = next(iter(block.operations)).operation
      for arg, sharding in zip(block.arguments, shardings):
        if not is_sharded(sharding):
          continue
        users = [
          (u.owner.operation, u.operand_number)
          for u in arg.uses
          if u.owner.operation.name != "stablehlo.return"
        ]
        if not users:
          continue
        with ir.InsertionPoint(first), ir.Location.name(_RELAY_MARK, op.location):
          relay = ir.Operation.create(
            "stablehlo.reshape",
            results=[op.results[arg.arg_number].type],
            operands=[arg],
            attributes={"sdy.sharding": sdy.TensorShardingPerValueAttr.get([sharding])},
          )
        for user, number in users:
          user.operands[number] = relay.results[0]


def _drop_loop_relays(module: ir.Module) -> None:
  """Removes the reshapes _relay_loop_arguments inserted (identities on local types)."""
  for op in list(walk(main_func(module))):
    if op.name == "stablehlo.reshape" and _RELAY_MARK in str(op.location):
      op.results[0].replace_all_uses_with(op.operands[0])
      op.erase()
