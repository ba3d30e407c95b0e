"""`jax.jit(f).lower(...).cost_analysis()` on `workshop`.

JAX answers Lowered.cost_analysis with XLA's HloCostAnalysis in-process, and refuses it
(NotImplementedError) for any backend behind the PJRT C API. Our cost model
(compiler/cost.py) is computed from the program's operations before fusion, which is
what Lowered.cost_analysis promises (costs without compiler optimizations), and the
compiled executable reports it through PJRT_Executable_GetCostAnalysis. So on `workshop`
Lowered.cost_analysis compiles (JAX keeps that executable for a later `.compile()`) and
returns the executable's dict: "flops", "transcendentals", "bytes accessed", ... as on
the CPU backend.
"""

from __future__ import annotations

_installed = False


def install(platform: str) -> None:
  """Makes Lowered.cost_analysis work for `platform`. Idempotent."""
  global _installed
  if _installed:
    return
  from jax._src.interpreters import pxla

  original = pxla.MeshComputation.cost_analysis

  def cost_analysis(self):
    backend = self.compile_args["backend"]
    if getattr(backend, "platform", None) == platform:
      return self.compile().cost_analysis()
    return original(self)

  pxla.MeshComputation.cost_analysis = cost_analysis
  _installed = True
