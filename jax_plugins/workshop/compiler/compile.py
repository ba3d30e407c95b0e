"""compile_program: the entry point PJRT_Client_Compile calls (with the GIL held).

The compile path, one pass per module, in the order compile_program runs them:

  1. parse and options   `_parse` (here), options.parse, layouts.entry_layouts
  2. sharding propagation  spmd.propagate.propagate_shardings: shardings left to the compiler
  3. lowering            lowering.lower_main: the module's @main into a Plan, one rule per
                         op (rules/, one module per op family); it raises NeedsPartitioning
                         where sharded values meet ops outside manual computations, then
  4. partitioning        spmd.partition.partition makes the program per-device code
                         (Shardy's passes; spmd/fallback.py, spmd/unreduced.py) and the
                         lowering runs again on it (`_partition_and_lower`)
     combining           spmd.combine.combine_all_reduces, on the per-device program (before
                         the direct lowering, or after partitioning): independent
                         all-reduces as one
  5. legalize            legalize.legalize (run by lower_main before it checks the
                         results' shardings): dtypes the kernels lack computed in others
  6. cost                cost.cost_analysis, of the lowered plan: the program's
                         operations, however they are fused
     broadcasts          broadcasts.reduce_broadcasts: a reduce of a broadcast or iota
                         reads its small source instead
  7. cse                 cse.eliminate_common_subexpressions
     carries             hoist.forward_unchanged_carries: a loop's result that its body
                         returns unchanged is the loop's operand (no loop writes it out)
  8. fusion and idioms   codegen.compile_loops (small while loops as native code),
                         idioms.fold_index_concatenates (gathers read their index arrays),
                         idioms.replace_idioms, fusion.fuse_plan
  9. codegen             codegen.compile_fusions: large fused regions as native loops
 10. hoist               hoist.hoist_loop_invariants: what an interpreted loop computes
                         again on every iteration, computed once before it
     memory loops        codegen.compile_memory_loops: the loops still interpreted, as
                         native code calling the kernels of their big values' ops
 11. blocks              codegen.compile_blocks: the straight-line small ops left in
                         interpreted loops (threefry hashes, index bookkeeping) as
                         native functions (jit_block)
 12. horizontal          horizontal.fuse_horizontally: independent small generated
                         fusions (an optimizer's per-leaf updates) as one kernel
(7-11 only with `fuse`). The Executable then gets the optimized program (optimized.py)
that JAX's queries read. The sharding facts every pass reads (a value's sharding,
meshes) are in spmd/sharding.py, which depends on none of the passes.
"""

from __future__ import annotations

import hashlib

from jax._src.interpreters import mlir as jax_mlir
from jax._src.lib import _jax
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from . import (
  broadcasts,
  codegen,
  cse,
  errors,
  fusion,
  hoist,
  horizontal,
  idioms,
  layouts,
  lowering,
)
from . import options as options_lib
from . import rules  # noqa: F401  (importing it registers every rule)
from .. import custom_calls
from .cost import cost_analysis
from .optimized import optimized_program
from .options import Options
from .plan import Executable, Plan
from .spmd import combine, partition, propagate

# MLIR bytecode magic; portable artifacts (VHLO, possibly with sdy mixed in) start with it.
_BYTECODE_MAGIC = b"ML\xefR"


