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
  5. Our fallback (`_fall_back`): ops that convert-global-to-local cannot turn into
     per-device code, or would get wrong (slices, pads, windows, sorts along sharded dims,
     loops, gathers, custom calls, chlo ops, variadic reductions), run on the whole value: their
     sharded operands are resharded to replicated, their results resharded back. Each
     such op carries `workshop.replicated`, which the optimized program (`as_text()`)
     shows as the frontend attribute `workshop_partitioning` on the op.
  6. `func.func(sdy-reshard-to-collectives)`: each reshard becomes `sdy.all_gather`,
     `all_slice`, `all_to_all`, `collective_permute` or `reduce_scatter`.
  7. A guard (`_check_local`): uneven shardings, resharding over sub-axes, and all-reduces
     of unknown combiners are compile errors naming op and sharding.
  8. `sdy-convert-global-to-local`: local (shard) types everywhere, manual computations
     inlined, sdy collectives as StableHLO collectives with explicit replica groups; then
     all-reduces completing a max/min/product reduction get that combiner back (the
     pass always sums).

The result is per-device SPMD code, like a shard_map body, which the lowering and the
collective kernels already run. @main keeps `sdy.sharding` on its (now local) parameters
and results, which the optimized program reports to JAX.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy, stablehlo

from . import errors
from .options import Options, may_choose
from .sharding import PINNED_ATTR, Meshes, is_replicated, per_value, pinned_partition

# StableHLO ops whose per-device form is the same op on local shapes, once
# insert-explicit-reshards has made operand and result shardings agree (elementwise) or
# resolved the op's sharding rule (the rest); convert-global-to-local rewrites them.
_LOCAL_OPS = frozenset("stablehlo." + name for name in """
    abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros
    divide exponential exponential_minus_one floor imag is_finite log log_plus_one logistic
    maximum minimum multiply negate not or popcnt power real reduce_precision remainder
    round_nearest_afz round_nearest_even rsqrt select shift_left shift_right_arithmetic
    shift_right_logical sign sine sqrt subtract tan tanh xor
    broadcast_in_dim transpose reshape dot_general iota constant optimization_barrier
    """.split()) | {"sdy.constant", "sdy.reshard", "sdy.manual_computation", "func.return",
                    "sdy.all_gather", "sdy.all_slice", "sdy.all_reduce", "sdy.all_to_all",
                    "sdy.collective_permute", "sdy.reduce_scatter"}

# Single-operand reductions with these bodies are local too: a reduction over a sharded
# dim leaves a partial result per device that an all-reduce with the same body completes.
# (Shardy's all_reduce is a sum, so _fix_all_reduce_bodies puts the body back.)
_COMBINERS = frozenset("stablehlo." + name for name in
                       ("add", "multiply", "maximum", "minimum", "and", "or"))

FALLBACK_ATTR = "workshop.replicated"

# The location name of the all-reduces _mark_unreduced_partials inserts (and
# _drop_marked_all_reduces removes again after convert-global-to-local).
_UNREDUCED_MARK = "workshop.unreduced_partial"

# The location name of the identity reshapes _relay_loop_arguments inserts (and
# _drop_loop_relays removes again after convert-global-to-local).
_RELAY_MARK = "workshop.loop_argument_relay"

# A bound on inlining, against (invalid) recursive programs.
_MAX_INLINED_CALLS = 100_000


def partition(module: ir.Module, options: Options, *,
              replicate_all: bool = False) -> list[str]:
  """Rewrites the global program `module` into per-device code, in place.

  `replicate_all`: every op runs on the whole value (the fallback for a program the
  per-op partitioning rejects): inputs gathered, results sliced to their shardings.

  Returns:
    One line per op that runs on the whole value (replicated) instead of its shard.

  Raises:
    NotImplementedError: Shardy rejects the program; the message names its op and
      sharding.
  """
  _check_even(module)
  inline_calls(module)
  _unify_meshes(module)
  _unpin(module)
  _close_unchoosable(module, options)
  _fold_empty(module)
  # symbol-dce: the inlined callees.
  _run(module, "symbol-dce", "sdy-propagation-pipeline")
  _drop_sub_axes(module)
  _drop_uneven_axes(module)
  _unreduce_constants(module)
  _answer_inspections(module)
  _run(module, "func.func(sdy-insert-explicit-reshards{enable-full-version=true})")
  _fold_empty(module)
  _drop_repeated_all_reduces(module)
  _unreduce_whole_results(module)
  _lower_replicated_to_unreduced(module)
  _lower_sharded_to_unreduced(module)
  notes = _fall_back(module, replicate_all)
  _lower_replicated_to_unreduced(module)  # the fallback's results that are unreduced
  _run(module, "func.func(sdy-reshard-to-collectives)")
  _check_local(module)
  _localize_region_arguments(module)
  _localize_slice_sizes(module)
  _mark_unreduced_partials(module)
  _relay_loop_arguments(module)
  _run(module, "sdy-convert-global-to-local")
  _drop_loop_relays(module)
  _drop_marked_all_reduces(module)
  _fix_all_reduce_bodies(module)
  return notes


