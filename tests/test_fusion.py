"""Elementwise fusion (compiler/fusion.py, kernels/fusion.cc): which runs fuse, and that a
fused program computes what JAX's CPU backend computes, across block and thread boundaries.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import assert_matches_cpu
from test_compiler import compile_fn, ops


def fused_plan(f, *args):
  return compile_fn(f, *args, fuse=True).plan


def test_chain_with_scalar_constants_is_one_fusion():
  plan = fused_plan(lambda x: jnp.tanh(x * 2 + 1), np.ones(8, np.float32))
  assert ops(plan) == ["constant", "constant", "fusion"]
  body = plan.instrs[-1].attrs["body"]
  assert ops(body) == ["broadcast_in_dim", "multiply", "broadcast_in_dim", "add", "tanh"]
  assert plan.instrs[-1].outs == plan.results


def test_fusion_stops_at_a_reduction_and_keeps_values_used_later():
  # exp(x) is read by the fused divide after the reduction, so the first fusion outputs it.
  plan = fused_plan(lambda x: jnp.exp(x - 1) / jnp.sum(jnp.exp(x - 1)),
                    np.ones(8, np.float32))
  kinds = ops(plan)
  assert "reduce" in kinds and kinds.count("fusion") >= 1
  first = plan.instrs[kinds.index("fusion")]
  later_reads = {s for i in plan.instrs[kinds.index("fusion") + 1:] for s in i.ins}
  assert set(first.outs) <= later_reads | set(plan.results)


def test_single_op_is_not_wrapped():
  assert ops(fused_plan(lambda x, y: x + y, np.ones(4, np.float32),
                        np.ones(4, np.float32))) == ["add"]


# Sizes around the 2048-element block and the thread pool's grain (64K elements).
@pytest.mark.parametrize("n", [1, 7, 2048, 2049, 65536 * 3 + 5])
def test_fused_chain_matches_cpu(n):
  x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  assert_matches_cpu(lambda x: jnp.where(x > 0, jnp.exp(-x * x), x / 3) + 0.5, x, rtol=2e-6)


def test_fused_chain_with_two_outputs_and_mixed_dtypes():
  x = np.arange(-50, 50, dtype=np.float32)

  def f(x):
    y = jnp.abs(x) * 3
    return y, (y > 10).astype(jnp.int32) + jnp.int32(1)

  assert_matches_cpu(f, x)


def test_fused_integer_division_by_zero_follows_xla():
  x = np.arange(-8, 8, dtype=np.int32)
  assert_matches_cpu(lambda x: (x * 3) // (x % 4) + 1, x)
