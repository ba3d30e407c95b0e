"""Family `indexing` (pad, reverse, dynamic_slice, dynamic_update_slice):
kernels/indexing/ (indexing.cc, indices.h). Also dynamic_pad (a pad) and
get_dimension_size (a constant).

Everything static is decided here, so the kernels only walk precomputed strides: pad gets
the part of the operand that survives negative padding. Out-of-range dynamic indices are
the kernels' business, as StableHLO and XLA define it: dynamic_slice and
dynamic_update_slice clamp starts so the window fits.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir

from .. import errors
from ..irtools import shape_of
from ..lowering import Lowering, register


def constant_ints(op: ir.Operation, i: int) -> list[int]:
  """The values of operand i, which a stablehlo.constant must define (a shape operand).

  Raises:
    NotImplementedError: it is computed at run time (a dynamic shape).
  """
  owner = op.operands[i].owner
  if (
    not isinstance(owner, (ir.Operation, ir.OpView)) or owner.operation.name != "stablehlo.constant"
  ):
    raise errors.unsupported(op, f"operand {i} is a shape computed at run time")
  return [int(v) for v in np.asarray(owner.operation.attributes["value"]).reshape(-1)]


@register("stablehlo.dynamic_pad")
def _dynamic_pad(ctx: Lowering, op: ir.Operation) -> None:
  """pad with constant low/high/interior operands."""
  low, interior = constant_ints(op, 2), constant_ints(op, 4)
  for value in interior:
    if value < 0:
      raise errors.malformed(op, f"negative interior padding {value}")
  ctx.emit(
    op,
    pad_attrs(shape_of(op.operands[0]), shape_of(op.results[0]), low, interior),
    operands=op.operands[:2],
    kernel="pad",
  )


@register("stablehlo.pad")
def _pad(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x, padding value. Attrs: src_start, dst_start, dst_step, counts (per dim).

  Operand element src_start[d] + i lands at result position dst_start[d] + i * dst_step[d]
  for i < counts[d]; the kernel fills the rest with the padding value. Negative low/high
  padding crops, which is why only a sub-box of the operand may survive.
  """
  for interior in op.attributes["interior_padding"]:
    if interior < 0:
      raise errors.malformed(op, f"negative interior padding {interior}")
  ctx.emit(
    op,
    pad_attrs(
      shape_of(op.operands[0]),
      shape_of(op.results[0]),
      list(op.attributes["edge_padding_low"]),
      list(op.attributes["interior_padding"]),
    ),
  )


def pad_attrs(in_dims, out_dims, lows, interiors) -> dict:
  """The pad kernel's attributes for StableHLO pad's low and interior padding."""
  src_start, dst_start, steps, counts = [], [], [], []
  for size, out, low, interior in zip(in_dims, out_dims, lows, interiors, strict=True):
    step = interior + 1
    # Element i sits at low + i * step; keep those with 0 <= low + i * step < out.
    first = max(0, -(low // step))
    last = min(size - 1, (out - 1 - low) // step) if out > 0 else -1
    count = max(0, last - first + 1)
    src_start.append(first if count else 0)
    dst_start.append(low + first * step if count else 0)
    steps.append(step)
    counts.append(count)
  return {"src_start": src_start, "dst_start": dst_start, "dst_step": steps, "counts": counts}


@register("stablehlo.reverse")
def _reverse(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op, {"dims": list(op.attributes["dimensions"])})


@register("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")
def _dynamic_slice(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x[, update], one scalar start per dim. No attrs: the window is the result's
  (update's) shape, and the kernel clamps each start into [0, dim - window]."""
  ctx.emit(op)


@register("stablehlo.get_dimension_size")
def _get_dimension_size(ctx: Lowering, op: ir.Operation) -> None:
  # Shapes are static, so this is a constant.
  size = shape_of(op.operands[0])[op.attributes["dimension"].value]
  ctx.emit(op, {"data": np.int32(size).tobytes()}, operands=[], kernel="constant")
