"""Lowered.cost_analysis() on workshop (JAX refuses it for PJRT C API backends) vs XLA:CPU."""

import jax
import jax.numpy as jnp
import numpy as np

from reference import cpu_device


def test_lowered_cost_analysis_is_a_dict_like_cpus():
  def f(a, b):
    return jnp.tanh(a @ b).sum()

  a, b = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
  ours = jax.jit(f).lower(*jax.device_put((a, b), jax.devices("workshop")[0])).cost_analysis()
  ref = jax.jit(f).lower(*jax.device_put((a, b), cpu_device())).cost_analysis()
  assert isinstance(ours, dict)
  for key in ("flops", "transcendentals", "bytes accessed"):
    assert key in ours and key in ref
  assert ours["transcendentals"] == ref["transcendentals"] == 32
  # 2*8*16*4 for the dot plus the sum's adds; XLA counts one add fewer in the reduce.
  assert abs(ours["flops"] - ref["flops"]) <= 0.01 * ref["flops"]
  assert abs(ours["bytes accessed"] - ref["bytes accessed"]) <= 0.05 * ref["bytes accessed"]