def inline_calls(module: ir.Module) -> None:
  """Replaces every func.call and composite (at any depth) by a copy of its callee's
  (decomposition's) body; the callees go with symbol-dce.

  Propagation does not look into composites (jax.lax.top_k's would come out replicated
  where XLA:CPU keeps the batch sharded); the plugin's composite kernels (top_k) are
  traded for their decompositions in partitioned programs."""
  funcs = {op.attributes["sym_name"].value: op.operation for op in module.body.operations
           if op.operation.name == "func.func"}
  main = funcs["main"]
  for _ in range(_MAX_INLINED_CALLS):
    call = next((o for o in _walk(main) if o.name in ("func.call", "stablehlo.composite")),
                None)
    if call is None:
      break
    callee = funcs[call.attributes[
        "callee" if call.name == "func.call" else "decomposition"].value]
    body = callee.regions[0].blocks[0]
    mapping = dict(zip(body.arguments, call.operands))
    *ops, ret = [o.operation for o in body.operations]
    with ir.InsertionPoint(call):
      for o in ops:
        clone = o.clone()
        _remap(clone, mapping)
        for old, new in zip(o.results, clone.results):
          mapping[old] = new
    for r, v in zip(call.results, ret.operands, strict=True):
      r.replace_all_uses_with(mapping.get(v, v))
    call.erase()
  else:
    raise NotImplementedError(
        f"workshop: more than {_MAX_INLINED_CALLS} calls to inline (recursion?)")


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
  target = _mesh_name(module)
  meshes = {op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
            for op in module.body.operations if op.operation.name == "sdy.mesh"}
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
    renames[name] = ({a: b for (a, _), (b, _) in zip(axes(mesh), axes(goal))} if same
                     else None)
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
          target_ref, [sdy.DimensionShardingAttr.get([], d.is_closed, d.priority)
                       for d in dims])
    axis = lambda a: sdy.AxisRefAttr.get(rename[a.name], a.sub_axis_info)
    return sdy.TensorShardingAttr.get(
        target_ref,
        [sdy.DimensionShardingAttr.get([axis(sdy.AxisRefAttr(a)) for a in d.axes],
                                       d.is_closed, d.priority) for d in dims],
        [axis(sdy.AxisRefAttr(a)) for a in sharding.replicated_axes],
        [axis(sdy.AxisRefAttr(a)) for a in sharding.unreduced_axes])

  def moved_dicts(array: ir.Attribute) -> ir.Attribute:
    dicts = [{a.name: a.attr for a in ir.DictAttr(d)} for d in ir.ArrayAttr(array)]
    for d in dicts:
      if "sdy.sharding" in d:
        d["sdy.sharding"] = moved(d["sdy.sharding"])
    return ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])

  for top in module.body.operations:
    for op in (top.operation, *_walk(top.operation)):
      if op.name == "func.func":
        for name in ("arg_attrs", "res_attrs"):
          if name in op.attributes:
            op.attributes[name] = moved_dicts(op.attributes[name])
      if op.name == "sdy.manual_computation":
        meshes_used = {mesh_of(s) for s in sdy.TensorShardingPerValueAttr(
            op.attributes["in_shardings"]).shardings} | {mesh_of(s) for s in
            sdy.TensorShardingPerValueAttr(op.attributes["out_shardings"]).shardings}
        rename = next((renames[m] for m in meshes_used if m in renames), None)
        if rename is not None:
          op.attributes["manual_axes"] = sdy.ManualAxesAttr.get(
              [ir.StringAttr.get(rename[a]) for a in
               re.findall(r'"([^"]*)"', str(op.attributes["manual_axes"]))])
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
  mesh = _mesh_name(module)
  meshes = {op.attributes["sym_name"].value: op for op in module.body.operations
            if op.operation.name == "sdy.mesh"}
  if mesh is not None and not list(sdy.MeshAttr(meshes[mesh].attributes["mesh"]).axes):
    mesh = None  # Only maximal meshes: let propagation choose the results' sharding.
  for op in _walk(_main(module)):
    partition = pinned_partition(op)
    if partition is None or PINNED_ATTR in op.attributes:
      continue
    op.attributes[PINNED_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                    partition)
    if op.results and mesh is not None:
      op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
          [_replicated(mesh, _rank(r)) for r in op.results])
    else:
      del op.attributes["sdy.sharding"]


def _answer_inspections(module: ir.Module) -> None:
  """Each `custom_call @InspectSharding` (jax.debug.inspect_array_sharding) is answered with
  the sharding propagation gave its operand (XLA's partitioner answers at the same point)
  and removed: it computes nothing, and as a custom call the fallback would gather its
  operand."""
  from .. import callbacks  # pylint: disable=import-outside-toplevel

  meshes = {op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
            for op in module.body.operations if op.operation.name == "sdy.mesh"}
  for op in list(_walk(_main(module))):
    if op.name != "stablehlo.custom_call" or \
        ir.StringAttr(op.attributes["call_target_name"]).value != callbacks.INSPECT_TARGET:
      continue
    key = ir.StringAttr(op.attributes["backend_config"]).value \
        if "backend_config" in op.attributes else ""
    manual, parent = False, op.parent
    while parent is not None and parent.name != "func.func":
      manual = manual or parent.name == "sdy.manual_computation"
      parent = parent.parent
    sharding, mesh_axes, dims = _value_sharding(op.operands[0]), (), None
    if sharding is not None and not manual:
      attr = sdy.TensorShardingAttr(sharding)
      mesh = attr.mesh_or_ref
      mesh = meshes[mesh.value] if isinstance(mesh, ir.FlatSymbolRefAttr) else \
          sdy.MeshAttr(mesh)
      mesh_axes = [(sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in mesh.axes]
      dims = [[sdy.AxisRefAttr(a).name for a in sdy.DimensionShardingAttr(d).axes]
              for d in attr.dimension_shardings]
    try:
      callbacks.inspection(key, mesh_axes, dims, manual=manual)
    except ValueError as e:
      raise NotImplementedError(f"workshop: {e}") from None
    for r in op.results:
      r.replace_all_uses_with(op.operands[0])
    op.erase()


def _walk(op: ir.Operation) -> Iterator[ir.Operation]:
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        yield child.operation
        yield from _walk(child.operation)


def _remap(op: ir.Operation, mapping: dict) -> None:
  """Points the operands of `op` and of the ops nested in it at their copies."""
  for i, v in enumerate(op.operands):
    if v in mapping:
      op.operands[i] = mapping[v]
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        _remap(child.operation, mapping)


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
        f"workshop: automatic SPMD partitioning failed in {', '.join(passes)}: "
        f"{message}") from None


def _main(module: ir.Module) -> ir.Operation:
  return next(op.operation for op in module.body.operations
              if op.operation.name == "func.func"
              and op.operation.attributes["sym_name"].value == "main")


def _mesh_name(module: ir.Module) -> str | None:
  """The module's first mesh with axes (JAX adds an empty one for keys made outside jit)."""
  meshes = [op for op in module.body.operations if op.operation.name == "sdy.mesh"]
  for op in meshes:
    if list(sdy.MeshAttr(op.attributes["mesh"]).axes):
      return op.attributes["sym_name"].value
  return meshes[0].attributes["sym_name"].value if meshes else None


def _replicated(mesh: str | ir.Attribute, rank: int,
                like: ir.Attribute | None = None) -> ir.Attribute:
  """Replicated on `like`'s mesh if given (a reshard may not change mesh), else `mesh`."""
  if like is not None:
    mesh = sdy.TensorShardingAttr(like).mesh_or_ref
  return sdy.TensorShardingAttr.get(
      mesh, [sdy.DimensionShardingAttr.get([], True) for _ in range(rank)])


def _close_unchoosable(module: ir.Module, options: Options) -> None:
  """Parameters and results JAX left unannotated and the compiler may not choose for are
  replicated (XLA's default); the rest stay open for propagation to choose."""
  mesh = _mesh_name(module)
  if mesh is None:
    return
  main = _main(module)
  ftype = ir.FunctionType(main.attributes["function_type"].value)
  for name, types, flags in (("arg_attrs", ftype.inputs, options.propagate_to_parameters),
                             ("res_attrs", ftype.results, options.propagate_to_outputs)):
    current = (list(ir.ArrayAttr(main.attributes[name])) if name in main.attributes
               else [ir.DictAttr.get({})] * len(types))
    updated = []
    for i, (attrs, t) in enumerate(zip(current, types)):
      entries = {a.name: a.attr for a in ir.DictAttr(attrs)}
      if "sdy.sharding" not in entries and not may_choose(flags, i) and \
          isinstance(t, ir.RankedTensorType):
        entries["sdy.sharding"] = _replicated(mesh, t.rank)
      updated.append(ir.DictAttr.get(entries))
    main.attributes[name] = ir.ArrayAttr.get(updated)


