"""Family `reduce_window` (reduce_window, select_and_scatter): kernels/reduce_window/
(reduce_window.cc, window.h).

The rules turn StableHLO's optional window attributes into explicit per-dimension lists
(defaults filled in by attrs.ints_per_dim and attrs.pad_lo, which convolution.py reads
its window with too), so the kernels never deal with missing attributes. Only the low padding is passed on: with
the result shape (which the verifier checked) it determines the rest.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

import itertools
import math

from .. import dtypes, errors, lanes
from ..attrs import ints_per_dim, pad_lo
from ..lowering import Lowering, register
from .indexing import pad_attrs
from .reduce import match_combiner, combiner

# Most element visits (window positions times the result) of a general reduce_window
# (_reduce_window_general: one map per position).
_MAX_WINDOW_STACK = 1 << 26

# select_and_scatter select bodies: `compare DIR, %current, %candidate` keeps the current
# selection while true. With the operands swapped the direction flips.
_SELECT_DIRECTIONS = ("GE", "GT", "LE", "LT")
_FLIPPED = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}


@register("stablehlo.reduce_window")
def _reduce_window(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x, init. Attrs: window, strides, base_dilation, window_dilation, pad_lo, body.

  Variadic forms and other bodies go to _reduce_window_general.
  """
  if len(op.operands) != 2 or match_combiner(op) is None:
    _reduce_window_general(ctx, op)
    return
  rank = len(op.operands[0].type.shape)
  attrs = {
    "window": ints_per_dim(op, "window_dimensions", rank, 1),
    "strides": ints_per_dim(op, "window_strides", rank, 1),
    "base_dilation": ints_per_dim(op, "base_dilations", rank, 1),
    "window_dilation": ints_per_dim(op, "window_dilations", rank, 1),
    "pad_lo": pad_lo(op, rank),
    "body": combiner(op),
  }
  # f16/bf16 run in f32 (legalize.py); XLA:CPU rounds each body result to the declared
  # type (a bf16 cumsum's partial sums are bf16), so the kernel does too.
  dtype = dtypes.lookup(op.operands[0].type.element_type)
  if dtype is not None and dtype.name in ("f16", "bf16"):
    attrs["round_to"] = dtype.code
  ctx.emit(op, attrs)


def _reduce_window_general(ctx: Lowering, op: ir.Operation) -> None:
  """reduce_window with any body and any number of operands (the JVP of max-pooling,
  cummax of complex, cumlogsumexp) as kernels that exist: a cumulative reduction as a
  doubling scan (_scan_general), any other window folded offset by offset in XLA:CPU's
  order (_fold_in_order: init, then the window's elements row-major, padding and
  dilation holes skipped), so bodies that are not associative or commutative (x - y)
  and inits that are not the identity (a JVP's init 1) give XLA:CPU's values.

  Raises:
    NotImplementedError: window positions times the result exceed _MAX_WINDOW_STACK.
  """
  n = len(op.operands) // 2
  slots = ctx.operand_slots(op)  # (refuses shards: the fold slices the whole value)
  x_slots, init_slots = slots[:n], slots[n:]
  in_dims = list(op.operands[0].type.shape)
  rank = len(in_dims)
  window = ints_per_dim(op, "window_dimensions", rank, 1)
  strides = ints_per_dim(op, "window_strides", rank, 1)
  base = ints_per_dim(op, "base_dilations", rank, 1)
  dilation = ints_per_dim(op, "window_dilations", rank, 1)
  lo = pad_lo(op, rank)
  out_dims = list(op.results[0].type.shape)
  axis = _scan_axis(in_dims, out_dims, window, strides, base, dilation, lo)
  if axis is not None:
    _scan_general(ctx, op, axis, x_slots, init_slots, reverse=lo[axis] == 0)
    return
  positions = math.prod(window)
  if positions * math.prod(out_dims) > _MAX_WINDOW_STACK:
    raise errors.unsupported(
      op,
      f"reduce_window with this body over {positions} window "
      f"positions of {out_dims} is too large to fold",
    )
  masks = _reading_masks(in_dims, out_dims, window, strides, base, dilation, lo)
  geometry = (in_dims, out_dims, window, strides, base, dilation, lo)
  _fold_in_order(ctx, op, x_slots, init_slots, masks, geometry)


def _reading_masks(in_dims, out_dims, window, strides, base, dilation, lo) -> dict:
  """Per window offset (row-major): None when every output reads an operand element
  there, else a bool array of out_dims saying which do (the others read padding or a
  base-dilation hole, which XLA:CPU skips: init is folded once per window)."""
  per_dim = []
  for i, o, w, s, b, d, low in zip(in_dims, out_dims, window, strides, base, dilation, lo):
    rows = []
    for k in range(w):
      at = np.arange(o) * s + k * d - low
      rows.append((at >= 0) & (at <= (i - 1) * b) & (at % b == 0))
    per_dim.append(rows)
  masks = {}
  for offset in itertools.product(*(range(w) for w in window)):
    mask = np.ones(out_dims, bool)
    for axis, k in enumerate(offset):
      shape = [1] * len(out_dims)
      shape[axis] = out_dims[axis]
      mask = mask & per_dim[axis][k].reshape(shape)
    masks[offset] = None if mask.all() else mask
  return masks