def compile_program(
  code: bytes,
  format: str,  # pylint: disable=redefined-builtin
  options: bytes,
  num_devices: int,
  *,
  fuse: bool = True,
) -> Executable:
  """Compiles a StableHLO program into an Executable for the C++ executor.

  Args:
    code: for format "mlir", a StableHLO portable artifact (MLIR bytecode, VHLO with native
      sdy ops) or MLIR text (StableHLO, or legacy MHLO); for format "hlo", a serialized
      HloModuleProto (converted to StableHLO by jaxlib).
    format: PJRT program format, "mlir" or "hlo".
    options: a serialized xla.CompileOptionsProto; empty means defaults.
    num_devices: how many devices the client has; assigned ids must be below it.
    fuse: run the plan optimizations, common subexpression elimination (cse.py), library
      idioms as composite kernels (idioms.py), small while loops as native code
      (codegen/, unless WORKSHOP_CODEGEN=0), then fusion (fusion.py), whose large regions
      codegen compiles to native loops too, and the loop invariants of interpreted loops
      moved out of them (hoist.py); off to see the plain lowering.

  Raises:
    ValueError: unknown format, undecodable program or options, bad device assignment,
      malformed ops.
    NotImplementedError: ops, dtypes, shapes or shardings the plugin doesn't support;
      the message names the op, its dtypes and its source location.
    RuntimeError: a bug in the compiler, naming the op it was lowering.
  """
  if format not in ("mlir", "hlo"):
    raise ValueError(f"Unknown program format '{format}'.")
  custom_calls.discard_inspections()  # inspect_array_sharding answers: given once it compiled
  with jax_mlir.make_ir_context() as ctx, ir.Location.unknown():
    # 1. Parse and options.
    module = _parse(code, format, ctx)
    opts = options_lib.parse(
      options,
      num_devices,
      _module_int(module, "mhlo.num_replicas"),
      _module_int(module, "mhlo.num_partitions"),
    )
    _drop_placement_annotations(module.operation)
    parameter_layouts, output_layouts = layouts.entry_layouts(module)
    layouts.drop_layout_constraints(module.operation)
    # 2. Sharding propagation.
    propagate.propagate_shardings(module, opts)
    text = str(module)  # as received (partitioning rewrites the module)
    # 3-5. Lowering, partitioning if the lowering needs it, legalize.
    module, plan, donations, partitioned = _partition_and_lower(module, opts, ctx)
    custom_calls.deliver_inspections()
    # 6. Cost, of the program's operations, however they are fused.
    cost = cost_analysis(plan)
    # Reductions of broadcasts read the broadcast's source (never building the broadcast).
    plan = broadcasts.reduce_broadcasts(plan)
    if fuse:
      # 7. cse; 8. fusion and idioms; 9. codegen.
      plan = cse.eliminate_common_subexpressions(plan)
      plan = hoist.forward_unchanged_carries(plan)
      plan = codegen.compile_loops(plan)
      plan = idioms.replace_idioms(idioms.fold_index_concatenates(plan))
      plan = codegen.compile_fusions(fusion.fuse_plan(plan))
      # 10. What the interpreted loops compute again on every iteration, once before them.
      plan = hoist.hoist_loop_invariants(plan)
      # The loops left interpreted, again, with their big values in memory.
      plan = codegen.compile_memory_loops(plan)
      # 11. The small straight-line ops left in interpreted loops as native blocks.
      plan = codegen.compile_blocks(plan)
      # 12. Independent small generated fusions as one kernel (horizontal fusion).
      plan = horizontal.fuse_horizontally(plan)
    name = (
      module.operation.attributes["sym_name"].value
      if "sym_name" in module.operation.attributes
      else "main"
    )
    parameter_kinds, output_kinds = _memory_kinds(module)
    return Executable(
      name=name,
      plan=plan,
      num_replicas=opts.num_replicas,
      num_partitions=opts.num_partitions,
      device_assignment=opts.device_assignment,
      device_assignment_proto=opts.device_assignment_proto,
      donations=donations,
      fingerprint=_fingerprint(format, code, options),
      text=text,
      parameter_memory_kinds=parameter_kinds,
      output_memory_kinds=output_kinds,
      parameter_layouts=parameter_layouts,
      output_layouts=output_layouts,
      optimized_program=optimized_program(
        module,
        opts.num_partitions,
        local_types=partitioned,
        layouts=(parameter_layouts, output_layouts),
      ),
      cost_analysis=sorted(cost.items()),
    )


def _partition_and_lower(
  module: ir.Module, opts: Options, ctx: ir.Context
) -> tuple[ir.Module, Plan, list[tuple[int, int]], bool]:
  """Lowers `module` (lowering.lower_main, which legalizes the plan), partitioning it first
  (partition.partition) if the direct lowering needs that.

  Returns:
    The module the plan was lowered from (partitioning rewrites it, or parses it again),
    the plan, its donations, and whether the module was partitioned.
  """
  # The direct lowering runs on the combined program; a program that needs partitioning
  # goes to Shardy as it arrived (its passes take one all-reduce per value).
  source = None
  if combine.combinable(module):
    source = module.operation.get_asm(enable_debug_info=True)
    combine.combine_all_reduces(module)
  try:
    plan, donations = lowering.lower_main(module, opts)
    return module, plan, donations, False
  except errors.NeedsPartitioning:
    # Sharded values meet ops outside manual computations: only a partitioner can say
    # what each device computes. Programs that don't need one (single device, pmap,
    # shard_map) keep the direct lowering.
    if source is not None:
      module = ir.Module.parse(source, ctx)
    source = module.operation.get_asm(enable_debug_info=True)
    custom_calls.discard_inspections()
    try:
      partition.partition(module, opts)
    except NotImplementedError as e:
      # Shardy rejected the per-op partitioning; computing every op whole (inputs
      # gathered, results sliced) is slow but correct. If that fails too, the first
      # error says more.
      module = ir.Module.parse(source, ctx)
      custom_calls.discard_inspections()
      try:
        partition.partition(module, opts, replicate_all=True)
      except NotImplementedError:
        raise e from None
    combine.combine_all_reduces(module)
    plan, donations = lowering.lower_main(module, opts, partitioned=True)
    return module, plan, donations, True