def _check_even(module: ir.Module) -> None:
  """Parameters and results are split evenly (JAX only makes such shardings; Shardy's
  passes would abort the process on others)."""
  main = _main(module)
  meshes = Meshes(module)
  ftype = ir.FunctionType(main.attributes["function_type"].value)
  for name, role, types in (("arg_attrs", "parameter", ftype.inputs),
                            ("res_attrs", "result", ftype.results)):
    if name not in main.attributes:
      continue
    for i, (attrs, t) in enumerate(zip(ir.ArrayAttr(main.attributes[name]), types)):
      attrs = ir.DictAttr(attrs)
      if "sdy.sharding" not in attrs or not isinstance(t, ir.RankedTensorType):
        continue
      counts = meshes.shard_counts(attrs["sdy.sharding"])
      if any(d % n for d, n in zip(t.shape, counts)):
        raise errors.unsupported(
            main, f"{role} {i} of type {t} is sharded as {attrs['sdy.sharding']}, which "
            "does not split it evenly; uneven shardings are not supported")


def _value_sharding(value: ir.Value) -> ir.Attribute | None:
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
        value.result_number]
  func = value.owner.owner.operation
  if func.name == "stablehlo.while":
    # A loop region's argument is the carry, sharded like the loop's result.
    return _value_shardings(func)[value.arg_number]
  if func.name != "func.func" or "arg_attrs" not in func.attributes:
    return None
  attrs = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[value.arg_number])
  return attrs["sdy.sharding"] if "sdy.sharding" in attrs else None


def _is_sharded(sharding: ir.Attribute | None) -> bool:
  return not is_replicated(sharding)


def _fall_back(module: ir.Module, replicate_all: bool = False) -> list[str]:
  """Makes each op that is not `_is_local` and touches a sharded value run replicated.

  Runs after insert-explicit-reshards (run before, that pass would shard the operands
  again wherever the op's sharding rule allows it), so the op is rewired by hand: its
  sharded operands (and sharded values its regions capture) go through an `sdy.reshard`
  to replicated, its results are declared replicated and resharded to what their users
  were given, an all-reduce that completed its partial result is dropped (the result is
  whole now), and every sharding inside its regions is dropped (everything is whole).
  reshard-to-collectives then makes all-gathers and all-slices of the new reshards.
  """
  mesh = _mesh_name(module)
  meshes = Meshes(module)
  notes, dead = [], []
  block = _main(module).regions[0].blocks[0]
  for op in [o.operation for o in block.operations]:
    if replicate_all:
      if op.name.startswith("sdy.") or op.name == "func.return":
        continue
    elif op.name == "sdy.all_reduce" or _is_local(op, meshes):
      continue
    inner = list(_walk(op))
    defined_inside = {r for o in inner for r in o.results}
    defined_inside |= {a for o in [op, *inner] for reg in o.regions for b in reg.blocks
                       for a in b.arguments}
    captured = {v for o in inner for v in o.operands
                if v not in defined_inside and _is_sharded(_value_sharding(v))}
    sharded_in = [i for i, v in enumerate(op.operands) if _is_sharded(_value_sharding(v))]
    result_shardings = [_value_sharding(r) for r in op.results]
    nested = any(o.name.startswith("sdy.") or "sdy.sharding" in o.attributes for o in inner)
    if not (sharded_in or captured or nested or any(map(_is_sharded, result_shardings))):
      continue
    with ir.InsertionPoint(op), op.location:
      for i in sharded_in:
        v = op.operands[i]
        op.operands[i] = _reshard(v, _replicated(mesh, _rank(v), _value_sharding(v)))
      whole = {v: _reshard(v, _replicated(mesh, _rank(v), _value_sharding(v)))
               for v in captured}
    for o in inner:
      for i, v in enumerate(o.operands):
        if v in whole:
          o.operands[i] = whole[v]
    _replicate_nested(op)
    if op.results:
      op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
          [_replicated(mesh, _rank(r), _value_sharding(r)) for r in op.results])
    for r, sharding in zip(op.results, result_shardings):
      for use in list(r.uses):
        user = use.owner.operation
        if user.name == "sdy.all_reduce":
          with ir.InsertionPoint(user), user.location:
            replacement = _reshard(r, user.attributes["out_sharding"])
          user.results[0].replace_all_uses_with(replacement)
          dead.append(user)  # erased after the walk, which still lists it
      if _is_sharded(sharding) and _divides(sharding, r, meshes) and \
          "\":(" not in str(sharding) and list(r.uses):
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


def _reshard_whole(value: ir.Value, sharding: ir.Attribute) -> list[ir.Operation]:
  """The ops taking a whole (replicated) `value` to `sharding`, in order.

  Unreduced axes are partial sums: only the devices at coordinate 0 of those axes keep
  the value (`sdy.replicated_to_unreduced`, lowered by _lower_replicated_to_unreduced),
  so the partial sums add up to it once; a reshard straight to an unreduced sharding
  keeps it on every device (reshard-to-collectives makes it an all-slice), and the sum
  over the axes counts it once per device.
  """
  attr = sdy.TensorShardingAttr(sharding)
  unreduced = list(attr.unreduced_axes)
  if not unreduced:
    return [_reshard(value, sharding).owner.operation]
  dims = _without_unreduced(sharding, unreduced)
  chain = [_reshard(value, dims).owner.operation] if _is_sharded(dims) else []
  source = chain[-1].results[0] if chain else value
  chain.append(ir.Operation.create(
      "sdy.replicated_to_unreduced", results=[value.type], operands=[source],
      attributes={"axes": _axis_list(unreduced), "out_sharding": sharding}))
  return chain


def _divides(sharding: ir.Attribute | None, value: ir.Value, meshes: Meshes) -> bool:
  """Whether `sharding` splits every dim of `value` evenly (convert-global-to-local aborts
  the process on any other)."""
  if sharding is None or not isinstance(value.type, ir.RankedTensorType):
    return True
  dims = ir.RankedTensorType(value.type).shape
  return all(d % n == 0 for d, n in zip(dims, meshes.shard_counts(sharding)))


def _drop_sub_axes(module: ir.Module) -> None:
  """Intermediates propagation sharded over a sub-axis ("i":(2)2, from a reshape that
  splits a sharded dim) lose that axis: the all-gathers and all-slices
  convert-global-to-local makes for sub-axes disagree on which device holds which shard
  (jaxlib 0.10.2), so no reshard may involve one. Fewer sharded axes is always valid."""
  for op in _walk(_main(module)):
    if "sdy.sharding" not in op.attributes:
      continue
    per_value = sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings
    if not any("\":(" in str(s) for s in per_value):
      continue
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
        [_without_sub_axes(sdy.TensorShardingAttr(s)) for s in per_value])


# Ops that compute nothing when their results have no elements (_fold_empty): StableHLO
# ops without regions or effects, and sdy's value-preserving ones.
_NOT_FOLDED = frozenset("stablehlo." + name for name in """
    custom_call rng rng_bit_generator all_gather all_reduce all_to_all reduce_scatter
    collective_permute collective_broadcast send recv infeed outfeed after_all
    create_token optimization_barrier partition_id replica_id
    """.split())
