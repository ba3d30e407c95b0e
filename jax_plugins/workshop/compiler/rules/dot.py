"""Family `dot` (dot_general): kernels/dot/dot.cc.

dot_general's operands are converted to the dtype its result is computed in (8-bit
integer and 8/4-bit float operands have their own paths), and transposes around it are
folded into its dimension numbers (see _dot_general).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes
from ..lowering import Lowering, register
from ..optable import FLOATS, MINIFLOATS, SPECS
from ..upcast import convert_slot, element_dtype, emit_converted


@register("stablehlo.dot_general")
def _dot_general(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: batch and contracting dimensions of each side.

  Result dims are [batch..., lhs free..., rhs free...]; precision and algorithm
  attributes are hints we don't need for exact-dtype CPU kernels. Operands are converted
  to the result's compute dtype (operands of another dtype come from
  preferred_element_type, e.g. s8 x s8 -> s32 or bf16 x bf16 -> f32), so the kernel
  sees one dtype.

  Transposes are folded in, as XLA's algebraic simplifier does: an operand that is a
  (chain of) transposes used only here becomes the untransposed value with its dimension
  numbers permuted (the kernel reads strided operands in place), and a transpose that is
  the result's only user and swaps the lhs and rhs free dims makes this the dot of the
  swapped operands ((A B)^T = B^T A^T), writing the transposed result directly.
  """
  dn = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
  attrs = {
    "lhs_batch": list(dn.lhs_batching_dimensions),
    "rhs_batch": list(dn.rhs_batching_dimensions),
    "lhs_contract": list(dn.lhs_contracting_dimensions),
    "rhs_contract": list(dn.rhs_contracting_dimensions),
  }
  if _minifloat_dot(ctx, op, attrs):
    return
  if _narrow_int_dot(op):
    # The kernel reads 8-bit operands as they are (kernels/dot/dot.cc NarrowIntGemm):
    # exact f32 GEMMs, where converting to s32 first would take the integer loop.
    ctx.emit(op, attrs)
    return
  if not _foldable(op):
    emit_converted(ctx, op, attrs)
    return
  sides = []  # (value, batch dims, contracting dims) of lhs and rhs
  for i, side in enumerate(("lhs", "rhs")):
    value, perm = _folded_operand(op, i)
    sides.append(
      (
        value,
        [perm[d] for d in attrs[f"{side}_batch"]],
        [perm[d] for d in attrs[f"{side}_contract"]],
      )
    )
  result_op = op
  if (transpose := _folded_result_transpose(op)) is not None:
    sides.reverse()
    result_op = transpose
  (lhs, lhs_batch, lhs_contract), (rhs, rhs_batch, rhs_contract) = sides
  ctx.emit_kernel(
    op,
    "dot_general",
    ctx.operand_slots(op, [lhs, rhs]),
    ctx.result_slots(result_op),
    {
      "lhs_batch": lhs_batch,
      "rhs_batch": rhs_batch,
      "lhs_contract": lhs_contract,
      "rhs_contract": rhs_contract,
    },
  )


def _higher_precision(a: dtypes.DType, b: dtypes.DType) -> dtypes.DType:
  """Of two float dtypes, the one XLA's primitive_util::HigherPrecisionType picks: more
  range (the overflow exponent), then more significand bits, then more bits."""

  def key(d):
    info = ml_dtypes.finfo(d.numpy)
    return info.maxexp, info.nmant, d.numpy.itemsize

  return a if key(a) >= key(b) else b


def _minifloat_dot(ctx: Lowering, op: ir.Operation, attrs: dict) -> bool:
  """Emits a dot_general with 8/4-bit float operands or result as XLA:CPU computes it,
  and returns True; else (no minifloat, or one only beside types of 16 or more bits that
  hold it exactly) returns False.

  XLA:CPU computes such a dot in one type T, the higher precision of the three types
  (_higher_precision): operands of another type are first rounded to T (e4m3fn to e5m2
  loses a significand bit); T is computed as f16 (f32 products and sums, rounded to f16,
  then to T: two roundings) unless its range exceeds f16's (f8E8M0FNU: one rounding from
  f32); then T is converted to the result type. Converting the operands straight to f32
  and rounding once differs from XLA:CPU in the last bit of about half the results of an
  e5m2 x e4m3fn -> e5m2 dot.
  """
  lhs, rhs = (element_dtype(op, v) for v in op.operands)
  out = element_dtype(op, op.results[0])
  if not {lhs.name, rhs.name, out.name} & MINIFLOATS:
    return False
  if not all(d.name in FLOATS | MINIFLOATS for d in (lhs, rhs, out)):
    return False
  common = _higher_precision(_higher_precision(lhs, rhs), out)
  if common.name not in MINIFLOATS:
    return False
  f32, f16 = dtypes.by_name("f32"), dtypes.by_name("f16")
  ins = [
    convert_slot(ctx, op, convert_slot(ctx, op, s, common), f32) for s in ctx.operand_slots(op)
  ]
  [result] = ctx.result_slots(op)
  dims = ctx.slots[result][1]
  dot = ctx.temp_slot(f32, dims)
  ctx.emit_kernel(op, "dot_general", ins, [dot], attrs)
  if ml_dtypes.finfo(common.numpy).maxexp <= ml_dtypes.finfo(np.float16).maxexp:
    dot = convert_slot(ctx, op, dot, f16)
  if common != out:
    dot = convert_slot(ctx, op, dot, common)
  ctx.emit_kernel(op, "convert", [dot], [result])
  return True


