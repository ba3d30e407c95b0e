"""Shardings the program leaves to the compiler, chosen before lowering.

A jit without in_shardings/out_shardings around a shard_map arrives with @main's
parameters and results unannotated, and compile options allowing the compiler to pick
their shardings (allow_spmd_sharding_propagation_to_parameters/_output). XLA's sharding
propagation would give them the shardings of the manual computation that consumes or
produces them; we do the same, for that case only: a parameter used only as operands of
`sdy.manual_computation`s that agree on its sharding, a result returned straight from one.
The choice is written into the module as `sdy.sharding`, so the lowering gives the value
its local shape and the optimized program reports it to JAX (which then lays out the
arguments accordingly, and labels the outputs).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from . import sharding
from ..options import Options, may_choose


def propagate_shardings(module: ir.Module, options: Options) -> None:
  """Annotates @main's unannotated parameters and results where the choice is forced."""
  if options.num_partitions == 1:
    return
  main = next(
    (
      op.operation
      for op in module.body.operations
      if op.operation.name == "func.func" and op.operation.attributes["sym_name"].value == "main"
    ),
    None,
  )
  if main is None:
    return
  block = main.regions[0].blocks[0]
  chosen_args = {}
  for i, arg in enumerate(block.arguments):
    if may_choose(options.propagate_to_parameters, i):
      consumers = {_in_sharding(use.owner, use.operand_number) for use in arg.uses}
      if len(consumers) == 1 and None not in consumers:
        chosen_args[i] = consumers.pop()
  returned = list(block.operations)[-1].operation.operands
  chosen_results = {}
  for j, value in enumerate(returned):
    if may_choose(options.propagate_to_outputs, j) and isinstance(value, ir.OpResult):
      owner = value.owner
      if owner.name == "sdy.manual_computation":
        chosen_results[j] = sharding.per_value(owner.attributes["out_shardings"])[
          value.result_number
        ]
  _annotate(main, "arg_attrs", len(block.arguments), chosen_args)
  _annotate(main, "res_attrs", len(returned), chosen_results)


def _in_sharding(op: ir.Operation, operand: int) -> ir.Attribute | None:
  if op.name != "sdy.manual_computation":
    return None
  return sharding.per_value(op.attributes["in_shardings"])[operand]


def _annotate(func: ir.Operation, name: str, n: int, chosen: dict[int, ir.Attribute]) -> None:
  """Sets sdy.sharding on the values in `chosen` that have none."""
  if not chosen:
    return
  current = (
    list(ir.ArrayAttr(func.attributes[name]))
    if name in func.attributes
    else ([ir.DictAttr.get({})] * n)
  )
  updated = []
  for i, attrs in enumerate(current):
    entries = {a.name: a.attr for a in ir.DictAttr(attrs)}
    if i in chosen and "sdy.sharding" not in entries:
      entries["sdy.sharding"] = chosen[i]
    updated.append(ir.DictAttr.get(entries))
  func.attributes[name] = ir.ArrayAttr.get(updated)