_FOLDED_SDY = frozenset({"sdy.reshard", "sdy.sharding_constraint", "sdy.all_gather",
                         "sdy.all_slice", "sdy.all_to_all", "sdy.collective_permute"})


def _fold_empty(module: ir.Module) -> None:
  """Ops whose every result has no elements become empty constants (XLA's
  ZeroSizedHloElimination).

  There is nothing to compute or move, and the passes break on such values: an
  associative_scan run op by op (eager) over a 16-element array sharded 2 ways comes to
  an add of two 0-element arrays sharded differently, whose reshard convert-global-to-local
  rejects ("dimension size of operand at 'all_gather_dim' cannot be zero"). A constant
  keeps the result's sharding (a reshard's: the one it asked for).
  """
  for op in list(_partitioned_ops(_main(module))):
    if op.regions or not op.results or op.name in _NOT_FOLDED or not (
        op.name.startswith("stablehlo.") or op.name in _FOLDED_SDY) or \
        op.name == "stablehlo.constant":
      continue
    types = [r.type for r in op.results]
    if not all(isinstance(t, ir.RankedTensorType) and
               0 in ir.RankedTensorType(t).shape for t in types):
      continue
    shardings = [_value_sharding(r) for r in op.results]
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
  convert-global-to-local aborts the process on them (jaxlib 0.10.2), and _check_local
  refused them. Fewer sharded axes is always valid: each dim keeps the longest prefix
  of its axes that splits it evenly (none for a zero-size dim), and insert-explicit-reshards then reshards between
  the value and its producer and users as their rules need.
  """
  meshes = Meshes(module)
  for op in _walk(_main(module)):
    if "sdy.sharding" in op.attributes and op.results:
      per_value = sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings
      if len(per_value) != len(op.results):
        continue
      even = [_evenly(s, r.type, meshes) for s, r in zip(per_value, op.results)]
      if any(e != s for e, s in zip(even, per_value)):
        op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(even)
    elif op.name in ("sdy.sharding_constraint", "sdy.reshard") and \
        "sharding" in op.attributes:
      even = _evenly(op.attributes["sharding"], op.results[0].type, meshes)
      if even != op.attributes["sharding"]:
        op.attributes["sharding"] = even


def _evenly(sharding: ir.Attribute, t: ir.Type, meshes: Meshes) -> ir.Attribute:
  """`sharding` with each dim's axes cut to the longest prefix that divides the dim."""
  if not isinstance(t, ir.RankedTensorType):
    return sharding
  attr = sdy.TensorShardingAttr(sharding)
  sizes = meshes.axis_sizes(sharding)
  dims, changed = [], False
  for n, d in zip(ir.RankedTensorType(t).shape, map(sdy.DimensionShardingAttr,
                                                     attr.dimension_shardings)):
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
  return sdy.TensorShardingAttr.get(attr.mesh_or_ref, dims, list(attr.replicated_axes),
                                    list(attr.unreduced_axes))


def _without_sub_axes(sharding: sdy.TensorShardingAttr) -> ir.Attribute:
  dims = []
  for d in map(sdy.DimensionShardingAttr, sharding.dimension_shardings):
    axes = []
    for a in d.axes:
      if sdy.AxisRefAttr(a).sub_axis_info is not None:
        break  # the axes after it would shard a different way without it
      axes.append(a)
    dims.append(sdy.DimensionShardingAttr.get(axes, d.is_closed, d.priority))
  return sdy.TensorShardingAttr.get(
      sharding.mesh_or_ref, dims,
      [a for a in sharding.replicated_axes if sdy.AxisRefAttr(a).sub_axis_info is None],
      [a for a in sharding.unreduced_axes if sdy.AxisRefAttr(a).sub_axis_info is None])


def _rank(value: ir.Value) -> int:
  return ir.RankedTensorType(value.type).rank


def _reshard(value: ir.Value, sharding: ir.Attribute) -> ir.Value:
  return ir.Operation.create("sdy.reshard", results=[value.type], operands=[value],
                             attributes={"sharding": sharding}).results[0]


def _combiner(op: ir.Operation) -> str | None:
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
  rank = _rank(op.results[0])
  for v in (*op.operands, *op.results):
    sharding = _value_sharding(v)
    if _rank(v) != rank:
      continue
    if sharding is not None:
      for d, dim in enumerate(sdy.TensorShardingAttr(sharding).dimension_shardings):
        if sdy.DimensionShardingAttr(dim).axes:
          dims.add(d)
  return dims


def _ints(op: ir.Operation, name: str) -> list[int]:
  return list(ir.DenseI64ArrayAttr(op.attributes[name])) if name in op.attributes else []


def _passes_through(op: ir.Operation) -> bool:
  """For ops that move data along some dims: whether the sharded dims are untouched, so
  each device's shard maps to the same shard (convert-global-to-local rewrites only
  such ops, and aborts on others)."""
  dims = _sharded_dims(op)
  shape = ir.RankedTensorType(op.operands[0].type).shape
  if op.name == "stablehlo.slice":
    start, limit, stride = (_ints(op, n) for n in ("start_indices", "limit_indices",
                                                   "strides"))
    return all(start[d] == 0 and limit[d] == shape[d] and stride[d] == 1 for d in dims)
  if op.name == "stablehlo.pad":
    lo, hi, interior = (_ints(op, n) for n in ("edge_padding_low", "edge_padding_high",
                                               "interior_padding"))
    return all(lo[d] == hi[d] == interior[d] == 0 for d in dims)
  if op.name == "stablehlo.gather":
    # From a whole operand (an embedding table), each device gathers its own indices.
    return not _is_sharded(_value_sharding(op.operands[0]))
  if op.name == "stablehlo.dynamic_slice":
    sizes = _ints(op, "slice_sizes")
    return all(sizes[d] == shape[d] for d in dims)
  if op.name == "stablehlo.dynamic_update_slice":
    update = ir.RankedTensorType(op.operands[1].type).shape
    return all(update[d] == shape[d] for d in dims)
  if op.name == "stablehlo.concatenate":
    return ir.IntegerAttr(op.attributes["dimension"]).value not in dims
  if op.name == "stablehlo.reverse":
    return not dims & set(_ints(op, "dimensions"))
  if op.name == "stablehlo.sort":
    return ir.IntegerAttr(op.attributes["dimension"]).value not in dims
  if op.name == "stablehlo.reduce_window":
    if len(op.operands) != 2:
      return False
    rank = len(shape)
    window = _ints(op, "window_dimensions")
    strides = _ints(op, "window_strides") or [1] * rank
    base = _ints(op, "base_dilations") or [1] * rank
    dil = _ints(op, "window_dilations") or [1] * rank
    pad = (list(ir.DenseIntElementsAttr(op.attributes["padding"]))
           if "padding" in op.attributes else [0] * (2 * rank))
    return all(window[d] == strides[d] == base[d] == dil[d] == 1 and
               pad[2 * d] == pad[2 * d + 1] == 0 for d in dims)
  return False


_PASS_THROUGH_OPS = frozenset("stablehlo." + name for name in
                              ("slice", "pad", "reverse", "sort", "reduce_window",
                               "concatenate", "dynamic_slice", "dynamic_update_slice",
                               "gather"))


