"""Helpers for rules that convert operands themselves (dot_general, convolution).

The dtype policy (which dtypes an op takes, f16/bf16 computed in f32) is the op table's
(optable.py) and is applied to every instruction by legalize.py. Rules convert only where
an op's own semantics mix element types: preferred_element_type makes dot_general and
convolution results wider than their operands.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from . import dtypes, errors
from .lowering import Lowering
from .optable import SPECS, OpSpec


def element_dtype(op: ir.Operation, value: ir.Value) -> dtypes.DType:
  """The DType of a tensor value's elements.

  Raises:
    NotImplementedError: the element type is not representable (f6, quantized, ...).
  """
  dtype = dtypes.lookup(value.type.element_type)
  if dtype is None:
    raise errors.unsupported(op, f"unsupported element type {value.type.element_type}")
  return dtype


def compute_dtype(op: ir.Operation, spec: OpSpec, dtype: dtypes.DType) -> dtypes.DType:
  """The dtype `spec`'s kernel computes a `dtype` value in (itself, or its upcast).

  Raises:
    NotImplementedError: the table has no kernel for `dtype`.
  """
  if dtype.name in spec.kernel:
    return dtype
  if dtype.name in spec.upcast:
    return dtypes.by_name(spec.upcast[dtype.name])
  raise errors.unsupported(op, f"op '{spec.name}' has no kernel for dtype {dtype.name}")


def convert_slot(ctx: Lowering, op: ir.Operation, slot: int, dtype: dtypes.DType) -> int:
  """`slot` converted to `dtype` (a new temporary slot), or `slot` if it already is."""
  code, dims = ctx.slots[slot]
  if code == dtype.code:
    return slot
  converted = ctx.temp_slot(dtype, dims)
  ctx.emit_kernel(op, "convert", [slot], [converted])
  return converted


def emit_converted(ctx: Lowering, op: ir.Operation, attrs: dict) -> None:
  """Emits `op` with its operands converted to the dtype its result is computed in.

  Operands of another dtype than the result come from preferred_element_type (s8 x s8 ->
  s32, bf16 x bf16 -> f32): the kernel then sees one dtype. Converting to the result's
  compute dtype (f32 for a bf16 result) rather than to the result dtype keeps the
  operands' precision.
  """
  name = op.name.removeprefix("stablehlo.")
  target = compute_dtype(op, SPECS[name], element_dtype(op, op.results[0]))
  ctx.emit_kernel(
    op,
    name,
    [convert_slot(ctx, op, s, target) for s in ctx.operand_slots(op)],
    ctx.result_slots(op),
    attrs,
  )