def _fold_in_order(ctx: Lowering, op: ir.Operation, x_slots, init_slots, masks, geometry):
  """A general reduce_window: acc = init, then per window offset (row-major) acc =
  body(acc, x at that offset) (a `map`) where the offset reads an operand element
  (`masks`; a `select` keeps acc elsewhere), as XLA:CPU folds each window. (A stack of
  the padded window slices reduced by the body folded each padding element in as init
  again, and in the lane plan's order: a JVP with init 1 came out 1 higher per padding
  element, lax_test's testReduceWindowGeneralJVP.)"""
  in_dims, out_dims, window, strides, base, dilation, lo = geometry
  n = len(x_slots)
  codes = [dtypes.lookup(x.type.element_type).code for x in op.operands[:n]]
  [body], captures = ctx.lower_regions(op, op.regions)
  lane_body = lanes.to_lanes(op, body, len(captures))
  accs = []
  for init, code in zip(init_slots, codes):
    acc = ctx.temp_slot(dtypes.by_code(code), out_dims)
    ctx.emit_kernel(op, "broadcast_in_dim", [init], [acc], {"dims": []})
    accs.append(acc)
  # Up to the last window's last element, as in _reduce_window_general.
  padded_dims = [
    (o - 1) * s + (w - 1) * d + 1 if o else 0
    for o, s, w, d in zip(out_dims, strides, window, dilation)
  ]
  padded = []
  for x_slot, init_slot, code in zip(x_slots, init_slots, codes):
    p = ctx.temp_slot(dtypes.by_code(code), padded_dims)
    ctx.emit_kernel(
      op,
      "pad",
      [x_slot, init_slot],
      [p],
      pad_attrs(in_dims, padded_dims, lo, [b - 1 for b in base]),
    )
    padded.append(p)
  pred = dtypes.by_name("pred")
  if math.prod(out_dims):
    for offset, mask in masks.items():
      if mask is not None and not mask.any():
        continue  # No output reads an element here.
      start = [k * d for k, d in zip(offset, dilation)]
      limit = [st + (o - 1) * s + 1 if o else st for st, o, s in zip(start, out_dims, strides)]
      pieces = []
      for p, code in zip(padded, codes):
        piece = ctx.temp_slot(dtypes.by_code(code), out_dims)
        ctx.emit_kernel(
          op, "slice", [p], [piece], {"start": start, "limit": limit, "stride": strides}
        )
        pieces.append(piece)
      folded = [ctx.temp_slot(dtypes.by_code(code), out_dims) for code in codes]
      ctx.emit_kernel(
        op, "map", [*accs, *pieces, *captures], folded, {"operands": 2 * n, "body": lane_body}
      )
      if mask is not None:
        where = ctx.temp_slot(pred, out_dims)
        ctx.emit_kernel(op, "constant", [], [where], {"data": mask.tobytes()})
        kept = []
        for f, a, code in zip(folded, accs, codes):
          k = ctx.temp_slot(dtypes.by_code(code), out_dims)
          ctx.emit_kernel(op, "select", [where, f, a], [k])
          kept.append(k)
        folded = kept
      accs = folded
  for acc, result in zip(accs, ctx.result_slots(op)):
    ctx.emit_kernel(op, "reshape", [acc], [result])  # The same array, named as the result.


def _scan_axis(in_dims, out_dims, window, strides, base, dilation, lo) -> int | None:
  """The axis of a cumulative reduction (kernels/reduce_window/reduce_window.cc AsScan: a
  window spanning one axis of length n > 1, padded by n - 1 before it, or after it when
  reversed; window 1 elsewhere, no stride or dilation), else None."""
  axis = None
  for a, (i, o, w, s, b, d) in enumerate(zip(in_dims, out_dims, window, strides, base, dilation)):
    if s != 1 or b != 1 or d != 1 or i != o:
      return None
    if w == 1 and lo[a] == 0:
      continue
    if axis is not None or w != i or i < 2 or lo[a] not in (0, i - 1):
      return None
    axis = a
  return axis