def _is_local(op: ir.Operation, meshes: Meshes) -> bool:
  """Whether convert-global-to-local makes a correct per-device form of `op`."""
  if op.name == "stablehlo.while":
    # A loop whose every op runs on shards: the carries keep their shardings.
    return all(_is_local(o, meshes) or o.name in ("stablehlo.return", "sdy.return")
               or not any(_is_sharded(_value_sharding(v)) for v in (*o.operands, *o.results))
               for o in _walk(op))
  if op.name == "stablehlo.reduce":
    if _combiner(op) is None:
      return False
  elif op.name in _PASS_THROUGH_OPS:
    if not _passes_through(op):
      return False
  elif op.name not in _LOCAL_OPS:
    return False
  if not _reduced_axes_in_mesh_order(op, meshes):
    return False
  values = [*op.operands, *op.results]
  # Sub-axes ("i":(2)2, from reshapes that split a sharded dim): the replica groups
  # convert-global-to-local gives their all-gathers disagree with the shards its
  # all-slices take (jaxlib 0.10.2), so such values are not left sharded.
  return all(_divides(_value_sharding(v), v, meshes) and
             "\":(" not in str(_value_sharding(v)) for v in values)


def _reduced_axes_in_mesh_order(op: ir.Operation, meshes: Meshes) -> bool:
  """False for a dot (reduction) whose contracted (reduced) dims are sharded over axes
  out of mesh order, e.g. [{"model", "data"}] on a ("data", "model") mesh.

  The all-reduce completing it must list its axes in mesh order for
  reshard-to-collectives' verifier, and in the dims' order for convert-global-to-local,
  which aborts the process otherwise (jaxlib 0.10.2).
  """
  if op.name == "stablehlo.dot_general":
    dims = stablehlo.DotDimensionNumbers(
        op.attributes["dot_dimension_numbers"]).lhs_contracting_dimensions
  elif op.name == "stablehlo.reduce":
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
  else:
    return True
  sharding = _value_sharding(op.operands[0])
  if sharding is None:
    return True
  order = list(meshes.axis_sizes(sharding))
  dim_shardings = sdy.TensorShardingAttr(sharding).dimension_shardings
  axes = [order.index(sdy.AxisRefAttr(a).name) for d in dims
          for a in sdy.DimensionShardingAttr(dim_shardings[d]).axes]
  return axes == sorted(axes)


def _contracting_axes(op: ir.Operation) -> list[ir.Attribute]:
  """The axes sharding a dot's contracted dims (its lhs's), in dim order: the axes
  convert-global-to-local wants the dot's all-reduce over."""
  if op.name == "stablehlo.dot_general":
    dims = stablehlo.DotDimensionNumbers(
        op.attributes["dot_dimension_numbers"]).lhs_contracting_dimensions
  elif op.name == "stablehlo.dot":
    dims = [_rank(op.operands[0]) - 1]
  else:
    return []
  sharding = _value_sharding(op.operands[0])
  if sharding is None:
    return []
  dim_shardings = sdy.TensorShardingAttr(sharding).dimension_shardings
  return [a for d in dims for a in sdy.DimensionShardingAttr(dim_shardings[d]).axes]


def _reduction_axes(op: ir.Operation) -> list[str]:
  """The printed axis refs of an sdy.all_reduce's `reduction_axes`."""
  return re.findall(r'"[^"]*"(?::\(\d+\)\d+)?', str(op.attributes["reduction_axes"]))


def _unreduced_axes(sharding: ir.Attribute | None) -> list[str]:
  if sharding is None:
    return []
  return [str(a).removeprefix("#sdy<axis_ref").removesuffix(">")
          for a in sdy.TensorShardingAttr(sharding).unreduced_axes]


def _sums_unreduced(op: ir.Operation) -> bool:
  """Whether an sdy.all_reduce completes a value `unreduced` over every axis it reduces
  (a parameter JAX passes as partial sums, a value constrained unreduced): a sum, the
  meaning of `unreduced`."""
  axes = _reduction_axes(op)
  return bool(axes) and set(axes) <= set(_unreduced_axes(_value_sharding(op.operands[0])))


def _drop_repeated_all_reduces(module: ir.Module) -> None:
  """An sdy.all_reduce of an all-reduce's result over the same axes is dropped.

  Propagation's export completes a value constrained from unreduced to reduced with an
  all-reduce, and insert-explicit-reshards then adds a second one over the same axes
  (jaxlib 0.10.2), which would count every partial sum twice (a reshard of an
  `unreduced={"y"}` array came out twice XLA:CPU's). The second one's operand is whole
  along those axes already.
  """
  for op in list(_walk(_main(module))):
    if op.name != "sdy.all_reduce" or not isinstance(op.operands[0], ir.OpResult):
      continue
    producer = op.operands[0].owner.operation
    if producer.name != "sdy.all_reduce":
      continue
    axes = set(_reduction_axes(op))
    done = set(_reduction_axes(producer)) - set(
        _unreduced_axes(producer.attributes["out_sharding"]))
    if axes and axes <= done:
      if producer.attributes["out_sharding"] != op.attributes["out_sharding"]:
        with ir.InsertionPoint(op), op.location:
          replacement = _reshard(op.operands[0], op.attributes["out_sharding"])
      else:
        replacement = op.operands[0]
      op.results[0].replace_all_uses_with(replacement)
      op.erase()


def _unreduce_constants(module: ir.Module) -> None:
  """A constant (or iota) propagation made `unreduced` over axes A becomes the replicated
  constant and an `sdy.replicated_to_unreduced` over A (lowered as the other ones are).

  `unreduced` means the devices' values sum to the value; a constraint of a constant to
  unreduced (the cotangent seed of a `reduced` value's gradient: jax.grad through a
  shard_map with out_specs=P(reduced={"x"})) comes out of propagation's import as the
  constant's own sharding, which convert-global-to-local gives every device (twice the
  sum over a 2-device axis). XLA:CPU keeps the value on the devices at coordinate 0 of A
  and zeros on the others.
  """
  for op in list(_partitioned_ops(_main(module))):
    if op.name not in ("sdy.constant", "stablehlo.constant", "stablehlo.iota") or \
        "sdy.sharding" not in op.attributes:
      continue
    sharding = sdy.TensorShardingAttr(
        sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings[0])
    axes = list(sharding.unreduced_axes)
    if not axes:
      continue
    result = op.results[0]
    users = [(u.owner.operation, u.operand_number) for u in result.uses]
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
        [_without_unreduced(sharding, axes)])
    with ir.InsertionPoint(op), op.location:
      summed = ir.Operation.create(
          "sdy.replicated_to_unreduced", results=[result.type], operands=[result],
          attributes={"axes": _axis_list(axes), "out_sharding": sharding})
    summed.move_after(op)
    for user, number in users:
      user.operands[number] = summed.results[0]


