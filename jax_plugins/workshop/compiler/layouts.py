"""Device layouts of @main's parameters and results.

JAX states the layout it wants for each parameter and result of @main as the attribute
`mhlo.layout_mode` (jax/_src/interpreters/mlir.py; xla/pjrt/layout_mode.h):
  * absent or "default": the backend's default layout, dense row-major here as on XLA:CPU;
  * "auto": the compiler chooses;
  * an xla::Layout in text form, e.g. "{0,1}": that layout (`minor_to_major`, fastest-varying
    dimension first; "{0,1}" is column-major for rank 2).

A layout is returned as its minor_to_major list, always explicit. Kernels only ever see
row-major arrays: the executor transposes arguments in another layout on the way in and
results on the way out (runtime/executable.cc), so layouts cost a copy, never a kernel.

For "auto" we choose as XLA:CPU's layout assignment does in the cases measured against it
(tests/compiler/test_layouts.py): parameters get the default layout; a result takes the layout that
flows to it from the parameters through transposes (laid out so that they are bitcasts,
as XLA's ChooseOutputLayoutFromOperandLayout does) and elementwise ops (the one layout
their operands agree on; splat constants and broadcast scalars constrain nothing; operands
that disagree give row-major); every other op gives row-major. `custom_call
@LayoutConstraint` (with_sharding_constraint with a Format, with_layout_constraint) is a
copy into its layout on XLA:CPU, which reaches the result only when it is returned
directly by a one-partition program; elsewhere its value is row-major. XLA propagates
through more ops than these; there an "auto" result may be row-major here where XLA:CPU
picks another layout, which is still a valid answer to "auto".

Tiled layouts ("{1,0:T(8,128)}") are refused at compile time. XLA:CPU accepts them and
reports them back but stores the elements untiled (measured), a label without effect;
this plugin reports only layouts its memory has.
"""

from __future__ import annotations

import math
import re

import numpy as np
from jaxlib.mlir import ir

from . import optable

LAYOUT_MODE = "mhlo.layout_mode"
LAYOUT_CONSTRAINT = "LayoutConstraint"

# Ops whose result has the shape of every tensor operand and whose elements depend only on
# the elements at the same index (so the result can be laid out like the operands): the op
# table's elementwise ops, and bitcast_convert, which the table does not mark elementwise
# (lane plans and fusion do not run it) but is element for element where the widths agree
# (where they differ, the shapes differ and no operand lends its layout).
SAME_LAYOUT_OPS = frozenset(
  "stablehlo." + name for name in optable.ELEMENTWISE | {"bitcast_convert"}
) | {"sdy.sharding_constraint", "sdy.reshard"}

_LAYOUT_TEXT = re.compile(r"^\{\s*(\d+(?:\s*,\s*\d+)*)?\s*\}$")


def row_major(rank: int) -> list[int]:
  return list(range(rank - 1, -1, -1))


def parse_layout(text: str, rank: int, what: str) -> list[int]:
  """minor_to_major of the xla::Layout text `text` ("{1,0}") for a rank-`rank` array.

  Raises:
    NotImplementedError: a tiled layout ("{1,0:T(8,128)}"); buffers here are dense.
    ValueError: text that is not a layout, or not a permutation of the `rank` dims.
  """
  match = _LAYOUT_TEXT.match(text.strip())
  if match is None:
    if ":" in text:
      raise NotImplementedError(
        f"workshop: {what} asks for the layout {text}; only dense layouts (a dimension "
        "order, no tiles or memory space) are supported"
      )
    raise ValueError(
      f"workshop: {what} has the layout mode {text!r}, which is neither "
      "'default', 'auto' nor a layout such as '{1,0}'"
    )
  order = [int(d) for d in match.group(1).split(",")] if match.group(1) else []
  if sorted(order) != list(range(rank)):
    raise ValueError(
      f"workshop: {what} asks for the layout {text}, which is not a "
      f"permutation of its {rank} dimensions"
    )
  return order


def _main(module: ir.Module) -> ir.Operation:
  return next(
    op.operation
    for op in module.body.operations
    if op.operation.name == "func.func"
    and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"
  )


def _modes(func: ir.Operation, attr_name: str, n: int) -> list[str]:
  """Each parameter's (arg_attrs) or result's (res_attrs) layout mode; "default" if unset."""
  if attr_name not in func.attributes:
    return ["default"] * n
  modes = []
  for attrs in ir.ArrayAttr(func.attributes[attr_name]):
    attrs = ir.DictAttr(attrs)
    modes.append(ir.StringAttr(attrs[LAYOUT_MODE]).value if LAYOUT_MODE in attrs else "default")
  return modes


def _rank(value_type: ir.Type) -> int:
  return ir.RankedTensorType(value_type).rank if isinstance(value_type, ir.RankedTensorType) else 0


