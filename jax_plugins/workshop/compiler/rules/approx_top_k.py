"""approx_top_k: `jax.lax.approx_max_k` / `approx_min_k` off TPU (notebook 03's exercise).

Family `approx_top_k`: plugin_src/kernels/approx_top_k.cc.

Off TPU, JAX lowers them to `stablehlo.custom_call @ApproxTopK` with `is_fallback = true`,
which XLA:CPU computes exactly: the first `top_k` along `reduction_dim` in the order of
the comparator (its TopK kernel, or a sort). So do we, in one kernel
(kernels/approx_top_k.cc), equal values by lower index first.

  operands: x (float), iota (s32, x's shape), init value (-inf or +inf), init index (-1);
            only x matters for the exact result, the rest is for TPU's approximate one.
  results:  values (x's dtype), indices (s32), both x's shape with `top_k` along
            `reduction_dim` (the whole dimension, sorted, with aggregate_to_topk=false).
  comparator (called_computations[0]): `compare GT` (max_k) or `LT` (min_k) of its first
            two arguments.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import CUSTOM_CALLS, Lowering


def _approx_top_k(ctx: Lowering, op: ir.Operation) -> None:
  """Emits kernel approx_top_k; attrs: k, dim (the reduction dimension), largest (1|0)."""
  config = ir.DictAttr(op.attributes["mhlo.backend_config"])
  dim = ir.IntegerAttr(config["reduction_dim"]).value
  x = ir.RankedTensorType(op.operands[0].type)
  if not 0 <= dim < x.rank:
    raise errors.malformed(op, f"approx_top_k along dimension {dim} of {x}")
  k = ir.IntegerAttr(config["top_k"]).value
  if not ir.BoolAttr(config["aggregate_to_topk"]).value:
    # The candidates TPU's approximate algorithm leaves, not cut to top_k: off TPU,
    # XLA:CPU returns the whole dimension sorted, and the results' type says how many.
    k = ir.RankedTensorType(op.results[0].type).shape[dim]
  if not 0 < k <= x.shape[dim]:
    raise errors.malformed(op, f"approx_top_k k={k} along dimension {dim} of {x}")
  callee = ir.FlatSymbolRefAttr(ir.ArrayAttr(op.attributes["called_computations"])[0]).value
  ctx.emit(op, {"k": k, "dim": dim, "largest": int(_direction(op, ctx.funcs[callee]) == "GT")},
           operands=op.operands[:1], kernel="approx_top_k")


def _direction(op: ir.Operation, comparator: ir.Operation) -> str:
  """GT or LT: the comparator must be one compare of its first two arguments."""
  block = comparator.regions[0].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and body[0].name == "stablehlo.compare":
    compare = body[0]
    direction = stablehlo.ComparisonDirectionAttr(
        compare.attributes["comparison_direction"]).value
    if (direction in ("GT", "LT") and compare.operands[0] == block.arguments[0]
        and compare.operands[1] == block.arguments[1]):
      return direction
  raise errors.unsupported(op, "unsupported approx_top_k comparator (want GT or LT of the "
                           "values)")


CUSTOM_CALLS["ApproxTopK"] = _approx_top_k
