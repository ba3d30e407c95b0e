"""stablehlo.custom_call: dispatches on the call target to rules registered per target.

    @register_custom_call("Qr")
    def _qr(ctx: Lowering, op: ir.Operation) -> None: ...

Unknown targets are reported as unsupported, naming the target.
"""

from __future__ import annotations

from collections.abc import Callable

from jaxlib.mlir import ir

from .. import errors
from ..lowering import Lowering, Rule, register

_TARGETS: dict[str, Rule] = {}


def register_custom_call(*targets: str) -> Callable[[Rule], Rule]:
  """Decorator registering `rule` as the lowering of custom calls to each of `targets`."""

  def wrap(rule: Rule) -> Rule:
    for target in targets:
      assert target not in _TARGETS, f"duplicate custom_call rule for {target}"
      _TARGETS[target] = rule
    return rule

  return wrap


def target(op: ir.Operation) -> str:
  return ir.StringAttr(op.attributes["call_target_name"]).value


@register("stablehlo.custom_call")
def _custom_call(ctx: Lowering, op: ir.Operation) -> None:
  rule = _TARGETS.get(target(op))
  if rule is None:
    raise errors.unsupported(op, f"unsupported custom_call target '{target(op)}'")
  rule(ctx, op)
