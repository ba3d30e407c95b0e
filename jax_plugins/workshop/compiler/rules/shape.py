"""Data movement ops: constant, iota and ops that rearrange elements.

Family `shape`: plugin_src/kernels/shape.cc.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir

from .. import constants, dtypes
from ..attrs import ints
from ..lowering import Lowering, register
from .dot import transpose_folded_into_dot


@register("stablehlo.constant")
def _constant(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: data = the full row-major array in the result dtype; a splat of more than one
  element is a scalar constant and a broadcast_in_dim of it."""
  t = op.results[0].type
  # An unrepresentable dtype is reported by emit; don't try to read its data first.
  dtype = dtypes.lookup(t.element_type)
  splat = constants.splat_bytes(op, dtype) if dtype and math.prod(t.shape) > 1 else None
  if splat is not None:
    # A splat as its scalar broadcast: the plan holds one element, not the whole array,
    # and fusion reads the scalar instead of streaming a materialized array.
    scalar = ctx.temp_slot(dtype, ())
    ctx.emit_kernel(op, "constant", [], [scalar], {"data": splat})
    ctx.emit(op, {"dims": []}, operands=[], extra_ins=[scalar], kernel="broadcast_in_dim")
    return
  data = constants.dense_bytes(op, dtype, tuple(t.shape)) if dtype else b""
  ctx.emit(op, {"data": data})


# The dynamic_* forms take their result shape from an operand; with a static result type
# (shape operands that are constants, the only kind a static program has) they are the
# static op, and the shape operand is not read.


@register("stablehlo.iota", "stablehlo.dynamic_iota")
def _iota(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: dim. f16/bf16 and complex iotas are made in f32/f64 and converted (optable)."""
  ctx.emit(op, {"dim": op.attributes["iota_dimension"].value}, operands=[], kernel="iota")


@register("stablehlo.reshape", "stablehlo.dynamic_reshape")
def _reshape(ctx: Lowering, op: ir.Operation) -> None:
  # Row-major data is unchanged; the executor takes both shapes from the slots.
  ctx.emit(op, operands=op.operands[:1], kernel="reshape")


@register("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")
def _broadcast_in_dim(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(
    op,
    {"dims": ints(op, "broadcast_dimensions")},
    operands=op.operands[:1],
    kernel="broadcast_in_dim",
  )


@register("stablehlo.transpose")
def _transpose(ctx: Lowering, op: ir.Operation) -> None:
  if transpose_folded_into_dot(op):  # The dot_general wrote the transposed result.
    return
  ctx.emit(op, {"perm": ints(op, "permutation")})


@register("stablehlo.slice")
def _slice(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(
    op,
    {
      "start": ints(op, "start_indices"),
      "limit": ints(op, "limit_indices"),
      "stride": ints(op, "strides"),
    },
  )


@register("stablehlo.concatenate")
def _concatenate(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op, {"dim": op.attributes["dimension"].value})
