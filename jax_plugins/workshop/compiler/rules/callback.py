"""Host callbacks and the tokens that order them.

`custom_call @workshop_python_callback` (emitted by jax_plugins/workshop/callbacks.py for
pure_callback, io_callback and jax.debug.callback/print) becomes a `host_callback`
instruction over the call's array operands and results; attr `callback_id` names the
HostCallback the executor calls (plugin_src/kernels/callback.cc).

Tokens (`!stablehlo.token`) carry no data: a token value is a pred[0] slot (JAX passes
pred[0] buffers for main's token parameters). The executor runs a plan's instructions one
after another in program order, which already orders every side effect, so
`create_token` and `after_all` just produce an empty value and callbacks neither read nor
write tokens.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from .. import errors
from ..lowering import Lowering, register
from .control import CUSTOM_CALLS

TARGET = "workshop_python_callback"


def is_token(t: ir.Type) -> bool:
  return str(t) == "!stablehlo.token"


def _empty_token(ctx: Lowering, op: ir.Operation, value: ir.Value) -> None:
  (s,) = ctx.result_slots(op, [value])
  ctx.emit_kernel(op, "constant", [], [s], {"data": b""})


def _host_callback(ctx: Lowering, op: ir.Operation) -> None:
  """ins: the array operands; outs: the array results. Attrs: callback_id (int)."""
  config = op.attributes["mhlo.backend_config"] if "mhlo.backend_config" in op.attributes \
      else None
  if not isinstance(config, ir.DictAttr) or "callback_id" not in config:
    raise errors.malformed(op, f"{TARGET} without a callback_id in mhlo.backend_config")
  callback_id = ir.IntegerAttr(config["callback_id"]).value
  operands = [v for v in op.operands if not is_token(v.type)]
  results = [r for r in op.results if not is_token(r.type)]
  ctx.emit(op, {"callback_id": callback_id}, operands=operands, results=results,
           kernel="host_callback")
  for r in op.results:
    if is_token(r.type):
      _empty_token(ctx, op, r)


@register("stablehlo.create_token", "stablehlo.after_all")
def _token(ctx: Lowering, op: ir.Operation) -> None:
  _empty_token(ctx, op, op.result)


CUSTOM_CALLS[TARGET] = _host_callback
