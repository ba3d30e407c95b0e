"""stablehlo.composite: a named op with a decomposition function.

No op-table family and no kernel: a composite is inlined (its decomposition) or taken
over by a family's rule and kernel.

Serializing a JAX program turns CHLO ops without a StableHLO equivalent (chlo.erf,
chlo.top_k, chlo.sinh, ...) into composites named after them. A composite whose name has
a registered rule gets a kernel of its own; any other is lowered by inlining its
decomposition, which is correct by construction (it is what XLA would run).

    @register_composite("chlo.top_k")
    def _top_k(ctx: Lowering, op: ir.Operation) -> None:
      k = composite_attributes(op)["k"]
"""

from __future__ import annotations

from collections.abc import Callable

from jaxlib.mlir import ir

from ..lowering import Lowering, Rule, register

_NAMED: dict[str, Rule] = {}


def register_composite(*names: str) -> Callable[[Rule], Rule]:
  """Decorator registering `rule` as the lowering of composites named `names`."""

  def wrap(rule: Rule) -> Rule:
    for name in names:
      assert name not in _NAMED, f"duplicate composite rule for {name}"
      _NAMED[name] = rule
    return rule

  return wrap


def composite_attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
  """The composite's `composite_attributes` ({} if absent)."""
  if "composite_attributes" not in op.attributes:
    return {}
  attrs = ir.DictAttr(op.attributes["composite_attributes"])
  return {attrs[i].name: attrs[i].attr for i in range(len(attrs))}


@register("stablehlo.composite")
def _composite(ctx: Lowering, op: ir.Operation) -> None:
  name = ir.StringAttr(op.attributes["name"]).value
  rule = _NAMED.get(name)
  if rule is not None:
    rule(ctx, op)
    return
  callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
  outs = ctx.lower_call(op, callee, [ctx.slot(v) for v in op.operands])
  for result, slot in zip(op.results, outs, strict=True):
    ctx.bind(result, slot)