def _unreduce_whole_results(module: ir.Module) -> None:
  """An elementwise or shape op whose result propagation made `unreduced` over axes none
  of its operands is unreduced over computes the whole value on every device; the axes
  move to an `sdy.replicated_to_unreduced` after it.

  `jnp.array(x, out_sharding=P(unreduced={"x"}))` is a convert constrained unreduced:
  the constraint becomes the convert's own sharding (jaxlib 0.10.2), every device held x
  and the sum over "x" counted it once per device; XLA:CPU keeps x on the devices at
  coordinate 0 of the axes and zeros on the others, as replicated_to_unreduced does.
  Dots and reductions are left alone: their partial results are what unreduced means.
  """
  for op in list(_partitioned_ops(_main(module))):
    if op.name not in _LOCAL_OPS or not op.name.startswith("stablehlo.") or \
        op.name == "stablehlo.dot_general" or len(op.results) != 1:
      continue
    sharding = _value_sharding(op.results[0])
    if sharding is None:
      continue
    held = {a for v in op.operands for a in _unreduced_axes(_value_sharding(v))}
    attr = sdy.TensorShardingAttr(sharding)
    new = [a for a in attr.unreduced_axes
           if str(a).removeprefix("#sdy<axis_ref").removesuffix(">") not in held]
    if not new:
      continue
    result = op.results[0]
    users = [(u.owner.operation, u.operand_number) for u in result.uses]
    op.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
        [_without_unreduced(sharding, new)])
    with ir.InsertionPoint(op), op.location:
      summed = ir.Operation.create(
          "sdy.replicated_to_unreduced", results=[result.type], operands=[result],
          attributes={"axes": _axis_list(new), "out_sharding": sharding})
    summed.move_after(op)
    for user, number in users:
      user.operands[number] = summed.results[0]


def _lower_replicated_to_unreduced(module: ir.Module) -> None:
  """`sdy.replicated_to_unreduced` over axes A (a reshard from P() to
  P(unreduced={"x"})) keeps the value on the devices at coordinate 0 of every axis in A
  and zeros on the others, as XLA:CPU does, so the partial sums add up to the value.

  convert-global-to-local has no pattern for the op (jaxlib 0.10.2: "failed to legalize
  operation 'sdy.replicated_to_unreduced'"); it becomes a select on a per-partition
  table read at `partition_id` (the way that pass makes all-slices).
  """
  meshes = _mesh_attrs(module)
  for op in list(_walk(_main(module))):
    if op.name != "sdy.replicated_to_unreduced":
      continue
    out_sharding = sdy.TensorShardingAttr(op.attributes["out_sharding"])
    axes = _reduction_axes_of(op.attributes["axes"])
    if any(":" in a for a in axes):
      raise errors.unsupported(op, "unreduced over a sub-axis")
    axes = [a.strip('"') for a in axes]
    coords = _device_coordinates(_mesh_of(out_sharding, meshes))
    keep = [int(all(c[a] == 0 for a in axes)) for c in coords]
    x = op.operands[0]
    t = ir.RankedTensorType(x.type)
    i1 = ir.IntegerType.get_signless(1)
    with ir.InsertionPoint(op), op.location:
      flag = _partition_table(keep, i1)
      whole = _without_unreduced(out_sharding, list(out_sharding.unreduced_axes))
      mask = ir.Operation.create(
          "stablehlo.broadcast_in_dim", results=[ir.RankedTensorType.get(t.shape, i1)],
          operands=[flag], attributes={
              "broadcast_dimensions": ir.DenseI64ArrayAttr.get([]),
              "sdy.sharding": sdy.TensorShardingPerValueAttr.get([whole])}).result
      zero = _zeros(t, whole)
      out = ir.Operation.create(
          "stablehlo.select", results=[t], operands=[mask, x, zero], attributes={
              "sdy.sharding": sdy.TensorShardingPerValueAttr.get([out_sharding])}).result
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _lower_sharded_to_unreduced(module: ir.Module) -> None:
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
  meshes, sizes = _mesh_attrs(module), Meshes(module)
  for op in list(_walk(_main(module))):
    if op.name != "sdy.sharded_to_unreduced":
      continue
    x = op.operands[0]
    in_sharding = _value_sharding(x)
    out_sharding = sdy.TensorShardingAttr(op.attributes["out_sharding"])
    per_dim = [_reduction_axes_of(a) for a in re.findall(
        r"\{([^}]*)\}", str(op.attributes["axes"]))]
    if any(":" in a for axes in per_dim for a in axes):
      raise errors.unsupported(op, "unreduced over a sub-axis")
    t = ir.RankedTensorType(x.type)
    if in_sharding is None or len(per_dim) != t.rank:
      raise errors.unsupported(op, f"operand sharding {in_sharding} and axes "
                               f"{op.attributes['axes']} do not match")
    in_dims = [[str(a) for a in sdy.DimensionShardingAttr(d).axes]
               for d in sdy.TensorShardingAttr(in_sharding).dimension_shardings]
    local = sizes.local_dims(in_sharding, tuple(t.shape))
    coords = _device_coordinates(_mesh_of(out_sharding, meshes))
    axis_size = sizes.axis_sizes(out_sharding)
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op), op.location:
      starts = []
      for d, axes in enumerate(per_dim):
        names = [a.strip('"') for a in axes]
        held = [a.removeprefix("#sdy<axis_ref").removesuffix(">").strip().strip('"')
                for a in in_dims[d]]
        if names and held[len(held) - len(names):] != names:
          raise errors.unsupported(
              op, f"axes {names} are not the last of dim {d}'s axes {held}")
        offsets = []
        for c in coords:
          index = 0
          for a in names:
            index = index * axis_size[a] + c[a]
          offsets.append(index * local[d])
        starts.append(_partition_table(offsets, i32))
      whole = _without_unreduced(out_sharding, list(out_sharding.unreduced_axes))
      zero = _zeros(t, whole)
      out = ir.Operation.create(
          "stablehlo.dynamic_update_slice", results=[t], operands=[zero, x, *starts],
          attributes={"sdy.sharding": sdy.TensorShardingPerValueAttr.get(
              [op.attributes["out_sharding"]])}).result
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _zeros(t: ir.RankedTensorType, sharding: ir.Attribute) -> ir.Value:
  """Zeros of type `t` sharded as `sharding`: a broadcast scalar (convert-global-to-local
  keeps a sharded constant's global value, which then fails verification)."""
  scalar = ir.RankedTensorType.get([], t.element_type)
  zero = ir.Operation.create("stablehlo.constant", results=[scalar], attributes={
      "value": ir.DenseElementsAttr.get_splat(scalar, _zero_of(t.element_type))}).result
  return ir.Operation.create(
      "stablehlo.broadcast_in_dim", results=[t], operands=[zero], attributes={
          "broadcast_dimensions": ir.DenseI64ArrayAttr.get([]),
          "sdy.sharding": sdy.TensorShardingPerValueAttr.get([sharding])}).result


def _mesh_attrs(module: ir.Module) -> dict[str, sdy.MeshAttr]:
  return {op.attributes["sym_name"].value: sdy.MeshAttr(op.attributes["mesh"])
          for op in module.body.operations if op.operation.name == "sdy.mesh"}


