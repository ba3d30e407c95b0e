"""jax.lax.linalg primitives that JAX lowers only for cpu/cuda/rocm, lowered on `workshop`.

JAX registers eigh, svd, eig, schur, hessenberg, tridiagonal and geqp3 (QR with column
pivoting) only with platform-specific rules that emit LAPACK custom calls, and gives lu a
CPU rule (LAPACK getrf) besides a generic one (an unrolled Python LU whose pivot choice
differs from getrf's on NaN, and which was 5-55x slower at 256x256). `install()` registers
JAX's own CPU rules for `workshop`, so the StableHLO around each call (sorting, the
complex eigenvalue assembly, info -> NaN, pivots -> permutation) is exactly the CPU
backend's; the custom calls `lapack_<s|d|c|z><routine>_ffi` they emit are lowered by
compiler/rules/lapack.py to the kernels in plugin_src/kernels/lapack.cc, which call the
same LAPACK routines.

cholesky, geqrf, householder_product, ormqr and tridiagonal_solve keep JAX's generic
lowerings (the plugin has kernels for the first three), but their CPU rules accept only
LAPACK's types: f16/bf16 input is a NotImplementedError at lowering on the CPU backend,
and `install()` makes it the same error on `workshop` rather than a silent f16 result.
tridiagonal_solve with perturb_singular=True (eigh_tridiagonal's eigenvectors), which the
generic rule refuses, gets the CPU rule: jaxlib's `tridiagonal_solve_perturbed_ffi`, whose
kernel is in lapack.cc too. A tridiagonal_solve whose b has no elements returns b (its
result, empty), as XLA:CPU's gtsv of n = 0 does.
"""

from __future__ import annotations

import functools

_installed = False


def _lapack_types_only(routine: str, generic):
  """`generic`, after the dtype check of JAX's CPU rule (jaxlib.lapack's: f32, f64, c64,
  c128; anything else raises NotImplementedError naming the dtype)."""
  from jaxlib import lapack

  def rule(ctx, *args, **params):
    lapack.build_lapack_fn_target(routine, ctx.avals_in[-1].dtype)
    return generic(ctx, *args, **params)

  return rule


def _perturbed_by_cpu_rule(rule, cpu_rule):
  """tridiagonal_solve: `cpu_rule` when perturb_singular, else `rule`; b itself when it has
  no elements (the result has b's shape and dtype; JAX's generic rule reads d[0], which a
  system of size 0 lacks, where XLA:CPU's gtsv takes n = 0)."""

  def lower(ctx, *args, perturb_singular: bool):
    if 0 in ctx.avals_in[-1].shape:
      return [args[-1]]
    chosen = cpu_rule if perturb_singular else rule
    return chosen(ctx, *args, perturb_singular=perturb_singular)

  return lower


def install(platform: str) -> None:
  """Registers the LAPACK-backed linalg lowerings for `platform`. Idempotent."""
  global _installed
  if _installed:
    return
  from jax._src.interpreters import mlir
  from jax._src.lax import linalg

  cpu = functools.partial
  rules = [
    (linalg.eigh_p, cpu(linalg._eigh_cpu_gpu_lowering, target_name_prefix="cpu")),
    (linalg.svd_p, cpu(linalg._svd_cpu_gpu_lowering, target_name_prefix="cpu")),
    (linalg.tridiagonal_p, cpu(linalg._tridiagonal_cpu_gpu_lowering, target_name_prefix="cpu")),
    (linalg.geqp3_p, cpu(linalg._geqp3_cpu_gpu_lowering, target_name_prefix="cpu")),
    (linalg.lu_p, cpu(linalg._lu_cpu_gpu_lowering, target_name_prefix="cpu")),
    (linalg.eig_p, linalg._eig_cpu_lowering),
    (linalg.schur_p, linalg._schur_cpu_lowering),
    (linalg.hessenberg_p, linalg._hessenberg_cpu_lowering),
  ]
  # The LAPACK routine each CPU rule calls, for its dtype check (tridiagonal_solve's
  # operand checked is b, the last one, as in JAX's rule).
  for primitive, routine in [
    (linalg.cholesky_p, "potrf_ffi"),
    (linalg.geqrf_p, "geqrf_ffi"),
    (linalg.householder_product_p, "orgqr_ffi"),
    (linalg.ormqr_p, "ormqr_ffi"),
    (linalg.tridiagonal_solve_p, "gtsv_ffi"),
  ]:
    generic = mlir._lowerings[primitive]
    rule = _lapack_types_only(routine, generic.rule)
    if primitive is linalg.tridiagonal_solve_p:
      rule = _perturbed_by_cpu_rule(rule, linalg._tridiagonal_solve_cpu_lowering)
    rules.append((primitive, rule, generic.inline))
  for primitive, rule, *inline in rules:
    mlir.register_lowering(primitive, rule, platform=platform, inline=inline[0] if inline else True)
  _installed = True
