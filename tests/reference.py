"""Run a JAX function on the workshop backend and on JAX's CPU backend, and compare.

    from reference import assert_matches_cpu
    assert_matches_cpu(jnp.tanh, x, rtol=1e-6)

A hand-written StableHLO program (ops or variants JAX never emits) runs the same way:
`run_stablehlo(text, *args, platform=...)` on one backend, `assert_stablehlo_matches_cpu`
on both.

The CPU backend (XLA:CPU, compiled by LLVM) is the reference: it is not our code.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax._src.lib import xla_client

# Default tolerances by result dtype. Floats: libm and XLA's vectorized math differ in the
# last few ulps, and reductions/GEMMs sum in a different order, so a few ulps of the
# dtype's epsilon, scaled for accumulation. Integers and bools must match exactly.
_DEFAULT_TOL = {
  np.dtype(np.float16): 2e-3,
  np.dtype(np.float32): 2e-5,
  np.dtype(np.float64): 1e-12,
  np.dtype(np.complex64): 2e-5,
  np.dtype(np.complex128): 1e-12,
}


def cpu_device():
  return jax.devices("cpu")[0]


def run_on(device, f, *args, **jit_kwargs):
  """jit(f)(*args) with every array argument placed on `device`; returns numpy leaves."""
  placed = jax.device_put(args, device)
  out = jax.jit(f, **jit_kwargs)(*placed)
  return jax.tree.map(np.asarray, out)


def results_with_helpers_awake_and_parked(f, *args, rounds: int = 3) -> list[np.ndarray]:
  """jit(f)(*args) on workshop, `rounds` times right after a kernel split over every thread
  (the pool's helpers still polling) and as often after a 10 ms pause (helpers parked):
  how many threads share a kernel depends on which (thread_pool.cc, PartsFor), its
  results must not. Returns the 2 * rounds results as numpy arrays."""
  import time

  dev = jax.devices("workshop")[0]
  args = [jax.device_put(a, dev) for a in args]
  g = jax.jit(f)
  warm = jax.jit(lambda v: jax.numpy.tanh(v) * 2.0)
  big = jax.device_put(np.ones(1 << 21, np.float32), dev)
  results = []
  for _ in range(rounds):
    jax.block_until_ready(warm(big))
    results.append(np.asarray(g(*args)))
    time.sleep(0.01)
    results.append(np.asarray(g(*args)))
  return results


@functools.cache
def _compiled(text: str, platform: str):
  device = jax.devices(platform)[0]
  return device.client.compile_and_load(text, xla_client.DeviceList((device,)))


def run_stablehlo(text: str, *args, platform: str = "workshop") -> list[np.ndarray]:
  """Compiles StableHLO `text` (MLIR text of a module with a public @main) for the first
  device of `platform` ("workshop" or "cpu") and runs it on `args` (numpy arrays or
  scalars, placed with x64 on so that 64-bit ones stay 64-bit).

  Executables are cached per (text, platform): a program run on several inputs, or on
  both backends, compiles once per backend.

  Returns:
    The results, as numpy arrays.
  Raises:
    jax.errors.JaxRuntimeError: compiling or running failed (an unsupported op, say).
  """
  device = jax.devices(platform)[0]
  exe = _compiled(text, platform)
  with jax.enable_x64(True):
    buffers = [jax.device_put(a, device) for a in args]
  return [np.asarray(o) for o in exe.execute(buffers)]


def assert_stablehlo_matches_cpu(text: str, *args, compare=None) -> list[np.ndarray]:
  """Runs StableHLO `text` on workshop and on the CPU backend (`run_stablehlo`) and
  checks each pair of results with `compare(ours, ref)`; by default they must be equal
  (`np.testing.assert_array_equal`: same values, NaNs in the same places).

  Returns:
    Our results.
  """
  ours = run_stablehlo(text, *args)
  ref = run_stablehlo(text, *args, platform="cpu")
  assert len(ours) == len(ref), (len(ours), len(ref))
  for a, b in zip(ours, ref, strict=True):
    (compare or np.testing.assert_array_equal)(a, b)
  return ours


def default_tol(dtype) -> float:
  import ml_dtypes

  dtype = np.dtype(dtype)
  if dtype == np.dtype(ml_dtypes.bfloat16):
    return 2e-2
  return _DEFAULT_TOL.get(dtype, 0.0)


def _widen(x: np.ndarray) -> np.ndarray:
  # numpy's allclose has no bfloat16 arithmetic; 16-bit floats are exact in float32.
  return x.astype(np.float32) if x.dtype.kind in "fV" and x.itemsize == 2 else x


def assert_matches_cpu(
  f, *args, rtol: float | None = None, atol: float | None = None, **jit_kwargs
):
  """Asserts jit(f) gives the same results on workshop as on the CPU backend.

  Tolerances default per result dtype (see _DEFAULT_TOL); exact for integers and pred.
  NaNs must appear in the same places.
  """
  ours = run_on(jax.devices("workshop")[0], f, *args, **jit_kwargs)
  ref = run_on(cpu_device(), f, *args, **jit_kwargs)
  ours_leaves, ours_tree = jax.tree.flatten(ours)
  ref_leaves, ref_tree = jax.tree.flatten(ref)
  assert ours_tree == ref_tree
  for a, b in zip(ours_leaves, ref_leaves):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    tol = default_tol(a.dtype)
    r = tol if rtol is None else rtol
    t = tol if atol is None else atol
    if r == 0 and t == 0:
      np.testing.assert_array_equal(a, b)
    else:
      np.testing.assert_allclose(_widen(a), _widen(b), rtol=r, atol=t, equal_nan=True)
  return ours