def _mesh_of(sharding: sdy.TensorShardingAttr,
             meshes: dict[str, sdy.MeshAttr]) -> sdy.MeshAttr:
  mesh = sharding.mesh_or_ref
  return meshes[mesh.value] if isinstance(mesh, ir.FlatSymbolRefAttr) else sdy.MeshAttr(mesh)


def _device_coordinates(mesh: sdy.MeshAttr) -> list[dict[str, int]]:
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


def _partition_table(values: list[int], element_type: ir.Type) -> ir.Value:
  """A scalar: `values[partition_id]` (a constant table read at the partition id)."""
  i32 = ir.IntegerType.get_signless(32)
  pid = ir.Operation.create(
      "stablehlo.partition_id",
      results=[ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))]).result
  pid = ir.Operation.create("stablehlo.convert", results=[
      ir.RankedTensorType.get([], i32)], operands=[pid]).result
  n = len(values)
  dtype = np.bool_ if element_type == ir.IntegerType.get_signless(1) else np.int32
  table = ir.Operation.create("stablehlo.constant", results=[
      ir.RankedTensorType.get([n], element_type)], attributes={
          "value": ir.DenseElementsAttr.get(np.array(values, dtype), type=element_type,
                                            shape=[n])}).result
  entry = ir.Operation.create(
      "stablehlo.dynamic_slice", results=[ir.RankedTensorType.get([1], element_type)],
      operands=[table, pid],
      attributes={"slice_sizes": ir.DenseI64ArrayAttr.get([1])}).result
  return ir.Operation.create("stablehlo.reshape", results=[
      ir.RankedTensorType.get([], element_type)], operands=[entry]).result


def _reduction_axes_of(attr: ir.Attribute) -> list[str]:
  return re.findall(r'"[^"]*"(?::\(\d+\)\d+)?', str(attr))


def _zero_of(element_type: ir.Type) -> ir.Attribute:
  if isinstance(element_type, ir.IntegerType):
    return ir.IntegerAttr.get(element_type, 0)
  if isinstance(element_type, ir.ComplexType):
    raise NotImplementedError("workshop: an unreduced complex value")
  return ir.FloatAttr.get(element_type, 0.0)


def _mark_unreduced_partials(module: ir.Module) -> None:
  """A dot whose partial result is kept unreduced gets an all-reduce that is not one.

  A dot contracting a sharded dim leaves a partial sum per device. When its result is
  `unreduced` over those axes (jax `out_sharding=P(..., unreduced={"y"})`, the transpose
  of a `reduced` operand), nothing completes it: the partial sums are the value. But
  convert-global-to-local CHECK-aborts the process (jaxlib 0.10.2: "Expected sharded
  contracting dot_general to have one user and the user is an sdy.all_reduce") unless
  the dot's one user is an `sdy.all_reduce` over exactly its contracted axes. Such dots
  get that all-reduce, located at _UNREDUCED_MARK, in front of all their users (an
  all-reduce insert-explicit-reshards made over part of the axes follows it), and
  _drop_marked_all_reduces takes it out again after the pass: the local dot is the
  partial sum the unreduced sharding asks for.
  """
  meshes = Meshes(module)
  for op in list(_partitioned_ops(_main(module))):
    if op.name not in ("stablehlo.dot_general", "stablehlo.dot"):
      continue
    axes = _contracting_axes(op)
    if not axes:
      continue
    for operand in op.operands[:2]:
      if isinstance(operand, ir.OpResult) and \
          operand.owner.operation.name == "stablehlo.pad" and \
          not _is_zero_constant(operand.owner.operation.operands[1]):
        # convert-global-to-local CHECK-aborts on this ("Padding value must be zero
        # for sharded contracting dot_general").
        raise errors.unsupported(
            op, "a dot contracting a sharded dim of an operand padded with a nonzero "
            "value")
    order = list(meshes.axis_sizes(_value_sharding(op.operands[0])))
    names = [sdy.AxisRefAttr(a).name for a in axes]
    if [order.index(n) for n in names] != sorted(order.index(n) for n in names):
      # The all-reduce must list them in mesh order, the pass wants them in dims' order.
      raise errors.unsupported(
          op, f"a dot contracting dims sharded out of mesh order ({names})")
    users = list(op.results[0].uses)
    if len(users) == 1 and users[0].owner.operation.name == "sdy.all_reduce" and \
        str(users[0].owner.operation.attributes["reduction_axes"]) == \
        str(_axis_list(axes)):
      continue
    result = op.results[0]
    sharding = _value_sharding(result)
    with ir.InsertionPoint(op), ir.Location.name(_UNREDUCED_MARK, op.location):
      marked = ir.Operation.create(
          "sdy.all_reduce", results=[result.type], operands=[result],
          attributes={"reduction_axes": _axis_list(axes),
                      "out_sharding": _without_unreduced(sharding, axes)})
    marked.move_after(op)
    for use in users:
      use.owner.operation.operands[use.operand_number] = marked.results[0]


def _is_zero_constant(value: ir.Value) -> bool:
  if not isinstance(value, ir.OpResult) or \
      value.owner.operation.name not in ("stablehlo.constant", "sdy.constant"):
    return False
  attr = ir.DenseElementsAttr(value.owner.operation.attributes["value"])
  if not attr.is_splat:
    return False
  v = attr.get_splat_value()
  for cls in (ir.FloatAttr, ir.IntegerAttr):
    try:
      return cls(v).value == 0
    except (TypeError, ValueError):
      pass
  return False


def _axis_list(axes: list[ir.Attribute]) -> ir.Attribute:
  return ir.Attribute.parse("#sdy<axis_ref_list{" + ", ".join(map(str, axes)) + "}>")


def _without_unreduced(sharding: ir.Attribute, axes: list[ir.Attribute]) -> ir.Attribute:
  attr = sdy.TensorShardingAttr(sharding)
  names = {str(a) for a in axes}
  return sdy.TensorShardingAttr.get(
      attr.mesh_or_ref, list(attr.dimension_shardings), list(attr.replicated_axes),
      [a for a in attr.unreduced_axes if str(a) not in names])


def _drop_marked_all_reduces(module: ir.Module) -> None:
  """Removes the all-reduces _mark_unreduced_partials inserted: their operands (a dot's
  partial sums) are what their users take."""
  for op in list(_walk(_main(module))):
    if op.name == "stablehlo.all_reduce" and _UNREDUCED_MARK in str(op.location):
      op.results[0].replace_all_uses_with(op.operands[0])
      op.erase()


def _fix_all_reduce_bodies(module: ir.Module) -> None:
  """An all-reduce completing a max (min, product, ...) reduction combines with max.

  After convert-global-to-local every all-reduce sums; the ones whose operand comes
  straight from a reduction (checked in _check_local) get that reduction's body op.
  """
  for op in _walk(_main(module)):
    if op.name != "stablehlo.all_reduce":
      continue
    producer = (op.operands[0].owner.operation
                if isinstance(op.operands[0], ir.OpResult) else None)
    kind = _combiner(producer) if producer is not None else None
    if kind is None or kind == "stablehlo.add":
      continue
    block = op.regions[0].blocks[0]
    old = list(block.operations)[0].operation
    with ir.InsertionPoint(old), old.location:
      new = ir.Operation.create(kind, results=[old.results[0].type],
                                operands=list(block.arguments))
    old.results[0].replace_all_uses_with(new.results[0])
    old.erase()


