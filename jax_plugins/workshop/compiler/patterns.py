"""Expression trees of scalar regions, for recognising the bodies JAX emits.

Reduce bodies (argmax) and sort comparators (jnp.sort) that JAX emits have a few fixed
shapes; recognising them lets a dedicated kernel replace evaluating the region. `tree`
turns a region value into nested tuples, canonical up to operand order of commutative ops,
so rules compare against trees built with the same helpers:

  ("arg", i)                          block argument i
  ("const", value)                    rank-0 constant, as a Python float/int/bool ("nan")
  ("compare", dir, type, lhs, rhs)    GT/GE are spelled as LT/LE with operands swapped
  (op, operand, ...)                  any other op (operands of and/or/EQ/NE sorted)
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from . import constants, dtypes
from .rules.elementwise import default_compare_type

Tree = tuple

_COMMUTATIVE = {
  "stablehlo.and",
  "stablehlo.or",
  "stablehlo.add",
  "stablehlo.multiply",
  "stablehlo.maximum",
  "stablehlo.minimum",
  "stablehlo.xor",
}


def arg(i: int) -> Tree:
  return ("arg", i)


def compare(direction: str, compare_type: str, lhs: Tree, rhs: Tree) -> Tree:
  """The canonical tree of `compare direction, lhs, rhs, compare_type`."""
  if direction in ("GT", "GE"):
    direction, lhs, rhs = {"GT": "LT", "GE": "LE"}[direction], rhs, lhs
  if direction in ("EQ", "NE"):
    lhs, rhs = sorted((lhs, rhs), key=repr)
  return ("compare", direction, compare_type, lhs, rhs)


def op(name: str, *operands: Tree) -> Tree:
  """The canonical tree of op `name` ("and", "select", ...) applied to `operands`."""
  full = f"stablehlo.{name}"
  if full in _COMMUTATIVE:
    operands = tuple(sorted(operands, key=repr))
  return (name, *operands)


# Regions larger than this are never one of the recognised patterns; the cap also bounds
# the tree's size (shared subexpressions are expanded).
_MAX_OPS = 64


def returned(block: ir.Block) -> list[Tree] | None:
  """The trees of the values `block`'s terminator returns; None for a large block."""
  ops = list(block.operations)
  if len(ops) > _MAX_OPS:
    return None
  memo: dict[ir.Value, Tree] = {}
  return [tree(v, block, memo) for v in ops[-1].operands]


def tree(value: ir.Value, block: ir.Block, memo: dict[ir.Value, Tree]) -> Tree:
  """The expression tree computing `value` in `block` (a region's only block)."""
  if value not in memo:
    memo[value] = _tree(value, block, memo)
  return memo[value]


def _tree(value: ir.Value, block: ir.Block, memo: dict[ir.Value, Tree]) -> Tree:
  value = value.maybe_downcast()
  if isinstance(value, ir.BlockArgument):
    return arg(value.arg_number) if value.owner == block else ("outer",)
  producer = value.owner.operation
  name = producer.name
  t = ir.RankedTensorType(value.type)
  # Constants count wherever they are defined: deserialization may hoist them out.
  if name == "stablehlo.constant" and t.rank == 0:
    dtype = dtypes.lookup(t.element_type)
    if dtype is not None:
      raw = constants.dense_bytes(producer, dtype, ())
      value = np.frombuffer(raw, dtype.numpy)[0].item()
      # NaN != NaN would make trees holding one unequal to themselves.
      return ("const", "nan" if value != value else value)
  if producer.block != block:
    return ("outer",)
  operands = [tree(v, block, memo) for v in producer.operands]
  if name == "stablehlo.compare":
    direction = stablehlo.ComparisonDirectionAttr(producer.attributes["comparison_direction"])
    if "compare_type" in producer.attributes:
      compare_type = stablehlo.ComparisonTypeAttr(producer.attributes["compare_type"]).value
    else:
      compare_type = default_compare_type(producer.operands[0].type)
    return compare(direction.value, compare_type, *operands)
  if name.startswith("stablehlo.") and len(producer.regions) == 0:
    return op(name.removeprefix("stablehlo."), *operands)
  return ("opaque", name, value.result_number)
