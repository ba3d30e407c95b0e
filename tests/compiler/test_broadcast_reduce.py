"""Reductions of broadcasts and iotas never build the broadcast (compiler/broadcasts.py).

Each program is run on workshop and compared with numpy, and its plan (every instruction,
fusion bodies included) must not produce a value of the broadcast's size: as on XLA:CPU,
which fuses the broadcast into the reduction. One large case (a 17 GB broadcast) runs in
a process whose device memory limit would refuse it if it were built.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax_plugins.workshop.compiler import compile_program


def _plan(f, *args):
  from jax._src.lib import _jax
  from jaxlib.mlir.dialects import stablehlo

  target = stablehlo.get_version_from_compatibility_requirement(
    stablehlo.StablehloCompatibilityRequirement.WEEK_4
  )
  artifact = _jax.mlir.serialize_portable_artifact(
    jax.jit(f).lower(*args).compiler_ir("stablehlo"), target, True
  )
  return compile_program(artifact, "mlir", b"", 1).plan


def _largest_value(plan) -> int:
  """Elements of the largest value any instruction (or fusion body step) produces."""
  largest = 0
  for instr in plan.instrs:
    for out in instr.outs:
      largest = max(largest, math.prod(plan.slots[out][1]))
    body = instr.attrs.get("body")
    if hasattr(body, "instrs"):
      largest = max(largest, _largest_value(body))
  return largest


V5 = np.arange(5, dtype=np.float32) - 2
V7 = np.linspace(-1, 1, 7).astype(np.float32)
CASES = {
  # name: (f, args, numpy reference, elements of the broadcast)
  "scalar_sum": (
    lambda s: jnp.broadcast_to(s, (64, 65)).sum(),
    (np.float32(1.5),),
    lambda s: np.float32(1.5) * 64 * 65,
    64 * 65,
  ),
  "row_max": (
    lambda v: jnp.broadcast_to(v, (64, 5)).max(axis=0),
    (V5,),
    lambda v: v,
    64 * 5,
  ),
  "scaled_column_sum": (
    lambda v: (jnp.broadcast_to(v[:, None], (5, 64)) * 2).sum(),
    (V5,),
    lambda v: (v * 2).sum() * 64,
    5 * 64,
  ),
  "iota_sum": (
    lambda: lax.broadcasted_iota(jnp.int32, (64, 65), 1).sum(axis=0),
    (),
    lambda: np.arange(65, dtype=np.int32) * 64,
    64 * 65,
  ),
  "ones_sum": (lambda: jnp.ones((100, 200)).sum(), (), lambda: np.float32(20000), 20000),
  "compare_count": (
    lambda v: (jnp.broadcast_to(v, (64, 5)) > 0).sum(axis=0),
    (V5,),
    lambda v: (v > 0).astype(np.int32) * 64,
    64 * 5,
  ),
  "middle_dims": (
    lambda v: jnp.broadcast_to(v, (3, 64, 7)).sum(axis=(0, 2)),
    (V7,),
    lambda v: np.full(64, v.sum() * 3, np.float32),
    3 * 64 * 7,
  ),
  "convert_int_sum": (
    lambda v: jnp.broadcast_to(v, (3, 64, 5)).astype(jnp.int32).sum(axis=1),
    (V5,),
    lambda v: np.broadcast_to(v.astype(np.int32) * 64, (3, 5)),
    3 * 64 * 5,
  ),
  "min_with_init": (
    lambda v: lax.reduce(jnp.broadcast_to(v, (64, 5)), np.float32(-1), lax.min, (0, 1)),
    (V5,),
    lambda v: np.float32(min(-1, v.min())),
    64 * 5,
  ),
  "int8_sum_wraps": (
    lambda v: lax.reduce(jnp.broadcast_to(v, (300, 5)), np.int8(3), lax.add, (0,)),
    (np.array([1, 2, 3, -4, 127], np.int8),),
    lambda v: (np.int64(3) + v.astype(np.int64) * 300).astype(np.int8),
    300 * 5,
  ),
  "select_of_broadcasts": (
    lambda v, w: jnp.where(jnp.broadcast_to(v, (64, 7)) > 0, jnp.broadcast_to(w, (64, 7)), 1.0).sum(
      axis=0
    ),
    (V7, V7 * 3),
    lambda v, w: np.where(v > 0, w, 1.0).astype(np.float32) * 64,
    64 * 7,
  ),
  "variance": (
    lambda s: jnp.broadcast_to(s, (64, 65)).var(),
    (np.float32(1.5),),
    lambda s: np.float32(0),
    64 * 65,
  ),
  "std_keepdims_mean": (
    lambda v: jnp.broadcast_to(v, (64, 7)).std(axis=0),
    (V7,),
    lambda v: np.zeros(7, np.float32),
    64 * 7,
  ),
  "centered_sum_of_squares": (
    lambda v: ((jnp.broadcast_to(v, (64, 7)) - v.mean()) ** 2).sum(axis=0),
    (V7,),
    lambda v: (v - v.mean()) ** 2 * 64,
    64 * 7,
  ),
  "tile_sum": (lambda v: jnp.tile(v, (64, 1)).sum(), (V7,), lambda v: v.sum() * 64, 64 * 7),
  "repeat_max": (
    lambda v: jnp.repeat(v[None], 64, axis=0).max(axis=0),
    (V7,),
    lambda v: v,
    64 * 7,
  ),
  "argmax_with_ties": (
    lambda v: jnp.argmax(jnp.broadcast_to(v, (64, 6)), axis=1),
    (np.array([1, 3, 3, 0, -2, 3], np.float32),),
    lambda v: np.full(64, 1, np.int32),
    64 * 6,
  ),
  # A size-1 dim broadcast to a larger one (broadcast_to of a keepdims value): reduced
  # over, its elements count (the rewrite once read the size-1 dim as mapped).
  "unit_dim_sum": (
    lambda v: jnp.broadcast_to(v[:, None], (7, 64)).sum(axis=-1),
    (V7,),
    lambda v: v * 64,
    7 * 64,
  ),
  "unit_dim_int_total": (
    lambda v: jnp.broadcast_to(v.reshape(1, 5, 1), (3, 5, 64)).sum(),
    (np.array([3, 5, -2, 7, 1], np.int32),),
    lambda v: np.int32(v.sum() * 3 * 64),
    3 * 5 * 64,
  ),
  "unit_dim_mean_middle": (
    lambda v: jnp.broadcast_to(v[:, None, :], (7, 64, 5)).mean(axis=(1, 2)),
    (np.outer(V7, V5).astype(np.float32),),
    lambda v: v.mean(axis=1),
    7 * 64 * 5,
  ),
  "argmin_rows": (
    lambda v: jnp.argmin(jnp.broadcast_to(v[:, None], (7, 64)), axis=0),
    (V7,),
    lambda v: np.full(64, np.argmin(v), np.int32),
    7 * 64,
  ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_not_materialized(name):
  f, args, ref, big = CASES[name]
  got = np.asarray(jax.jit(f)(*args))
  want = np.asarray(ref(*args))
  if got.dtype.kind == "f":
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  else:
    np.testing.assert_array_equal(got, want.astype(got.dtype))
  assert _largest_value(_plan(f, *args)) < big


def test_other_reductions_unchanged():
  """A product (not rewritten) and an outer sum whose operands cover every dim (nothing
  smaller to read) still give numpy's values."""
  v = np.linspace(0.5, 1.5, 5).astype(np.float32)
  got = jax.jit(lambda v: jnp.broadcast_to(v, (4, 5)).prod(axis=0))(v)
  np.testing.assert_allclose(np.asarray(got), v**4, rtol=1e-6)
  got = jax.jit(lambda v, w: (v[:, None] + w[None, :]).max())(V5, V7)
  np.testing.assert_allclose(np.asarray(got), V5.max() + V7.max(), rtol=1e-6)


def test_huge_broadcast_sum():
  """2**16 x (2**16 + 1) f32 (17 GB), in a process whose device memory limit (1 GiB) would
  refuse the broadcast if it were built."""
  script = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    d = jax.devices("workshop")[0]
    print("LIMIT", d.memory_stats()["bytes_limit"])
    got = jax.jit(lambda s: jnp.broadcast_to(s, (2**16, 2**16 + 1)).sum())(np.float32(1.5))
    print("SUM", float(got))
    """
  )
  env = dict(
    os.environ,
    JAX_PLATFORMS="workshop",
    JAX_PJRT_CLIENT_CREATE_OPTIONS=f"device_memory_limit:{1 << 30}",
  )
  out = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr[-2000:]
  assert f"LIMIT {1 << 30}" in out.stdout, out.stdout
  # Exact in f32: 1.5 * (2**32 + 2**16).
  assert f"SUM {1.5 * 2**16 * (2**16 + 1)}" in out.stdout, out.stdout
