"""Compiling a JAX function with jax_plugins.workshop.compiler in-process, for the tests
that inspect the plan (tests/compiler/, tests/ops/test_reduce.py, test_sort.py, test_dot.py).
"""

import jax
from jax._src.lib import _jax
from jaxlib.mlir.dialects import stablehlo

from jax_plugins.workshop.compiler import compile_program


def artifact(lowered) -> bytes:
  """The portable artifact JAX would hand a PJRT plugin: VHLO with native sdy ops."""
  target = stablehlo.get_version_from_compatibility_requirement(
    stablehlo.StablehloCompatibilityRequirement.WEEK_4
  )
  return _jax.mlir.serialize_portable_artifact(lowered.compiler_ir("stablehlo"), target, True)


def compile_fn(f, *args, num_devices=1, options=b"", fuse=False, **jit_kwargs):
  """The plan of jit(f)(*args); unfused by default, so tests see one kernel per op."""
  return compile_program(
    artifact(jax.jit(f, **jit_kwargs).lower(*args)), "mlir", options, num_devices, fuse=fuse
  )


def ops(plan):
  return [i.op for i in plan.instrs]
