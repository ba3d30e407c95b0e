"""Family `gather_scatter` (gather, scatter, scatter_general): kernels/gather_scatter.cc
(with kernels/indexing/indices.h).

Everything static is decided here, so the kernels only walk precomputed strides: gather
and scatter get their dimension numbers resolved into one "walk" (see _walk).
Out-of-range dynamic indices are the kernels' business, as StableHLO and XLA define it:
gather clamps starts so the window fits; scatter drops an update window that does not
fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors, lanes
from ..irtools import shape_of
from ..lowering import Lowering, register
from .indexing import constant_ints
from .reduce import match_combiner


def _strides(dims: Sequence[int]) -> list[int]:
  """Row-major element strides."""
  strides, s = [], 1
  for d in reversed(dims):
    strides.append(s)
    s *= d
  return strides[::-1]


def _walk(
  op: ir.Operation,
  *,
  operand: list[int],
  indices: list[int],
  io: list[int],
  index_vector_dim: int,
  start_dims: Sequence[int],
  start_limits: list[int],
  operand_batching_dims: Sequence[int],
  indices_batching_dims: Sequence[int],
  window_io_dims: Sequence[int],
  window_operand_dims: list[int],
) -> dict:
  """The attrs gather and scatter share (kernels/gather_scatter.cc documents them).

  `io` is the gather result or the scatter updates; its dims are the batch dims (in the
  order of the indices' dims, index_vector_dim left out) and the window dims
  `window_io_dims`, which map in order onto the operand's `window_operand_dims`.
  """
  op_strides, idx_strides, io_strides = _strides(operand), _strides(indices), _strides(io)
  batch_dims = [d for d in range(len(indices)) if d != index_vector_dim]
  io_batch_dims = [d for d in range(len(io)) if d not in window_io_dims]
  components = indices[index_vector_dim] if index_vector_dim < len(indices) else 1
  if (
    [indices[d] for d in batch_dims] != [io[d] for d in io_batch_dims]
    or components != len(start_dims)
    or len(window_io_dims) != len(window_operand_dims)
  ):
    raise errors.malformed(op, "indices, result/updates and dimension numbers disagree")
  batching_stride = {
    i: op_strides[o] for o, i in zip(operand_batching_dims, indices_batching_dims, strict=True)
  }
  return {
    "batch_shape": [indices[d] for d in batch_dims],
    "batch_index_strides": [idx_strides[d] for d in batch_dims],
    "batch_operand_strides": [batching_stride.get(d, 0) for d in batch_dims],
    "batch_strides": [io_strides[d] for d in io_batch_dims],
    "index_vector_stride": idx_strides[index_vector_dim] if index_vector_dim < len(indices) else 0,
    "start_strides": [op_strides[d] for d in start_dims],
    "start_limits": start_limits,
    "window_shape": [io[d] for d in window_io_dims],
    "window_strides": [io_strides[d] for d in window_io_dims],
    "window_operand_strides": [op_strides[d] for d in window_operand_dims],
  }


@register("stablehlo.gather", "stablehlo.dynamic_gather")
def _gather(ctx: Lowering, op: ir.Operation) -> None:
  """ins: operand, start_indices. Attrs: the walk (_walk).

  indices_are_sorted is a hint we don't need. dynamic_gather's slice sizes are an operand,
  which must be a constant (JAX emits static shapes; StableHLO programs use constants).
  """
  dn = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
  operand, indices = shape_of(op.operands[0]), shape_of(op.operands[1])
  if op.name == "stablehlo.dynamic_gather":
    slice_sizes = constant_ints(op, 2)
  else:
    slice_sizes = list(op.attributes["slice_sizes"])
  dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
  start_dims = list(dn.start_index_map)
  ctx.emit(
    op,
    operands=op.operands[:2],
    kernel="gather",
    attrs=_walk(
      op,
      operand=operand,
      indices=indices,
      io=shape_of(op.results[0]),
      index_vector_dim=dn.index_vector_dim,
      start_dims=start_dims,
      start_limits=[operand[d] - slice_sizes[d] for d in start_dims],
      operand_batching_dims=dn.operand_batching_dims,
      indices_batching_dims=dn.start_indices_batching_dims,
      window_io_dims=list(dn.offset_dims),
      window_operand_dims=[d for d in range(len(operand)) if d not in dropped],
    ),
  )


def _update_computation(op: ir.Operation) -> str | None:
  """ "set" for a body returning the update, the combiner (add, multiply, ...), or None."""
  block = op.regions[0].blocks[0]
  body = [o.operation for o in block.operations]
  if (
    len(block.arguments) == 2
    and len(body) == 1
    and body[0].name == "stablehlo.return"
    and list(body[0].operands) == [block.arguments[1]]
  ):
    return "set"
  return match_combiner(op)


@register("stablehlo.scatter")
def _scatter(ctx: Lowering, op: ir.Operation) -> None:
  """ins: operand, scatter_indices, updates. Attrs: the walk (_walk) and body: "set" or
  a reduce combiner (add, multiply, maximum, minimum, and, or); any other body makes a
  `scatter_general` whose body is a lane plan (captures are extra operands).

  indices_are_sorted and unique_indices are hints we don't need: updates apply in order.
  """
  if len(op.operands) != 3:
    raise errors.unsupported(op, "unsupported variadic scatter")
  dn = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
  operand, indices, updates = (shape_of(v) for v in op.operands)
  dropped = set(dn.inserted_window_dims) | set(dn.input_batching_dims)
  window_operand_dims = [d for d in range(len(operand)) if d not in dropped]
  window_io_dims = list(dn.update_window_dims)
  if len(window_io_dims) != len(window_operand_dims):
    raise errors.malformed(op, "update_window_dims do not match the operand's window")
  window = [1] * len(operand)
  for o, u in zip(window_operand_dims, window_io_dims):
    window[o] = updates[u]
  start_dims = list(dn.scattered_dims_to_operand_dims)
  attrs = _walk(
    op,
    operand=operand,
    indices=indices,
    io=updates,
    index_vector_dim=dn.index_vector_dim,
    start_dims=start_dims,
    start_limits=[operand[d] - window[d] for d in start_dims],
    operand_batching_dims=dn.input_batching_dims,
    indices_batching_dims=dn.scatter_indices_batching_dims,
    window_io_dims=window_io_dims,
    window_operand_dims=window_operand_dims,
  )
  if (body := _update_computation(op)) is not None:
    ctx.emit(op, {**attrs, "body": body})
    return
  # Any other update computation (x.at[i].apply(f)): a lane plan over (current, update).
  [region], captures = ctx.lower_regions(op, op.regions)
  ctx.emit(
    op,
    {**attrs, "body": lanes.to_lanes(op, region, len(captures))},
    extra_ins=captures,
    kernel="scatter_general",
  )