def _narrow_int_dot(dot: ir.Operation) -> bool:
  """s8/u8 operands (either mix) into an s32 result: preferred_element_type=int32."""
  return element_dtype(dot, dot.results[0]).name == "s32" and all(
    element_dtype(dot, v).name in ("s8", "u8") for v in dot.operands
  )


def _foldable(dot: ir.Operation) -> bool:
  """Only dots the kernel runs on their declared values (no conversions) fold transposes."""
  result = element_dtype(dot, dot.results[0])
  return result.name in SPECS["dot_general"].kernel and all(
    element_dtype(dot, v) == result for v in dot.operands
  )


def _single_user(value: ir.Value) -> ir.Operation | None:
  uses = list(value.uses)
  return uses[0].owner.operation if len(uses) == 1 else None


def _transpose_chain(dot: ir.Operation, i: int) -> list[ir.Operation]:
  """The transposes operand i of `dot` is computed by, nearest first, each used only by the
  next (the first by `dot`)."""
  chain = []
  value = dot.operands[i]
  while (
    isinstance(value.owner, (ir.Operation, ir.OpView))
    and value.owner.operation.name == "stablehlo.transpose"
    and _single_user(value) is not None
    and not _is_folded_result(value.owner.operation)
  ):
    chain.append(value.owner.operation)
    value = chain[-1].operands[0]
  return chain


def _is_folded_result(transpose: ir.Operation) -> bool:
  """Whether `transpose` is written by the dot_general it transposes."""
  producer = transpose.operands[0].owner
  if not isinstance(producer, (ir.Operation, ir.OpView)):
    return False
  producer = producer.operation
  if producer.name != "stablehlo.dot_general":
    return False
  folded = _folded_result_transpose(producer)
  return folded is not None and folded == transpose


def _folded_operand(dot: ir.Operation, i: int) -> tuple[ir.Value, list[int]]:
  """The value operand i of `dot` reads once its transposes are folded, and the map from
  operand dims to that value's dims (identity when nothing folds).

  A fold must keep the free dims in ascending order (the result lists them that way)."""
  chain = _transpose_chain(dot, i)
  rank = ir.RankedTensorType(dot.operands[i].type).rank
  perm = list(range(rank))
  for transpose in chain:
    step = list(transpose.attributes["permutation"])
    perm = [step[p] for p in perm]
  if not chain or not _foldable(dot):
    return dot.operands[i], list(range(rank))
  dn = stablehlo.DotDimensionNumbers(dot.attributes["dot_dimension_numbers"])
  side = (
    (dn.lhs_batching_dimensions, dn.lhs_contracting_dimensions)
    if i == 0
    else (dn.rhs_batching_dimensions, dn.rhs_contracting_dimensions)
  )
  free = [perm[d] for d in range(rank) if d not in side[0] and d not in side[1]]
  if free != sorted(free):
    return dot.operands[i], list(range(rank))
  return chain[-1].operands[0], perm


def _folded_result_transpose(dot: ir.Operation) -> ir.Operation | None:
  """The transpose that is the only user of `dot`'s result, if it swaps the lhs and rhs free
  dims and keeps the batch dims first (gradients of `x @ w` produce transpose(dot(g, x)))."""
  transpose = _single_user(dot.results[0])
  if transpose is None or transpose.name != "stablehlo.transpose" or not _foldable(dot):
    return None
  dn = stablehlo.DotDimensionNumbers(dot.attributes["dot_dimension_numbers"])
  batch = len(dn.lhs_batching_dimensions)
  lhs_free = (
    ir.RankedTensorType(dot.operands[0].type).rank - batch - len(dn.lhs_contracting_dimensions)
  )
  rank = ir.RankedTensorType(dot.results[0].type).rank
  swap = [*range(batch), *range(batch + lhs_free, rank), *range(batch, batch + lhs_free)]
  return transpose if list(transpose.attributes["permutation"]) == swap else None


def transpose_folded_into_dot(transpose: ir.Operation) -> bool:
  """Whether a dot_general absorbs `transpose` (see _dot_general): then it emits nothing."""
  transpose = transpose.operation
  if _is_folded_result(transpose):
    return True
  user, value = transpose, transpose.results[0]
  while (user := _single_user(value)) is not None and user.name == "stablehlo.transpose":
    value = user.results[0]
  if user is None or user.name != "stablehlo.dot_general":
    return False
  for i, operand in enumerate(user.operands):
    if operand == value and transpose in _transpose_chain(user, i):
      folded_value, _ = _folded_operand(user, i)
      return folded_value != operand
  return False
