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

from .. import errors
from ..lowering import Lowering, register
from ..optable import SPECS
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
  ctx.emit(op, {"k": k}, kernel="top_k")


def _kernel(op: ir.Operation) -> str:
  name = ir.StringAttr(op.attributes["name"]).value if op.name == "stablehlo.composite" else op.name
  return name.removeprefix("chlo.")