def _parse(code: bytes, format: str, ctx: ir.Context) -> ir.Module:  # pylint: disable=redefined-builtin
  """Deserializes the program into a verified StableHLO module."""
  try:
    if format == "hlo":
      code = _jax.mlir.hlo_to_stablehlo(code)
    if code.startswith(_BYTECODE_MAGIC):
      # Also accepts plain (non-VHLO) StableHLO bytecode.
      module = stablehlo.deserialize_portable_artifact(ctx, code)
    else:
      module = ir.Module.parse(code, ctx)
    if _has_mhlo(module.operation):
      module = _mhlo_to_stablehlo(module, ctx)
    module.operation.verify()
  except (ValueError, ir.MLIRError, _jax.JaxRuntimeError) as e:
    raise ValueError(f"workshop: failed to parse the {format} program: {e}") from None
  return module


def _has_mhlo(op: ir.Operation) -> bool:
  return any(
    child.operation.name.startswith("mhlo.") or _has_mhlo(child.operation)
    for region in op.regions
    for block in region.blocks
    for child in block.operations
  )


def _mhlo_to_stablehlo(module: ir.Module, ctx: ir.Context) -> ir.Module:
  """Legacy MHLO (as in XLA's own C API tests, or HLO imports) -> StableHLO via jaxlib.

  mhlo.copy has no StableHLO counterpart; on values it is the identity, so it goes first.
  """

  def drop_copies(op: ir.Operation) -> None:
    for region in op.regions:
      for block in region.blocks:
        for child in list(block.operations):
          if child.operation.name == "mhlo.copy":
            child.operation.results[0].replace_all_uses_with(child.operation.operands[0])
            child.operation.erase()
          else:
            drop_copies(child.operation)

  drop_copies(module.operation)
  return ir.Module.parse(_jax.mlir.mhlo_to_stablehlo(str(module)), ctx)


def _drop_placement_annotations(op: ir.Operation) -> None:
  """Removes custom_call @annotate_device_placement (device_put to a memory kind in jit).

  On values it is the identity. Where a result lives is also stated by @main's
  `mhlo.memory_kind` result attributes, which the executor follows (_memory_kinds); an
  intermediate moved to host memory needs no move here, both memories being host RAM.
  """
  for region in op.regions:
    for block in region.blocks:
      for child in list(block.operations):
        child = child.operation
        if (
          child.name == "stablehlo.custom_call"
          and ir.StringAttr(child.attributes["call_target_name"]).value
          == "annotate_device_placement"
        ):
          child.results[0].replace_all_uses_with(child.operands[0])
          child.erase()
        else:
          _drop_placement_annotations(child)


def _memory_kinds(module: ir.Module) -> tuple[list[str], list[str]]:
  """The memory kind of each @main parameter and result (`mhlo.memory_kind`, else device)."""
  main = next(
    op.operation
    for op in module.body.operations
    if op.operation.name == "func.func" and op.operation.attributes["sym_name"].value == "main"
  )
  ftype = ir.FunctionType(main.attributes["function_type"].value)

  def kinds(attr_name: str, n: int) -> list[str]:
    if attr_name not in main.attributes:
      return ["device"] * n
    return [
      ir.StringAttr(ir.DictAttr(a)["mhlo.memory_kind"]).value
      if "mhlo.memory_kind" in ir.DictAttr(a)
      else "device"
      for a in ir.ArrayAttr(main.attributes[attr_name])
    ]

  return kinds("arg_attrs", len(ftype.inputs)), kinds("res_attrs", len(ftype.results))


def _module_int(module: ir.Module, name: str) -> int:
  """An integer module attribute such as mhlo.num_partitions; 1 if absent."""
  attrs = module.operation.attributes
  return attrs[name].value if name in attrs else 1


def _fingerprint(*parts: str | bytes) -> str:
  """sha256 over length-prefixed parts, so distinct part lists never hash alike."""
  h = hashlib.sha256()
  for part in parts:
    data = part.encode() if isinstance(part, str) else part
    h.update(len(data).to_bytes(8, "little") + data)
  return h.hexdigest()
