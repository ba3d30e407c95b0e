"""CHLO ops that reach the plugin: special functions and top_k.

Family `chlo`: plugin_src/kernels/chlo.cc.

Serializing a JAX program expands most CHLO ops into StableHLO (erf_inv, lgamma,
digamma, polygamma, zeta, bessel_i1e, erfc, next_after, square, atan, ...); the ones
below survive as `stablehlo.composite "chlo.<name>"` (see composite.py). We give them
kernels of their own (plugin_src/kernels/chlo.cc) instead of inlining the
decompositions: libm-accurate and one pass over memory instead of a dozen. The same rules
serve the raw `chlo.<name>` ops of MLIR text programs. Kernels are named after the op
without the `chlo.` prefix.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from .. import dtypes, errors
from ..lowering import Lowering, register
from ..optable import MINIFLOATS, SPECS
from .composite import composite_attributes, register_composite

# Unary elementwise: erf, sinh, ...
_UNARY = [name for name, spec in SPECS.items() if spec.family == "chlo" and name != "top_k"]


def _names(*ops: str) -> list[str]:
  return [f"chlo.{name}" for name in ops]


@register(*_names(*_UNARY))
@register_composite(*_names(*_UNARY))
def _unary(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op, kernel=_kernel(op))


@register("chlo.top_k")
@register_composite("chlo.top_k")
def _top_k(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x [..., n]. outs: values [..., k], indices [..., k] (s32). Attrs: k.

  Largest first in the total order (NaN above +inf, -0 below +0); ties by lower index:
  what the decomposition's stable sort with `compare GT, TOTALORDER` gives.
  """
  attrs = composite_attributes(op) if op.name == "stablehlo.composite" else op.attributes
  k = ir.IntegerAttr(attrs["k"]).value
  x = op.operands[0].type
  n = x.shape[-1] if x.rank else 0
  if not 0 <= k <= n:
    raise errors.malformed(op, f"top_k with k={k} of a dimension of size {n}")
  dtype = dtypes.lookup(ir.RankedTensorType(x).element_type)
  if dtype is not None and dtype.name in MINIFLOATS:
    _minifloat_top_k(ctx, op, k, dtype)
    return
  ctx.emit(op, {"k": k}, kernel="top_k")


def _minifloat_top_k(ctx: Lowering, op: ir.Operation, k: int, dtype: dtypes.DType) -> None:
  """top_k of 8/4-bit floats as XLA:CPU runs it (its TopkDecomposer): a stable descending
  sort of (x, iota) by x's total order on the minifloat bits, both sliced to the first k.
  (The top_k kernel in f32 would order FNUZ NaN, which XLA puts below every value, last.)"""
  dims = tuple(ir.RankedTensorType(op.operands[0].type).shape)
  rank, s32 = len(dims), dtypes.by_name("s32")
  [x] = ctx.operand_slots(op)[:1]
  outs = ctx.result_slots(op)
  iota, values, indices = (
    ctx.temp_slot(s32, dims),
    ctx.temp_slot(dtype, dims),
    ctx.temp_slot(s32, dims),
  )
  ctx.emit_kernel(op, "iota", [], [iota], {"dim": rank - 1})
  ctx.emit_kernel(op, "sort", [x, iota], [values, indices], {"dim": rank - 1, "keys": [[0, 1, 0]]})
  window = {"start": [0] * rank, "limit": [*dims[:-1], k], "stride": [1] * rank}
  for sorted_slot, out in zip((values, indices), outs):
    ctx.emit_kernel(op, "slice", [sorted_slot], [out], window)


def _kernel(op: ir.Operation) -> str:
  name = ir.StringAttr(op.attributes["name"]).value if op.name == "stablehlo.composite" else op.name
  return name.removeprefix("chlo.")
