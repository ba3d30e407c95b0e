"""jax.lax.linalg primitives that JAX lowers only for cpu/cuda/rocm, lowered on `workshop`.

JAX registers eigh, svd, eig, schur, hessenberg, tridiagonal and geqp3 (QR with column
pivoting) only with platform-specific rules that emit LAPACK custom calls. `install()`
registers JAX's own CPU rules for `workshop`, so the StableHLO around each call (sorting,
the complex eigenvalue assembly, info -> NaN) is exactly the CPU backend's; the custom
calls `lapack_<s|d|c|z><routine>_ffi` they emit are lowered by compiler/rules/lapack.py to
the kernels in plugin_src/kernels/lapack.cc, which call the same LAPACK routines.
"""

from __future__ import annotations

import functools

_installed = False


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
      (linalg.tridiagonal_p,
       cpu(linalg._tridiagonal_cpu_gpu_lowering, target_name_prefix="cpu")),
      (linalg.geqp3_p, cpu(linalg._geqp3_cpu_gpu_lowering, target_name_prefix="cpu")),
      (linalg.eig_p, linalg._eig_cpu_lowering),
      (linalg.schur_p, linalg._schur_cpu_lowering),
      (linalg.hessenberg_p, linalg._hessenberg_cpu_lowering),
  ]
  for primitive, rule in rules:
    mlir.register_lowering(primitive, rule, platform=platform)
  _installed = True