def entry_layouts(module: ir.Module) -> tuple[list[list[int]], list[list[int]]]:
  """(parameter layouts, result layouts) of @main, each a minor_to_major list.

  Raises:
    NotImplementedError, ValueError: as parse_layout, naming the parameter or result.
  """
  main = _main(module)
  ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
  params = []
  for i, (mode, t) in enumerate(zip(_modes(main, "arg_attrs", len(ftype.inputs)), ftype.inputs)):
    rank = _rank(t)
    params.append(
      row_major(rank)
      if mode in ("default", "auto")
      else parse_layout(mode, rank, f"parameter {i} of @main")
    )
  result_modes = _modes(main, "res_attrs", len(ftype.results))
  attrs = module.operation.attributes
  single_partition = (
    "mhlo.num_partitions" not in attrs or ir.IntegerAttr(attrs["mhlo.num_partitions"]).value == 1
  )
  flowing = _flowing_layouts(main, params, single_partition) if "auto" in result_modes else None
  results = []
  for i, (mode, t) in enumerate(zip(result_modes, ftype.results)):
    rank = _rank(t)
    if mode == "default":
      results.append(row_major(rank))
    elif mode == "auto":
      results.append(flowing[i])
    else:
      results.append(parse_layout(mode, rank, f"result {i} of @main"))
  return params, results


def _flowing_layouts(
  main: ir.Operation, params: list[list[int]], single_partition: bool
) -> list[list[int]]:
  """The layout reaching each operand of @main's return (see the module docstring).

  Values whose layout is free (splat constants and broadcasts of a scalar, which XLA lays
  out however their user wants) constrain nothing; an elementwise op takes the one layout
  its other operands agree on, row-major if they disagree.
  """
  block = main.regions[0].blocks[0]
  known: dict[ir.Value, list[int] | None] = {}  # None: free
  constrained: dict[ir.Value, list[int]] = {}  # results of custom_call @LayoutConstraint
  for arg, layout in zip(block.arguments, params):
    known[arg] = layout

  def layout_of(value: ir.Value) -> list[int] | None:
    return known[value] if value in known else row_major(_rank(value.type))

  for op in block.operations:
    op = op.operation
    if op.name == "func.return":
      return [
        constrained[v]
        if v in constrained and single_partition
        else layout_of(v) or row_major(_rank(v.type))
        for v in op.operands
      ]
    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
      continue
    result = op.results[0]
    if op.name == "stablehlo.transpose":
      perm = [int(p) for p in ir.DenseI64ArrayAttr(op.attributes["permutation"])]
      inverse = [0] * len(perm)
      for i, p in enumerate(perm):
        inverse[p] = i
      # Result dim i is operand dim perm[i]: in memory, the result's dims go in the order
      # of the operand dims they come from.
      operand = layout_of(op.operands[0])
      known[result] = None if operand is None else [inverse[d] for d in operand]
    elif (
      op.name == "stablehlo.custom_call"
      and ir.StringAttr(op.attributes["call_target_name"]).value == LAYOUT_CONSTRAINT
      and "result_layouts" in op.attributes
    ):
      # XLA:CPU makes the constraint a copy into that layout, which reaches the result
      # only when returned directly by a one-partition program; users of the copy, and
      # partitioned programs, see row-major (measured against XLA:CPU, tests/compiler/test_layouts.py).
      layout = ir.ArrayAttr(op.attributes["result_layouts"])[0]
      constrained[result] = [int(d) for d in np.asarray(ir.DenseIntElementsAttr(layout))]
      known[result] = row_major(_rank(result.type))
    elif _is_free(op):
      known[result] = None
    elif op.name in SAME_LAYOUT_OPS:
      shape = ir.RankedTensorType(result.type).shape
      layouts = {
        tuple(layout)
        for v in op.operands
        if isinstance(v.type, ir.RankedTensorType)
        and ir.RankedTensorType(v.type).shape == shape
        and (layout := layout_of(v)) is not None
      }
      known[result] = (
        None if not layouts else list(layouts.pop()) if len(layouts) == 1 else row_major(len(shape))
      )
  raise ValueError("workshop: @main has no func.return")  # a verified module always has one


def _is_free(op: ir.Operation) -> bool:
  """A splat constant or a broadcast of a scalar: any layout holds it alike."""
  if op.name == "stablehlo.constant":
    return ir.DenseElementsAttr(op.attributes["value"]).is_splat
  if op.name == "stablehlo.broadcast_in_dim":
    operand = op.operands[0].type
    return (
      isinstance(operand, ir.RankedTensorType)
      and math.prod(ir.RankedTensorType(operand).shape) == 1
    )
  return False


def drop_layout_constraints(op: ir.Operation) -> None:
  """Removes every custom_call @LayoutConstraint: on values it is the identity, and the
  layout of an intermediate does not matter here (kernels read and write row-major); where
  it reaches a result, entry_layouts has already read it."""
  for region in op.regions:
    for block in region.blocks:
      for child in list(block.operations):
        child = child.operation
        if (
          child.name == "stablehlo.custom_call"
          and ir.StringAttr(child.attributes["call_target_name"]).value == LAYOUT_CONSTRAINT
        ):
          child.results[0].replace_all_uses_with(child.operands[0])
          child.erase()
        else:
          drop_layout_constraints(child)
