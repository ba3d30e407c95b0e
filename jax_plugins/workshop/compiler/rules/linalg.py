"""Linear algebra: cholesky, triangular_solve and the QR custom calls JAX emits.

Family `linalg`: plugin_src/kernels/linalg.cc.

`jnp.linalg.qr` lowers (for platforms without LAPACK custom calls of their own) to the
custom calls `Qr` (LAPACK geqrf form: R above the diagonal, Householder vectors below it,
plus the scalar factors `taus`) and `ProductOfElementaryHouseholderReflectors` (LAPACK
orgqr/ungqr: Q from those vectors). LU, solve and inv lower to generic while loops.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import CUSTOM_CALLS, Lowering, register


def _bool(op: ir.Operation, name: str, default: bool = False) -> int:
  return int(ir.BoolAttr(op.attributes[name]).value) if name in op.attributes else default


def _batch_and_matrix(op: ir.Operation, i: int) -> tuple[list[int], list[int]]:
  t = op.operands[i].type
  if t.rank < 2:
    raise errors.malformed(op, f"operand {i} must have rank >= 2, got {t}")
  return list(t.shape[:-2]), list(t.shape[-2:])


@register("stablehlo.cholesky")
def _cholesky(ctx: Lowering, op: ir.Operation) -> None:
  """ins: a [..., n, n] (f32/f64/c64/c128). Attrs: lower (0/1).

  Out: L (or U) with the other triangle zeroed; all NaN where a is not positive definite.
  """
  _, (m, n) = _batch_and_matrix(op, 0)
  if m != n:
    raise errors.malformed(op, "cholesky of a non-square matrix")
  ctx.emit(op, {"lower": _bool(op, "lower")})


@register("stablehlo.triangular_solve")
def _triangular_solve(ctx: Lowering, op: ir.Operation) -> None:
  """ins: a [..., m, m], b [..., m, n] (left_side) or [..., n, m].

  Attrs: left_side, lower, unit_diagonal (0/1), transpose_a ("NO_TRANSPOSE", "TRANSPOSE",
  "ADJOINT"). Batch dims of a and b must be equal (no broadcasting in StableHLO).
  """
  a_batch, (m, m2) = _batch_and_matrix(op, 0)
  b_batch, b_matrix = _batch_and_matrix(op, 1)
  left = _bool(op, "left_side")
  if m != m2 or a_batch != b_batch or b_matrix[0 if left else 1] != m:
    raise errors.malformed(op, "triangular_solve operand shapes do not match")
  ctx.emit(
    op,
    {
      "left_side": left,
      "lower": _bool(op, "lower"),
      "unit_diagonal": _bool(op, "unit_diagonal"),
      "transpose_a": stablehlo.TransposeAttr(op.attributes["transpose_a"]).value,
    },
  )


def _geqrf(ctx: Lowering, op: ir.Operation) -> None:
  """ins: a [..., m, n]. outs: a in geqrf form [..., m, n], taus [..., min(m, n)]."""
  _batch_and_matrix(op, 0)
  ctx.emit(op, kernel="geqrf")


def _householder_product(ctx: Lowering, op: ir.Operation) -> None:
  """ins: a [..., m, n] (vectors below the diagonal), taus [..., k], m >= n >= k.

  out: the first n columns of Q = H_1 ... H_k, [..., m, n].
  """
  _, (m, n) = _batch_and_matrix(op, 0)
  k = op.operands[1].type.shape[-1]
  if not m >= n >= k:
    raise errors.malformed(op, f"householder product needs m >= n >= k, got {m}, {n}, {k}")
  ctx.emit(op, kernel="householder_product")


CUSTOM_CALLS["Qr"] = _geqrf
CUSTOM_CALLS["ProductOfElementaryHouseholderReflectors"] = _householder_product
