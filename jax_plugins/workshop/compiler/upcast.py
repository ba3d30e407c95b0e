"""Dtype policy shared by the rules: which dtypes an op supports, and f16/bf16 in f32.

The C++ kernels do no f16/bf16 arithmetic. Like XLA:CPU, a compute op on 16-bit floats
is lowered as convert -> f32 kernel -> convert back, so each op rounds once from f32 to
its declared result type (XLA:CPU keeps that per-op rounding too):

    %r = stablehlo.exponential %x : tensor<4xbf16>
      =>  convert(x: bf16 -> f32), exponential(f32), convert(f32 -> bf16) -> r

Data movement (reshape, transpose, slice, select, ...) works on any dtype by byte width
and is emitted unchanged.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from . import dtypes, errors
from .lowering import Lowering


def element_dtype(op: ir.Operation, value: ir.Value) -> dtypes.DType:
  """The DType of a tensor value's elements.

  Raises:
    NotImplementedError: the element type is not representable (f8, i4, ...).
  """
  dtype = dtypes.lookup(value.type.element_type)
  if dtype is None:
    raise errors.unsupported(op, f"unsupported element type {value.type.element_type}")
  return dtype


def check_dtype(op: ir.Operation, dtype: dtypes.DType, supported: frozenset[str],
                what: str = "") -> None:
  """Raises NotImplementedError naming op, dtype and location if `dtype` isn't supported.

  `supported` holds XLA dtype names (see the families in dtypes.py); `what` qualifies
  the message, e.g. " for reduce body 'maximum'".
  """
  if dtype.name not in supported:
    raise errors.unsupported(op, f"unsupported dtype {dtype.name}{what}")


def convert_slot(ctx: Lowering, op: ir.Operation, slot: int, dtype: dtypes.DType) -> int:
  """`slot` converted to `dtype` (a new temporary slot), or `slot` if it already is."""
  code, dims = ctx.slots[slot]
  if code == dtype.code:
    return slot
  converted = ctx.temp_slot(dtype, dims)
  ctx.emit_kernel(op, "convert", [slot], [converted])
  return converted


def emit_upcast(ctx: Lowering, op: ir.Operation, attrs: dict | None = None, *,
                operand_dtype: dtypes.DType | None = None,
                result_dtype: dtypes.DType | None = None, kernel: str | None = None) -> None:
  """Emits `op`'s kernel computing in f32 where operands or results are f16/bf16.

  Args:
    kernel: the kernel name, if not the op's.
    operand_dtype: convert every operand to this dtype (e.g. dot_general's operands to
      the result's compute dtype); default: each operand's dtypes.compute_dtype.
    result_dtype: the dtype the kernel produces results in; default: each result's
      compute dtype. Results are converted to their declared types afterwards.
  """
  ins = [
      convert_slot(ctx, op, s,
                   operand_dtype or dtypes.compute_dtype(dtypes.by_code(ctx.slots[s][0])))
      for s in ctx.operand_slots(op)
  ]
  outs = ctx.result_slots(op)
  kernel_outs: list[int] = []
  for s in outs:
    code, dims = ctx.slots[s]
    compute = result_dtype or dtypes.compute_dtype(dtypes.by_code(code))
    kernel_outs.append(s if compute.code == code else ctx.temp_slot(compute, dims))
  ctx.emit_kernel(op, kernel or op.name.removeprefix("stablehlo."), ins, kernel_outs, attrs)
  for computed, declared in zip(kernel_outs, outs):
    if computed != declared:
      ctx.emit_kernel(op, "convert", [computed], [declared])


def emit_checked(ctx: Lowering, op: ir.Operation, supported: frozenset[str],
                 attrs: dict | None = None, *, operand: int = 0) -> None:
  """Checks operand `operand`'s dtype against `supported`, then emit_upcast(op)."""
  check_dtype(op, element_dtype(op, op.operands[operand]), supported)
  emit_upcast(ctx, op, attrs)