def _scan_general(
  ctx: Lowering,
  op: ir.Operation,
  axis: int,
  x_slots: list[int],
  init_slots: list[int],
  reverse: bool,
) -> None:
  """A cumulative reduction with any body (cumlogsumexp, complex cummax) as a doubling
  scan (Hillis and Steele, "Data parallel algorithms", CACM 29(12), 1986): at step k =
  1, 2, 4, ... < n, y[i] = body(y[i - k], y[i]) for i >= k (reversed: y[i] =
  body(y[i], y[i + k]) for i < n - k). Each step is a stack of the two shifted slices
  reduced over its leading dim by the body (reduce_general), so a result passes through
  log2(n) bodies, the depth of JAX's associative_scan that XLA:CPU runs, instead of the
  O(n^2) window stack.

  The padding elements and init are taken as the body's identity, as for every
  reduce_window of JAX's cumulative reductions: StableHLO leaves the order in which a
  window's elements and init are combined to the implementation, so a body and init for
  which it matters have no one result.

  `x_slots`, `init_slots`: the slots of the operands and of their inits
  (ctx.operand_slots, as _reduce_window_general took them).
  """
  xs = op.operands[: len(x_slots)]
  dims = list(op.operands[0].type.shape)
  length = dims[axis]
  codes = [dtypes.lookup(x.type.element_type).code for x in xs]
  [body], captures = ctx.lower_regions(op, op.regions)
  lane_body = lanes.to_lanes(op, body, len(captures))
  ys = list(x_slots)

  def cut(slot: int, code: int, start: int, limit: int) -> int:
    lo = [0] * len(dims)
    hi = list(dims)
    lo[axis], hi[axis] = start, limit
    out = ctx.temp_slot(dtypes.by_code(code), [h - l for l, h in zip(lo, hi)])
    ctx.emit_kernel(
      op, "slice", [slot], [out], {"start": lo, "limit": hi, "stride": [1] * len(dims)}
    )
    return out

  steps = []
  k = 1
  while k < length:
    steps.append(k)
    k *= 2
  for step, k in enumerate(steps):
    last = step == len(steps) - 1
    part = list(dims)
    part[axis] = length - k
    combined = []
    for y, code in zip(ys, codes):
      rows = []
      for start in (0, k):  # y[i - k] then y[i]: the body's (earlier, later) order
        piece = cut(y, code, start, start + length - k)
        row = ctx.temp_slot(dtypes.by_code(code), [1, *part])
        ctx.emit_kernel(op, "reshape", [piece], [row])
        rows.append(row)
      stack = ctx.temp_slot(dtypes.by_code(code), [2, *part])
      ctx.emit_kernel(op, "concatenate", rows, [stack], {"dim": 0})
      combined.append(stack)
    outs = [ctx.temp_slot(dtypes.by_code(code), part) for code in codes]
    ctx.emit_kernel(
      op,
      "reduce_general",
      [*combined, *init_slots, *captures],
      outs,
      {"dims": [0], "body": lane_body},
    )
    # The k elements no step-k partner reaches keep their value: the first k (the last
    # k when reversed).
    results = (
      ctx.result_slots(op)
      if last
      else [ctx.temp_slot(dtypes.by_code(code), dims) for code in codes]
    )
    for y, code, c, r in zip(ys, codes, outs, results):
      kept = cut(y, code, length - k, length) if reverse else cut(y, code, 0, k)
      ctx.emit_kernel(op, "concatenate", [c, kept] if reverse else [kept, c], [r], {"dim": axis})
    ys = results


@register("stablehlo.select_and_scatter")
def _select_and_scatter(ctx: Lowering, op: ir.Operation) -> None:
  """ins: operand, source, init. Attrs: window, strides, pad_lo, select, body.

  `select` is the comparison ("GE", "GT", "LE", "LT") that keeps the current selection
  over a later candidate; `body` the combiner that scatters source values.

  Raises:
    NotImplementedError: a select body that is not one such comparison of its two
      arguments, or a scatter body that is not a single recognised combiner.
  """
  rank = len(op.operands[0].type.shape)
  ctx.emit(
    op,
    {
      "window": ints_per_dim(op, "window_dimensions", rank, 1),
      "strides": ints_per_dim(op, "window_strides", rank, 1),
      "pad_lo": pad_lo(op, rank),
      "select": _select_direction(op),
      "body": combiner(op, region=1),
    },
  )


def _select_direction(op: ir.Operation) -> str:
  block = op.regions[0].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and len(block.arguments) == 2:
    compare, ret = body
    if (
      compare.name == "stablehlo.compare"
      and ret.name == "stablehlo.return"
      and list(ret.operands) == list(compare.results)
      and _compare_type(compare) != "TOTALORDER"
    ):
      direction = stablehlo.ComparisonDirectionAttr(
        compare.attributes["comparison_direction"]
      ).value
      args = list(block.arguments)
      if direction in _SELECT_DIRECTIONS and list(compare.operands) == args:
        return direction
      if direction in _SELECT_DIRECTIONS and list(compare.operands) == args[::-1]:
        return _FLIPPED[direction]
  ops = ", ".join(o.name for o in body)
  raise errors.unsupported(op, f"unsupported select body ({ops})")


def _compare_type(compare: ir.Operation) -> str | None:
  if "compare_type" not in compare.attributes:
    return None
  return stablehlo.ComparisonTypeAttr(compare.attributes["compare_type"]).value
