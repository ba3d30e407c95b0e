"""Random bits: rng_bit_generator.

Family `random`: plugin_src/kernels/random.cc.

XLA:CPU resolves the DEFAULT algorithm to PHILOX, so we do too: `jax.random` with the rbg
PRNGs must give the same bits on every backend that shares XLA's choice.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes, errors
from ..lowering import Lowering, register

# Valid state lengths (u64 words) per algorithm: key + 64-bit counter, or key + 128-bit.
_STATE_SIZES = {"THREE_FRY": (2,), "PHILOX": (2, 3)}


@register("stablehlo.rng_bit_generator")
def _rng_bit_generator(ctx: Lowering, op: ir.Operation) -> None:
  """ins: state u64[2|3]. outs: new state (same type), bits (integer of 8-64 bits).

  Attrs: algorithm ("THREE_FRY" or "PHILOX").
  """
  algorithm = stablehlo.RngAlgorithmAttr(op.attributes["rng_algorithm"]).value
  if algorithm == "DEFAULT":
    algorithm = "PHILOX"
  state = op.operands[0].type
  if str(state.element_type) != "ui64" or state.rank != 1:
    raise errors.unsupported(op, f"unsupported rng state type {state} (want u64[N])")
  if state.shape[0] not in _STATE_SIZES[algorithm]:
    sizes = " or ".join(map(str, _STATE_SIZES[algorithm]))
    raise errors.malformed(
      op, f"{algorithm} needs a state of {sizes} u64 words, got {state.shape[0]}"
    )
  bits = dtypes.lookup(op.results[1].type.element_type)
  if bits is None or bits.numpy.kind not in "iu":
    raise errors.unsupported(
      op, f"unsupported rng_bit_generator output type {op.results[1].type} (integers only)"
    )
  ctx.emit(op, {"algorithm": algorithm})