def _replicate_nested(op: ir.Operation) -> None:
  """Inside a replicated op everything is whole: sdy ops become identities (a reshard,
  constraint or collective of a whole value is the value) and shardings go. A manual
  computation (shard_map in a loop body) still takes and gives shards: its operands are
  resharded to its in_shardings and its results back to replicated, which
  reshard-to-collectives makes all-slices and all-gathers."""
  manual = []
  for child in list(_walk(op)):
    if child.name == "sdy.manual_computation":
      manual.append(child)
    elif child.name.startswith("sdy.") and child.name != "sdy.return" and \
        len(child.operands) == len(child.results) == 1:
      child.results[0].replace_all_uses_with(child.operands[0])
      child.erase()
    elif "sdy.sharding" in child.attributes:
      del child.attributes["sdy.sharding"]
  for m in manual:
    if _inside_manual(m, op):
      continue  # nested in another manual computation: already per-device code
    ins = sdy.TensorShardingPerValueAttr(m.attributes["in_shardings"]).shardings
    outs = sdy.TensorShardingPerValueAttr(m.attributes["out_shardings"]).shardings
    with ir.InsertionPoint(m), m.location:
      for i, sharding in enumerate(ins):
        m.operands[i] = _reshard(m.operands[i], sharding)
    for r, sharding in zip(m.results, outs):
      users = [(u.owner.operation, u.operand_number) for u in r.uses]
      with ir.InsertionPoint(m), m.location:
        whole = _reshard(r, _replicated(None, _rank(r), sharding))
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


def _partitioned_ops(op: ir.Operation) -> Iterator[ir.Operation]:
  """The ops nested in `op` that run on shards: not inside replicated ops or manual
  computations (already per-device code)."""
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        child = child.operation
        yield child
        if child.name != "sdy.manual_computation" and FALLBACK_ATTR not in child.attributes:
          yield from _partitioned_ops(child)


def _localize_slice_sizes(module: ir.Module) -> None:
  """A dynamic_slice left partitioned takes its local slice sizes.

  Its sharded dims are whole (`_passes_through`), so the local size of each is the local
  dim; convert-global-to-local retypes the op but keeps the global `slice_sizes`
  (jaxlib 0.10.2), which then fails verification.
  """
  meshes = Meshes(module)
  for op in _partitioned_ops(_main(module)):
    if op.name != "stablehlo.dynamic_slice":
      continue
    sharding = _value_sharding(op.results[0])
    if sharding is None:
      continue
    local = meshes.local_dims(sharding, tuple(_ints(op, "slice_sizes")))
    op.attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(list(local))


def _localize_region_arguments(module: ir.Module) -> None:
  """Gives the regions of a loop left partitioned their local argument types.

  convert-global-to-local retypes a while's operands, results and body ops, but not its
  regions' block arguments (jaxlib 0.10.2), and then fails verification.
  """
  meshes = Meshes(module)
  for op in _walk(_main(module)):
    if op.name != "stablehlo.while" or FALLBACK_ATTR in op.attributes:
      continue
    for region in op.regions:
      for arg, v in zip(region.blocks[0].arguments, op.operands):
        sharding = _value_sharding(v)
        if sharding is not None:
          t = ir.RankedTensorType(arg.type)
          arg.set_type(ir.RankedTensorType.get(
              list(meshes.local_dims(sharding, tuple(t.shape))), t.element_type))


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
  for op in list(_partitioned_ops(_main(module))):
    if op.name != "stablehlo.while" or FALLBACK_ATTR in op.attributes:
      continue
    shardings = _value_shardings(op)
    for region in op.regions:
      block = region.blocks[0]
      first = next(iter(block.operations)).operation
      for arg, sharding in zip(block.arguments, shardings):
        if not _is_sharded(sharding):
          continue
        users = [(u.owner.operation, u.operand_number) for u in arg.uses
                 if u.owner.operation.name != "stablehlo.return"]
        if not users:
          continue
        with ir.InsertionPoint(first), ir.Location.name(_RELAY_MARK, op.location):
          relay = ir.Operation.create(
              "stablehlo.reshape", results=[op.results[arg.arg_number].type],
              operands=[arg],
              attributes={"sdy.sharding": sdy.TensorShardingPerValueAttr.get([sharding])})
        for user, number in users:
          user.operands[number] = relay.results[0]


def _value_shardings(op: ir.Operation) -> list[ir.Attribute | None]:
  """The sharding of each result of `op` (None: none recorded)."""
  if "sdy.sharding" not in op.attributes:
    return [None] * len(op.results)
  return list(sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings)


def _drop_loop_relays(module: ir.Module) -> None:
  """Removes the reshapes _relay_loop_arguments inserted (identities on local types)."""
  for op in list(_walk(_main(module))):
    if op.name == "stablehlo.reshape" and _RELAY_MARK in str(op.location):
      op.results[0].replace_all_uses_with(op.operands[0])
      op.erase()


def _check_local(module: ir.Module) -> None:
  """Every op left sharded is one convert-global-to-local handles correctly.

  A guard: on some ops and shardings that pass aborts the process instead of failing.

  Raises:
    NotImplementedError: naming the op and the sharding.
  """
  meshes = Meshes(module)
  for op in _partitioned_ops(_main(module)):
    if op.name in ("stablehlo.return", "sdy.return"):
      continue
    for v in (*op.operands, *op.results):
      if not _divides(_value_sharding(v), v, meshes):
        raise errors.unsupported(
            op, f"sharding {_value_sharding(v)} does not divide {v.type} evenly; uneven "
            "shardings are not supported")
    if op.name == "sdy.all_reduce":
      producer = (op.operands[0].owner.operation
                if isinstance(op.operands[0], ir.OpResult) else None)
      if not _sums_unreduced(op) and (
          producer is None or not (producer.name == "stablehlo.dot_general" or
                                   _combiner(producer) is not None)):
        raise errors.unsupported(
            op, "a partial result that is not a reduction's or a dot's; the combiner "
            "of its all-reduce is unknown")
    if op.name.startswith("sdy.") and "\":(" in str(_value_sharding(op.results[0])
                                                  if op.results else ""):
      raise errors.unsupported(
          op, f"resharding over a sub-axis ({_value_sharding(op.results[0])}) is not "
          "supported")
    if op.name.startswith("sdy.") or FALLBACK_ATTR in op.attributes or \
        _is_local(op, meshes):
      continue
    if any(_is_sharded(_value_sharding(v)) for v in (*op.operands, *op.results)):
      raise errors.unsupported(
          op, f"sharded as {_value_sharding(op.results[0]) if op.results else '?'} after "
          "partitioning, which the per-device conversion does not support")
