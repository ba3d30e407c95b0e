"""The LAPACK custom calls of JAX's CPU linalg lowerings (registered for `workshop` by
jax_plugins/workshop/extensions/linalg.py): `lapack_<x><routine>_ffi`, x = s/d/c/z for f32, f64, c64,
c128. Each becomes one kernel of plugin_src/kernels/lapack.cc (operands, results and
attributes are documented there); the FFI attributes arrive in `mhlo.backend_config`.

Family `lapack`: plugin_src/kernels/lapack.cc.

Layouts: JAX asks for column-major matrices (operand_layouts/result_layouts); our buffers
are row-major and the kernels call LAPACKE's row-major interface, which transposes, so the
layouts are not needed.

Also `tridiagonal_solve_perturbed_ffi` (lax.linalg.tridiagonal_solve with
perturb_singular=True; not LAPACK, no dtype letter): kernel tridiagonal_solve_perturbed.

Errors (at compile time): an element type that doesn't match the target's letter, or a
routine/dtype pair with no kernel, is a NotImplementedError naming target and dtype.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from .. import dtypes, errors
from ..lowering import CUSTOM_CALLS, Lowering

_LETTERS = {"s": "f32", "d": "f64", "c": "c64", "z": "c128"}

# routine -> (kernel, {FFI attribute: kernel attribute}, fixed attributes)
_ROUTINES = {
  "syevd": ("lapack_evd", {"mode": "mode", "uplo": "uplo"}, {}),
  "heevd": ("lapack_evd", {"mode": "mode", "uplo": "uplo"}, {}),
  "gesdd": ("lapack_svd", {"mode": "mode"}, {"algorithm": "gesdd"}),
  "gesvd": ("lapack_svd", {"mode": "mode"}, {"algorithm": "gesvd"}),
  "geev": ("lapack_geev", {"compute_left": "compute_left", "compute_right": "compute_right"}, {}),
  "gees": ("lapack_gees", {"mode": "mode"}, {}),
  "gehrd": ("lapack_gehrd", {"low": "low", "high": "high"}, {}),
  "sytrd": ("lapack_sytrd", {"uplo": "uplo"}, {}),
  "hetrd": ("lapack_sytrd", {"uplo": "uplo"}, {}),
  "getrf": ("lapack_getrf", {}, {}),
  "geqp3": ("lapack_geqp3", {}, {}),
}


def _rule(letter: str, routine: str):
  kernel, names, fixed = _ROUTINES[routine]
  target = f"lapack_{letter}{routine}_ffi"

  def lower(ctx: Lowering, op: ir.Operation) -> None:
    operands = 2 if routine == "geqp3" else 1  # geqp3 also takes the initial pivots.
    if len(op.operands) != operands:
      raise errors.malformed(op, f"{target} takes {operands} operands, got {len(op.operands)}")
    dtype = dtypes.lookup(op.operands[0].type.element_type)
    if dtype is None or dtype.name != _LETTERS[letter]:
      got = dtype.name if dtype else op.operands[0].type.element_type
      raise errors.unsupported(op, f"{target} has no kernel for dtype {got}")
    config = (
      op.attributes["mhlo.backend_config"] if "mhlo.backend_config" in op.attributes else None
    )
    attrs = dict(fixed)
    for ffi_name, name in names.items():
      if not isinstance(config, ir.DictAttr) or ffi_name not in config:
        raise errors.malformed(op, f"{target} without attribute {ffi_name}")
      attrs[name] = ir.IntegerAttr(config[ffi_name]).value
    if (
      routine == "gees"
      and isinstance(config, ir.DictAttr)
      and "sort" in config
      and ir.IntegerAttr(config["sort"]).value != ord("N")
    ):
      raise errors.unsupported(op, f"{target} with sorted eigenvalues")
    ctx.emit(op, attrs, kernel=kernel)

  return target, lower


for _letter in _LETTERS:
  for _routine in _ROUTINES:
    if (_routine in ("heevd", "hetrd")) != (_letter in "cz") and _routine in (
      "syevd",
      "heevd",
      "sytrd",
      "hetrd",
    ):
      continue  # sy* for real types, he* for complex, as JAX names them.
    _target, _lower = _rule(_letter, _routine)
    CUSTOM_CALLS[_target] = _lower


def _tridiagonal_solve_perturbed(ctx: Lowering, op: ir.Operation) -> None:
  """ins: dl, d, du [..., m], b [..., m, k], one dtype of f32/f64/c64/c128. out: x like b."""
  target = "tridiagonal_solve_perturbed_ffi"
  if len(op.operands) != 4:
    raise errors.malformed(op, f"{target} takes 4 operands, got {len(op.operands)}")
  dtype = dtypes.lookup(op.operands[3].type.element_type)
  if dtype is None or dtype.name not in _LETTERS.values():
    got = dtype.name if dtype else op.operands[3].type.element_type
    raise errors.unsupported(op, f"{target} has no kernel for dtype {got}")
  b = op.operands[3].type
  if (
    b.rank < 2
    or len(op.results) != 1
    or op.results[0].type != b
    or any(x.type != ir.RankedTensorType.get(b.shape[:-1], b.element_type) for x in op.operands[:3])
  ):
    raise errors.malformed(
      op, f"{target} needs dl, d, du [..., m] and b [..., m, k] of one dtype, and returns x like b"
    )
  ctx.emit(op, {}, kernel="tridiagonal_solve_perturbed")


CUSTOM_CALLS["tridiagonal_solve_perturbed_ffi"] = _tridiagonal_solve_perturbed
